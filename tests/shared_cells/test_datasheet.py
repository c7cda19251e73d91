"""The datasheet cell, tested once: tools/shared_cells/datasheet.py (notebooks 01 and 09 carry a copy;
tools/sync_cells.py --check keeps the copies the same as the file, so 01's copy stands for both).

The lookup is tested with made-up tables (its decisions: model as a word, memory size, form factor, the
first row that fits) and with inputs made from the real table (every row can be found, one page per
model), never with the table's figures: a row added for a new GPU breaks nothing that is still true.
Every assertion names the file to mend. Notebook 01's cell that compares a GPU with its datasheet is
tested in tests/notebooks/test_01_gpu_branches.py.
"""
import re

import pytest

from support.notebook_code import load_shared

SOURCE = "tools/shared_cells/datasheet.py"
ds = load_shared("datasheet.py")

# A made-up table with the shapes of the real one (a row for every memory size or every form factor,
# rows that differ by memory, by form factor, or both). Its figures number the rows: the bandwidth is the
# row's number, the TFLOP/s ten times it, so an answer says which row it came from.
MADE_UP_ROWS = [  # (model, memory GB, form factor)
    ("T4", None, "any"),  # 1
    ("P100", 16, "PCIE"),  # 2
    ("P100", 12, "PCIE"),  # 3
    ("P100", 16, "SXM2"),  # 4
    ("V100", None, "PCIE"),  # 5
    ("V100", None, "SXM2"),  # 6
    ("A100", 40, "any"),  # 7
    ("A100", 80, "PCIE"),  # 8
    ("A100", 80, "SXM"),  # 9: SXM4 and SXM5 too
    ("L4", None, "any"),  # 10
    ("H100", 80, "SXM"),  # 11: its device name says no form factor
    ("H100", None, "PCIE"),  # 12
]


def made_up_table(rows):
    """(DATASHEETS, DATASHEET_PAGES) for rows of (model, memory, form): row n (from 1) moves n GB/s and
    computes 10 n TFLOP/s; each model's page is https://example.com/<model>."""
    table = [(model, memory, form, number, 10.0 * number)
             for number, (model, memory, form) in enumerate(rows, start=1)]
    return table, {model: f"https://example.com/{model}" for model, *_ in rows}


@pytest.fixture
def made_up(monkeypatch):
    """The datasheet cell reading MADE_UP_ROWS instead of its own table; returns a function that puts
    other rows in."""
    def use(rows=MADE_UP_ROWS, sxm_unless_named=("H100",)):
        table, pages = made_up_table(rows)
        cell = ds.datasheet.__globals__  # the namespace every function of the cell reads its table from
        monkeypatch.setitem(cell, "DATASHEETS", table)
        monkeypatch.setitem(cell, "DATASHEET_PAGES", pages)
        monkeypatch.setitem(cell, "SXM_UNLESS_NAMED", sxm_unless_named)
    use()
    return use


def row_found(name):
    """The number of the row datasheet(name) answers with (its bandwidth), or None."""
    found = ds.datasheet(name)
    return None if found is None else found[0]


# ---- the lookup, on real device names and a made-up table -------------------------------------------
# The names are torch.cuda.get_device_name()'s (the driver's) for each card, as nvidia-smi prints them.

@pytest.mark.parametrize("name, row", [
    ("Tesla T4", 1), ("NVIDIA L4", 10),
    ("NVIDIA A100-SXM4-40GB", 7), ("NVIDIA A100-PCIE-40GB", 7),  # 40 GB: one row for every form
    ("NVIDIA A100 80GB PCIe", 8), ("NVIDIA A100-SXM4-80GB", 9), ("NVIDIA A100-SXM-80GB", 9),
    ("NVIDIA A100-SXM4", None),  # no memory size in the name: 40 or 80 GB cannot be told apart
    ("Tesla V100-SXM2-16GB", 6), ("Tesla V100-SXM2-32GB", 6),  # a row for every memory size
    ("Tesla V100-PCIE-16GB", 5), ("Tesla V100-PCIE-32GB", 5),
    ("Tesla P100-SXM2-16GB", 4), ("Tesla P100-PCIE-16GB", 2), ("Tesla P100-PCIE-12GB", 3),
    ("Tesla P100-SXM2-12GB", None),  # a memory and form factor the table has no row for
    ("Tesla V100-DGXS-16GB", None), ("Tesla V100-SXM3-32GB", None),  # form factors without a row
    ("Tesla V100S-PCIE-32GB", None),  # a different model (V100S), not a V100
    ("NVIDIA L40S", None), ("NVIDIA T400", None),  # L4 and T4 only as whole words
    ("AMD Instinct MI250X/MI250", None),
    ("NVIDIA H100 80GB HBM3", 11),  # the SXM5 module's name says no form factor: SXM
    ("NVIDIA H100 PCIe", 12), ("NVIDIA H100 NVL", None),  # the NVL card: no row
    ("NVIDIA GH200 480GB", None), ("NVIDIA H800", None),
])
def test_a_device_name_finds_the_row_of_its_model_memory_and_form_factor(made_up, name, row):
    assert row_found(name) == row, (
        f"{SOURCE}: datasheet({name!r}) answered from row {row_found(name)} of a made-up table, not "
        f"{row} (model as a whole word, the memory size, the form factor)")


def test_the_first_row_that_fits_answers(made_up):
    made_up([("V100", None, "any"), ("V100", None, "SXM2")])
    assert row_found("Tesla V100-SXM2-16GB") == 1, f"{SOURCE}: datasheet() must answer with the first row"


def test_datasheet_gives_the_rows_bandwidth_peak_and_its_models_page(made_up):
    assert ds.datasheet("NVIDIA A100 80GB PCIe") == (8, 80.0, "https://example.com/A100"), (
        f"{SOURCE}: datasheet() gives (GB/s, TFLOP/s, page) of its row")
    assert ds.published_peak("NVIDIA A100 80GB PCIe") == (80.0, "https://example.com/A100"), (
        f"{SOURCE}: published_peak() gives (TFLOP/s, page) of datasheet()'s row")
    assert ds.datasheet("Made-up GPU 9000") is None and ds.published_peak("Made-up GPU 9000") is None, (
        f"{SOURCE}: a GPU the table does not know gets None")


def test_datasheet_table_puts_the_measured_speed_beside_the_published_peak_rounded(made_up):
    made_up([("X1", None, "any")])  # 10 TFLOP/s
    table = ds.datasheet_table("Made-up X1", 4567.891)
    assert list(table.index) == ["Made-up X1"] and table.index.name == "GPU", (
        f"{SOURCE}: datasheet_table() has one row, named after the GPU")
    assert table.iloc[0].to_dict() == {"measured_TFLOP_per_s": 4.6, "published_TFLOP_per_s": 10.0,
                                       "share_of_peak_pct": 46}, (
        f"{SOURCE}: datasheet_table() gives TFLOP/s to one decimal and the share in whole percent")
    assert ds.datasheet_table("Made-up GPU 9000", 30000.0) is None, (
        f"{SOURCE}: datasheet_table() of a GPU the table does not know is None")


# ---- reading a device name ----------------------------------------------------------------------------

@pytest.mark.parametrize("name, gigabytes", [
    ("Tesla V100-SXM2-16GB", 16), ("NVIDIA A100 80GB PCIe", 80), ("NVIDIA A100-SXM4-40GB", 40),
    ("Tesla T4", None), ("NVIDIA L4", None), ("NVIDIA H100 80GB HBM3", 80), ("NVIDIA GH200 480GB", 480),
])
def test_memory_size_is_read_from_the_device_name(name, gigabytes):
    assert ds.memory_gb(name) == gigabytes, f"{SOURCE}: memory_gb({name!r}) is not {gigabytes}"


@pytest.mark.parametrize("name, form", [
    ("Tesla V100-SXM2-16GB", "SXM2"), ("NVIDIA A100-SXM4-40GB", "SXM4"), ("NVIDIA A100-SXM-80GB", "SXM"),
    ("Tesla V100-PCIE-32GB", "PCIE"), ("NVIDIA A100 80GB PCIe", "PCIE"), ("NVIDIA H100 NVL", "NVL"),
    ("Tesla T4", None), ("NVIDIA L4", None), ("Tesla V100-DGXS-16GB", None),
])
def test_a_form_factor_the_device_name_states_is_read_from_it(name, form):
    assert ds.form_factor(name) == form, f"{SOURCE}: form_factor({name!r}) is not {form}"


def test_a_model_whose_sxm_module_names_no_form_factor_is_sxm_unless_its_name_says_otherwise(made_up):
    made_up(sxm_unless_named=("X100",))
    for name, form in [("NVIDIA X100 80GB HBM3", "SXM"), ("NVIDIA X100", "SXM"), ("NVIDIA X100 PCIe", "PCIE"),
                       ("NVIDIA X100 NVL", "NVL"), ("NVIDIA GX100 480GB", None), ("NVIDIA X1000", None),
                       ("NVIDIA H100 80GB HBM3", None)]:  # H100 is not in this made-up list
        assert ds.form_factor(name) == form, f"{SOURCE}: form_factor({name!r}) is not {form}"


# ---- the real table: consistent whatever rows it holds -------------------------------------------------

def name_stating(model, memory, form):
    """A device name that says a row's model, memory (if the row has one) and form factor (if the row
    has one): 'NVIDIA A100 80GB PCIE'."""
    return " ".join(["NVIDIA", model] + ([f"{memory}GB"] if memory else []) + ([form] if form != "any" else []))


def test_every_row_is_found_by_a_name_that_states_its_model_memory_and_form_factor():
    for model, memory, form, gb_per_s, tflop_per_s in ds.DATASHEETS:
        name = name_stating(model, memory, form)
        assert ds.datasheet(name) == (gb_per_s, tflop_per_s, ds.DATASHEET_PAGES[model]), (
            f"{SOURCE}: the row {(model, memory, form)} is not what datasheet({name!r}) answers: an "
            f"earlier row of DATASHEETS answers first, or the row's form factor is not one a device name "
            f"can state")


def test_the_table_has_one_row_per_model_memory_and_form_factor_and_a_page_per_model():
    keys = [(model, memory, form) for model, memory, form, *_ in ds.DATASHEETS]
    assert len(keys) == len(set(keys)), f"{SOURCE}: DATASHEETS has two rows for one model, memory and form"
    assert {model for model, *_ in keys} == set(ds.DATASHEET_PAGES), (
        f"{SOURCE}: every model of DATASHEETS needs its page in DATASHEET_PAGES, and every page a row")
    for model, page in ds.DATASHEET_PAGES.items():
        assert page.startswith("https://"), f"{SOURCE}: {model}'s datasheet page {page!r} is not a link"


def test_every_row_holds_numbers_a_lookup_can_use():
    for model, memory, form, gb_per_s, tflop_per_s in ds.DATASHEETS:
        row = (model, memory, form, gb_per_s, tflop_per_s)
        assert re.fullmatch(r"\w+", model), f"{SOURCE}: the model of {row} must be one word of a device name"
        assert memory is None or (isinstance(memory, int) and memory > 0), (
            f"{SOURCE}: the memory of {row} is a number of GB, or None for every size")
        assert form == "any" or re.fullmatch(r"PCIE|SXM\d*|NVL", form), (
            f"{SOURCE}: the form factor of {row} is 'any' or one form_factor() reads from a device name")
        assert gb_per_s > 0 and tflop_per_s > 0, f"{SOURCE}: {row} needs positive GB/s and TFLOP/s"


def test_each_model_whose_sxm_module_names_no_form_factor_reads_as_sxm():
    for model in ds.SXM_UNLESS_NAMED:
        assert ds.form_factor(f"NVIDIA {model} 80GB HBM3") == "SXM", (
            f"{SOURCE}: {model} is in SXM_UNLESS_NAMED, so a name without a form factor is its SXM module")
        assert ds.form_factor(f"NVIDIA {model} PCIe") == "PCIE", f"{SOURCE}: a named form factor comes first"
