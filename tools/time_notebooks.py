"""Time notebooks the way README's table and the title tables were measured.

Each notebook runs alone in an empty temporary folder (tools/notebook_run.py), one at a time, at full
size unless --fast. "whole" is the wall time of the run, kernel start included; "core" adds up the code
cells before the notebook's Summary heading (tools/anatomy.py). The load average before and after is
printed too, because PyTorch on a few cores slows down a lot when anything else runs.

    .venv/bin/python tools/time_notebooks.py notebooks/04_when_does_the_gpu_win.ipynb [--fast] [--keep out/]
"""
import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import anatomy  # noqa: E402  (beside this file)
from notebook_run import run_alone  # noqa: E402


def load_average():
    return " ".join(f"{value:.2f}" for value in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def report_line(name, fast, run, before, after):
    """One line of the report: the seconds, the core's printed prose, the load average."""
    if run.error:
        return f"{name} {'fast' if fast else 'full size'}: FAILED after {run.whole_s:.0f} s: {run.error}"
    printed, _ = anatomy.shown_in_core(run.notebook)
    return (f"{name} {'fast' if fast else 'full size'}: whole {run.whole_s:.0f} s, core "
            f"{run.core_s:.0f} s, {printed} words of printed prose in the core "
            f"(load average before {before}, after {after})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--fast", action="store_true", help="fast mode (TUTORIAL_FAST=1)")
    parser.add_argument("--keep", metavar="FOLDER", help="save each executed notebook, outputs and all, there")
    args = parser.parse_args(argv)
    failed = 0
    for path in args.notebooks:
        before = load_average()
        run = run_alone(path, fast=args.fast, timeout=3600, keep=args.keep)
        failed += run.error is not None
        print(report_line(Path(path).name, args.fast, run, before, load_average()), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
