"""What a notebook of this collection is made of, read as data: its sections in order, its core, and
the class rule that says how long a workshop needs for the core.

This is the one definition of "the core" (every cell before the Summary heading) and of the class rule;
tools/notebook_run.py, tools/budget.py, tools/time_notebooks.py, tools/gpu_run.py and the tests
(through tests/notebook_code.py) all read them from here. It needs nothing but the standard library, so
a throwaway Python environment can import it too; a notebook is an nbformat node or a plain dict.

The anatomy, in this order in every notebook (CONTRIBUTING.md, "The anatomy of a notebook"):
title cell ("# NN · Title", what you will find out, the title table), "## Setup", "## Step 1 · ...",
"## Step 2 · ...", ..., "## Summary", "## Exercises", "## Learn more", "## Going deeper",
"## Words used here" (the last cell, made by tools/sync_cells.py). Level-3 headings are free inside a
section.

The class rule (README states it; a test compares the two):

    minutes = 1.1 × (5 + (markdown words + printed words) / 100 + 1.0 × visible code cells
                     + 0.1 × visible code lines + 0.5 × folded code cells outside Setup
                     + 1.0 × tables and figures shown + T4 run minutes)

counted over the core. Printed words are the lines of at least PROSE_LINE_WORDS words that the core's
cells print as text (a fast-mode run); tables are outputs shown as HTML tables, figures are images. A
folded cell in a Step costs half a minute: the class waits for it to run and the instructor says what
it does. The same counts, taken section by section, give each section's minutes (section_minutes).
"""
import hashlib
import json
import math
import re

# ---- Reading cells --------------------------------------------------------------------------------


def _source(cell):
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _kind(cell):
    return cell.get("cell_type")


def is_folded(cell):
    """True for a folded plumbing cell: a code cell whose first line is '#@title ...'."""
    return _kind(cell) == "code" and _source(cell).startswith("#@title ")


# ---- The anatomy ----------------------------------------------------------------------------------

TITLE = re.compile(r"^# (\d\d) · \S")
HEADING = re.compile(r"^## (.+?)\s*$", re.M)
STEP = re.compile(r"^Step (\d+) · \S")
SECTIONS = ["Setup", "Step", "Summary", "Exercises", "Learn more", "Going deeper", "Words used here"]
SUMMARY_HEADING = re.compile(r"^## Summary\s*$", re.M)


def headings(notebook):
    """[(cell index, text)] of every level-2 heading ("## ...") in the markdown cells, in order."""
    return [(index, found.group(1)) for index, cell in enumerate(notebook["cells"])
            if _kind(cell) == "markdown" for found in HEADING.finditer(_source(cell))]


def section_of(heading):
    """The SECTIONS entry a level-2 heading opens, or None for a heading the anatomy does not know."""
    if STEP.match(heading):
        return "Step"
    return heading if heading in SECTIONS else None


def anatomy_problems(notebook):
    """What breaks the anatomy, in words ([] when nothing does)."""
    cells = notebook["cells"]
    problems = []
    if not cells or _kind(cells[0]) != "markdown" or not TITLE.match(_source(cells[0])):
        problems.append("the first cell is not a markdown title '# NN · Title'")
    found = headings(notebook)
    unknown = [text for _, text in found if section_of(text) is None]
    if unknown:
        problems.append(f"level-2 headings the anatomy does not know: {unknown} (use '### ' inside a "
                        f"section)")
    order = [section_of(text) for _, text in found if section_of(text)]
    collapsed = [name for i, name in enumerate(order) if i == 0 or name != order[i - 1]]
    if collapsed != SECTIONS:
        problems.append(f"the sections run {collapsed}, not {SECTIONS}")
    repeated = sorted({name for name in order if name != "Step" and order.count(name) > 1})
    if repeated:
        problems.append(f"sections that appear more than once: {repeated}")
    steps = [int(STEP.match(text).group(1)) for _, text in found if STEP.match(text)]
    if steps != list(range(1, len(steps) + 1)):
        problems.append(f"the steps are numbered {steps}, not 1, 2, 3, ...")
    inside = [text for index, text in found if not _source(cells[index]).startswith(f"## {text}")]
    if inside:
        problems.append(f"level-2 headings inside a cell, not opening it: {inside}")
    if found and found[-1][1] == "Words used here" and found[-1][0] != len(cells) - 1:
        problems.append("'## Words used here' is not the last cell")
    return problems


# ---- The notebook's version -----------------------------------------------------------------------

# A notebook uploaded alone cannot read its own file, so it carries its version: the shared setup cell's
# line `NOTEBOOK_VERSION = "NN_words.ipynb@<16 hex digits>"`, which tools/sync_cells.py writes. The version
# is a hash of the cells' types and sources, that line left out: outputs, ids and metadata are not part of
# it, so a run, a stripped output or a Colab form's state does not change it.
VERSION_LINE = re.compile(r"^NOTEBOOK_VERSION = .*$\n?", re.M)


def notebook_version(notebook):
    """The first 16 hex digits of sha256 over [[cell type, source], ...] of every cell, each code cell's
    NOTEBOOK_VERSION line left out (RECORD_SPEC: the record's `notebooks_version`)."""
    cells = [[_kind(cell), VERSION_LINE.sub("", _source(cell)) if _kind(cell) == "code" else _source(cell)]
             for cell in notebook["cells"]]
    text = json.dumps(cells, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def version_line(file_name, notebook):
    """The shared setup cell's line that says which notebook this is and which version."""
    return f'NOTEBOOK_VERSION = "{file_name}@{notebook_version(notebook)}"'


# ---- Exercises ------------------------------------------------------------------------------------

# An exercise (CONTRIBUTING.md, "Exercises") is a markdown cell `exercise-<name>` opening with
# "### Exercise N · ..." in the Exercises section, then three code cells: `exercise-<name>-check`
# (folded: the check), `exercise-<name>-starter` (visible: what the learner edits, `...` marking the
# part to write) and `exercise-<name>-answer` (folded, "#@title Answer ...").
EXERCISE_HEADING = re.compile(r"^### Exercise (\d+) · \S")
EXERCISE_PARTS = ("check", "starter", "answer")


def exercises(notebook):
    """{name: {"task": cell, "check": cell, "starter": cell, "answer": cell}} of the notebook's
    exercises, in order; a part that is missing is None."""
    cells = {cell.get("id"): cell for cell in notebook["cells"]}
    found = {}
    for cell in notebook["cells"]:
        name = cell.get("id") or ""
        if _kind(cell) == "markdown" and EXERCISE_HEADING.match(_source(cell)):
            found[name.removeprefix("exercise-")] = {
                "task": cell, **{part: cells.get(f"{name}-{part}") for part in EXERCISE_PARTS}}
    return found


TASK_MINUTES = re.compile(r"\bAbout (\d+) minutes\b", re.I)


def exercise_minutes(task):
    """The minutes an exercise's task (its source) says it takes ('About 10 minutes.'), or None."""
    found = TASK_MINUTES.search(task)
    return int(found.group(1)) if found else None


# ---- The core -------------------------------------------------------------------------------------

def summary_index(notebook):
    """The index of the cell holding the '## Summary' heading, or None."""
    return next((index for index, cell in enumerate(notebook["cells"])
                 if _kind(cell) == "markdown" and SUMMARY_HEADING.search(_source(cell))), None)


def core_cells(notebook):
    """The cells of the core: every cell before the one holding the Summary heading; ValueError when
    the notebook has no Summary heading."""
    index = summary_index(notebook)
    if index is None:
        raise ValueError("the notebook has no '## Summary' heading, so it has no core")
    return list(notebook["cells"][:index])


def core_markdown(notebook):
    """The markdown text of the core."""
    return "\n".join(_source(cell) for cell in core_cells(notebook) if _kind(cell) == "markdown")


def core_words(notebook):
    """Markdown words of the core (whitespace-separated, as a word counter counts them)."""
    return len(core_markdown(notebook).split())


def visible_core_code_cells(notebook):
    """The core's code cells a learner reads: the ones that are not folded."""
    return [cell for cell in core_cells(notebook) if _kind(cell) == "code" and not is_folded(cell)]


def visible_core_code_lines(notebook):
    """The non-blank lines of the core's visible code cells."""
    return sum(1 for cell in visible_core_code_cells(notebook)
               for line in _source(cell).splitlines() if line.strip())


def section_of_each_cell(notebook):
    """[section] for each cell of the core: 'Setup' for the title and Setup (the opening), 'Step N' for
    a Step's cells."""
    marks = dict(headings(notebook))
    found, section = [], "Setup"
    for index, _ in enumerate(core_cells(notebook)):
        step = STEP.match(marks.get(index, "")) if index in marks else None
        if step:
            section = f"Step {step.group(1)}"
        elif marks.get(index) == "Setup":
            section = "Setup"
        found.append(section)
    return found


def folded_step_cells(notebook):
    """The core's folded code cells outside Setup: each costs the class half a minute."""
    return [cell for cell, section in zip(core_cells(notebook), section_of_each_cell(notebook))
            if section != "Setup" and is_folded(cell)]


# ---- What the core's cells show (from a run) ------------------------------------------------------

PROSE_LINE_WORDS = 8  # a printed line with at least this many words is prose
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml")


def _words(line):
    """The words of a printed line: tokens with a letter in them (a row of numbers is not prose)."""
    return [token for token in line.split() if re.search(r"[A-Za-z]", token)]


def _text(value):
    return "".join(value) if isinstance(value, list) else (value or "")


def output_text(output):
    """What a learner reads of one cell output as plain text: a stream, an error's name and message,
    a result or display shown as markdown, or the text/plain form of one that has no richer form (a
    table shown as HTML or a figure shown as a picture is not read as text)."""
    kind = output.get("output_type")
    if kind == "stream":
        return _text(output.get("text", ""))
    if kind == "error":
        return f"{output.get('ename', '')}: {output.get('evalue', '')}"
    data = output.get("data", {})
    if kind not in ("execute_result", "display_data"):
        return ""
    if "text/markdown" in data:
        return _text(data["text/markdown"])
    if set(data) <= {"text/plain"}:
        return _text(data.get("text/plain", ""))
    return ""


def printed_prose_words(outputs):
    """Words of printed prose in `outputs` (a cell's outputs): the lines of at least
    PROSE_LINE_WORDS words, counted whole."""
    counts = [len(_words(line)) for output in outputs for line in output_text(output).splitlines()]
    return sum(count for count in counts if count >= PROSE_LINE_WORDS)


def tables_and_figures(outputs):
    """How many tables (outputs shown as an HTML table) and figures (images) `outputs` show."""
    count = 0
    for output in outputs:
        data = output.get("data", {})
        if any(kind in data for kind in IMAGE_TYPES):
            count += 1
        elif "<table" in _text(data.get("text/html", "")):
            count += 1
    return count


def core_outputs(notebook):
    """The outputs of each code cell of a run notebook's core, as a list per cell."""
    return [cell.get("outputs", []) for cell in core_cells(notebook) if _kind(cell) == "code"]


def shown_in_core(notebook):
    """(printed words, tables and figures) of a run notebook's core, as the class rule counts them."""
    outputs = core_outputs(notebook)
    return (sum(printed_prose_words(cell) for cell in outputs),
            sum(tables_and_figures(cell) for cell in outputs))


# ---- The class rule -------------------------------------------------------------------------------

OPENING_MINUTES = 5  # open the notebook on Colab, switch the runtime, run the setup cells
WORDS_PER_MINUTE = 100
MINUTES_PER_VISIBLE_CELL = 1.0
MINUTES_PER_VISIBLE_LINE = 0.1
MINUTES_PER_FOLDED_CELL = 0.5  # a folded code cell outside Setup: the class waits, the instructor says what
MINUTES_PER_TABLE_OR_FIGURE = 1.0
QUESTIONS_FACTOR = 1.1  # room for questions
CORE_LIMIT_MINUTES = 45  # of a 60-minute slot: a quarter is left for an exercise


def class_rule_minutes(markdown_words, printed_words, visible_cells, visible_lines, tables_figures,
                       t4_run_minutes, folded_cells=0, opening=True):
    """The class rule: how many minutes a workshop needs for a core (or, with opening=False, for one
    section of it that is not the opening)."""
    return QUESTIONS_FACTOR * (OPENING_MINUTES * opening
                               + (markdown_words + printed_words) / WORDS_PER_MINUTE
                               + MINUTES_PER_VISIBLE_CELL * visible_cells
                               + MINUTES_PER_VISIBLE_LINE * visible_lines
                               + MINUTES_PER_FOLDED_CELL * folded_cells
                               + MINUTES_PER_TABLE_OR_FIGURE * tables_figures + t4_run_minutes)


def rounded_up(minutes, step=5):
    """`minutes` rounded up to a multiple of `step`, as the title table states them."""
    return step * math.ceil(minutes / step - 1e-9)


# The title cell's "In class" line, which tools/sync_cells.py writes from the manifest (and the GPU records):
# "about 40 min of teaching, of which about 3 min running on a T4 (an estimate), then ..."
WORKSHOP_T4 = re.compile(r"about (\d+) min of teaching\b.*?\b(?:of which|including) (?:about |under )?"
                         r"(\d+(?:\.\d+)?) min (?:running|of running)", re.I | re.S)


def workshop_t4(notebook):
    """(the title's teaching minutes on a Colab T4, the T4 run minutes of the core it states), or None
    when the title cell says neither."""
    found = WORKSHOP_T4.search(" ".join(_source(notebook["cells"][0]).split()))
    return (int(found.group(1)), float(found.group(2))) if found else None


def core_counts(notebook, printed_words, tables_figures):
    """What the class rule counts of a core, as a dict (the run's printed words and tables and figures
    are given: they need a run)."""
    stated = workshop_t4(notebook)
    return {"markdown_words": core_words(notebook), "printed_words": printed_words,
            "visible_cells": len(visible_core_code_cells(notebook)),
            "visible_lines": visible_core_code_lines(notebook), "tables_figures": tables_figures,
            "t4_run_minutes": stated[1] if stated else None,
            "folded_cells": len(folded_step_cells(notebook))}


def section_minutes(notebook, shown, seconds, t4_run_minutes):
    """{section: minutes by the class rule} of a run core: 'Setup' holds the opening, and each
    section its own words, cells, lines, folded cells, tables and figures; the core's T4 run minutes
    are shared among the Steps in proportion to each one's run time here (Setup's installs and
    imports take none, unless the core is all Setup). `shown` and `seconds` give, per code
    cell id, (printed words, tables and figures) and seconds in this run. They add up to the core's
    minutes."""
    sections = section_of_each_cell(notebook)
    counts = {}
    for cell, section in zip(core_cells(notebook), sections):
        count = counts.setdefault(section, {"markdown_words": 0, "printed_words": 0, "visible_cells": 0,
                                            "visible_lines": 0, "tables_figures": 0, "folded_cells": 0,
                                            "seconds": 0.0})
        if _kind(cell) == "markdown":
            count["markdown_words"] += len(_source(cell).split())
            continue
        if _kind(cell) != "code":
            continue
        printed, tables = shown.get(cell.get("id"), (0, 0))
        count["printed_words"] += printed
        count["tables_figures"] += tables
        count["seconds"] += seconds.get(cell.get("id"), 0.0)
        if is_folded(cell):
            count["folded_cells"] += section != "Setup"
        else:
            count["visible_cells"] += 1
            count["visible_lines"] += sum(1 for line in _source(cell).splitlines() if line.strip())
    # Setup's seconds are mostly installs and imports, whose time swings with the machine's load:
    # the T4 minutes go to the Steps, by their seconds, so that a busy run gives the same plan
    steps = {section: count for section, count in counts.items() if section != "Setup"} or counts
    total_seconds = sum(count["seconds"] for count in steps.values())
    minutes = {}
    for section, count in counts.items():
        spent = count.pop("seconds") * (section in steps)
        share = spent / total_seconds if total_seconds else (section in steps) / len(steps)
        minutes[section] = class_rule_minutes(**count, t4_run_minutes=t4_run_minutes * share,
                                              opening=section == "Setup")
    return minutes


def minutes_plan(minutes, marks=(15, 30, 45)):
    """[(mark, the section the class is in at that minute)] of a core's section minutes (in order); a
    mark after the core's end says 'the exercises'."""
    plan, elapsed = [], 0.0
    ends = []
    for section, spent in minutes.items():
        elapsed += spent
        ends.append((elapsed, section))
    for mark in marks:
        plan.append((mark, next((section for end, section in ends if mark <= end), "the exercises")))
    return plan


# What a core prints depends a little on the machine that runs it (a verdict on a busy machine says
# more than on a quiet one), so the title may state the rule's minutes rounded up from anywhere within
# this many minutes of one run's count (1 minute: 90 words of printed prose). The limit has no slack.
STATED_SLACK_MINUTES = 1.0


def budget_problems(notebook, printed_words, tables_figures, limit=CORE_LIMIT_MINUTES):
    """What breaks the class rule for a run core ([] when nothing does): the title's plan must state
    the rule's minutes rounded up to 5 (give or take STATED_SLACK_MINUTES of the count), and they must
    be at most `limit` (None: no limit)."""
    stated = workshop_t4(notebook)
    if stated is None:
        return ["the title's plan does not say 'about N min of teaching, of which about M min "
                "running': run tools/sync_cells.py"]
    counts = core_counts(notebook, printed_words, tables_figures)
    minutes = class_rule_minutes(**counts)
    shown = ", ".join(f"{name} {value:g}" for name, value in counts.items())
    problems = []
    if not (rounded_up(minutes - STATED_SLACK_MINUTES) <= stated[0]
            <= rounded_up(minutes + STATED_SLACK_MINUTES)):
        problems.append(f"the title table says {stated[0]} min; the class rule gives {minutes:.1f} min "
                        f"({shown}), so it should say {rounded_up(minutes)} min")
    if limit is not None and minutes > limit:
        problems.append(f"the class rule gives {minutes:.1f} min ({shown}), over the core's limit of "
                        f"{limit} min: move what does not serve the core's story below the Summary")
    return problems
