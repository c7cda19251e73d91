"""A package that is installed, by its metadata, but cannot be imported: a release pair nobody measured.

The install cell decides whether a package works by importing it. This builds that situation for real:
a throwaway environment like tests/test_missing_packages.py's, whose fastai has its real metadata
(so pip and importlib.metadata say fastai 2.8.12 is there) but whose code raises ImportError on import.
Notebook 01 then runs alone as on Kaggle with Internet off: the install cell must report the import
error's last line, that pip could not repair it, and how to reinstall; Step 6 must be skipped instead
of stopping Run All.
"""
import sysconfig
from pathlib import Path

import pytest

from test_missing_packages import environment_without, errors, run_alone, text_of

BROKEN_IMPORT = "cannot import name 'tvpad' from 'fastai.vision.core'"


def environment_with_a_fastai_that_cannot_be_imported(folder):
    python = environment_without("fastai", folder)
    site = next(folder.glob("lib/python*/site-packages"))
    here = Path(sysconfig.get_paths()["purelib"])
    (info,) = here.glob("fastai-*.dist-info")
    (site / info.name).symlink_to(info)  # the metadata says fastai is installed
    (site / "fastai").mkdir()
    (site / "fastai" / "__init__.py").write_text(f"raise ImportError({BROKEN_IMPORT!r})\n")
    return python


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    workspace = tmp_path_factory.mktemp("broken_fastai")
    python = environment_with_a_fastai_that_cannot_be_imported(workspace / "venv")
    folder = workspace / "run01"
    folder.mkdir()
    return run_alone(python, "01", folder)


def test_the_environment_really_has_a_fastai_that_cannot_be_imported(tmp_path):
    import subprocess
    python = environment_with_a_fastai_that_cannot_be_imported(tmp_path / "venv")
    said = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('fastai'))"],
                          capture_output=True, text=True, check=True)
    assert said.stdout.strip().startswith("2.8")
    failed = subprocess.run([str(python), "-c", "import fastai"], capture_output=True, text=True)
    assert failed.returncode != 0 and BROKEN_IMPORT in failed.stderr


def test_notebook_01_reports_the_import_error_and_skips_step_6(cells):
    assert errors(cells) == [], "Run All must reach the end"
    assert all(cell["count"] is not None for cell in cells), "every code cell must have run"
    setup = " ".join(text_of(cells[0]).split())
    assert f"fastai: importing it fails (ImportError: {BROKEN_IMPORT})." in setup
    # Offline, pip finds nothing newer than the installed releases, so it succeeds without a repair.
    assert "Installing failed" not in setup and "Settings > Internet" not in setup
    assert "pip finished without an error, yet this remains: restart the session" in setup
    assert "-m pip install --force-reinstall --no-deps fastai" in setup
    assert "Everything else still works: without fastai, Step 6" in setup
    assert any("Step 6 skipped" in text_of(cell) for cell in cells[2:])
