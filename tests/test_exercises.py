"""Every notebook's exercises have the form an instructor can use, asserted once for every notebook.

An exercise (CONTRIBUTING.md, "Exercises") is a markdown cell `exercise-<name>` opening with
"### Exercise N · ..." in the Exercises section, then three code cells:
- `exercise-<name>-check`, folded: defines the check the learner calls, which compares with a reference
  the notebook computes and returns a Feedback (the shared setup cell): "PASSED ...", "NOT DONE YET ..."
  or "NOT YET RIGHT: " and what is wrong, off by how much, on which input;
- `exercise-<name>-starter`, visible: what the learner edits, `...` marking the part to write; it runs
  without an error and ends with a call of the check;
- `exercise-<name>-answer`, folded, its first line `#@title Answer ...`: the answer under names of its
  own (so Run All never overwrites the learner's work), checked by the same check.

What runs where: the nbval run of every notebook runs the untouched starter and the answer, and
conftest.py asserts there that the starter's check said NOT DONE YET and the answer's PASSED (on the
CPU, in fast mode). Each exercise's likely wrong answer is tried by a test in the notebook's test file
marked `@pytest.mark.exercise("NN", "<name>")`, which asserts the message meant for it; this file checks
that every exercise has one.
"""
import ast
import re

import nbformat
import pytest

from notebook_code import NOTEBOOKS, REPO, is_folded, read
from verdicts import starter_and_answer_verdicts

NOTEBOOK_IDS = [path.name for path in NOTEBOOKS]
EXERCISE_HEADING = re.compile(r"^### Exercise (\d+) · \S")


def exercises(notebook):
    """{name: {"task": cell, "check": cell, "starter": cell, "answer": cell}} of the notebook's
    exercises, in order; a part that is missing is None."""
    cells = {cell.get("id"): cell for cell in notebook.cells}
    found = {}
    for cell in notebook.cells:
        name = cell.get("id", "")
        if cell.cell_type == "markdown" and EXERCISE_HEADING.match(cell.source):
            found[name.removeprefix("exercise-")] = {
                "task": cell, **{part: cells.get(f"{name}-{part}") for part in ("check", "starter", "answer")}}
    return found


def assigned_names(source):
    """The names a cell's top-level code binds: assignments, functions, classes, imports, for targets."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        else:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
                    names.add(inner.id)
    return names


def has_ellipsis(source):
    return any(isinstance(node, ast.Constant) and node.value is Ellipsis for node in ast.walk(ast.parse(source)))


def exercise_problems(notebook):
    """What breaks the exercise form in a notebook ([] when nothing does)."""
    found = exercises(notebook)
    problems = []
    if not 2 <= len(found) <= 4:
        problems.append(f"{len(found)} exercises; two to four are expected")
    headings = [cell.source for cell in notebook.cells if cell.cell_type == "markdown"]
    section = next((i for i, text in enumerate(headings) if text.startswith("## Exercises")), None)
    after = next((i for i, text in enumerate(headings) if text.startswith("## Learn more")), None)
    numbers = []
    for name, parts in found.items():
        missing = [part for part, cell in parts.items() if cell is None]
        if missing:
            problems.append(f"exercise {name!r} lacks its {', '.join(missing)} cell(s) (ids exercise-{name}-…)")
            continue
        numbers.append(int(EXERCISE_HEADING.match(parts["task"].source).group(1)))
        index = headings.index(parts["task"].source)
        if section is None or after is None or not section < index < after:
            problems.append(f"exercise {name!r} is not in the Exercises section")
        if not is_folded(parts["check"]):
            problems.append(f"exercise {name!r}: its check cell is not a folded #@title cell")
        if is_folded(parts["starter"]) or not has_ellipsis(parts["starter"].source):
            problems.append(f"exercise {name!r}: its starter is not a visible cell with ... to replace")
        if not parts["answer"].source.startswith("#@title Answer") or not is_folded(parts["answer"]):
            problems.append(f"exercise {name!r}: its answer is not a folded '#@title Answer' cell")
        overwritten = assigned_names(parts["answer"].source) & assigned_names(parts["starter"].source)
        if overwritten:
            problems.append(f"exercise {name!r}: its answer overwrites the learner's {sorted(overwritten)}")
        order = [notebook.cells.index(parts[part]) for part in ("task", "check", "starter", "answer")]
        if order != sorted(order):
            problems.append(f"exercise {name!r}: the cells are not in the order task, check, starter, answer")
    if numbers != list(range(1, len(numbers) + 1)):
        problems.append(f"the exercises are numbered {numbers}, not 1, 2, ...")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_every_notebook_has_two_to_four_exercises_in_the_form(path):
    assert exercise_problems(read(path)) == []


def claimed_exercises():
    """{(notebook, name)} claimed by a test marked @pytest.mark.exercise(notebook, name)."""
    claimed = set()
    for test_file in (REPO / "tests").glob("test_[0-9][0-9]_*.py"):
        for node in ast.walk(ast.parse(test_file.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.exercise":
                claimed.add(tuple(ast.literal_eval(arg) for arg in node.args))
    return claimed


def test_every_exercise_has_a_test_of_its_likely_wrong_answer():
    wanted = {(path.name[:2], name) for path in NOTEBOOKS
              for name in exercises(read(path))}
    claimed = claimed_exercises()
    assert wanted - claimed == set(), "exercises without a wrong-answer test (@pytest.mark.exercise)"
    assert claimed <= wanted, "claims of no exercise"


# --- The rules above, tried on made-up notebooks ---------------------------------------------------

def made_up(*parts):
    """A notebook: an Exercises section with exercises made of (name, starter source, answer source)."""
    cells = [nbformat.v4.new_markdown_cell("## Exercises")]
    for number, (name, starter, answer) in enumerate(parts, start=1):
        cells += [nbformat.v4.new_markdown_cell(f"### Exercise {number} · Do {name}", id=f"exercise-{name}"),
                  nbformat.v4.new_code_cell(f"#@title Check\ndef check_{name}(x):\n    return x",
                                            id=f"exercise-{name}-check"),
                  nbformat.v4.new_code_cell(starter, id=f"exercise-{name}-starter"),
                  nbformat.v4.new_code_cell(answer, id=f"exercise-{name}-answer")]
    cells.append(nbformat.v4.new_markdown_cell("## Learn more"))
    return nbformat.v4.new_notebook(cells=cells)


GOOD = [("one", "mine = ...\ncheck_one(mine)", "#@title Answer\nanswer = 1\ncheck_one(answer)"),
        ("two", "def f():\n    return ...\ncheck_two(f)", "#@title Answer\ndef f_answer():\n    return 2")]


def test_the_exercise_form_passes_and_each_break_is_named():
    assert exercise_problems(made_up(*GOOD)) == []
    assert exercise_problems(made_up(GOOD[0])) == ["1 exercises; two to four are expected"]
    assert exercise_problems(made_up(*GOOD, *GOOD[:1] * 0, ("c", *GOOD[0][1:]), ("d", *GOOD[0][1:]),
                                     ("e", *GOOD[0][1:]))) == ["5 exercises; two to four are expected"]
    overwrite = ("two", "def f():\n    return ...", "#@title Answer\ndef f():\n    return 2")
    assert exercise_problems(made_up(GOOD[0], overwrite)) == [
        "exercise 'two': its answer overwrites the learner's ['f']"]
    no_ellipsis = ("two", "def f():\n    return 1", GOOD[1][2])
    assert "its starter is not a visible cell with ... to replace" in exercise_problems(
        made_up(GOOD[0], no_ellipsis))[0]
    unfolded = ("two", GOOD[1][1], "def f_answer():\n    return 2")
    assert "its answer is not a folded '#@title Answer' cell" in exercise_problems(made_up(GOOD[0], unfolded))[0]
    notebook = made_up(*GOOD)
    del notebook.cells[3]  # exercise one's starter
    assert exercise_problems(notebook) == ["exercise 'one' lacks its starter cell(s) (ids exercise-one-…)",
                                           "the exercises are numbered [2], not 1, 2, ..."]


def test_an_answer_may_not_bind_any_name_the_starter_binds():
    assert assigned_names("import numpy as np\nfor i, (a, b) in enumerate(x):\n    c = 1\nclass K: pass") == {
        "np", "i", "a", "b", "c", "K"}
    assert assigned_names("check(x)\nprint(y)") == set()


def test_starters_must_say_not_done_yet_and_answers_passed_in_the_run():
    assert starter_and_answer_verdicts("exercise-knee-starter", "NOT DONE YET: replace the ...") is None
    assert starter_and_answer_verdicts("exercise-knee-starter", "PASSED") is not None
    assert starter_and_answer_verdicts("exercise-knee-answer", "x\nPASSED: 3 of 3 inputs") is None
    assert "must print" in starter_and_answer_verdicts("exercise-knee-answer", "NOT YET RIGHT: off by 2")
    assert starter_and_answer_verdicts("exercise-knee-check", "") is None
    assert starter_and_answer_verdicts("cell-03", "anything") is None


def test_claims_are_read_from_the_marker():
    assert all(len(key) == 2 for key in claimed_exercises())
