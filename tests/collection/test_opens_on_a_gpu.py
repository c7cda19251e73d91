"""Every notebook opens on a GPU where the service reads it, knows its version, and ends its core with the
record cell (issue 45). tools/sync_cells.py writes all three from the manifest and the notebook itself;
`--check` fails when one is stale, and this says which rule broke."""
import pytest

from anatomy import core_cells, is_folded, version_line
from manifest import notebook as manifest_entry
from support.notebook_code import NOTEBOOKS, read

RECORD_TITLE = "#@title Your run: "


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_colab_and_kaggle_are_asked_for_a_gpu(path):
    metadata = read(path).metadata
    assert metadata.get("accelerator") == "GPU", "Colab opens it on a GPU runtime"
    assert metadata.get("colab", {}).get("gpuType") == "T4", "Colab's free T4"
    kaggle = metadata.get("kaggle", {})
    assert (kaggle.get("accelerator"), kaggle.get("isGpuEnabled")) == ("nvidiaTeslaT4", True), \
        "Kaggle's T4 x2, the only T4 it offers"
    assert kaggle.get("isInternetEnabled") is manifest_entry(path.name[:2]).internet


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_the_setup_cell_says_which_notebook_and_version_this_is(path):
    notebook = read(path)
    lines = [line for cell in notebook.cells if cell.cell_type == "code"
             for line in cell.source.splitlines() if line.startswith("NOTEBOOK_VERSION = ")]
    assert lines == [version_line(path.name, notebook)], "run tools/sync_cells.py"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_the_core_ends_with_the_folded_record_cell(path):
    code = [cell for cell in core_cells(read(path)) if cell.cell_type == "code"]
    assert code[-1].source.startswith(RECORD_TITLE) and is_folded(code[-1])
    assert sum(cell.source.startswith(RECORD_TITLE) for cell in read(path).cells if
               cell.cell_type == "code") == 1
