"""Notebooks 01 and 03 where a package is missing and pip cannot reach any index: Kaggle with Internet off.

Kaggle starts notebooks with Internet off and its image lacks ddgs; Colab lacks ddgs too. This builds that
situation for real: a throwaway virtual environment that holds everything of the project's environment
(by symlinks, so it costs seconds, not gigabytes) except one package, a kernel that believes it runs on
Kaggle (KAGGLE_KERNEL_RUN_TYPE), and pip with no index and no configuration (PIP_NO_INDEX=1,
PIP_CONFIG_FILE pointing at nothing), so that the install cell's pip call fails as it does offline.
Each notebook is copied alone into an empty folder and run top to bottom in that environment by
tools/notebook_run.py, stopping at the first error as "Run All" does.
"""
import os
import subprocess
import sysconfig
import venv
from pathlib import Path

import nbformat
import pytest

from support.environments import environment_without, errors, run_offline_on_kaggle, shown_text

@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return tmp_path_factory.mktemp("offline_kaggle")


@pytest.fixture(scope="module")
def run_without(workspace):
    """run_without(package, prefix): notebook `prefix`'s cells, run alone where `package` is missing.

    Each environment is built once and shared by the tests that need it.
    """
    pythons = {}

    def run(distribution, prefix, through=None, then=""):
        if distribution not in pythons:
            pythons[distribution] = environment_without(distribution, workspace / f"venv_no_{distribution}")
        folder = workspace / f"run{prefix}_no_{distribution}"
        folder.mkdir()
        return run_offline_on_kaggle(pythons[distribution], prefix, folder, through, then)

    return run


def test_pip_really_fails_in_that_environment(workspace):
    python = environment_without("ddgs", workspace / "venv_pip_check")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")},
           "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull}
    found = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('ddgs'))"],
                           capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "None"
    pip = subprocess.run([str(python), "-m", "pip", "install", "ddgs>=9.0"], env=env,
                         capture_output=True, text=True)
    assert pip.returncode != 0 and "No matching distribution" in pip.stderr


def test_notebook_01_without_fastai_runs_to_the_end_and_skips_step_6(run_without):
    cells = run_without("fastai", "01")
    assert errors(cells) == []
    assert all(cell["count"] is not None for cell in cells), "every code cell must have run"
    setup = shown_text(cells[0])
    assert "fastai: not installed" in setup and "Settings > Internet" in " ".join(setup.split())
    assert "CalledProcessError" not in setup
    assert any("Step 6 skipped" in shown_text(cell) for cell in cells[2:])


def test_notebook_03_without_ddgs_takes_the_offline_path(run_without):
    # Through the plan only: the cells after it branch on `plan` (the first look, the download, the
    # check) and on UNAVAILABLE (the export, which only "fastai export" there skips:
    # test_03_training.py tests export_skip_reason); with the values the last cell prints, they take the
    # path of nbval's run wherever that is offline (as CI is) to the end, so running them again here
    # would check nothing new.
    state = "plan, sorted(UNAVAILABLE)"
    cells = run_without("ddgs", "03", through="plan", then=f"print(repr(({state})))")
    assert errors(cells) == []
    assert all(cell["count"] is not None for cell in cells), "every code cell must have run"
    setup = " ".join(shown_text(cells[0]).split())
    assert "ddgs: not installed" in setup and "Settings > Internet" in setup
    assert "Everything else still works" in setup
    plans = [" ".join(shown_text(cell).split()) for cell in cells[2:] if "Plan: " in shown_text(cell)]
    assert len(plans) == 1 and plans[0].startswith("Plan: stand-in."), plans
    assert "ddgs is not installed" in plans[0], "the plan must say why there is no search"
    assert shown_text(cells[-1]).strip() == "('stand-in', ['ddgs'])", "the state the rest reads"


def test_notebook_03_without_fastai_stops_with_the_plain_message(run_without):
    cells = run_without("fastai", "03")
    (error,) = [output for output in cells[0]["outputs"] if output["output_type"] == "error"]
    assert error["ename"] == "SetupStopped"
    assert error["traceback"] == ["Setup stopped: this notebook needs the package(s) named above."]
    assert "cannot run without fastai" in " ".join(shown_text(cells[0]).split())
    assert all(cell["count"] is None for cell in cells[1:]), "Run All must stop at the install cell"


def test_notebook_09_without_triton_plans_to_show_the_kernels(run_without):
    # Through the plan only: the cells after it read TRITON_MODE, the stand-in `triton` and `tl`, and
    # known_problem, which are then as where Triton cannot be imported (test_09_broken_triton.py runs
    # that to the end), so running them again checks nothing new.
    cells = run_without("triton", "09", through="plan", then="print(TRITON_MODE, type(triton).__name__, "
                                                            "type(tl).__name__, known_problem)")
    assert errors(cells) == []
    assert all(cell["count"] is not None for cell in cells), "every code cell must have run"
    setup = " ".join(shown_text(cells[0]).split())
    assert "triton: not installed" in setup and "the kernels are shown, not run" in setup
    later = [" ".join(shown_text(cell).split()) for cell in cells[2:]]
    assert any("Triton not installed, shown" in text for text in later)
    assert shown_text(cells[-1]).split() == ["shown", "KernelsShownOnly", "KernelsShownOnly", "None"]
