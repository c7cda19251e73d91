"""tools/handout.py: the notebooks without their answers, for a class that should not see them; the checks
stay, and a handout notebook runs with Run All, every starter saying NOT DONE YET."""
import re
import sys

import nbformat
import pytest

from support.notebook_code import NOTEBOOKS, REPO, read

sys.path.insert(0, str(REPO / "tools"))
import anatomy  # noqa: E402
import handout  # noqa: E402
from notebook_run import run_alone  # noqa: E402


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_a_handout_lacks_the_answers_and_keeps_everything_else(path):
    notebook = read(path)
    given = handout.handout(notebook)
    answers = {parts["answer"].get("id") for parts in anatomy.exercises(notebook).values()}
    assert [cell.get("id") for cell in given.cells] == [cell.get("id") for cell in notebook.cells
                                                        if cell.get("id") not in answers]
    assert all(parts["check"] is not None and parts["starter"] is not None and parts["answer"] is None
               for parts in anatomy.exercises(given).values()), "checks and starters stay"
    assert not any(re.search(r"What a good answer says", cell.source, re.I) for cell in given.cells)
    assert read(path).cells == notebook.cells, "the notebook itself is not changed"


def test_an_open_questions_good_answer_is_taken_out_and_the_question_kept():
    cell = nbformat.v4.new_markdown_cell("**To discuss:** why?\n\n<details><summary>What a good answer "
                                         "says</summary>\n\nBecause.\n</details>\n\nMore after.")
    given = handout.handout(nbformat.v4.new_notebook(cells=[cell]))
    assert given.cells[0].source == "**To discuss:** why?\n\nMore after."


def test_a_handout_notebook_runs_with_run_all_and_each_starter_says_not_done_yet(tmp_path):
    path = next(path for path in NOTEBOOKS if path.name.startswith("02_"))
    written = tmp_path / "handout" / path.name
    written.parent.mkdir()
    nbformat.write(handout.handout(read(path)), str(written))
    run = run_alone(written, fast=True)
    assert run.error is None, run.error
    starters = [cell for cell in run.notebook["cells"] if (cell.get("id") or "").endswith("-starter")]
    assert starters and all("NOT DONE YET" in "".join(output.get("text", "") or
                                                       "".join(output.get("data", {}).get("text/plain", ""))
                                                       for output in cell["outputs"])
                            for cell in starters)
