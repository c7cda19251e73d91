"""Read the notebooks as data, and load their small helper functions for unit tests.

The notebooks cannot import code from this repository (each must run alone on Colab or
Kaggle), so the helpers live inside them. `load_helpers` runs only the definitions of a
notebook, never its work: import statements, function and class definitions, and
UPPER_CASE constants whose value is a plain literal. `run_cell` runs one whole cell, its
top-level work too, in a namespace a test fills with the helpers and stand-ins (a `device`,
a stood-in torch.cuda): how a test executes a cell's GPU branch on a CPU. `load_shared` gives the
definitions of one shared cell (tools/shared_cells/<file>) from one notebook's copy, for the tests in
tests/shared_cells/.
"""
import ast
import contextlib
import io
import os
import re
import sys
import types
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))  # tools/anatomy.py: the core and the class rule
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


# ---- The shared cells: one source each in tools/shared_cells/, a copy in each notebook carrying it ----
SHARED_CELL_DIR = REPO / "tools" / "shared_cells"


def shared_cell_files():
    """{first line: file name} of every shared cell's source in tools/shared_cells/: a code cell whose
    first line is one of these is a copy tools/sync_cells.py writes."""
    return {path.read_text(encoding="utf-8").split("\n", 1)[0]: path.name
            for path in sorted(SHARED_CELL_DIR.glob("*.py"))}


def shared_copy_of(cell):
    """The file in tools/shared_cells/ whose copy `cell` is (for example 'datasheet.py'), or None."""
    if cell.cell_type != "code":
        return None
    return shared_cell_files().get(cell.source.split("\n", 1)[0])


def shared_cell_carriers(file):
    """The numbers of the notebooks that carry a copy of tools/shared_cells/<file>, in order
    (notebooks/manifest.toml: install.py and shared_setup.py go to every notebook)."""
    carriers = [number for number, entry in sorted(_manifest().items()) if file in entry.carries]
    assert carriers, f"no notebook carries tools/shared_cells/{file} (notebooks/manifest.toml)"
    return carriers


def shared_cell_carrier(file):
    """The first notebook, by number, that carries a copy of tools/shared_cells/<file>."""
    return shared_cell_carriers(file)[0]


def shared_cell_use(number, file):
    """(the functions notebook `number`'s copy of tools/shared_cells/<file> defines, the ones the
    notebook uses): named in another code cell, or by a function of the copy that is used."""
    cells = [cell for cell in read(notebook_path(number)).cells if cell.cell_type == "code"]
    [copy] = [cell for cell in cells if shared_copy_of(cell) == file]
    defined = {node.name: node for node in ast.parse(copy.source).body if isinstance(node, ast.FunctionDef)}

    def names(tree):
        return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} & set(defined)

    used = set().union(*(names(ast.parse(cell.source)) for cell in cells if cell is not copy))
    todo = list(used)
    while todo:
        for name in names(defined[todo.pop()]) - used:
            used.add(name)
            todo.append(name)
    return set(defined), used


def shared_names(file):
    """The names the shared cell tools/shared_cells/<file> defines: its functions, classes and
    literal constants (what load_helpers keeps of it, less its imports)."""
    names = []
    for node in ast.parse((SHARED_CELL_DIR / file).read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif _is_literal_constant(node):
            names += [target.id for target in node.targets]
    return names


def load_shared(file):
    """The definitions of the shared cell tools/shared_cells/<file> (for example 'datasheet.py'), run
    from its copy in the first notebook that carries it, as load_helpers runs them (so coverage.py
    measures them). tools/sync_cells.py --check keeps every copy the same as the file, so one copy stands
    for all. Only the cell's own names are attributes; its functions read the rest of that notebook's
    definitions (its imports, `pd`, ...) as their globals, `namespace.some_function.__globals__`."""
    helpers = vars(load_helpers(shared_cell_carrier(file)))
    missing = [name for name in shared_names(file) if name not in helpers]
    assert not missing, f"the copy of tools/shared_cells/{file} lacks {missing}: run tools/sync_cells.py"
    return types.SimpleNamespace(**{name: helpers[name] for name in shared_names(file)})


def notebook_constant(prefix, name, **names):
    """The value notebook `prefix` gives the UPPER_CASE constant `name` at the top level of a code cell,
    evaluated with `names` (for example FAST=True: its value in fast mode)."""
    for source in code_cells(read(notebook_path(prefix))):
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == name:
                return eval(compile(ast.Expression(node.value), name, "eval"), dict(names))
    raise LookupError(f"notebook {prefix} assigns no constant {name}")


def load_helpers_quietly(prefix):
    """load_helpers(prefix) for a notebook that imports fastai (03): fastai's import warns that
    torch.jit.script is deprecated (the notebook silences the same message) and that a pandas option it
    sets is deprecated; both are fastai's to fix, not the tests'."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"fastai\.")
        return load_helpers(prefix)


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


class TorchWithAStandInGpu:
    """`torch` for a cell run by run_cell on a CPU-only machine, except that torch.<factory>(...,
    device=<a CUDA device>) returns stand_in(): the tensor a real GPU would give, which this PyTorch
    cannot make. Everything else is torch itself."""

    def __init__(self, factory, stand_in):
        self._factory, self._stand_in = factory, stand_in

    def __getattr__(self, name):
        import torch

        real = getattr(torch, name)
        if name != self._factory:
            return real

        def make(*size, device=None, **kwargs):
            if device is not None and torch.device(device).type == "cuda":
                return self._stand_in()
            return real(*size, device=device, **kwargs)
        return make


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


# ---- The core and the class rule: defined once, in tools/anatomy.py -------------------------------
from anatomy import (PROSE_LINE_WORDS, SUMMARY_HEADING, budget_problems, class_rule_minutes,  # noqa: E402,F401
                     core_cells, core_markdown, core_outputs, core_words, is_folded, output_text,
                     printed_prose_words, rounded_up, tables_and_figures, visible_core_code_cells,
                     visible_core_code_lines, workshop_t4, CORE_LIMIT_MINUTES)

# The least T4 run time, in minutes, a title table may state for its core until a GPU record measures
# it: each notebook's t4_run_minutes_at_least in notebooks/manifest.toml, with its reason.
from manifest import notebooks as _manifest  # noqa: E402

T4_RUN_MINUTES_AT_LEAST = {number: entry.t4_run_minutes_at_least for number, entry in _manifest().items()}


def visible_core_code(notebook):
    """The code a learner reads in the core: every visible (not folded) code cell before the Summary."""
    return "\n".join(cell.source for cell in visible_core_code_cells(notebook))


def missing_taught_calls(notebook, taught):
    """The entries of `taught` (regular expressions, searched across lines) that no visible code cell
    of the core matches: the calls a notebook teaches must be in view where the prose teaches them."""
    code = visible_core_code(notebook)
    return [pattern for pattern in taught if not re.search(pattern, code, re.S)]
