"""Report each notebook's workshop budget: the core's markdown words, the prose its cells print in a
fast-mode run, its visible code cells, the title table's T4 estimate and the least that README's rule
allows.

    .venv/bin/python tools/budget.py notebooks/05_find_the_bottleneck.ipynb [more notebooks]
    .venv/bin/python tools/budget.py --static notebooks/*.ipynb   # no run: printed prose not counted

Each notebook runs alone in an empty temporary folder through nbclient, in fast mode (TUTORIAL_FAST=1),
as the tests run it. The rule (README, "Workshop slot"): 1 minute per 100 words read (markdown and
printed prose) + 1.5 minutes per visible code cell + the core's run time on a T4, at most 60 minutes;
at most 1,500 markdown words and 300 printed words in the core. The tests check the same numbers.
"""
import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import notebook_code as nc  # noqa: E402


def run_fast(path):
    """The notebook at `path` after a fast-mode run alone in an empty folder."""
    import nbformat
    from nbclient import NotebookClient

    os.environ["TUTORIAL_FAST"] = "1"
    folder = Path(tempfile.mkdtemp(prefix="budget_"))
    try:
        copy = folder / Path(path).name
        shutil.copy(path, copy)
        notebook = nbformat.read(copy, as_version=4)
        NotebookClient(notebook, timeout=1200, kernel_name="python3",
                       resources={"metadata": {"path": str(folder)}}).execute()
        return notebook
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def budget_lines(notebook, printed=None):
    """The report of one notebook; `printed` is the printed-prose count, or None when not run."""
    words = nc.core_words(notebook)
    cells = len(nc.visible_core_code_cells(notebook))
    stated = nc.workshop_t4(notebook)
    read = words + (printed or 0)
    lines = [f"  core markdown words {words} (budget {nc.CORE_WORD_BUDGET})",
             f"  printed prose words {'not counted' if printed is None else printed} "
             f"(budget {nc.PRINTED_PROSE_BUDGET})",
             f"  visible code cells in the core {cells}"]
    if stated is None:
        lines.append("  the title table states no 'about N min on a Colab T4, of which M min running'")
    else:
        estimate, run_minutes = stated
        least = nc.minimum_minutes(read, cells, run_minutes)
        lines.append(f"  estimate {estimate} min on a T4 (T4 run time {run_minutes:g} min); the rule "
                     f"asks at least {least:.1f} min{'' if estimate >= least else ': TOO LOW'}"
                     f"{'' if estimate <= nc.SLOT_MINUTES else ', OVER THE SLOT'}")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--static", action="store_true", help="do not run: leave printed prose out")
    args = parser.parse_args()
    for path in args.notebooks:
        notebook = nc.read(path)
        printed = None
        if not args.static:
            ran = run_fast(path)
            printed = nc.core_printed_words(ran)
        print(Path(path).name)
        print("\n".join(budget_lines(notebook, printed)), flush=True)


if __name__ == "__main__":
    main()
