"""Read the notebooks as data, and load their small helper functions for unit tests.

The notebooks cannot import code from this repository (each must run alone on Colab or
Kaggle), so the helpers live inside them. `load_helpers` runs only the definitions of a
notebook, never its work: import statements, function and class definitions, and
UPPER_CASE constants whose value is a plain literal. `run_cell` runs one whole cell, its
top-level work too, in a namespace a test fills with the helpers and stand-ins (a `device`,
a stood-in torch.cuda): how a test executes a cell's GPU branch on a CPU.
"""
import ast
import contextlib
import io
import os
import re
import types
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
SHARED_CELL_FIRST_LINE = "#@title Shared setup: "
INSTALL_CELL_FIRST_LINE = "#@title Setup, part 1: "


def read(path):
    """The notebook at `path` as an nbformat node."""
    return nbformat.read(str(path), as_version=4)


def code_cells(notebook):
    """The source text of every code cell."""
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def notebook_path(prefix):
    """The notebook whose file name starts with `prefix`, for example '02'."""
    matches = [path for path in NOTEBOOKS if path.name.startswith(prefix)]
    assert len(matches) == 1, f"expected one notebook starting with {prefix!r}, found {matches}"
    return matches[0]


def _is_literal_constant(node):
    if not isinstance(node, ast.Assign):
        return False
    if not all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets):
        return False
    try:
        ast.literal_eval(node.value)
    except ValueError:
        return False
    return True


def is_definition(node):
    """True for what load_helpers keeps of a cell: imports, functions, classes, literal constants."""
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return isinstance(node, keep) or _is_literal_constant(node)


# load_helpers writes each notebook's definitions to a real file here (git ignores the folder), so
# that coverage.py can attribute lines and branches to them and tracebacks show their code.
HELPER_DIR = REPO / ".test-cache" / "notebook_helpers"
_HEADER = "# ---- cell {index} of {name}, cell id {cell_id}: its lines 1-{lines} follow ----"


def _statement_lines(node):
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return range(start, node.end_lineno + 1)


def _definitions_only(source):
    """`source` with every top-level statement that is not a definition blanked out, line for
    line, so that a line of the result is the same line of the cell."""
    lines = source.splitlines()
    kept, dropped = set(), set()
    for node in ast.parse(source).body:
        (kept if is_definition(node) else dropped).update(_statement_lines(node))
    shared = kept & dropped
    assert not shared, f"a definition shares line {min(shared)} with other work: {lines[min(shared) - 1]!r}"
    return [("" if number in dropped else line) for number, line in enumerate(lines, start=1)]


def helper_source(prefix):
    """(text of the generated helper file of notebook `prefix`, its line map): each code cell's
    definitions at their own line numbers below a header line; line_map[n - 1] is
    (cell index in the notebook, cell id, line in the cell) for line n, or None for a header."""
    path = notebook_path(prefix)
    text, line_map = [], []
    for index, cell in enumerate(read(path).cells):
        if cell.cell_type != "code":
            continue
        lines = _definitions_only(cell.source)
        text.append(_HEADER.format(index=index, name=path.name, cell_id=cell.get("id"), lines=len(lines)))
        line_map.append(None)
        text += lines
        line_map += [(index, cell.get("id"), number) for number in range(1, len(lines) + 1)]
    return "\n".join(text) + "\n", line_map


def helper_file(prefix):
    """Where load_helpers writes notebook `prefix`'s definitions: `.test-cache/notebook_helpers/05_....py`."""
    return HELPER_DIR / f"{notebook_path(prefix).stem}.py"


def _write_if_changed(path, text):
    """Write `text` to `path` when the file is missing or differs; returns the path. Atomic:
    parallel test workers write the same file."""
    if not (path.is_file() and path.read_text() == text):
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(text)
        os.replace(temporary, path)
    return path


def write_helper_file(prefix):
    """Write helper_file(prefix) when it is missing or out of date; returns its path."""
    return _write_if_changed(helper_file(prefix), helper_source(prefix)[0])


def load_helpers(prefix):
    """Run the definitions (not the work) of notebook `prefix` and return them as a namespace.

    They run from a generated file, helper_file(prefix), so that coverage.py measures them and a
    traceback shows their lines; each line there is the same line of its cell (see helper_source).
    """
    path = write_helper_file(prefix)
    namespace = {"__name__": f"notebook_{prefix}"}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return types.SimpleNamespace(**namespace)


def cell_source(prefix, cell_id):
    """The source of the code cell `cell_id` of notebook `prefix` (cell ids are kept by every edit)."""
    found = [cell.source for cell in read(notebook_path(prefix)).cells
             if cell.cell_type == "code" and cell.get("id") == cell_id]
    assert len(found) == 1, f"notebook {prefix} has {len(found)} code cells with the id {cell_id!r}"
    return found[0]


def cell_file(prefix, cell_id):
    """Where run_cell writes a whole cell: `.test-cache/notebook_helpers/01_name.<cell id>.py`
    (cell ids have no dots, so the part before the first dot names the notebook)."""
    return HELPER_DIR / f"{notebook_path(prefix).stem}.{cell_id}.py"


def run_cell(prefix, cell_id, namespace):
    """Run the whole code cell `cell_id` of notebook `prefix`, its top-level work too, in
    `namespace` (a dict: the notebook's helpers plus the stand-ins a test chooses, such as
    `{**vars(nb), "device": torch.device("cuda")}`); returns what the cell printed.

    Like load_helpers, it runs the cell from a generated file, cell_file(prefix, cell_id), whose
    line n is line n of the cell, so that coverage.py measures the cell and a traceback shows it.
    """
    path = _write_if_changed(cell_file(prefix, cell_id), cell_source(prefix, cell_id) + "\n")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(path.read_text(), str(path), "exec"), namespace)
    return printed.getvalue()


def notebook_location(path, line):
    """'05_find_the_bottleneck.ipynb cell 20 (id cell-20) line 9' for a line of a generated file
    (a notebook's helper file, or a cell file of run_cell)."""
    prefix = Path(path).name[:2]
    stem, _, cell_id = Path(path).stem.partition(".")
    if cell_id:
        index = next(index for index, cell in enumerate(read(notebook_path(prefix)).cells)
                     if cell.get("id") == cell_id)
        return f"{notebook_path(prefix).name} cell {index} (id {cell_id}) line {line}"
    entry = helper_source(prefix)[1][line - 1]
    if entry is None:
        return f"{notebook_path(prefix).name}, a cell header"
    index, cell_id, number = entry
    return f"{notebook_path(prefix).name} cell {index} (id {cell_id}) line {number}"


SUMMARY_HEADING = re.compile(r"^#+ (?:Step \d+ · )?Summary\b", re.IGNORECASE | re.MULTILINE)


def core_markdown(notebook):
    """The markdown text of the core: every markdown cell before the Summary heading, and the part
    of the Summary's own cell before that heading."""
    texts = []
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        found = SUMMARY_HEADING.search(cell.source)
        if found:
            texts.append(cell.source[:found.start()])
            break
        texts.append(cell.source)
    return "\n".join(texts)


def core_words(notebook):
    """Markdown words of the core (whitespace-separated, as a word counter counts them)."""
    return len(core_markdown(notebook).split())


# ---- The workshop budget of a core (README's rule, checked by tests/test_learner_first.py and, for
# what the cells print, by conftest.py on every nbval run) ------------------------------------------
CORE_WORD_BUDGET = 1500  # markdown words before the Summary
PRINTED_PROSE_BUDGET = 300  # words of printed prose in the core, in a fast-mode run
PROSE_LINE_WORDS = 8  # a printed line with at least this many words is prose
MINUTES_PER_CODE_CELL = 1.5
WORDS_PER_MINUTE = 100
SLOT_MINUTES = 60


def core_cells(notebook):
    """The cells of the core: every cell before the one holding the Summary heading."""
    cells = []
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and SUMMARY_HEADING.search(cell.source):
            return cells
        cells.append(cell)
    return cells


def is_folded(cell):
    """True for a folded plumbing cell: a code cell whose first line is '#@title ...'."""
    return cell.cell_type == "code" and cell.source.startswith("#@title ")


def visible_core_code_cells(notebook):
    """The core's code cells a learner reads: the ones that are not folded."""
    return [cell for cell in core_cells(notebook) if cell.cell_type == "code" and not is_folded(cell)]


def _words(line):
    """The words of a printed line: tokens with a letter in them (a row of numbers is not prose)."""
    return [token for token in line.split() if re.search(r"[A-Za-z]", token)]


def output_text(output):
    """What a learner reads of one cell output as plain text: a stream, an error's name and message,
    a result or display shown as markdown, or the text/plain form of one that has no richer form (a
    table shown as HTML or a figure shown as a picture is not read as text)."""
    kind = output.get("output_type")
    if kind == "stream":
        text = output.get("text", "")
        return "".join(text) if isinstance(text, list) else text
    if kind == "error":
        return f"{output.get('ename', '')}: {output.get('evalue', '')}"
    data = output.get("data", {})
    if kind not in ("execute_result", "display_data"):
        return ""
    if "text/markdown" in data:
        text = data["text/markdown"]
    elif set(data) <= {"text/plain"}:
        text = data.get("text/plain", "")
    else:
        return ""
    return "".join(text) if isinstance(text, list) else text


def printed_prose_words(outputs):
    """Words of printed prose in `outputs` (a cell's outputs): the lines of at least PROSE_LINE_WORDS
    words, counted whole."""
    counts = [len(_words(line)) for output in outputs for line in output_text(output).splitlines()]
    return sum(count for count in counts if count >= PROSE_LINE_WORDS)


def core_printed_words(notebook):
    """The printed prose of a run notebook's core: what the workshop budget counts of its outputs."""
    return sum(printed_prose_words(cell.get("outputs", [])) for cell in core_cells(notebook)
               if cell.cell_type == "code")


WORKSHOP_T4 = re.compile(r"about (\d+) min on a Colab T4\b.*?\b(?:of which|including) "
                         r"(?:about |under )?(\d+(?:\.\d+)?) min (?:running|of running)", re.I)


def workshop_t4(notebook):
    """(the title table's workshop estimate on a Colab T4 in minutes, the T4 run time of the core it
    states in minutes), or None when the row does not say both."""
    for line in notebook.cells[0].source.splitlines():
        if line.startswith("|") and "workshop" in line.lower():
            found = WORKSHOP_T4.search(line)
            if found:
                return int(found.group(1)), float(found.group(2))
    return None


def minimum_minutes(words_read, visible_code_cells, t4_run_minutes):
    """README's rule for a workshop estimate: 1 minute per 100 words read (markdown and printed prose),
    1.5 minutes per visible code cell, and the core's run time on a T4."""
    return words_read / WORDS_PER_MINUTE + MINUTES_PER_CODE_CELL * visible_code_cells + t4_run_minutes


def core_budget_problems(notebook, number, printed_words=None):
    """What breaks the core's budget, in words ([] when nothing does); `printed_words` is the printed
    prose of a fast-mode run, or None where no run was made (then only the markdown is counted)."""
    words = core_words(notebook)
    problems = []
    if words > CORE_WORD_BUDGET:
        problems.append(f"{words} markdown words, over {CORE_WORD_BUDGET}")
    if printed_words is not None and printed_words > PRINTED_PROSE_BUDGET:
        problems.append(f"{printed_words} words of printed prose, over {PRINTED_PROSE_BUDGET}")
    stated = workshop_t4(notebook)
    if stated is None:
        return problems + ["the title table's workshop row does not say 'about N min on a Colab T4, "
                           "of which about M min running'"]
    estimate, run_minutes = stated
    cells = len(visible_core_code_cells(notebook))
    least = minimum_minutes(words + (printed_words or 0), cells, run_minutes)
    if estimate < least:
        problems.append(f"the estimate of {estimate} min is below the rule's {least:.1f} min ({words} "
                        f"markdown + {printed_words or 0} printed words, {cells} visible code cells, "
                        f"{run_minutes:g} min running)")
    if estimate > SLOT_MINUTES:
        problems.append(f"the estimate of {estimate} min is over the slot of {SLOT_MINUTES} min")
    return problems


def visible_core_code(notebook):
    """The code a learner reads in the core: every visible (not folded) code cell before the Summary."""
    return "\n".join(cell.source for cell in visible_core_code_cells(notebook))


def missing_taught_calls(notebook, taught):
    """The entries of `taught` (regular expressions, searched across lines) that no visible code cell
    of the core matches: the calls a notebook teaches must be in view where the prose teaches them."""
    code = visible_core_code(notebook)
    return [pattern for pattern in taught if not re.search(pattern, code, re.S)]
