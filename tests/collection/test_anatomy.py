"""The anatomy of every notebook and the class rule of every core (tools/anatomy.py), each asserted once
for every notebook, and both rules tried at their boundaries on made-up notebooks.

The class rule needs a run (what the core prints and shows): conftest.py checks it in the nbval run of
each notebook. Here, without a run, the title table's minutes must be at least what the core's source
alone gives, and its T4 run minutes at least T4_RUN_MINUTES_AT_LEAST.
"""
import nbformat
import pytest

import anatomy
from support.notebook_code import NOTEBOOKS, T4_RUN_MINUTES_AT_LEAST, read

NOTEBOOK_IDS = [path.name for path in NOTEBOOKS]
SKELETON = ["# 99 · Title\n\nWhat you will find out.", "## Setup", "## Step 1 · One", "## Step 2 · Two",
            "## Summary\n\n- it works", "## Exercises", "## Learn more", "## Going deeper",
            "## Words used here"]


def notebook_of(*markdown, code_after=None):
    """A made-up notebook of markdown cells, with one code cell after the cell `code_after` names."""
    cells = []
    for text in markdown:
        cells.append(nbformat.v4.new_markdown_cell(text))
        if code_after and text.startswith(code_after):
            cells.append(nbformat.v4.new_code_cell("x = 1"))
    return nbformat.v4.new_notebook(cells=cells)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_every_notebook_has_the_anatomy(path):
    assert anatomy.anatomy_problems(read(path)) == []


def test_the_skeleton_passes_and_each_kind_of_break_is_named():
    assert anatomy.anatomy_problems(notebook_of(*SKELETON)) == []
    assert anatomy.anatomy_problems(notebook_of(*SKELETON[:3], "### Going on", *SKELETON[3:])) == []
    swapped = SKELETON[:5] + [SKELETON[7], SKELETON[5], SKELETON[6], SKELETON[8]]
    assert "the sections run" in anatomy.anatomy_problems(notebook_of(*swapped))[0]
    no_setup = [text for text in SKELETON if text != "## Setup"]
    assert "the sections run" in anatomy.anatomy_problems(notebook_of(*no_setup))[0]
    unknown = anatomy.anatomy_problems(notebook_of(*SKELETON[:7], "## A bug", *SKELETON[7:]))
    assert "does not know: ['A bug']" in unknown[0]
    step_after = anatomy.anatomy_problems(notebook_of(*SKELETON[:8], "## Step 3 · Late", SKELETON[8]))
    assert any("the sections run" in problem for problem in step_after)
    skipped = anatomy.anatomy_problems(notebook_of(*SKELETON[:3], "## Step 3 · Three", *SKELETON[4:]))
    assert skipped == ["the steps are numbered [1, 3], not 1, 2, 3, ..."]
    twice = anatomy.anatomy_problems(notebook_of(*SKELETON[:6], "## Exercises", *SKELETON[6:]))
    assert twice == ["sections that appear more than once: ['Exercises']"]
    last = anatomy.anatomy_problems(notebook_of(*SKELETON, code_after="## Words used here"))
    assert last == ["'## Words used here' is not the last cell"]
    shared = SKELETON[:4] + ["## Summary\n\n- it works\n\n## Exercises"] + SKELETON[6:]
    assert anatomy.anatomy_problems(notebook_of(*shared)) == [
        "level-2 headings inside a cell, not opening it: ['Exercises']"]
    untitled = anatomy.anatomy_problems(notebook_of("# Title", *SKELETON[1:]))
    assert untitled == ["the first cell is not a markdown title '# NN · Title'"]


def test_the_core_is_every_cell_before_the_summary():
    notebook = notebook_of(*SKELETON, code_after="## Step 2")
    assert len(anatomy.core_cells(notebook)) == 5 and anatomy.core_words(notebook) == 21
    with pytest.raises(ValueError, match="no '## Summary' heading"):
        anatomy.core_cells(notebook_of("# 99 · T", "### Summary"))


PLAN = "**Builds on:** nothing before it. **Taught on:** a Colab T4. **In class:**"


def run_core(*code, outputs=()):
    """A made-up core of visible code cells `code` (and one folded one), the first with `outputs`."""
    cells = [nbformat.v4.new_markdown_cell(f"# 99 · T\n\n{PLAN} about 20 min of teaching, of which "
                                           f"about 2 min running on a T4 (an estimate), then 9 min.")]
    cells += [nbformat.v4.new_code_cell(source) for source in code]
    cells.append(nbformat.v4.new_code_cell("#@title Plumbing\ny = 1\nz = 2"))
    cells[1].outputs = [nbformat.from_dict(output) for output in outputs]
    cells += [nbformat.v4.new_markdown_cell("## Summary\n\nmore words"),
              nbformat.v4.new_code_cell("after = 1")]
    return nbformat.v4.new_notebook(cells=cells)


def test_the_rule_counts_each_term_once_with_its_weight():
    assert anatomy.class_rule_minutes(0, 0, 0, 0, 0, 0) == pytest.approx(5.5)
    assert anatomy.class_rule_minutes(150, 50, 3, 20, 2, 4) == pytest.approx(1.1 * (5 + 2 + 3 + 2 + 2 + 4))
    notebook = run_core("a = 1\n\nb = 2", "c = 3")
    counts = anatomy.core_counts(notebook, printed_words=7, tables_figures=1)
    words = len(notebook.cells[0].source.split())
    assert counts == {"markdown_words": words, "printed_words": 7, "visible_cells": 2, "visible_lines": 3,
                      "tables_figures": 1, "t4_run_minutes": 2.0, "folded_cells": 0}
    assert anatomy.class_rule_minutes(0, 0, 0, 0, 0, 0, folded_cells=3) == pytest.approx(1.1 * (5 + 1.5))
    assert anatomy.class_rule_minutes(0, 0, 0, 0, 0, 0, opening=False) == 0


def test_printed_prose_is_lines_of_eight_words_and_tables_and_figures_are_counted_once_each():
    seven, eight = "one two three four five six seven", "one two three four five six seven eight"
    stream = {"output_type": "stream", "name": "stdout", "text": f"{seven}\n{eight}\n1 2 3 4 5 6 7 8 9\n"}
    assert anatomy.printed_prose_words([stream]) == 8, "a 7-word line and a row of numbers are not prose"
    html = {"output_type": "execute_result", "data": {"text/plain": eight, "text/html": "<table></table>"},
            "execution_count": 1, "metadata": {}}
    image = {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/plain": eight},
             "metadata": {}}
    markdown = {"output_type": "display_data", "data": {"text/plain": "x", "text/markdown": eight},
                "metadata": {}}
    error = {"output_type": "error", "ename": "ValueError", "evalue": seven, "traceback": []}
    assert anatomy.printed_prose_words([html, image]) == 0, "a table or a figure is not read as text"
    assert anatomy.printed_prose_words([markdown, error]) == 16, "the error's name makes its line prose"
    assert anatomy.tables_and_figures([html, image, markdown, stream]) == 2
    assert anatomy.tables_and_figures([{"output_type": "display_data", "metadata": {},
                                        "data": {"text/html": "<div>not a table</div>"}}]) == 0


def test_the_title_table_states_the_rule_rounded_up_to_five_and_the_core_keeps_its_limit():
    notebook = run_core("a = 1")  # states 20 min: 1.1 × (5 + 35 words / 100 + 1 + 0.1 + 0 + 2) = 9.3
    assert anatomy.core_words(notebook) == 35
    minutes = anatomy.class_rule_minutes(**anatomy.core_counts(notebook, 0, 0))
    assert minutes == pytest.approx(1.1 * (5 + 0.35 + 1 + 0.1 + 2)) and anatomy.rounded_up(minutes) == 10
    (problem,) = anatomy.budget_problems(notebook, 0, 0)
    assert problem.startswith("the title table says 20 min; the class rule gives 9.3 min")
    assert problem.endswith("so it should say 10 min") and "printed_words 0" in problem
    # printed words and tables and figures count: 15.0 rounds to 15, 15.01 to 20
    assert anatomy.rounded_up(15.0) == 15 and anatomy.rounded_up(15.01) == 20
    assert anatomy.budget_problems(notebook, 900, 0) == []  # 9.3 + 9.9 = 19.2 min
    assert anatomy.budget_problems(notebook, 0, 9) == []  # 9.3 + 9.9 = 19.2 min
    assert "should say 25 min" in anatomy.budget_problems(notebook, 900, 2)[0]  # 21.4 min
    # a run that printed a little more or less than the title's: 20 stays right within 1 minute of
    # the count, on both sides (20 <= rounded_up(minutes + 1) and rounded_up(minutes - 1) <= 20)
    assert anatomy.budget_problems(notebook, 955, 1) == []  # 20.90 min
    assert "should say 25 min" in anatomy.budget_problems(notebook, 965, 1)[0]  # 21.01 min
    assert anatomy.budget_problems(notebook, 430, 0) == []  # 14.03 min
    assert "should say 15 min" in anatomy.budget_problems(notebook, 420, 0)[0]  # 13.92 min
    over = anatomy.budget_problems(notebook, 900, 0, limit=19)
    assert len(over) == 1 and "over the core's limit of 19 min" in over[0]
    assert anatomy.budget_problems(notebook, 900, 0, limit=20) == []
    assert anatomy.budget_problems(notebook, 900, 0, limit=None) == []
    untold = run_core("a = 1")
    untold.cells[0].source = f"# 99 · T\n\n{PLAN} about 20 min of teaching."
    assert "does not say" in anatomy.budget_problems(untold, 0, 0)[0]


def test_the_plan_states_the_teaching_minutes_and_the_t4_run_time():
    notebook = run_core("a = 1")
    assert anatomy.workshop_t4(notebook) == (20, 2.0)
    notebook.cells[0].source = (f"# 99\n{PLAN} about 45 min of teaching,\nof which under 0.5 min running "
                                f"on Kaggle's T4 x2 (measured, 2 runs)")
    assert anatomy.workshop_t4(notebook) == (45, 0.5), "across a line break too"
    notebook.cells[0].source = f"# 99\n{PLAN} about 45 min of teaching."
    assert anatomy.workshop_t4(notebook) is None


def stepped_core():
    """A made-up core: the title, Setup with a folded cell, Step 1 with a visible and a folded cell,
    Step 2 with a visible cell; then the Summary."""
    cells = [nbformat.v4.new_markdown_cell(f"# 99 · T\n\n{PLAN} about 20 min of teaching, of which about "
                                           f"2 min running on a T4 (an estimate)."),
             nbformat.v4.new_markdown_cell("## Setup"),
             nbformat.v4.new_code_cell("#@title Setup\nx = 1", id="setup"),
             nbformat.v4.new_markdown_cell("## Step 1 · One\n\nten words of prose here to be read by the class"),
             nbformat.v4.new_code_cell("a = 1\nb = 2", id="one"),
             nbformat.v4.new_code_cell("#@title Plumbing\nc = 3", id="plumbing"),
             nbformat.v4.new_markdown_cell("## Step 2 · Two"),
             nbformat.v4.new_code_cell("d = 4", id="two"),
             nbformat.v4.new_markdown_cell("## Summary")]
    return nbformat.v4.new_notebook(cells=cells)


def test_a_folded_cell_in_a_step_costs_half_a_minute_and_setups_costs_nothing():
    notebook = stepped_core()
    assert [cell.get("id") for cell in anatomy.folded_step_cells(notebook)] == ["plumbing"]
    assert anatomy.section_of_each_cell(notebook) == ["Setup", "Setup", "Setup", "Step 1", "Step 1",
                                                      "Step 1", "Step 2", "Step 2"]
    assert anatomy.core_counts(notebook, 0, 0)["folded_cells"] == 1


def test_the_sections_minutes_add_up_to_the_cores_and_share_its_run_time_by_seconds():
    notebook = stepped_core()
    shown = {"one": (100, 1)}  # Step 1 printed 100 words and showed a table
    seconds = {"setup": 5.0, "one": 3.0, "plumbing": 1.0, "two": 0.0}  # Setup's installs: no share
    minutes = anatomy.section_minutes(notebook, shown, seconds, t4_run_minutes=2.0)
    total = anatomy.class_rule_minutes(**anatomy.core_counts(notebook, 100, 1))
    assert sum(minutes.values()) == pytest.approx(total)
    step_1_words = len(notebook.cells[3].source.split())
    assert minutes["Step 1"] == pytest.approx(1.1 * ((step_1_words + 100) / 100 + 1 + 0.2 + 0.5 + 1 + 2.0))
    step_2_words = len(notebook.cells[6].source.split())
    assert minutes["Step 2"] == pytest.approx(1.1 * (step_2_words / 100 + 1 + 0.1)), "it took no seconds"
    assert list(minutes) == ["Setup", "Step 1", "Step 2"]
    # a run whose Steps took no time shares the T4 minutes equally among them, none to Setup
    even = anatomy.section_minutes(notebook, shown, {"setup": 5.0}, t4_run_minutes=2.0)
    assert even["Step 2"] == pytest.approx(1.1 * (step_2_words / 100 + 1 + 0.1 + 1.0))
    assert sum(even.values()) == pytest.approx(total)


def test_the_plan_says_where_the_class_is_at_15_30_and_45_minutes():
    minutes = {"Setup": 6.0, "Step 1": 12.0, "Step 2": 15.0}  # ends at 6, 18, 33
    assert anatomy.minutes_plan(minutes) == [(15, "Step 1"), (30, "Step 2"), (45, "the exercises")]
    assert anatomy.minutes_plan({"Setup": 15.0, "Step 1": 15.0}) == [(15, "Setup"), (30, "Step 1"),
                                                                    (45, "the exercises")]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_the_title_table_is_at_least_what_the_source_alone_gives(path):
    """The nbval run checks the whole rule; without a run, printed prose, tables and figures count 0."""
    notebook = read(path)
    stated = anatomy.workshop_t4(notebook)
    assert stated, "the title's plan says 'about N min of teaching, of which about M min running'"
    assert stated[1] >= T4_RUN_MINUTES_AT_LEAST[path.name[:2]], "the T4 run time is below its floor"
    least = anatomy.class_rule_minutes(**anatomy.core_counts(notebook, 0, 0))
    assert stated[0] >= least, f"the title says {stated[0]} min, the source alone gives {least:.1f}"
    assert stated[0] <= anatomy.CORE_LIMIT_MINUTES


def test_every_notebook_has_a_t4_floor_and_no_other_has():
    assert set(T4_RUN_MINUTES_AT_LEAST) == {path.name[:2] for path in NOTEBOOKS}
