"""The instructor's kit (tools/instructor_kit.py): a note per notebook whose generated part says what the
notebook, its manifest entry and its exercise tests say, with its written part written, and a schedule
that says what the manifest and the GPU records say. The note's timing plan against a run of the notebook
is checked in the nbval run (conftest.py: note_problems)."""
import pytest

from support.notebook_code import NOTEBOOKS, REPO, read

import sys

sys.path.insert(0, str(REPO / "tools"))
import instructor_kit as kit  # noqa: E402
import manifest  # noqa: E402


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_each_notebook_has_a_note_whose_generated_part_is_current(path):
    number = path.name[:2]
    entry = manifest.notebook(number)
    note = kit.note_path(entry)
    assert note.exists(), f"no {note.relative_to(REPO)}: run tools/instructor_kit.py {number}"
    text = note.read_text(encoding="utf-8")
    minutes = {section: float(spent) for section, spent in kit.timing_in_note(text).items()}
    wanted = kit.generated_part(number, read(path), entry, minutes, kit.wrong_answer_messages(number))
    assert text.split(kit.END)[0] + kit.END == wanted, f"run tools/instructor_kit.py {number}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_each_notes_written_part_says_what_to_cut_the_pitfalls_and_questions(path):
    note = kit.note_path(manifest.notebook(path.name[:2]))
    assert kit.written_problems(note.read_text(encoding="utf-8")) == []


def test_the_schedule_is_current():
    entries = manifest.notebooks()
    assert kit.SCHEDULE.read_text(encoding="utf-8") == kit.schedule_text(
        entries, kit.titles_of(entries), kit.measured_minutes(entries), kit.exercises_of(entries)), (
        "run tools/instructor_kit.py")


def test_the_exercises_that_fit_in_what_the_slot_leaves_are_the_leading_ones_that_add_up():
    tasks = [("Exercise 1 · One", 10), ("Exercise 2 · Two", 5), ("Exercise 3 · Three", 10)]
    assert kit.slot_fit(45, tasks) == (15, ["Exercise 1", "Exercise 2"], 15, ["Exercise 3"])  # 15 of 15
    assert kit.slot_fit(46, tasks) == (14, ["Exercise 1"], 10, ["Exercise 2", "Exercise 3"])
    assert kit.slot_fit(35, tasks)[1:] == (["Exercise 1", "Exercise 2", "Exercise 3"], 25, [])
    assert kit.slot_fit(51, tasks)[1:] == ([], 0, ["Exercise 1", "Exercise 2", "Exercise 3"])
    # an exercise that does not say its minutes ends what fits: the plan cannot count it
    assert kit.slot_fit(30, [("Exercise 1 · One", None), ("Exercise 2 · Two", 5)])[1] == []
    assert kit.in_the_slot(46, tasks) == ("The 60-minute slot leaves 14 min after the teaching: Exercise 1 "
                                          "(10 min) fits in it; Exercise 2 and Exercise 3 are for after "
                                          "the class.")
    assert kit.in_the_slot(51, tasks).endswith("none of the exercises fits in it, so start Exercise 1 in "
                                               "class and finish it after.")
    assert kit.fitting(45, tasks) == "Exercise 1 and Exercise 2: 15 of 15 min"
    assert kit.fitting(51, tasks) == "none: 9 min left"


def test_the_timing_plan_rounds_each_section_and_says_where_the_class_is():
    minutes = {"Setup": 6.4, "Step 1": 11.6, "Step 2": 16.2}
    lines = kit.timing_table(minutes, {"Setup": "Setup", "Step 1": "Step 1 · One", "Step 2": "Step 2 · Two"})
    assert lines[2:5] == ["| Setup | 6 | 6 |", "| Step 1 · One | 12 | 18 |", "| Step 2 · Two | 16 | 34 |"]
    assert lines[-1] == ("Where the class should be: at 15 min, in Step 1; at 30 min, in Step 2; at 45 min, "
                         "on the exercises.")
    assert kit.timing_in_note("\n".join(lines)) == {"Setup": 6, "Step 1": 12, "Step 2": 16}


def test_a_note_is_stale_when_a_section_moves_more_than_a_minute_or_one_is_added():
    note = "| Setup | 6 | 6 |\n| Step 1 · One | 12 | 18 |"
    assert kit.timing_problems(note, {"Setup": 6.3, "Step 1": 13.4}) == []
    assert kit.timing_problems(note, {"Setup": 6.3, "Step 1": 13.6}) == [
        "Step 1: 12 min in the note, 13.6 by this run"]
    assert kit.timing_problems(note, {"Setup": 6.0, "Step 1": 12.0, "Step 2": 3.0})[0].startswith(
        "its timing plan has the sections")


def test_a_written_part_needs_each_heading_with_words_under_it():
    words = " ".join(["word"] * 20)
    full = "\n\n".join(f"{heading}\n\n{words}" for heading in kit.WRITTEN_HEADINGS)
    assert kit.written_problems(kit.END + "\n" + full) == []
    assert kit.written_problems("") == [f"{heading!r} is not written yet (twenty words at least)"
                                        for heading in kit.WRITTEN_HEADINGS]
    short = full.replace(words, "two words", 1)
    assert len(kit.written_problems(kit.END + "\n" + short)) == 1


def test_the_wrong_answers_are_read_from_the_exercise_tests(tmp_path):
    (tmp_path / "test_99_exercises.py").write_text(
        'import pytest\n\n@pytest.mark.exercise("99", "sum")\ndef test_a(nb):\n'
        '    assert nb.check_sum(lambda: 1) == "NOT YET RIGHT: for 1 it gave 3, not 2."\n'
        '    assert nb.check_sum(lambda: 3).startswith(f"NOT YET RIGHT: {3} is")\n'
        '    assert nb.check_sum(lambda: 1) == "NOT YET RIGHT: for 1 it gave 3, not 2."\n\n'
        '@pytest.mark.exercise("98", "other")\ndef test_b(nb):\n    assert "NOT YET RIGHT: no"\n')
    assert kit.wrong_answer_messages("99", tmp_path) == {"sum": ["NOT YET RIGHT: for 1 it gave 3, not 2."]}, \
        "a start too short to say anything is left out"
    assert kit.whole_messages(["NOT YET RIGHT: the batch moved to", "NOT YET RIGHT: the batch moved to cpu",
                               "NOT YET RIGHT: the numbers changed on meta"]) == [
        "NOT YET RIGHT: the batch moved to cpu", "NOT YET RIGHT: the numbers changed on meta"]
