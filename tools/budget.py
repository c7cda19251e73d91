"""Report each notebook's core by the class rule: what it counts, the minutes it gives, and what the
title's plan states.

    .venv/bin/python tools/budget.py notebooks/05_find_the_bottleneck.ipynb [more notebooks]
    .venv/bin/python tools/budget.py --static notebooks/*.ipynb   # no run: printed words, tables and
                                                                  # figures not counted

Each notebook runs alone in an empty folder in fast mode (tools/notebook_run.py), as the tests run it,
so that the prose its cells print and the tables and figures they show can be counted. The rule
(tools/anatomy.py, README's "Workshop slots"):

    minutes = 1.1 × (5 + (markdown words + printed words) / 100 + visible code cells
                     + 0.1 × visible code lines + 0.5 × folded code cells outside Setup
                     + tables and figures + T4 run minutes)

The manifest's teaching_minutes (which the title's plan states) is it rounded up to 5 minutes; a core
takes at most 45. The nbval run checks the same numbers for every notebook.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import anatomy  # noqa: E402  (beside this file)
from notebook_run import run_alone  # noqa: E402


def budget_lines(notebook, printed=None, tables_figures=None):
    """The report of one notebook; `printed` and `tables_figures` are None when it was not run."""
    counts = anatomy.core_counts(notebook, printed or 0, tables_figures or 0)
    ran = printed is not None
    lines = [f"  {name.replace('_', ' ')}: {value if value is not None else 'not stated'}"
             + ("" if ran or name not in ("printed_words", "tables_figures") else " (not run)")
             for name, value in counts.items()]
    stated = anatomy.workshop_t4(notebook)
    if stated is None:
        lines.append("  the title's plan states no 'about N min of teaching, of which about M min running'")
        return lines
    minutes = anatomy.class_rule_minutes(**counts)
    lines.append(f"  class rule: {minutes:.1f} min{'' if ran else ' at least'}, stated "
                 f"{stated[0]} min (should be {anatomy.rounded_up(minutes)}), limit "
                 f"{anatomy.CORE_LIMIT_MINUTES}{': OVER' if minutes > anatomy.CORE_LIMIT_MINUTES else ''}")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--static", action="store_true", help="do not run: count the source only")
    args = parser.parse_args(argv)
    import nbformat

    for path in args.notebooks:
        notebook = nbformat.read(path, as_version=4)
        printed = tables_figures = None
        if not args.static:
            run = run_alone(path, fast=True)
            if run.error:
                print(f"{Path(path).name}: the fast run failed: {run.error}")
                continue
            printed, tables_figures = anatomy.shown_in_core(run.notebook)
        print(Path(path).name)
        print("\n".join(budget_lines(notebook, printed, tables_figures)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
