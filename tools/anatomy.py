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
                     + 0.1 × visible code lines + 1.0 × tables and figures shown + T4 run minutes)

counted over the core. Printed words are the lines of at least PROSE_LINE_WORDS words that the core's
cells print as text (a fast-mode run); tables are outputs shown as HTML tables, figures are images.
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
MINUTES_PER_TABLE_OR_FIGURE = 1.0
QUESTIONS_FACTOR = 1.1  # room for questions
CORE_LIMIT_MINUTES = 45  # of a 60-minute slot: a quarter is left for an exercise


def class_rule_minutes(markdown_words, printed_words, visible_cells, visible_lines, tables_figures,
                       t4_run_minutes):
    """The class rule: how many minutes a workshop needs for a core."""
    return QUESTIONS_FACTOR * (OPENING_MINUTES + (markdown_words + printed_words) / WORDS_PER_MINUTE
                               + MINUTES_PER_VISIBLE_CELL * visible_cells
                               + MINUTES_PER_VISIBLE_LINE * visible_lines
                               + MINUTES_PER_TABLE_OR_FIGURE * tables_figures + t4_run_minutes)


def rounded_up(minutes, step=5):
    """`minutes` rounded up to a multiple of `step`, as the title table states them."""
    return step * math.ceil(minutes / step - 1e-9)


WORKSHOP_T4 = re.compile(r"about (\d+) min on a Colab T4\b.*?\b(?:of which|including) "
                         r"(?:about |under )?(\d+(?:\.\d+)?) min (?:running|of running)", re.I)


def workshop_t4(notebook):
    """(the title table's workshop minutes on a Colab T4, the T4 run minutes of the core it states),
    or None when no row of the title table says both."""
    for line in _source(notebook["cells"][0]).splitlines():
        if line.startswith("|") and "workshop" in line.lower():
            found = WORKSHOP_T4.search(line)
            if found:
                return int(found.group(1)), float(found.group(2))
    return None


def core_counts(notebook, printed_words, tables_figures):
    """What the class rule counts of a core, as a dict (the run's printed words and tables and figures
    are given: they need a run)."""
    stated = workshop_t4(notebook)
    return {"markdown_words": core_words(notebook), "printed_words": printed_words,
            "visible_cells": len(visible_core_code_cells(notebook)),
            "visible_lines": visible_core_code_lines(notebook), "tables_figures": tables_figures,
            "t4_run_minutes": stated[1] if stated else None}


# What a core prints depends a little on the machine that runs it (a verdict on a busy machine says
# more than on a quiet one), so the title may state the rule's minutes rounded up from anywhere within
# this many minutes of one run's count (1 minute: 90 words of printed prose). The limit has no slack.
STATED_SLACK_MINUTES = 1.0


def budget_problems(notebook, printed_words, tables_figures, limit=CORE_LIMIT_MINUTES):
    """What breaks the class rule for a run core ([] when nothing does): the title table must state
    the rule's minutes rounded up to 5 (give or take STATED_SLACK_MINUTES of the count), and they must
    be at most `limit` (None: no limit)."""
    stated = workshop_t4(notebook)
    if stated is None:
        return ["the title table's workshop row does not say 'about N min on a Colab T4, of which "
                "about M min running'"]
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
