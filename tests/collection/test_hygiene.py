"""Checks every notebook must pass before nbval even runs it.

They catch what nbval itself lets through: a failing `%pip` or `!cmd` line passes nbval
silently, so shell escapes and magics are forbidden outright, and the one install step
is a `subprocess.run(..., check=True)` that fails loudly.
"""
import ast
import functools
import os
import re
import subprocess
import sys

import nbformat
import pytest

from anatomy import is_folded
from support.notebook_code import NOTEBOOKS, REPO, code_cells, read

NOTEBOOK_IDS = [path.name for path in NOTEBOOKS]
# A magic or shell command run through the shell object (what `%pip` and `!cmd` become): it would fail
# as quietly as the magic. The shared setup reads the shell only to register its cell clock.
HIDDEN_MAGIC = re.compile(r"get_ipython\(\)\.|\.(run_line_magic|run_cell_magic|getoutput|magic)\(|\b(shell|ip)\.system\(")
NBVAL_TAGS = {"raises-exception", "nbval-skip", "nbval-ignore-output", "nbval-check-output", "nbval-raises-exception"}


def test_notebooks_are_numbered_in_reading_order():
    assert NOTEBOOKS, "no notebooks found in notebooks/"
    numbers = [int(path.name[:2]) for path in NOTEBOOKS]
    assert numbers == list(range(1, len(NOTEBOOKS) + 1))
    for path in NOTEBOOKS:
        assert re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", path.name), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_valid_nbformat_with_python3_kernel(path):
    notebook = read(path)
    nbformat.validate(notebook)
    assert notebook.metadata.get("kernelspec", {}).get("name") == "python3", "run tools/sync_cells.py"


def round_trip_difference(text):
    """Where `text` (a notebook file's text) differs from what nbformat writes of it, as 'line N: ...';
    None when a read and a write through nbformat give it back byte for byte."""
    written = nbformat.writes(nbformat.reads(text, as_version=4)) + "\n"
    if written == text:
        return None
    for number, (mine, theirs) in enumerate(zip(text.split("\n"), written.split("\n")), start=1):
        if mine != theirs:
            return f"line {number} is {mine.strip()[:60]!r} where nbformat writes {theirs.strip()[:60]!r}"
    return "the lengths differ"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_stored_exactly_as_nbformat_writes_it(path):
    """Then an edit made in JupyterLab or through nbformat is a diff of the cells it changed only."""
    difference = round_trip_difference(path.read_text(encoding="utf-8"))
    assert difference is None, (f"{path.name} is not stored as nbformat writes it ({difference}): read it "
                                f"and write it back with nbformat (tools/sync_cells.py does), and commit that")


def test_a_reordered_key_or_another_indent_is_found():
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1", id="c")])
    text = nbformat.writes(notebook) + "\n"
    assert round_trip_difference(text) is None
    assert round_trip_difference(text.replace('\n "cells"', '\n  "cells"')).startswith("line 2 is")
    reordered = text.replace('"execution_count": null,\n   "id": "c",', '"id": "c",\n   "execution_count": null,')
    assert reordered != text and round_trip_difference(reordered).startswith("line 5 is")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_first_cell_has_title_what_you_learn_and_run_time_table(path):
    first = read(path).cells[0]
    assert first.cell_type == "markdown"
    number = path.name[:2]
    assert re.match(rf"# {number} · \S", first.source), "title must read '# NN · Title'"
    assert "you will learn" in " ".join(first.source.lower().split())
    table_rows = [line for line in first.source.splitlines() if line.startswith("|")]
    assert len(table_rows) >= 3, "a run-time table (header, rule, rows) is expected"
    table = "\n".join(table_rows).lower()
    for word in ("cpu", "gpu", "internet"):
        assert word in table, f"the run-time table should mention {word!r}"


@pytest.fixture(scope="module")
def nbstripout_verdicts():
    """nbstripout --verify run once over every notebook (it takes seconds to start): its exit code and
    the notebooks it says it would strip."""
    verify = subprocess.run([sys.executable, "-m", "nbstripout", "--verify", "--keep-id", *map(str, NOTEBOOKS)],
                            capture_output=True, text=True)
    output = verify.stdout + verify.stderr
    would_strip = {path.name for path in NOTEBOOKS if f"would have stripped {path}" in output}
    return verify.returncode, would_strip, output


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_committed_without_outputs(path, nbstripout_verdicts):
    for cell in read(path).cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    returncode, would_strip, output = nbstripout_verdicts
    assert path.name not in would_strip, output
    assert returncode == 0 or would_strip, output  # a failure that names no notebook fails every one


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_no_shell_escapes_or_magics(path):
    for source in code_cells(read(path)):
        for line in source.splitlines():
            stripped = line.strip()
            assert not stripped.startswith(("!", "%")), f"magic or shell escape: {line!r}"
            assert not HIDDEN_MAGIC.search(stripped), f"hidden magic: {line!r}"
        ast.parse(source)  # every code cell is plain Python


def test_a_hidden_magic_is_found_and_reading_the_shell_is_not():
    for line in ["get_ipython().system('pip list')", "shell.run_line_magic('pip', 'list')", "shell.system('ls')",
                 "ip.getoutput('ls')", "get_ipython().run_cell_magic('bash', '', 'ls')"]:
        assert HIDDEN_MAGIC.search(line), line
    for line in ["return get_ipython()", "shell.events.register('pre_run_cell', clock.pre)",
                 "subprocess.run(command, check=True)", "platform.system()"]:
        assert not HIDDEN_MAGIC.search(line), line


def _calls(tree, dotted_name):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == dotted_name:
            yield node


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_subprocesses_fail_loudly_and_installs_are_guarded(path):
    for source in code_cells(read(path)):
        tree = ast.parse(source)
        for call in _calls(tree, "subprocess.run"):
            checks = [kw for kw in call.keywords if kw.arg == "check"]
            assert checks and ast.unparse(checks[0].value) == "True", f"needs check=True: {ast.unparse(call)}"
        installs = [call for call in _calls(tree, "subprocess.run") if "install" in ast.unparse(call)]
        for call in installs:
            parents = [n for n in ast.walk(tree) if isinstance(n, ast.If) and call in list(ast.walk(n))]
            assert any(re.search(r"COLAB|KAGGLE", ast.unparse(p.test)) for p in parents), (
                "pip install must only run on Colab or Kaggle"
            )


ABSOLUTE_PATH = re.compile(r"^(/[A-Za-z]|~/|[A-Za-z]:[\\/])")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_no_absolute_paths(path):
    for source in code_cells(read(path)):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not ABSOLUTE_PATH.match(node.value), f"absolute path in code: {node.value!r}"


@functools.cache
def _repository_module_names():
    """The names of the repository's own modules and top-level folders, outside .venv and hidden folders
    (which os.walk is told not to enter: the environment alone holds tens of thousands of files)."""
    names = {path.name for path in REPO.iterdir() if path.is_dir() and not path.name.startswith(".")}
    for folder, subfolders, files in os.walk(REPO):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        names |= {name[:-3] for name in files if name.endswith(".py")}
    return names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_no_import_of_repository_files(path):
    local = _repository_module_names()
    for source in code_cells(read(path)):
        assert "sys.path" not in source, "notebooks must not change sys.path to reach repository files"
        # Notebook 05 adds a folder to the search path with site.addsitedir, so that DataLoader
        # workers can import its dataset class: allowed only for a module the cell writes itself.
        assert "addsitedir" not in source or "write_text(" in source, \
            "site.addsitedir only for a folder the notebook writes its own module into"
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, "relative import"
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                assert root not in local, f"imports the repository's own {root!r}"


def _explained(lines, index):
    """True when the line after `index` is a comment of at least four words."""
    if index + 1 >= len(lines):
        return False
    following = lines[index + 1].strip()
    return following.startswith("#") and len(following.lstrip("#").split()) >= 4


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_nbval_markers_come_with_a_reason(path):
    for cell in read(path).cells:
        if cell.cell_type != "code":
            continue
        lines = cell.source.splitlines()
        for index, line in enumerate(lines):
            if re.match(r"\s*#\s*NBVAL_", line):
                assert _explained(lines, index), f"{line.strip()} needs a comment line after it saying why"
        if NBVAL_TAGS & set(cell.metadata.get("tags", [])):
            assert _explained(["(tag)", *lines], 0), "a cell with an nbval tag must open with a comment saying why"


FOLDED = {"jupyter": {"source_hidden": True}, "cellView": "form"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_every_title_cell_is_folded_in_jupyterlab_and_colab(path):
    for cell in read(path).cells:
        if is_folded(cell):
            assert cell.metadata.get("jupyter", {}).get("source_hidden") is True, cell.source[:70]
            assert cell.metadata.get("cellView") == "form", cell.source[:70]
        else:
            assert not cell.metadata.get("jupyter", {}).get("source_hidden"), (
                "a folded cell needs a '#@title' first line saying what it does: " + cell.source[:70])
