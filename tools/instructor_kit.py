"""The instructor's kit: a note per notebook (docs/instructors/NN_words.md) and the schedule
(docs/schedule.md), generated where the facts live and written where they do not.

    .venv/bin/python tools/instructor_kit.py          # run every notebook (fast mode), write the kit
    .venv/bin/python tools/instructor_kit.py 05 10    # only these notebooks' notes (and the schedule)
    .venv/bin/python tools/instructor_kit.py --check  # change nothing; exit 1 where the kit is stale

A note's generated part, between its two marker lines, comes from the notebook (its sections), its
manifest entry (objectives, the notebook it builds on, the hardware, the minutes), the class rule
applied section by section to a fast-mode run of the notebook alone (the timing plan, and where the
class should be at 15, 30 and 45 minutes), which exercises fit in what the 60-minute slot leaves, and
the notebook's exercise tests (the wrong answers they try, and what the check says to each). Below it,
the written part: what to cut when the class runs late, the platform's pitfalls, questions to ask. A new
note gets the headings of its written part to fill in; a rewrite keeps what is written there. The nbval
run checks each note's timing plan against the run it makes (conftest.py), and
tests/tooling/test_instructor_kit.py the rest.

The schedule: one slot per notebook, its teaching and exercise minutes (the manifest's) and the minutes
the GPU records measured, where they exist (tools/gpu_run.py).
"""
import argparse
import ast
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import anatomy  # noqa: E402
import manifest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTES = REPO / "docs" / "instructors"
SCHEDULE = REPO / "docs" / "schedule.md"
TESTS = REPO / "tests" / "notebooks"
START = ("<!-- The part from here to the line 'End of the generated part' is written by "
         "tools/instructor_kit.py: edit the notebook, its manifest entry or its tests, then run it. -->")
END = "<!-- End of the generated part. What follows is written by hand. -->"
WRITTEN_HEADINGS = ("## What to cut when the class runs late", "## Pitfalls on Colab and Kaggle",
                    "## Questions to ask the class")


# ---- What a run shows, section by section --------------------------------------------------------

def run_counts(executed):
    """({code cell id: (printed words, tables and figures)}, {code cell id: seconds}) of a run notebook."""
    from notebook_run import cell_seconds

    shown, seconds = {}, {}
    for cell in executed["cells"]:
        if cell["cell_type"] == "code":
            outputs = cell.get("outputs", [])
            shown[cell.get("id")] = (anatomy.printed_prose_words(outputs), anatomy.tables_and_figures(outputs))
            seconds[cell.get("id")] = cell_seconds(cell)
    return shown, seconds


def section_titles(notebook):
    """{'Setup' or 'Step N': the heading's words} of the core."""
    titles = {"Setup": "Setup: open it, switch to a GPU, run the setup cells"}
    for _, text in anatomy.headings(notebook):
        found = anatomy.STEP.match(text)
        if found:
            titles[f"Step {found.group(1)}"] = text
    return titles


def timing_table(minutes, titles):
    """The timing plan's lines: each section's minutes, rounded to whole minutes, the minute it ends
    by, and where the class should be at 15, 30 and 45 minutes (from the rounded minutes, so that the
    plan can be made again from the note alone)."""
    rounded = {section: round(spent) for section, spent in minutes.items()}
    lines = ["| section | minutes | done by minute |", "|---|---|---|"]
    elapsed = 0
    for section, spent in rounded.items():
        elapsed += spent
        lines.append(f"| {titles.get(section, section)} | {spent} | {elapsed} |")
    marks = "; ".join(f"at {mark} min, {'on ' if where == 'the exercises' else 'in '}{where}"
                      for mark, where in anatomy.minutes_plan(rounded))
    return lines + ["", f"Where the class should be: {marks}."]


def timing_in_note(text):
    """{section: minutes} of a note's timing plan, as written ({} when it has none)."""
    found = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].isdigit():
            section = re.match(r"(Setup|Step \d+)\b", cells[0])
            if section:
                found[section.group(1)] = int(cells[1])
    return found


def timing_problems(note_text, minutes, slack=1.0):
    """Where a note's timing plan differs from `minutes` (a run's section minutes) by more than `slack`
    minutes, or lacks or adds a section; [] when it is current."""
    written = timing_in_note(note_text)
    if set(written) != set(minutes):
        return [f"its timing plan has the sections {sorted(written)}, the notebook {sorted(minutes)}"]
    return [f"{section}: {written[section]} min in the note, {spent:.1f} by this run"
            for section, spent in minutes.items() if abs(written[section] - spent) > slack + 0.5]


# ---- What the exercise tests try -----------------------------------------------------------------

def _text(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "…" for part in node.values)
    return None


def wrong_answer_messages(number, test_dir=TESTS):
    """{exercise name: [the NOT YET RIGHT messages the tests marked exercise(number, name) assert]}, read
    from the notebook's test files' source (in order, without repeats)."""
    found = {}
    for path in sorted(Path(test_dir).glob(f"test_{number}_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            names = [ast.literal_eval(mark.args[1]) for mark in node.decorator_list
                     if isinstance(mark, ast.Call) and ast.unparse(mark.func) == "pytest.mark.exercise"
                     and ast.literal_eval(mark.args[0]) == number]
            parts = {id(part) for inner in ast.walk(node) if isinstance(inner, ast.JoinedStr)
                     for part in inner.values}
            said = [_text(inner) for inner in ast.walk(node) if id(inner) not in parts]
            said = [text for text in said if text and text.startswith("NOT YET RIGHT")]
            for name in names:
                kept = found.setdefault(name, [])
                for text in said:
                    if text not in kept:
                        kept.append(text)
    return {name: whole_messages(said) for name, said in found.items()}


def whole_messages(said):
    """The messages worth reading out: a start that a longer message of the list begins with, or one
    too short to say anything (a test's `startswith`), is left out."""
    return [text for text in said
            if len(text.removeprefix("NOT YET RIGHT:").strip(" …")) >= 15
            and not any(other != text and other.startswith(text) for other in said)]


# ---- The note ------------------------------------------------------------------------------------

SLOT_MINUTES = 60


def _named(names):
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def slot_fit(teaching, exercises, slot=SLOT_MINUTES):
    """(minutes the slot leaves after `teaching`, the leading exercises of `exercises` ([(heading,
    minutes or None)], in order) whose minutes add up to no more than that, their minutes, the rest)."""
    left = slot - teaching
    fit, used = [], 0
    for heading, took in exercises:
        if took is None or used + took > left:
            break
        fit.append(heading.split(" · ", 1)[0])
        used += took
    return left, fit, used, [heading.split(" · ", 1)[0] for heading, _ in exercises[len(fit):]]


def in_the_slot(teaching, exercises, slot=SLOT_MINUTES):
    """The note's sentence: what the slot leaves after the teaching, which exercises fit in it, which
    are for after the class."""
    left, fit, used, rest = slot_fit(teaching, exercises, slot)
    if not exercises:
        return f"The {slot}-minute slot leaves {left} min after the teaching."
    if not fit:
        said = f"none of the exercises fits in it, so start {rest[0]} in class and finish it after"
    else:
        said = f"{_named(fit)} ({used} min) fit{'s' * (len(fit) == 1)} in it"
        if rest:
            said += f"; {_named(rest)} {'is' if len(rest) == 1 else 'are'} for after the class"
    return f"The {slot}-minute slot leaves {left} min after the teaching: {said}."


def task_minutes(notebook):
    """{exercise name: (its heading, its minutes or None)} of a notebook, in order."""
    found = {}
    for name, parts in anatomy.exercises(notebook).items():
        task = anatomy._source(parts["task"])
        found[name] = (task.split("\n", 1)[0].lstrip("# ").strip(), anatomy.exercise_minutes(task))
    return found


def generated_part(number, notebook, entry, minutes, messages):
    """The note's generated part (between START and END)."""
    source = anatomy._source(notebook["cells"][0])
    title = source.split("\n", 1)[0].lstrip("# ").strip()
    plan = re.search(r"^\*\*Builds on:\*\*.*$", source, re.M)
    lines = [START, f"# {title}: notes for the instructor", "",
             plan.group(0) if plan else "(the title cell has no plan: run tools/sync_cells.py)", "",
             "**The learner will be able to:**", *[f"- {objective}" for objective in entry.objectives], "",
             "## Timing plan", "",
             "The class rule (README), section by section, on a fast-mode run of the notebook alone; the "
             "T4's running minutes shared among the Steps as their seconds in that run are. A GPU record "
             "of your rehearsal gives the measured minutes per Step.", ""]
    lines += timing_table(minutes, section_titles(notebook))
    tasks = task_minutes(notebook)
    lines += ["", "## Exercises, and the wrong answers learners give", "",
              in_the_slot(entry.teaching_minutes, list(tasks.values())), "",
              "Each check answers these wrong answers (the ones its tests try) with the message below: "
              "what to say is what it says, and why.", ""]
    for name, (heading, took) in tasks.items():
        lines.append(f"### {heading}" + (f" (about {took} min)" if took else ""))
        lines.append("")
        lines += [f"- {message}" for message in messages.get(name, [])] or ["- (no wrong answer tried)"]
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def written_part(text):
    """The part of a note below END (its written part), or the headings to fill in for a new note."""
    if END in text:
        return text.split(END, 1)[1].lstrip("\n")
    return "\n\n".join(f"{heading}\n\n(to be written)" for heading in WRITTEN_HEADINGS) + "\n"


def note_path(entry):
    return NOTES / entry.file.replace(".ipynb", ".md")


def note_text(number, notebook, entry, minutes, old_text=""):
    return generated_part(number, notebook, entry, minutes, wrong_answer_messages(number)) + "\n\n" + \
        written_part(old_text)


def written_problems(text):
    """What the written part of a note lacks: each heading, with words under it."""
    body = written_part(text)
    problems = []
    for heading in WRITTEN_HEADINGS:
        if heading not in body:
            problems.append(f"it lacks the heading {heading!r}")
            continue
        under = body.split(heading, 1)[1].split("\n## ", 1)[0]
        if "(to be written)" in under or len(under.split()) < 20:
            problems.append(f"{heading!r} is not written yet (twenty words at least)")
    return problems


# ---- The schedule --------------------------------------------------------------------------------

def schedule_text(entries, titles, measured, exercises):
    """docs/schedule.md: the slots in order, the manifest's minutes, the exercises that fit in what the
    slot leaves (`exercises`: {number: [(heading, minutes)]}), the GPU records' minutes where measured
    (`measured`: {file name: (minutes, runs)} for the hardware each is taught on)."""
    lines = [f"# Schedule: {len(entries)} slots of {SLOT_MINUTES} minutes", "",
             "Written by tools/instructor_kit.py from notebooks/manifest.toml and the GPU records "
             "(records/gpu/): edit those, then run it. Teaching minutes are the class rule's (README); "
             "each notebook's instructor note (docs/instructors/) splits them by Step. The exercises "
             "that fit in what the slot leaves are done in class; the others are for after it.", "",
             "| slot | notebook | taught on | teaching, min | exercises, min | in the slot "
             "| core on its GPU, measured |",
             "|---|---|---|---|---|---|---|"]
    for slot, (number, entry) in enumerate(sorted(entries.items()), start=1):
        found = measured.get(entry.file)
        runs = f"{found[0]} min ({found[1]} run{'s' * (found[1] != 1)})" if found else "not measured yet"
        lines.append(f"| {slot} | [{number} · {titles[number]}](instructors/{entry.file.replace('.ipynb', '.md')}) "
                     f"| {entry.hardware} | {entry.teaching_minutes} | {entry.exercise_minutes} "
                     f"| {fitting(entry.teaching_minutes, exercises.get(number, []))} | {runs} |")
    teaching = sum(entry.teaching_minutes for entry in entries.values())
    exercises_total = sum(entry.exercise_minutes for entry in entries.values())
    in_class = sum(slot_fit(entry.teaching_minutes, exercises.get(number, []))[2]
                   for number, entry in entries.items())
    lines += ["", f"In all: {teaching} min of teaching and {exercises_total} min of exercises, {in_class} "
                  f"of them in class, in {len(entries)} slots of {SLOT_MINUTES} min.", ""]
    return "\n".join(lines)


def fitting(teaching, exercises):
    """The schedule's cell: the exercises that fit in what the slot leaves after `teaching` minutes."""
    left, fit, used, _ = slot_fit(teaching, exercises)
    return f"{_named(fit)}: {used} of {left} min" if fit else f"none: {left} min left"


def exercises_of(entries):
    """{number: [(exercise heading, minutes)]} of each notebook."""
    import nbformat

    return {number: list(task_minutes(nbformat.read(str(entry.path), as_version=4)).values())
            for number, entry in entries.items()}


def measured_minutes(entries):
    import gpu_run

    found = {}
    for entry in entries.values():
        t4 = gpu_run.taught_on_minutes(entry.file, entry.hardware)
        if t4.measured:
            found[entry.file] = (t4.minutes, t4.runs)
    return found


def titles_of(entries):
    import nbformat

    return {number: nbformat.read(str(entry.path), as_version=4).cells[0].source.split("\n", 1)[0]
            .split("·", 1)[-1].strip() for number, entry in entries.items()}


# ---- The command ---------------------------------------------------------------------------------

def main(argv=None):
    import nbformat

    from notebook_run import run_alone

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="notebook numbers (all when none)")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 where a note or the schedule is stale "
                             "(runs each notebook in fast mode)")
    args = parser.parse_args(argv)
    entries = manifest.notebooks()
    chosen = args.notebooks or sorted(entries)
    stale = []
    for number in chosen:
        entry = entries[number]
        path = note_path(entry)
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        run = run_alone(entry.path, fast=True)
        if run.error:
            print(f"{entry.file}: the run stopped ({run.error}); its note is left as it is")
            stale.append(number)
            continue
        shown, seconds = run_counts(run.notebook)
        notebook = nbformat.read(str(entry.path), as_version=4)
        t4 = anatomy.workshop_t4(notebook)
        minutes = anatomy.section_minutes(notebook, shown, seconds, t4[1] if t4 else entry.t4_run_minutes)
        text = note_text(number, notebook, entry, minutes, old)
        if args.check:
            problems = timing_problems(old, minutes) + (["its generated part differs"] if
                                                        text.split(END)[0].split("## Timing plan")[0] !=
                                                        old.split(END)[0].split("## Timing plan")[0] else [])
            for problem in problems:
                print(f"{path.relative_to(REPO)}: {problem}")
            stale += [number] if problems else []
        elif text != old:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(REPO)}")
    schedule = schedule_text(entries, titles_of(entries), measured_minutes(entries),
                             exercises_of(entries))
    if args.check:
        if not SCHEDULE.exists() or SCHEDULE.read_text(encoding="utf-8") != schedule:
            print("docs/schedule.md differs: run tools/instructor_kit.py")
            stale.append("schedule")
    elif not SCHEDULE.exists() or SCHEDULE.read_text(encoding="utf-8") != schedule:
        SCHEDULE.write_text(schedule, encoding="utf-8")
        print("wrote docs/schedule.md")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
