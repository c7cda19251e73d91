"""Every copied cell matches its one source (tools/sync_cells.py), and the tool finds and mends a copy
edited by hand while keeping what each notebook owns: its PACKAGES, its cell ids and metadata."""
import ast
import contextlib
import io
import shutil
import subprocess
import sys
import types

import nbformat
import pytest

from notebook_code import INSTALL_CELL_FIRST_LINE, NOTEBOOKS, REPO, code_cells, read

sys.path.insert(0, str(REPO / "tools"))
import sync_cells  # noqa: E402

TOOL = REPO / "tools" / "sync_cells.py"


def run_tool(*args):
    """The tool's main() called here, as the command line would call it (a new Python process would
    spend seconds importing before each call): its exit code and what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        returncode = sync_cells.main(list(args))
    return types.SimpleNamespace(returncode=returncode, stdout=printed.getvalue())


def test_every_copy_matches_its_source():
    # the one run as a command, as CONTRIBUTING.md tells contributors to run it: its exit code counts
    done = subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every copy matches its source" in done.stdout


def test_every_shared_cell_has_a_copy_in_each_target():
    paths = sync_cells.notebooks()
    _, wanted = sync_cells.expected_copies(paths)
    for shared in sync_cells.SHARED:
        targets = shared.targets or tuple(number for number in paths if number != shared.source)
        assert sorted(number for s, number, _, _ in wanted if s == shared) == sorted(targets)


def test_the_install_cell_comes_first_and_names_torch_in_every_notebook():
    for path in NOTEBOOKS:
        cells = code_cells(read(path))
        assert cells[0].startswith(INSTALL_CELL_FIRST_LINE), f"{path.name}: the install cell comes first"
        packages = next(node.value for node in ast.parse(cells[0]).body
                        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "PACKAGES")
        assert "torch" in ast.literal_eval(packages), path.name


@pytest.fixture
def folder(tmp_path):
    for path in NOTEBOOKS:
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


def cell_starting(path, title):
    notebook = nbformat.read(str(path), as_version=4)
    return notebook, next(cell for cell in notebook.cells
                          if cell.cell_type == "code" and cell.source.startswith(title))


def edit(path, title, change):
    notebook, cell = cell_starting(path, title)
    cell.source = change(cell.source)
    nbformat.write(notebook, str(path))


def test_check_names_the_source_to_edit_and_sync_mends_the_copy_keeping_ids_and_metadata(folder):
    copy = next(folder.glob("04_*.ipynb"))
    title = "#@title Shared setup: "
    before, cell_before = cell_starting(copy, title)
    edit(copy, title, lambda source: source.replace("def fast_mode", "def fast_mode_edited_by_hand"))
    found = run_tool("--check", "--folder", str(folder))
    assert found.returncode == 1
    assert f"{copy.name}: the copy of '{title}" in found.stdout
    assert "differs from its source, 01_check_your_gpu.ipynb; edit it there" in found.stdout
    mended = run_tool("--folder", str(folder))
    assert mended.returncode == 0 and "1 copy rewritten" in mended.stdout
    after, cell_after = cell_starting(copy, title)
    assert cell_after.source == cell_before.source
    assert (cell_after.id, cell_after.metadata) == (cell_before.id, cell_before.metadata)
    assert run_tool("--check", "--folder", str(folder)).returncode == 0


def test_a_copy_of_06s_plumbing_edited_in_08_is_found(folder):
    copy = next(folder.glob("08_*.ipynb"))
    edit(copy, "#@title Plumbing: ", lambda source: source.replace('encoding="utf-8"', ""))
    edit(copy, "#@title Plumbing: ", lambda source: source + "\n# an edit by hand\n")
    found = run_tool("--check", "--folder", str(folder))
    assert found.returncode == 1 and "06_more_than_one_gpu.ipynb; edit it there" in found.stdout


def test_each_notebook_keeps_its_own_packages_and_an_edit_of_the_source_reaches_every_copy(folder):
    title = sync_cells.SHARED[0].title
    packages = {}
    for path in sorted(folder.glob("*.ipynb")):
        source = cell_starting(path, title)[1].source
        packages[path.name] = sync_cells.assignment_spans(source, ("PACKAGES",))
    source_notebook = next(folder.glob("01_*.ipynb"))
    edit(source_notebook, title, lambda source: source + "\n# a new last line\n")
    assert run_tool("--check", "--folder", str(folder)).returncode == 1
    assert run_tool("--folder", str(folder)).returncode == 0
    for path in sorted(folder.glob("*.ipynb")):
        copy = cell_starting(path, title)[1].source
        original = cell_starting(REPO / "notebooks" / path.name, title)[1].source
        assert copy.endswith("# a new last line\n")
        own = sync_cells.assignment_spans(original, ("PACKAGES",))["PACKAGES"]
        lines = original.split("\n")[own[0] - 1:own[1]]
        assert "\n".join(lines) in copy, f"{path.name} lost its own PACKAGES"


def test_with_kept_takes_the_copys_assignment_and_refuses_a_copy_without_it():
    source = "A = 1\nPACKAGES = {\n    'torch': 1,\n}\nprint(A)"
    copy = "A = 2\nPACKAGES = {'fastai': 2}\nprint(A)"
    assert sync_cells.with_kept(source, copy, ("PACKAGES",)) == "A = 1\nPACKAGES = {'fastai': 2}\nprint(A)"
    assert sync_cells.with_kept(source, copy, ()) == source
    with pytest.raises(ValueError, match="PACKAGES must be assigned"):
        sync_cells.with_kept(source, "A = 2", ("PACKAGES",))


def test_a_missing_or_doubled_copy_is_an_error_not_a_silent_pass(folder):
    copy = next(folder.glob("08_*.ipynb"))
    edit(copy, "#@title Plumbing: ", lambda source: "#@title Renamed by hand\n" + source.split("\n", 1)[1])
    done = run_tool("--check", "--folder", str(folder))
    assert done.returncode == 2 and "notebook 08 must hold one copy" in done.stdout


# ---- "Words used here": each notebook's entries of GLOSSARY.md ---------------------------------------

GLOSSARY_TEXT = """# Glossary

- **accelerator, device**: where PyTorch keeps a tensor.
- **launch (of a GPU kernel)**: the CPU telling the GPU to run a kernel;
  it returns at once.
- **tensor**: PyTorch's array.

## One word, one meaning
- *launch*: not an entry.
"""


def words_notebook(*texts):
    cells = [nbformat.v4.new_markdown_cell(text) for text in texts]
    return nbformat.v4.new_notebook(cells=cells)


def test_glossary_entries_have_an_anchor_from_their_first_words_and_every_bold_term():
    entries = sync_cells.glossary_entries(GLOSSARY_TEXT)
    assert list(entries) == ["glossary-accelerator-device", "glossary-launch", "glossary-tensor"]
    assert entries["glossary-launch"] == (["launch"], "**launch (of a GPU kernel)**: the CPU telling the "
                                                      "GPU to run a kernel; it returns at once.")
    assert entries["glossary-accelerator-device"][0] == ["accelerator", "device"]
    assert sync_cells.anchor_for("Devices", entries) == "glossary-accelerator-device"
    assert sync_cells.anchor_for("`tensor`", entries) == "glossary-tensor"
    assert sync_cells.anchor_for("kernel launches", entries) == "glossary-launch"
    assert sync_cells.anchor_for("rank", entries) is None


def test_the_words_cell_holds_the_linked_entries_in_the_glossarys_order_with_their_anchors():
    entries = sync_cells.glossary_entries(GLOSSARY_TEXT)
    notebook = words_notebook("A [tensor](#glossary-tensor) on the [device](#glossary-accelerator-device).",
                              "Again a [tensor](#glossary-tensor).")
    assert sync_cells.sync_words(notebook, entries) is True
    last = notebook.cells[-1]
    assert last.id == "words-used-here" and last.source.splitlines()[0] == "## Words used here"
    assert last.source.splitlines()[-2:] == [
        '- <a id="glossary-accelerator-device"></a>**accelerator, device**: where PyTorch keeps a tensor.',
        '- <a id="glossary-tensor"></a>**tensor**: PyTorch\'s array.']
    assert sync_cells.sync_words(notebook, entries) is False, "a second run changes nothing"
    # a cell added after it: the words cell moves back to the end; a link gone: its entry goes
    notebook.cells.append(nbformat.v4.new_markdown_cell("## Exercises"))
    notebook.cells[0].source = "A [tensor](#glossary-tensor)."
    assert sync_cells.words_difference(notebook, entries)[2] is not None
    assert sync_cells.sync_words(notebook, entries) is True
    assert notebook.cells[-1].id == "words-used-here" and "accelerator" not in notebook.cells[-1].source
    # no link at all: no words cell
    notebook.cells[0].source = notebook.cells[1].source = "No links."
    assert sync_cells.sync_words(notebook, entries) is True
    assert [cell.source for cell in notebook.cells] == ["No links.", "No links.", "## Exercises"]


def test_a_link_to_a_word_the_glossary_lacks_is_an_error():
    entries = sync_cells.glossary_entries(GLOSSARY_TEXT)
    with pytest.raises(ValueError, match="#glossary-rank, which GLOSSARY.md does not define"):
        sync_cells.sync_words(words_notebook("A [rank](#glossary-rank)."), entries)


def test_check_finds_a_words_cell_edited_by_hand(folder):
    copy = next(folder.glob("02_*.ipynb"))
    notebook = nbformat.read(str(copy), as_version=4)
    notebook.cells[0].source += "\n\nA [tensor](#glossary-tensor) here."
    nbformat.write(notebook, str(copy))
    assert run_tool("--folder", str(folder)).returncode == 0
    notebook = nbformat.read(str(copy), as_version=4)
    assert notebook.cells[-1].source.startswith("## Words used here")
    notebook.cells[-1].source += " (edited by hand)"
    nbformat.write(notebook, str(copy))
    found = run_tool("--check", "--folder", str(folder))
    assert found.returncode == 1 and "edit GLOSSARY.md or the links" in found.stdout
