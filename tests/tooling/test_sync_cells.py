"""Every shared cell's copies match its one source, a file in tools/shared_cells/ (tools/sync_cells.py);
--check names the file to edit when a copy was edited by hand, and a sync mends the copy while keeping
what each notebook owns: its PACKAGES, its cell ids and metadata."""
import ast
import contextlib
import io
import shutil
import subprocess
import sys
import types

import nbformat
import pytest

from support.notebook_code import INSTALL_CELL_FIRST_LINE, NOTEBOOKS, REPO, code_cells, read

sys.path.insert(0, str(REPO / "tools"))
import sync_cells  # noqa: E402

TOOL = REPO / "tools" / "sync_cells.py"
SOURCES = REPO / "tools" / "shared_cells"


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


def test_every_shared_cell_has_one_copy_in_each_target_and_no_notebook_is_a_source():
    paths = sync_cells.notebooks()
    read_notebooks = sync_cells.read_notebooks(paths)
    sources = sync_cells.read_sources()
    assert set(sources) == set(sync_cells.SHARED)
    found = sync_cells.copies(read_notebooks, sources)
    assert [copy.problem for copy in found if copy.problem] == []
    for shared in sync_cells.SHARED:
        targets = shared.targets or tuple(paths)
        assert sorted(copy.number for copy in found if copy.shared == shared) == sorted(targets)
        assert (SOURCES / shared.file).read_text().startswith(shared.title)


def test_the_readme_of_the_shared_cells_names_every_file():
    readme = (SOURCES / "README.md").read_text()
    for shared in sync_cells.SHARED:
        assert f"`{shared.file}`" in readme, f"tools/shared_cells/README.md does not name {shared.file}"


def test_the_install_cell_comes_first_and_names_torch_in_every_notebook():
    for path in NOTEBOOKS:
        cells = code_cells(read(path))
        assert cells[0].startswith(INSTALL_CELL_FIRST_LINE), f"{path.name}: the install cell comes first"
        packages = next(node.value for node in ast.parse(cells[0]).body
                        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "PACKAGES")
        assert "torch" in ast.literal_eval(packages), path.name


@pytest.fixture
def folder(tmp_path):
    """Copies of the notebooks (tmp_path/notebooks) and of the shared cells (tmp_path/sources)."""
    (tmp_path / "notebooks").mkdir()
    for path in NOTEBOOKS:
        shutil.copy(path, tmp_path / "notebooks" / path.name)
    shutil.copytree(SOURCES, tmp_path / "sources")
    return tmp_path


def tool(folder, *args):
    """The tool on the copies in `folder`."""
    return run_tool(*args, "--folder", str(folder / "notebooks"), "--sources", str(folder / "sources"))


def cell_starting(path, title):
    notebook = nbformat.read(str(path), as_version=4)
    return notebook, next(cell for cell in notebook.cells
                          if cell.cell_type == "code" and cell.source.startswith(title))


def edit(path, title, change):
    notebook, cell = cell_starting(path, title)
    cell.source = change(cell.source)
    nbformat.write(notebook, str(path))


def test_check_names_the_file_to_edit_and_sync_mends_the_copy_keeping_ids_and_metadata(folder):
    copy = next((folder / "notebooks").glob("04_*.ipynb"))
    title = "#@title Shared setup: "
    before, cell_before = cell_starting(copy, title)
    edit(copy, title, lambda source: source.replace("def fast_mode", "def fast_mode_edited_by_hand"))
    found = tool(folder, "--check")
    assert found.returncode == 1
    source = folder / "sources" / "shared_setup.py"
    assert f"{copy.name}: its copy of {source} differs" in found.stdout
    assert "'def fast_mode_edited_by_hand():' where the source has 'def fast_mode():'" in found.stdout
    assert f"edit {source}, not the copy" in found.stdout
    assert "1 cell differs from its source" in found.stdout
    mended = tool(folder)
    assert mended.returncode == 0 and "1 cell rewritten" in mended.stdout
    after, cell_after = cell_starting(copy, title)
    assert cell_after.source == cell_before.source
    assert (cell_after.id, cell_after.metadata) == (cell_before.id, cell_before.metadata)
    assert tool(folder, "--check").returncode == 0


def test_on_the_repository_check_names_the_file_in_tools_shared_cells(tmp_path):
    # the default sources folder, shown as a contributor types it
    for path in NOTEBOOKS:
        shutil.copy(path, tmp_path / path.name)
    edit(next(tmp_path.glob("09_*.ipynb")), "#@title The datasheet table: ", lambda source: source + "\n#")
    found = run_tool("--check", "--folder", str(tmp_path))
    assert found.returncode == 1
    assert "09_what_a_gpu_kernel_is.ipynb: its copy of tools/shared_cells/datasheet.py differs" in found.stdout
    assert "edit tools/shared_cells/datasheet.py, not the copy" in found.stdout


def test_check_names_the_tests_of_the_shared_cell_whose_copy_differs(tmp_path):
    for path in NOTEBOOKS:
        shutil.copy(path, tmp_path / path.name)
    edit(next(tmp_path.glob("08_*.ipynb")), "#@title Shared torchrun helpers: ", lambda source: source + "\n#")
    found = run_tool("--check", "--folder", str(tmp_path))
    assert found.returncode == 1
    assert ("edit tools/shared_cells/torchrun_helpers.py, not the copy, then run tools/sync_cells.py and "
            "its tests, tests/shared_cells/test_torchrun_helpers.py") in found.stdout
    for shared in sync_cells.SHARED:  # every shared cell's tests are where the message sends you
        assert sync_cells.test_file(shared).is_file(), f"{sync_cells.test_file(shared)} is missing"


def test_a_copy_of_the_plumbing_edited_in_06_is_found_like_any_other(folder):
    copy = next((folder / "notebooks").glob("06_*.ipynb"))  # once the source, now a copy
    edit(copy, "#@title Plumbing: ", lambda source: source.replace('encoding="utf-8"', ""))
    found = tool(folder, "--check")
    assert found.returncode == 1 and f"edit {folder / 'sources' / 'process_plumbing.py'}" in found.stdout
    assert "08_" not in found.stdout


def test_an_edit_of_a_source_reaches_every_copy_and_each_keeps_its_own_packages(folder):
    title = "#@title Setup, part 1: "
    packages = {}
    for path in sorted((folder / "notebooks").glob("*.ipynb")):
        source = cell_starting(path, title)[1].source
        start, end = sync_cells.assignment_spans(source, ("PACKAGES",))["PACKAGES"]
        packages[path.name] = source.split("\n")[start - 1:end]
    assert len({str(lines) for lines in packages.values()}) > 1, "the notebooks need different packages"
    source_file = folder / "sources" / "install.py"
    source_file.write_text(source_file.read_text() + "# a new last line\n")
    found = tool(folder, "--check")
    assert found.returncode == 1 and found.stdout.count("its copy of") == len(packages)
    assert tool(folder).returncode == 0
    for path in sorted((folder / "notebooks").glob("*.ipynb")):
        copy = cell_starting(path, title)[1].source
        assert copy.endswith("\n# a new last line"), path.name
        assert "\n".join(packages[path.name]) in copy, f"{path.name} lost its own PACKAGES"
        assert "this line stands for it" not in copy  # the source's own PACKAGES line goes nowhere
    assert tool(folder, "--check").returncode == 0


def test_with_kept_takes_the_copys_assignment_and_refuses_a_copy_without_it():
    source = "A = 1\nPACKAGES = {\n    'torch': 1,\n}\nprint(A)"
    copy = "A = 2\nPACKAGES = {'fastai': 2}\nprint(A)"
    assert sync_cells.with_kept(source, copy, ("PACKAGES",)) == "A = 1\nPACKAGES = {'fastai': 2}\nprint(A)"
    assert sync_cells.with_kept(source, copy, ()) == source
    with pytest.raises(ValueError, match="PACKAGES must be assigned"):
        sync_cells.with_kept(source, "A = 2", ("PACKAGES",))


def test_a_missing_or_doubled_copy_is_reported_not_passed_over(folder):
    notebooks = folder / "notebooks"
    eight = next(notebooks.glob("08_*.ipynb"))
    edit(eight, "#@title Plumbing: ", lambda source: "#@title Renamed by hand\n" + source.split("\n", 1)[1])
    six = next(notebooks.glob("06_*.ipynb"))
    notebook, cell = cell_starting(six, "#@title Shared setup: ")
    notebook.cells.insert(5, nbformat.v4.new_code_cell(cell.source, id="a-second-copy"))
    nbformat.write(notebook, str(six))
    edit(next(notebooks.glob("02_*.ipynb")), "#@title Shared setup: ", lambda source: source + "\n#")
    found = tool(folder, "--check")
    assert found.returncode == 1 and "3 cells differ" in found.stdout
    assert (f"{eight.name}: no code cell starts with '#@title Plumbing: run programs with a time limit', "
            f"the copy of {folder / 'sources' / 'process_plumbing.py'}") in found.stdout
    assert f"{six.name}: 2 code cells start with '#@title Shared setup: ' (ids " in found.stdout
    assert "a-second-copy): keep one copy of" in found.stdout
    # a sync mends what it can, and leaves the missing and the doubled copy to a person
    done = tool(folder)
    assert done.returncode == 1 and "02_tensors_and_models_on_the_device.ipynb: the copy of shared_setup.py" in \
        done.stdout.replace("rewrote ", "")
    assert "2 copies could not be written" in done.stdout


def test_a_notebook_without_a_manifest_entry_is_reported_and_a_lost_kernelspec_is_written(folder):
    notebooks = folder / "notebooks"
    shutil.copy(next(notebooks.glob("02_*.ipynb")), notebooks / "11_a_new_lesson.ipynb")
    one = next(notebooks.glob("01_*.ipynb"))
    notebook = nbformat.read(str(one), as_version=4)
    del notebook.metadata["kernelspec"]
    nbformat.write(notebook, str(one))
    found = tool(folder, "--check")
    assert found.returncode == 1
    assert f"11_a_new_lesson.ipynb: {sync_cells.NO_ENTRY}" in found.stdout
    assert f"{one.name}: its metadata 'kernelspec' is not what tools/sync_cells.py writes" in found.stdout
    done = tool(folder)
    assert done.returncode == 1 and f"11_a_new_lesson.ipynb: {sync_cells.NO_ENTRY}" in done.stdout
    assert nbformat.read(str(one), as_version=4).metadata["kernelspec"]["name"] == "python3"
    (notebooks / "11_a_new_lesson.ipynb").unlink()
    assert tool(folder, "--check").returncode == 0


def test_a_source_the_manifest_lacks_or_a_file_it_does_not_name_stops_the_tool(folder):
    (folder / "sources" / "stray.py").write_text("#@title A cell nobody copies\n")
    done = tool(folder, "--check")
    assert done.returncode == 2 and "stray.py is named in no entry of tools/sync_cells.py's TITLES" in done.stdout
    (folder / "sources" / "stray.py").unlink()
    (folder / "sources" / "datasheet.py").unlink()
    done = tool(folder)
    assert done.returncode == 2 and "datasheet.py is missing" in done.stdout
    (folder / "sources" / "datasheet.py").write_text("#@title Another title\n")
    done = tool(folder, "--check")
    assert done.returncode == 2 and "must start with '#@title The datasheet table: '" in done.stdout
    install = folder / "sources" / "install.py"
    install.write_text(install.read_text().replace("PACKAGES = ", "NEEDED = "))
    done = tool(folder, "--check")
    assert done.returncode == 2 and "install.py must assign PACKAGES once at the top level" in done.stdout
    (folder / "sources" / "shared_setup.py").write_text("#@title Shared setup: \ndef broken(:\n")
    done = tool(folder)
    assert done.returncode == 2 and "shared_setup.py is not Python: line 2" in done.stdout


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
    copy = next((folder / "notebooks").glob("02_*.ipynb"))
    notebook = nbformat.read(str(copy), as_version=4)
    notebook.cells[0].source += "\n\nA [tensor](#glossary-tensor) here."
    nbformat.write(notebook, str(copy))
    assert tool(folder).returncode == 0
    notebook = nbformat.read(str(copy), as_version=4)
    assert notebook.cells[-1].source.startswith("## Words used here")
    notebook.cells[-1].source += " (edited by hand)"
    nbformat.write(notebook, str(copy))
    found = tool(folder, "--check")
    assert found.returncode == 1 and "edit GLOSSARY.md or the notebook's glossary links" in found.stdout
