"""Test-run settings shared by every test, and the one switch that makes the notebooks small.

The test command sets TUTORIAL_FAST=1 here itself, so a run never depends on the caller's
environment; `--full-size` runs the notebooks at the size a learner gets instead.
The notebook kernels that nbval starts inherit this process's environment.
"""
import os


def pytest_addoption(parser):
    parser.addoption(
        "--full-size",
        action="store_true",
        help="run the notebooks at full size (TUTORIAL_FAST=0) instead of the small, fast test size",
    )


def pytest_configure(config):
    os.environ["TUTORIAL_FAST"] = "0" if config.getoption("--full-size") else "1"
    # Matplotlib must not try to open a window from plain tests (the notebooks draw inline).
    os.environ.setdefault("MPLBACKEND", "Agg")
