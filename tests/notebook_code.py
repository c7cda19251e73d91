"""Read the notebooks as data, and load their small helper functions for unit tests.

The notebooks cannot import code from this repository (each must run alone on Colab or
Kaggle), so the helpers live inside them. `load_helpers` runs only the definitions of a
notebook, never its work: import statements, function and class definitions, and
UPPER_CASE constants whose value is a plain literal.
"""
import ast
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


def load_helpers(prefix):
    """Run the definitions (not the work) of notebook `prefix` and return them as a namespace."""
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)
    namespace = {"__name__": f"notebook_{prefix}"}
    for source in code_cells(read(notebook_path(prefix))):
        tree = ast.parse(source)
        body = [node for node in tree.body if isinstance(node, keep) or _is_literal_constant(node)]
        code = compile(ast.Module(body=body, type_ignores=[]), f"<notebook {prefix}>", "exec")
        exec(code, namespace)
    return types.SimpleNamespace(**namespace)


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


def workshop_minutes(notebook):
    """The minutes the title table's "workshop" row estimates for reading and running the core
    (every number before "min" in that row), or [] when there is no such row."""
    rows = [line for line in notebook.cells[0].source.splitlines()
            if line.startswith("|") and "workshop" in line.lower()]
    return [int(number) for row in rows for number in re.findall(r"(\d+)\s*min", row)]
