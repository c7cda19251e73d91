"""tests/notebook_code.py itself: load_helpers keeps a notebook's definitions, never its work, and runs
them from a generated file whose every line is the same line of the same cell (what coverage.py and
tracebacks show must lead back to the notebook); run_cell runs one whole cell the same way."""
import inspect

import pytest

from support.notebook_code import (NOTEBOOKS, _definitions_only, cell_file, cell_source, code_cells, helper_file,
                           helper_source, load_helpers, notebook_location, notebook_path, read, run_cell)

CELL = '''\
import os
LIMIT = 3
WORK = os.getcwd()
print("work")


@staticmethod
def helper(x):
    return x + LIMIT
'''


def test_definitions_stay_on_their_lines_and_the_work_is_blanked():
    lines = _definitions_only(CELL)
    assert len(lines) == len(CELL.splitlines())
    assert lines[:2] == ["import os", "LIMIT = 3"]
    assert lines[2:4] == ["", ""], "a computed constant and a call are work, not definitions"
    assert lines[6:] == ["@staticmethod", "def helper(x):", "    return x + LIMIT"], "decorators stay"


def test_a_definition_sharing_a_line_with_work_is_refused():
    with pytest.raises(AssertionError, match="shares line 1"):
        _definitions_only("import os; print(os.getcwd())\n")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_every_generated_line_is_the_same_line_of_its_cell(path):
    text, line_map = helper_source(path.name[:2])
    cells = read(path).cells
    generated = text.splitlines()
    assert len(generated) == len(line_map)
    headers = [number for number, entry in enumerate(line_map) if entry is None]
    assert len(headers) == len(code_cells(read(path))), "one header line per code cell"
    for line, entry in zip(generated, line_map):
        if entry is not None:
            index, cell_id, number = entry
            assert cells[index].get("id") == cell_id
            assert line in ("", cells[index].source.splitlines()[number - 1])


def test_helpers_run_from_the_generated_file_and_lead_back_to_their_cell():
    nb = load_helpers("01")
    source_file = inspect.getsourcefile(nb.pick_device)
    assert source_file == str(helper_file("01")) and helper_file("01").is_file()
    first_line = inspect.getsourcelines(nb.pick_device)[1]
    where = notebook_location(source_file, first_line)
    index = int(where.split(" cell ")[1].split()[0])
    cell_line = int(where.rsplit(" line ", 1)[1])
    assert read(notebook_path("01")).cells[index].source.splitlines()[cell_line - 1] == "def pick_device():"
    assert not hasattr(nb, "facts"), "the notebook's work (facts = gather_facts()) must not run"


def test_run_cell_runs_a_whole_cell_from_its_own_file_and_returns_what_it_printed():
    import torch

    nb = load_helpers("01")
    namespace = {**vars(nb), "device": torch.device("cpu")}
    printed = run_cell("01", "gpu-answer", namespace)
    assert printed.startswith("No GPU: PyTorch runs on the CPU.")
    path = cell_file("01", "gpu-answer")
    assert path.is_file() and path.parent == helper_file("01").parent
    assert path.read_text().splitlines() == cell_source("01", "gpu-answer").splitlines()
    index = [cell.get("id") for cell in read(notebook_path("01")).cells].index("gpu-answer")
    where = notebook_location(path, 2)
    assert where == f"{notebook_path('01').name} cell {index} (id gpu-answer) line 2"


def test_a_cell_that_raises_shows_its_own_file_and_line_in_the_traceback():
    import traceback

    try:
        run_cell("01", "gpu-answer", {})  # no `device`, no helpers: the cell's first use fails
    except NameError as error:
        frames = traceback.extract_tb(error.__traceback__)
    else:
        raise AssertionError("a cell run without its names must raise NameError")
    assert frames[-1].filename == str(cell_file("01", "gpu-answer"))
    assert frames[-1].line == cell_source("01", "gpu-answer").splitlines()[frames[-1].lineno - 1].strip()


def test_cell_source_names_a_code_cell_or_fails():
    assert cell_source("01", "gpu-answer").strip()
    with pytest.raises(AssertionError, match="no-such-cell"):
        cell_source("01", "no-such-cell")


def test_load_shared_gives_a_shared_cells_own_names_from_the_first_notebook_that_carries_it():
    from support.notebook_code import load_shared, shared_cell_carrier, shared_copy_of, shared_names

    assert shared_cell_carrier("shared_setup.py") == "01" and shared_cell_carrier("datasheet.py") == "01"
    assert shared_cell_carrier("process_plumbing.py") == "06"
    datasheet = load_shared("datasheet.py")
    assert sorted(vars(datasheet)) == sorted(shared_names("datasheet.py"))
    assert {"datasheet", "form_factor", "DATASHEETS"} <= set(vars(datasheet))
    assert "arch_supported" not in vars(datasheet), "01's own helpers are not the shared cell's"
    # run from 01's helper file, so that coverage.py measures the copy; its globals are 01's
    assert datasheet.datasheet.__code__.co_filename == str(helper_file("01"))
    assert "pd" in datasheet.datasheet_table.__globals__
    copies = [cell.get("id") for cell in read(notebook_path("09")).cells
              if shared_copy_of(cell) == "datasheet.py"]
    assert len(copies) == 1
