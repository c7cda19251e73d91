"""Every notebook hands the figures its core measured to report_figures once, at the end of its core, in a
folded cell titled as showing nothing; Going deeper may hand its own once more (CONTRIBUTING.md, "Measuring
on a GPU"). tools/gpu_run.py and the run record read them from there; the record cell of the core reads the
figures the core reported."""
import ast

import nbformat
import pytest

from anatomy import is_folded, summary_index
from support.notebook_code import NOTEBOOKS, read
from support.verdicts import SHOWS_NOTHING

SHARED_SETUP = "#@title Shared setup: "


def report_cells(notebook):
    """[(in the core?, cell)] of the code cells that call report_figures (the shared setup defines it)."""
    summary = summary_index(notebook)
    found = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code" or cell.source.startswith(SHARED_SETUP):
            continue
        calls = [node for node in ast.walk(ast.parse(cell.source)) if isinstance(node, ast.Call)
                 and ast.unparse(node.func) == "report_figures"]
        if calls:
            found.append((summary is not None and index < summary, cell))
    return found


def figures_rule_problems(notebook):
    """What breaks the figures rule in a notebook ([] when nothing does)."""
    found = report_cells(notebook)
    core = [cell for in_core, cell in found if in_core]
    later = [cell for in_core, cell in found if not in_core]
    problems = []
    if len(core) != 1:
        problems.append(f"{len(core)} cells of the core call report_figures; one is expected, at its end")
    if len(later) > 1:
        problems.append(f"{len(later)} cells after the Summary call report_figures; at most one (Going deeper)")
    for _, cell in found:
        if not is_folded(cell) or SHOWS_NOTHING not in cell.source.split("\n", 1)[0]:
            problems.append(f"{cell.get('id')}: a report_figures cell is folded and its title says "
                            f"{SHOWS_NOTHING!r}")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_the_core_reports_its_figures_once_in_a_folded_cell_that_shows_nothing(path):
    assert figures_rule_problems(read(path)) == []


def test_the_figures_rule_on_made_up_notebooks():
    def notebook(*cells):
        return nbformat.v4.new_notebook(cells=list(cells))

    report = nbformat.v4.new_code_cell("#@title Hand the figures on (shows nothing)\nreport_figures(x=1)",
                                       id="report")
    summary = nbformat.v4.new_markdown_cell("## Summary")
    assert figures_rule_problems(notebook(report, summary)) == []
    assert figures_rule_problems(notebook(summary, report)) == [
        "0 cells of the core call report_figures; one is expected, at its end"]
    copies = [nbformat.v4.new_code_cell(report.source, id=f"report-{index}") for index in range(4)]
    assert figures_rule_problems(notebook(*copies[:2], summary, *copies[2:]))[:2] == [
        "2 cells of the core call report_figures; one is expected, at its end",
        "2 cells after the Summary call report_figures; at most one (Going deeper)"]
    shown = nbformat.v4.new_code_cell("report_figures(x=1)", id="shown")
    assert figures_rule_problems(notebook(shown, summary)) == [
        "shown: a report_figures cell is folded and its title says '(shows nothing)'"]
