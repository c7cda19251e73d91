"""Issue 12's habits that a script can check: code that fits the screen, prose that is true on every
machine, the plumbing folded so that the lesson stays short, and a core that ends before "Going deeper"."""
import re

import pytest

from notebook_code import NOTEBOOKS, read

NOTEBOOK_IDS = [path.name for path in NOTEBOOKS]
MAX_LINE = 100  # what JupyterLab shows beside its file browser at 1280 px; Colab is no wider

# Visible code lines (code cells that are not folded #@title cells): the lesson a learner reads.
VISIBLE_CODE_BUDGET = {"01": 150, "02": 250, "03": 150, "04": 250}
DEFAULT_BUDGET = 250

# Phrases that describe the machine a notebook was written on, not the reader's (lower case).
MACHINE_BOUND = ["here, on a", "here it printed", "on this machine", "here they say", "here both say",
                 "measured here", "in a full run on this", "here, without", "on the cpu here",
                 "here the model", "here, offline", "here, the"]


def visible_code_lines(notebook):
    return [line for cell in notebook.cells
            if cell.cell_type == "code" and not cell.source.startswith("#@title ")
            for line in cell.source.splitlines() if line.strip()]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_code_lines_fit_the_screen(path):
    too_long = [line for cell in read(path).cells if cell.cell_type == "code"
                for line in cell.source.splitlines() if len(line) > MAX_LINE]
    assert too_long == [], f"{len(too_long)} code lines over {MAX_LINE} characters, first: {too_long[0]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_prose_never_says_what_this_machine_printed(path):
    for cell in read(path).cells:
        if cell.cell_type == "markdown":
            text = " ".join(cell.source.lower().split())
            found = [phrase for phrase in MACHINE_BOUND if phrase in text]
            assert not found, f"{found} in: {cell.source[:100]!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_the_lesson_is_short_and_the_plumbing_folded(path):
    budget = VISIBLE_CODE_BUDGET.get(path.name[:2], DEFAULT_BUDGET)
    lines = visible_code_lines(read(path))
    assert len(lines) <= budget, f"{len(lines)} visible code lines, budget {budget}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_core_ends_with_its_summary_then_going_deeper(path):
    titles = [re.sub(r"^#+ ", "", line).lower() for cell in read(path).cells if cell.cell_type == "markdown"
              for line in cell.source.splitlines() if re.match(r"#{1,3} ", line)]
    summary = [i for i, title in enumerate(titles) if title.startswith("summary")]
    deeper = [i for i, title in enumerate(titles) if title.startswith("going deeper")]
    assert summary and deeper, "a core ending in a Summary, then a 'Going deeper' part, are expected"
    assert summary[0] < deeper[0], "the core ends with its Summary; Going deeper comes after it"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_title_table_gives_the_core_and_the_whole(path):
    table = [line.lower() for line in read(path).cells[0].source.splitlines() if line.startswith("|")]
    assert any("core" in line for line in table), "a row for the core's run time is expected"
    assert any("whole" in line for line in table), "a row for the whole notebook's run time is expected"
