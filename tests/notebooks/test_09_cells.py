"""Notebook 09's cells run whole on the CPU (notebook_code.run_cell) with stand-ins for what only Triton
or a GPU gives: the plan cell with a stand-in `import triton` and installed versions (on a CPU, a T4 and
another GPU, with Triton missing, working or installed but broken), the launch functions with kernels
that record their grid and arguments, Step 3's and Going deeper A's timing cells with a stand-in clock and
GPU name, the core's report to report_figures, and the order in which the notebook imports triton."""
import builtins
import json
import os
import re
import types

import pytest
import torch

from support.notebook_09 import STAND_IN_LAUNCH, stand_in_triton
from support.notebook_code import cell_source, load_helpers, load_shared, notebook_path, read, run_cell


@pytest.fixture(scope="module")
def nb():
    """The notebook's helpers, its kernels loaded as plain functions (support/notebook_09.py)."""
    with stand_in_triton():
        return load_helpers("09")


# --- The plan cell: compiled, interpreted or shown ------------------------------------------------

def run_plan_cell(nb, device_type, versions, monkeypatch, imported=False, capability=None,
                  import_error=None):
    """Run the notebook's `plan` cell with a stand-in device, installed versions and `import`.

    The cell's `import triton` gets a stand-in module (or raises `import_error`, as a Triton built for
    another PyTorch does), and `sys.modules` says whether triton was imported before: this test
    process keeps its own triton untouched. Returns the cell's names and the value TRITON_INTERPRET
    had when the cell imported triton ('not imported' if it did not).
    """
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    stand_in = types.ModuleType("triton")
    stand_in.language = types.ModuleType("triton.language")
    at_import = ["not imported"]

    def fake_import(name, *args, **kwargs):
        if name.split(".")[0] == "triton":
            at_import[0] = os.environ.get("TRITON_INTERPRET")
            if import_error is not None:
                raise import_error
            return stand_in
        return builtins.__import__(name, *args, **kwargs)

    namespace = {**vars(nb), "device": torch.device(device_type),
                 "installed_version": lambda name: versions.get(name),
                 "nvidia_capability": lambda device: capability,
                 "sys": types.SimpleNamespace(modules={"triton": stand_in} if imported else {}),
                 "__builtins__": {**vars(builtins), "__import__": fake_import}}
    print(run_cell("09", "plan", namespace), end="")  # what the cell printed, for capsys
    return namespace, at_import[0]


def test_plan_cell_without_triton_defines_the_stand_in(nb, monkeypatch, capsys):
    namespace, at_import = run_plan_cell(nb, "cpu", {"numpy": "2.4.6"}, monkeypatch)
    assert namespace["TRITON_MODE"] == "shown" and at_import == "not imported"
    assert os.environ.get("TRITON_INTERPRET") is None
    assert isinstance(namespace["triton"], nb.KernelsShownOnly)
    assert namespace["tl"].jit(len) is len
    assert "not installed" in capsys.readouterr().out


def test_plan_cell_on_a_cpu_sets_the_variable_first_and_names_a_known_problem(nb, monkeypatch, capsys):
    namespace, at_import = run_plan_cell(nb, "cpu", {"triton": "3.6.0", "numpy": "2.4.6"}, monkeypatch)
    assert namespace["TRITON_MODE"] == "interpreter" and at_import == "1"
    assert namespace["tl"] is namespace["triton"].language
    assert "3.6.0" in namespace["known_problem"]
    assert "Known problem" in capsys.readouterr().out
    namespace, _ = run_plan_cell(nb, "cpu", {"triton": "3.8.0", "numpy": "2.4.6"}, monkeypatch)
    assert namespace["known_problem"] is None
    namespace, _ = run_plan_cell(nb, "cpu", {"triton": "3.8.0", "numpy": "2.4.6"}, monkeypatch,
                                 imported=True)
    assert "Restart the Jupyter kernel".lower() in namespace["known_problem"].lower()


def test_plan_cell_finds_triton_windows_too(nb, monkeypatch):
    namespace, at_import = run_plan_cell(nb, "cpu", {"triton-windows": "3.5.1.post21", "numpy": "2.3.5"},
                                         monkeypatch)
    assert namespace["TRITON_VERSION"] == "3.5.1.post21" and namespace["TRITON_MODE"] == "interpreter"
    assert at_import == "1"


@pytest.mark.parametrize("device_type, capability", [("cpu", None), ("cuda", (7, 5))])
def test_plan_cell_shows_the_kernels_when_triton_is_installed_but_cannot_be_imported(
        nb, monkeypatch, capsys, device_type, capability):
    broken = ImportError("cannot import name 'knobs' from partially initialized module 'triton'")
    namespace, at_import = run_plan_cell(nb, device_type, {"triton": "3.5.0", "numpy": "2.4.6"},
                                         monkeypatch, capability=capability, import_error=broken)
    assert at_import == ("1" if device_type == "cpu" else None)  # the import was tried
    assert namespace["TRITON_MODE"] == "shown" and namespace["known_problem"] is None
    assert isinstance(namespace["triton"], nb.KernelsShownOnly) and namespace["tl"] is namespace["triton"]
    printed = capsys.readouterr().out
    assert printed.startswith("Triton 3.5.0, shown: triton is installed, but importing it fails "
                              "(ImportError: cannot import name 'knobs' from partially initialized "
                              "module 'triton'), so the kernels are shown, not run.")
    assert "-m pip install --force-reinstall" in printed and "Known problem" not in printed
    assert printed.rstrip().endswith("then restart the Jupyter kernel.")
    # every kernel cell after it still runs: the stand-in defines kernels, check_kernel skips them
    assert namespace["tl"].jit(len) is len
    assert nb.check_kernel("k", lambda: 1 / 0, None, namespace["TRITON_MODE"])[0] == "not run"


def test_plan_cell_on_a_t4_says_it_is_outside_tritons_list(nb, monkeypatch, capsys):
    namespace, _ = run_plan_cell(nb, "cuda", {"triton": "3.8.0", "numpy": "2.4.6"}, monkeypatch,
                                 capability=(7, 5))
    assert namespace["TRITON_MODE"] == "compiled" and namespace["CAPABILITY"] == (7, 5)
    assert "yours is 7.5" in capsys.readouterr().out


def test_plan_cell_on_a_gpu_compiles_and_never_sets_the_variable(nb, monkeypatch):
    # torch.device("cuda") can be made without a GPU: the cell only reads its type.
    namespace, at_import = run_plan_cell(nb, "cuda", {"triton": "3.1.0", "numpy": "2.4.6"}, monkeypatch,
                                         imported=True)
    assert namespace["TRITON_MODE"] == "compiled" and at_import is None
    assert namespace["known_problem"] is None  # the interpreter's breakages do not matter there


def test_the_notebook_imports_triton_only_after_setting_the_variable():
    source = cell_source("09", "plan")
    assert source.index('os.environ["TRITON_INTERPRET"] = "1"') < source.index("import triton")
    code = [cell.source for cell in read(notebook_path("09")).cells if cell.cell_type == "code"]
    before_plan = "\n".join(code[:code.index(source)])
    assert "import triton" not in before_plan and "torch.compile" not in before_plan
    assert "torch._dynamo" not in before_plan and "torch._inductor" not in before_plan


# --- The launch functions, with kernels that record their launches -------------------------------

class RecordingKernel:
    """Stands in for a @triton.jit kernel: `kernel[grid](*args, **meta)` records the launch."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **meta: self.launches.append((grid, args, meta))


def launch_cell(nb, cell_id, **names):
    """Run the cell that defines a launch function (add, softmax, matmul) on the CPU with recording
    kernels and `names`; its namespace, whose functions launch the recording kernels."""
    kernels = {name: RecordingKernel() for name in ("add_kernel", "softmax_kernel", "matmul_kernel")}
    namespace = {**vars(nb), **kernels, "triton": STAND_IN_LAUNCH, "device": torch.device("cpu"),
                 "TRITON_MODE": "compiled", "known_problem": None, "SIZES": {"vector": 257,
                                                                             "softmax": (3, 100)},
                 "checks": {}, **names}
    run_cell("09", cell_id, namespace)
    return namespace


def test_add_launches_one_program_per_block_also_for_a_part_filled_last_block(nb):
    namespace = launch_cell(nb, "add-check")
    x, y = torch.ones(257), torch.ones(257)
    for n, programs in ((257, 2), (256, 1)):
        out = namespace["add"](x[:n], y[:n], block=256)
        grid, args, meta = namespace["add_kernel"].launches[-1]
        assert grid == (programs,) and meta == {"BLOCK": 256}
        assert args[3] == n and args[2] is out and out.shape == (n,)
    namespace["add"](x, y, block=64)
    assert namespace["add_kernel"].launches[-1][0] == (5,)


def test_softmax_launches_one_program_per_row_of_a_contiguous_copy(nb):
    namespace = launch_cell(nb, "softmax-launch")
    namespace["softmax_kernel"].launches.clear()  # the cell's own check launched it once
    x = torch.randn(100, 3).T  # 3 rows of 100, not contiguous
    out = namespace["softmax"](x)
    ((grid, (out_arg, x_arg, cols, row_stride), meta),) = namespace["softmax_kernel"].launches
    assert grid == (3,) and cols == 100 and meta == {"BLOCK": 128}
    assert x_arg.is_contiguous() and torch.equal(x_arg, x) and row_stride == 100 and out_arg is out


def test_matmul_launches_one_program_per_tile_of_the_result(nb):
    namespace = launch_cell(nb, "matmul-launch")
    a, b = torch.randn(33, 17), torch.randn(31, 17).T  # b not contiguous: its strides are passed
    c = namespace["matmul"](a, b, blocks=(16, 32, 64))
    ((grid, args, meta),) = namespace["matmul_kernel"].launches
    assert grid == (3, 1) and args[3:6] == (33, 31, 17)
    assert args[6:12] == (17, 1, 1, 17, 31, 1) and args[2] is c and c.dtype == torch.float32
    assert meta == {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64}


@pytest.mark.parametrize("blocks, reason", [
    ((48, 32, 32), "48 is not a power of two"),
    ((32, 32, 8), "8 is below 16, the tile size tl.dot accepts on every Triton release")])
def test_matmul_refuses_block_sizes_triton_cannot_use_in_plain_words_before_any_launch(
        nb, blocks, reason):
    namespace = launch_cell(nb, "matmul-launch")
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    with pytest.raises(ValueError, match=re.escape(f"block sizes {blocks} cannot be used: {reason}")):
        namespace["matmul"](a, b, blocks=blocks)
    assert namespace["matmul_kernel"].launches == []
    namespace["matmul"](a, b, blocks=(16, 16, 16))  # the smallest allowed tile launches
    assert len(namespace["matmul_kernel"].launches) == 1


# --- Step 3 and Going deeper A timed on a GPU, with stand-ins; the figures the core reports -------

def run_speed_cell(nb, mode, gpu_name="Tesla T4", n=100):
    """The `speed` cell in Triton mode `mode`; on a GPU (compiled) torch.compile, the device name and
    time_it are stand-ins. Returns what it displayed and what it printed."""
    shown = []
    stand_in_torch = types.SimpleNamespace(
        compile=lambda function: function, softmax=torch.softmax,
        cuda=types.SimpleNamespace(get_device_name=lambda device: gpu_name))
    namespace = {**vars(nb), "TRITON_MODE": mode, "torch": stand_in_torch,
                 "device": torch.device("cuda" if mode == "compiled" else "cpu"), "display": shown.append,
                 "time_it": lambda function, device, repeats, warmup: 2e-3,
                 "x": torch.ones(n), "y": torch.ones(n), "matrix": torch.ones(4, 10)}
    return shown, run_cell("09", "speed", namespace)


@pytest.mark.parametrize("gpu_name, known", [("Tesla T4", True), ("NVIDIA L40S", False)])
def test_step_3_gpu_branch_runs_with_stand_ins(nb, gpu_name, known):
    (table,), printed = run_speed_cell(nb, "compiled", gpu_name)
    assert len(table) == 6 and table.ms.eq(2.0).all()
    assert table.share_of_peak_pct.notna().all() == known
    assert (f"{gpu_name} is not in the datasheet table" in printed) != known


def test_step_3_compares_an_a100_80gb_with_its_own_bandwidth(nb):
    # The 80 GB SXM module moves 2,039 GB/s (NVIDIA's datasheet), the 40 GB card 1,555 GB/s.
    (table,), _ = run_speed_cell(nb, "compiled", "NVIDIA A100-SXM4-80GB", n=10**7)
    vector = table.loc[("vector add", "your add_kernel")]
    assert vector.GB_per_s == 60.0  # 3 vectors of 4e7 bytes in the stand-in time_it's 2 ms
    assert vector.share_of_peak_pct == round(100 * 60 / 2039, 2)
    (table_40,), _ = run_speed_cell(nb, "compiled", "NVIDIA A100-SXM4-40GB", n=10**7)
    assert table_40.loc[("vector add", "your add_kernel")].share_of_peak_pct > vector.share_of_peak_pct


@pytest.mark.parametrize("mode", ["interpreter", "shown"])
def test_step_3_without_a_gpu_times_nothing_and_says_why(nb, mode):
    shown, printed = run_speed_cell(nb, mode)
    assert shown == [] and printed == nb.no_timing_message(mode) + "\n"


def run_matmul_speed_cell(nb, mode, gpu_name="Tesla T4"):
    """Going deeper A's timing cell in Triton mode `mode`, with a stand-in time_it (4 ms for cuBLAS,
    8 ms for the kernel) and device name; what it displayed and printed."""
    shown = []
    a, b = torch.ones(64, 32), torch.ones(32, 16)
    timed = {}

    def time_it(function, device, repeats, warmup):
        timed[len(timed)] = function
        return 4e-3 * len(timed)

    stand_in_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(get_device_name=lambda device: gpu_name))
    namespace = {**vars(nb), "TRITON_MODE": mode, "torch": stand_in_torch, "a": a, "b": b,
                 "device": torch.device("cuda"), "display": shown.append, "time_it": time_it,
                 "matmul": lambda a, b: a @ b}
    return shown, run_cell("09", "matmul-speed", namespace)


def test_going_deeper_a_times_the_matrix_product_against_the_float32_peak(nb):
    (table,), printed = run_matmul_speed_cell(nb, "compiled")
    flops = 2 * 64 * 32 * 16
    assert printed == "" and list(table.index) == ["PyTorch a @ b (cuBLAS)", "your matmul_kernel"]
    assert list(table.ms) == [4.0, 8.0]
    assert table.TFLOP_per_s.iloc[1] == round(flops / 8e-3 / 1e12, 2)
    t4_tflops = load_shared("datasheet.py").datasheet("Tesla T4")[1]  # run_matmul_speed_cell's GPU
    assert table.share_of_peak_pct.iloc[0] == round(100 * flops / 4e-3 / 1e12 / t4_tflops, 2)
    (unknown,), _ = run_matmul_speed_cell(nb, "compiled", "NVIDIA L40S")
    assert unknown.share_of_peak_pct.isna().all()
    shown, printed = run_matmul_speed_cell(nb, "interpreter")
    assert shown == [] and printed == nb.no_timing_message("interpreter") + "\n"


@pytest.mark.parametrize("mode, fallback", [("compiled", None),
                                            ("interpreter", "Triton interpreter on the CPU"),
                                            ("shown", "shown, not run")])
def test_the_core_reports_its_figures_once_with_what_stood_in(nb, mode, fallback):
    reported = []
    speeds = None
    if mode == "compiled":
        candidates = nb.speed_candidates(torch.ones(100), torch.ones(100), torch.ones(4, 10), None)
        speeds = nb.speed_table(candidates, lambda f: 2e-3, "Tesla T4")
    namespace = {**vars(nb), "TRITON_MODE": mode, "speeds": speeds, "CHECKS": {"vector add": "passed"},
                 "report_figures": lambda fallback=None, **figures: reported.append((fallback, figures))}
    run_cell("09", "report", namespace)
    ((said, figures),) = reported
    assert said == fallback and figures["check vector add"] == "passed"
    assert ("add_kernel GB_per_s" in figures) == (mode == "compiled")
    json.dumps(figures, allow_nan=False)  # plain numbers and strings
