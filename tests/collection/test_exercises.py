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

from anatomy import EXERCISE_HEADING, exercise_minutes, exercises, is_folded
from support.notebook_code import NOTEBOOKS, REPO, read
from support.verdicts import starter_and_answer_verdicts

NOTEBOOK_IDS = [path.name for path in NOTEBOOKS]
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
    for test_file in (REPO / "tests").rglob("test_*.py"):
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


# --- Every check answers whatever a learner writes: the probes (tests/exercise_probes.py) ------------

def test_the_learners_work_is_what_the_starters_statements_with_the_ellipsis_bind():
    from support.exercise_probes import learner_names

    starter = ("GIVEN = 3\nbig = make(GIVEN)\nmine = ...\nwith Counter() as counter:\n    ...\n"
               "def answer(x):\n    return ...\nclass Model:\n    def forward(self):\n        return ...\n"
               "check_it(answer, mine, counter.total(), big)")
    assert learner_names(starter) == {"mine": "value", "counter": "value", "answer": "function",
                                      "Model": "function"}


def test_each_argument_that_reads_the_learners_work_is_replaced_one_at_a_time():
    from support.exercise_probes import probe_calls

    starter = "def f(x):\n    return ...\nvalue = ...\ncheck_f(f, device, total=value + 1)"
    assert probe_calls(starter) == [
        ("a function that raises", "f", "check_f(__made_up['a function that raises'], device, total=value + 1)"),
        ("a function that returns None", "f",
         "check_f(__made_up['a function that returns None'], device, total=value + 1)"),
        ("a function that returns a string", "f",
         "check_f(__made_up['a function that returns a string'], device, total=value + 1)"),
        ("None", "value + 1", "check_f(f, device, total=None)"),
        ("a string", "value + 1", "check_f(f, device, total='a string')")]
    with pytest.raises(ValueError, match="not a call of its check_"):
        probe_calls("def f():\n    return ...\nprint(f)")


def run_probes(starter, namespace):
    """Run the probes of `starter` as the kernel does, in `namespace`; what they printed."""
    import contextlib
    import io

    from support.exercise_probes import probe_code

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(probe_code(starter), namespace)
    return printed.getvalue()


def test_the_probes_pass_a_check_that_answers_and_name_one_that_stops_with_a_traceback():
    from support.exercise_probes import probe_problems

    starter = "def double(x):\n    return ...\ncheck_double(double)"

    def answers(double):
        try:
            value = double(2)
        except Exception as error:
            return f"NOT YET RIGHT: double raised {error}"
        return "PASSED" if value == 4 else f"NOT YET RIGHT: {value!r} is not 4"

    assert probe_problems(run_probes(starter, {"check_double": answers})) == []

    def crashes(double):
        return "PASSED" if double(2) + 0 == 4 else "NOT YET RIGHT"

    problems = probe_problems(run_probes(starter, {"check_double": crashes}))
    assert [problem.split(",")[0] for problem in problems] == [
        "with a function that raises for double", "with a function that returns None for double",
        "with a function that returns a string for double"]
    assert "TRACEBACK ValueError: made up by the test run" in problems[0]
    assert "TRACEBACK TypeError" in problems[1]


def test_a_value_starter_is_probed_with_none_and_a_string():
    from support.exercise_probes import probe_problems

    starter = "costs = ...\ncheck_costs(costs, 4)"
    printed = run_probes(starter, {"check_costs": lambda costs, n: "PASSED" if costs * n == 8 else "NOT YET RIGHT"})
    assert probe_problems(printed) == [
        "with None for costs, the check said \"TRACEBACK TypeError: unsupported operand type(s) for *: "
        "'NoneType' and 'int'\", not NOT YET RIGHT or NOT DONE YET"]
    assert probe_problems("nothing")[0].startswith("the probes printed no answers")
    assert probe_problems("EXERCISE-PROBES []") == [
        "the starter's check call reads none of the learner's names: no probe was made"]


# --- Every way a check says NOT YET RIGHT is reached by a wrong answer in a test ---------------------

def _pieces(node):
    """A message expression as [text or None]: its constant text, None for each part computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [part.value if isinstance(part, ast.Constant) else None for part in node.values]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _pieces(node.left) + _pieces(node.right)
    return [None]


def _merged(pieces):
    merged = []
    for piece in pieces:
        if merged and piece is not None and merged[-1] is not None:
            merged[-1] += piece
        elif not (piece is None and merged and merged[-1] is None):
            merged.append(piece)
    return merged


def not_yet_right_messages(check_source):
    """[(line, pieces)] of every `Feedback(...)` in a check cell whose text starts with NOT YET RIGHT:
    the ways the check can say what is wrong."""
    found = []
    for node in ast.walk(ast.parse(check_source)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "Feedback" and node.args:
            pieces = _merged(_pieces(node.args[0]))
            if pieces and isinstance(pieces[0], str) and pieces[0].startswith("NOT YET RIGHT"):
                found.append((node.lineno, pieces))
    return found


def reaches(pieces, said):
    """True when `said` (a message a test asserts, whole or its start) is what `pieces` can say."""
    parts = [re.escape(piece) if piece is not None else "(?:.*?)" for piece in pieces]
    if re.fullmatch("".join(parts), said, re.S):
        return True
    for index, piece in enumerate(pieces):  # `said` ends inside piece `index`
        if piece is None:
            end = ".*"
        else:  # any start of the piece: (?:a(?:b(?:c)?)?)?
            end = "".join(f"(?:{re.escape(char)}" for char in piece) + ")?" * len(piece)
        if re.fullmatch("".join(parts[:index]) + end, said, re.S):
            return True
    return False


def asserted_messages(test_sources):
    """{(notebook, name): the NOT YET RIGHT messages (whole, or their start) that the tests marked
    exercise(notebook, name) assert}; a computed part of an f-string stands as 'X'."""
    said = {}
    for source in test_sources:
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            keys = [tuple(ast.literal_eval(arg) for arg in mark.args) for mark in node.decorator_list
                    if isinstance(mark, ast.Call) and ast.unparse(mark.func) == "pytest.mark.exercise"]
            texts = ["".join(piece if piece is not None else "X" for piece in _pieces(inner))
                     for inner in ast.walk(node) if isinstance(inner, (ast.Constant, ast.JoinedStr))]
            for key in keys:
                said.setdefault(key, []).extend(text for text in texts if text.startswith("NOT YET RIGHT"))
    return said


def unreached_messages(check_source, said):
    """The NOT YET RIGHT messages of a check that none of `said` (the messages its tests assert)
    reaches, as (line, text)."""
    messages = not_yet_right_messages(check_source)
    unreached = []
    for line, pieces in messages:
        whole = "".join(re.escape(piece) if piece is not None else "(?:.*?)" for piece in pieces)
        # a start that several messages share reaches none of them: assert more of the message
        unique = [text for text in said if re.fullmatch(whole, text, re.S) or (
            reaches(pieces, text) and sum(reaches(other, text) for _, other in messages) == 1)]
        if not unique:
            unreached.append((line, "".join(piece if piece is not None else "{…}" for piece in pieces)))
    return unreached


def test_every_not_yet_right_of_every_check_is_asserted_by_a_wrong_answer():
    """A check can be loosened until almost any answer passes; a wrong answer per message catches it."""
    said = asserted_messages(path.read_text() for path in (REPO / "tests").rglob("test_*.py"))
    missing = []
    for path in NOTEBOOKS:
        for name, parts in exercises(read(path)).items():
            for line, text in unreached_messages(parts["check"].source, said.get((path.name[:2], name), [])):
                missing.append(f"{path.name[:2]} {name}, line {line} of its check: {text[:110]}")
    assert missing == [], (
        f"{len(missing)} ways a check says NOT YET RIGHT that no test marked "
        f"@pytest.mark.exercise(notebook, name) asserts (write the wrong answer that reaches each):\n"
        + "\n".join(missing))


def test_a_message_is_reached_whole_or_by_its_start_and_only_by_what_it_can_say():
    pieces = ["NOT YET RIGHT: for ", None, ", ", None, " of ", None, " tensors are still on "]
    assert reaches(pieces, "NOT YET RIGHT: for a tuple, 2 of 2 tensors are still on ")
    assert reaches(pieces, "NOT YET RIGHT: for a tuple, 2 of")
    assert reaches(pieces, "NOT YET RIGHT: for a tu")
    assert not reaches(pieces, "NOT YET RIGHT: on a tuple")
    source = ('def check_x(f):\n    if f(1) is None:\n        return Feedback("NOT YET RIGHT: it returned None.")\n'
              '    if f(1) != 2:\n        return Feedback(f"NOT YET RIGHT: for 1 it gave {f(1)}, not 2.")\n'
              '    return Feedback("PASSED")\n')
    assert [line for line, _ in not_yet_right_messages(source)] == [3, 5]
    tests = ('@pytest.mark.exercise("01", "x")\ndef test_x(nb):\n'
             '    assert nb.check_x(lambda v: 3) == "NOT YET RIGHT: for 1 it gave 3, not 2."\n')
    said = asserted_messages([tests])
    assert said == {("01", "x"): ["NOT YET RIGHT: for 1 it gave 3, not 2."]}
    assert unreached_messages(source, said[("01", "x")]) == [(3, "NOT YET RIGHT: it returned None.")]
    assert unreached_messages(source, []) == [(3, "NOT YET RIGHT: it returned None."),
                                              (5, "NOT YET RIGHT: for 1 it gave {…}, not 2.")]
    assert len(unreached_messages(source, ["NOT YET RIGHT: "])) == 2, "a start both share reaches neither"


# --- Each exercise says how long it takes; the notebook's exercise minutes are their sum -------------

def exercise_minutes_problems(notebook, stated):
    """What is wrong with the exercises' minutes: a task that does not say 'About N minutes' (at most
    10, doable in class), or a sum other than the manifest's `exercise_minutes` (`stated`)."""
    problems, total = [], 0
    for name, parts in exercises(notebook).items():
        took = exercise_minutes(parts["task"].source)
        if took is None:
            problems.append(f"exercise {name!r}: its task does not say 'About N minutes.'")
        elif took > 10:
            problems.append(f"exercise {name!r}: {took} minutes; an exercise fits 10 in class")
        else:
            total += took
    if not problems and total != stated:
        problems.append(f"the exercises take {total} minutes by their tasks; the manifest says {stated}")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_each_exercise_says_its_minutes_and_they_add_up_to_the_manifests(path):
    import manifest

    assert exercise_minutes_problems(read(path), manifest.notebook(path.name[:2]).exercise_minutes) == []


def test_the_exercise_minutes_rule_on_made_up_notebooks():
    notebook = made_up(*GOOD)
    notebook.cells[1].source += " About 10 minutes."
    notebook.cells[5].source += " About 5 minutes."
    assert exercise_minutes_problems(notebook, 15) == []
    assert exercise_minutes_problems(notebook, 20) == [
        "the exercises take 15 minutes by their tasks; the manifest says 20"]
    notebook.cells[5].source = notebook.cells[5].source.replace("About 5", "About 15")
    assert exercise_minutes_problems(notebook, 25) == ["exercise 'two': 15 minutes; an exercise fits 10 in class"]
