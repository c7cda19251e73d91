"""Notebook 09 run alone with a Triton that is installed but cannot be imported, for real.

As tests/collection/test_broken_packages.py does for fastai: a throwaway environment whose triton has its
real metadata (importlib.metadata says it is installed, so the install cell is content) but whose code
raises ImportError, as a Triton built for another PyTorch, or a broken triton-windows, does. Notebook 09
runs alone in it, as on Kaggle with Internet off, and must read to the end with its kernels shown.
"""
import importlib.util
import subprocess

import pytest


BROKEN_TRITON = "cannot import name 'knobs' from partially initialized module 'triton'"


def environment_with_a_triton_that_cannot_be_imported(folder):
    from support.environments import environment_with_a_broken

    return environment_with_a_broken("triton", folder, BROKEN_TRITON)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton's metadata to copy")
def test_notebook_09_with_a_triton_that_cannot_be_imported_shows_its_kernels_to_the_end(tmp_path):
    from support.environments import errors, run_offline_on_kaggle, shown_text

    python = environment_with_a_triton_that_cannot_be_imported(tmp_path / "venv")
    said = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('triton'))"],
                          capture_output=True, text=True, check=True)
    version = said.stdout.strip()
    failed = subprocess.run([str(python), "-c", "import triton"], capture_output=True, text=True)
    assert failed.returncode != 0 and BROKEN_TRITON in failed.stderr

    folder = tmp_path / "run09"
    folder.mkdir()
    cells = run_offline_on_kaggle(python, "09", folder)
    assert errors(cells) == [], "Run All must reach the end: no NameError after the plan cell"
    assert all(cell["count"] is not None for cell in cells), "every code cell must have run"
    assert "Packages ready" in shown_text(cells[0])  # the install cell leaves the import to the plan cell
    texts = [" ".join(shown_text(cell).split()) for cell in cells]
    (plan,) = [text for text in texts if text.startswith(f"Triton {version}, ")]
    assert plan.startswith(f"Triton {version}, shown: triton is installed, but importing it fails "
                           f"(ImportError: {BROKEN_TRITON}), so the kernels are shown, not run.")
    assert "-m pip install --force-reinstall" in plan and plan.endswith("restart the Jupyter kernel.")
    assert sum("not run (no Triton)" in text for text in texts) >= 4, "each kernel's check says so"
    assert not any("matches PyTorch" in text for text in texts)
    assert any(text.startswith("Without a working Triton nothing runs") for text in texts)
