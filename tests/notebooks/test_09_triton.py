"""Notebook 09's helpers, its decisions at their boundaries, its GPU branches with stand-ins, its
Triton kernels run for real under Triton's interpreter at the sizes where masks matter, and its
exercises' checks given the answers a learner is likely to write.

The notebook defines its kernels with `@triton.jit` and `tl.constexpr` at the top level, while it
imports triton only when it is installed (inside an `if`, which load_helpers skips). So the helpers
are loaded with a stand-in `triton`/`tl` put into builtins for the moment of loading: the kernels
become plain functions, and the pure helpers are what these tests call. The kernels themselves run in
a subprocess that sets TRITON_INTERPRET=1 before it imports triton, as the notebook does: in this
process another test may already have imported triton (torch.compile does), and then Triton's own
functions (tl.max, tl.sum) would not run in the interpreter; that subprocess also gives the
exercises' checks real kernels, the notebook's answers and likely wrong ones. Coverage.py is started
there too, so the report counts the kernels' lines. The launch functions (add, softmax, matmul) also
run here, defined by run_cell in a namespace whose kernels record the grid and the arguments they are
launched with.
"""
import builtins
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import types
from unittest import mock

import pytest
import torch

from support.notebook_code import cell_source, load_helpers, notebook_path, read, run_cell, write_helper_file

STAND_IN_TRITON = types.SimpleNamespace(jit=lambda function: function, constexpr=int)


@pytest.fixture(scope="module")
def nb():
    with mock.patch.object(builtins, "triton", STAND_IN_TRITON, create=True), \
            mock.patch.object(builtins, "tl", STAND_IN_TRITON, create=True):
        return load_helpers("09")


# --- Which way the kernels run: compiled, interpreted or shown ------------------------------------

@pytest.mark.gpu_branch("09", "triton_plan: device_type == 'cuda'")
@pytest.mark.gpu_branch("09", "triton_plan: capability is not None and capability < (8, 0)")
def test_triton_plan_for_each_kind_of_machine(nb):
    assert nb.triton_plan("cuda", None)[0] == "shown"
    assert nb.triton_plan("cpu", None)[0] == "shown"
    assert "triton-windows" in nb.triton_plan("cpu", None)[1]
    assert nb.triton_plan("cuda", "3.8.0")[0] == "compiled"  # NVIDIA, and AMD under ROCm
    for device_type in ("cpu", "mps", "xpu"):
        mode, reason = nb.triton_plan(device_type, "3.8.0")
        assert mode == "interpreter" and "times" in reason


@pytest.mark.parametrize("capability, outside", [((7, 5), True), ((7, 0), True), ((6, 0), True),
                                                 ((8, 0), False), ((8, 6), False), ((9, 0), False),
                                                 (None, False)])
def test_triton_plan_says_a_t4_is_outside_tritons_supported_gpus_and_what_tl_dot_does_there(
        nb, capability, outside):
    # Triton's README lists NVIDIA compute capability 8.0+; below it (PR #5066) tl.dot is plain FMAs.
    mode, reason = nb.triton_plan("cuda", "3.8.0", capability)
    assert mode == "compiled"
    assert ("supports compute capability 8.0 and newer" in reason) == outside
    if outside:
        assert f"yours is {capability[0]}.{capability[1]}" in reason and "without Tensor Cores" in reason


@pytest.mark.gpu_branch("09", "nvidia_capability: device.type == 'cuda' and (not hip)")
def test_nvidia_capability_only_for_an_nvidia_gpu(nb):
    asked = []
    cuda = types.SimpleNamespace(get_device_capability=lambda device: asked.append(device) or (7, 5))
    # torch.cuda.get_device_capability returns a tuple (major, minor); a T4 says (7, 5)
    assert nb.nvidia_capability(torch.device("cuda:0"), hip=None, cuda=cuda) == (7, 5)
    assert asked == [torch.device("cuda:0")]
    assert nb.nvidia_capability(torch.device("cuda"), hip="6.4.43482", cuda=cuda) is None  # ROCm
    assert nb.nvidia_capability(torch.device("cpu"), hip=None, cuda=cuda) is None
    assert nb.nvidia_capability(torch.device("mps"), hip=None, cuda=cuda) is None
    assert len(asked) == 1


def test_import_failure_gives_the_errors_last_line_and_the_command_that_repairs_it(nb):
    error = ImportError("Traceback line\ncannot import name 'triton_key' from 'triton.compiler'")
    requires = ["filelock", 'triton==3.5.0; platform_system == "Linux" and platform_machine == "x86_64"']
    why = nb.import_failure(error, "triton", requires, executable="/venv/bin/python")
    assert why.startswith("triton is installed, but importing it fails (ImportError: cannot "
                          "import name 'triton_key' from 'triton.compiler'), so the kernels are shown")
    assert '\n    /venv/bin/python -m pip install --force-reinstall "triton==3.5.0"\n' in why
    assert why.endswith("then restart the Jupyter kernel")
    # This project's torch asks for "triton~=3.8.0; platform_system == ..." (a compatible release)
    why = nb.import_failure(RuntimeError("boom"), "triton",
                            ['triton~=3.8.0; platform_system == "Linux" and python_version < "3.15"'],
                            executable="py")
    assert '    py -m pip install --force-reinstall "triton~=3.8.0"' in why and "(RuntimeError: boom)" in why
    # No pin (PyTorch's Windows wheels name no Triton): reinstall the installed one, triton-windows
    why = nb.import_failure(ImportError("DLL load failed"), "triton-windows",
                            ["filelock", "sympy>=1.13.3"], executable="python.exe")
    assert "    python.exe -m pip install --force-reinstall --no-deps triton-windows\n" in why
    assert why.startswith("triton-windows is installed")
    assert "(ImportError: no message)" in nb.import_failure(ImportError(""), "triton", [])


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton installed")
def test_import_failure_reads_the_installed_distribution_and_torchs_requirement_itself(nb):
    why = nb.import_failure(ImportError("boom"))  # this environment's triton and torch
    assert why.startswith("triton is installed, but importing it fails (ImportError: boom)")
    pins = [r for r in importlib.metadata.requires("torch") or [] if r.startswith("triton")]
    assert ('--force-reinstall "triton' in why) == bool(pins)  # PyTorch's Linux wheels name one


@pytest.mark.parametrize("triton_version, numpy_version, broken", [
    ("3.1.9", "1.26.4", True), ("3.1.0", "2.3.5", True), ("3.2.0", "2.3.5", False),
    ("3.6.9", "2.4.0", True), ("3.6.0", "2.4.6", True), ("3.7.0", "2.4.0", False),
    ("3.6.0", "2.3.99", False), ("3.2.0", "2.4.0", True), ("3.8.0+git1234", "2.4.6", False),
    ("3.7.0rc1", "2.5.0", False),
])
def test_interpreter_problem_at_the_version_boundaries(nb, triton_version, numpy_version, broken):
    problem = nb.interpreter_problem(triton_version, numpy_version)
    assert (problem is not None) == broken, problem
    if broken:
        assert triton_version in problem


def test_import_problem_only_when_triton_came_first_without_the_variable(nb):
    assert "Restart the Jupyter kernel".lower() in nb.import_problem("interpreter", True, None).lower()
    assert nb.import_problem("interpreter", True, "0") is not None
    assert nb.import_problem("interpreter", True, "1") is None  # set on an earlier run of the cell
    assert nb.import_problem("interpreter", False, None) is None
    assert nb.import_problem("compiled", True, None) is None
    assert nb.import_problem("shown", True, None) is None


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


# --- The sizes, and the check that guards every result ---------------------------------------------

def test_problem_sizes_leave_the_last_block_partly_filled_and_stay_small_under_the_interpreter(nb):
    for mode in ("compiled", "interpreter", "shown"):
        for fast in (True, False):
            sizes = nb.problem_sizes(mode, fast)
            assert sizes["vector"] % 256 != 0
            # Step 4's C++ loop takes 8 or 16 numbers at a time: the prose's "shorter last round"
            assert sizes["vector"] % 8 != 0
            columns = sizes["softmax"][1]
            assert columns & (columns - 1), "the softmax block (a power of two) is partly filled"
            if mode != "compiled":
                assert any(size % 32 for size in sizes["matmul"])
                assert sizes["vector"] <= 200_000 and max(sizes["matmul"]) <= 256
    assert nb.problem_sizes("compiled", False)["vector"] > nb.problem_sizes("interpreter", False)["vector"]
    assert nb.problem_sizes("interpreter", True)["vector"] < nb.problem_sizes("interpreter", False)["vector"]


def test_check_kernel_passes_fails_and_skips(nb):
    checks = {}
    expected = torch.arange(5.0)
    status, verdict, result = nb.check_kernel("k", lambda: expected.clone(), expected, "interpreter",
                                              checks=checks)
    assert status == "passed" and "interpreter" in verdict and torch.equal(result, expected)
    assert "on the GPU" in nb.check_kernel("k", lambda: expected.clone(), expected, "compiled",
                                           checks=checks)[1]
    # A broken interpreter: all zeros, or an exception; the result is never handed back.
    status, verdict, result = nb.check_kernel("k", lambda: torch.zeros(5), expected, "interpreter",
                                              known_problem="old triton", checks=checks)
    assert status == "failed" and result is None
    assert "Mismatched elements" in verdict and "Known cause: old triton" in verdict

    def broken():
        raise TypeError("only 0-dimensional arrays can be converted to Python scalars")

    status, verdict, result = nb.check_kernel("k", broken, expected, "interpreter", checks=checks)
    assert status == "failed" and "TypeError" in verdict and "Known cause" not in verdict
    called = []
    status, verdict, result = nb.check_kernel("k", lambda: called.append(1), expected, "shown",
                                              checks=checks)
    assert status == "not run" and called == [] and result is None
    assert checks == {"k": "not run"}  # the last check under each name, for report_figures
    nb.check_kernel("other", lambda: expected.clone(), expected, "compiled", checks=checks)
    assert checks == {"k": "not run", "other": "passed"}


def test_check_kernel_uses_the_tolerance_it_is_given(nb):
    expected = torch.ones(4)
    nearly = expected + 5e-3  # about what TF32's 10-bit mantissas give a float32 matrix product
    assert nb.check_kernel("k", lambda: nearly, expected, "compiled")[0] == "failed"
    tf32 = nb.matmul_tolerance("compiled", (8, 0))
    assert nb.check_kernel("k", lambda: nearly, expected, "compiled", **tf32)[0] == "passed"
    float32 = nb.matmul_tolerance("compiled", (7, 5))
    assert nb.check_kernel("k", lambda: nearly, expected, "compiled", **float32)[0] == "failed"
    assert nb.check_kernel("k", lambda: expected + 5e-5, expected, "compiled", **float32)[0] == "passed"


@pytest.mark.gpu_branch("09", "matmul_tolerance: mode == 'compiled' and capability is not None and "
                              "(capability >= (8, 0))")
@pytest.mark.parametrize("mode, capability, tf32", [
    ("compiled", (7, 5), False),  # a T4: tl.dot is float32 FMAs since triton PR #5066
    ("compiled", (7, 0), False), ("compiled", (8, 0), True), ("compiled", (8, 9), True),
    ("compiled", (9, 0), True), ("compiled", None, False),  # None: an AMD GPU, whose default is "ieee"
    ("interpreter", None, False), ("interpreter", (8, 0), False), ("shown", (9, 0), False),
])
def test_matmul_tolerance_allows_tf32_only_from_compute_capability_8(nb, mode, capability, tf32):
    tolerance = nb.matmul_tolerance(mode, capability)
    assert tolerance == ({"atol": 1e-2, "rtol": 1e-2} if tf32 else {"atol": 1e-4, "rtol": 1e-4})


def test_installed_version_reads_the_metadata_or_says_none(nb):
    assert nb.installed_version("torch") == importlib.metadata.version("torch")
    assert nb.installed_version("no-such-package-nb09") is None


class RecordingKernel:
    """Stands in for a @triton.jit kernel: `kernel[grid](*args, **meta)` records the launch."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **meta: self.launches.append((grid, args, meta))


# triton/__init__.py's cdiv and next_power_of_2, for the launch functions run with stand-in kernels
STAND_IN_LAUNCH = types.SimpleNamespace(cdiv=lambda x, y: (x + y - 1) // y,
                                        next_power_of_2=lambda n: 1 << (n - 1).bit_length())


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


def test_softmax_in_steps_matches_torch_and_stays_finite_for_large_scores(nb):
    scores = torch.tensor([[1000.0, 1001.0, 999.0], [0.0, -1.0, 2.0]])
    torch.testing.assert_close(nb.softmax_in_steps(scores), torch.softmax(scores, dim=1))


def test_add_relu_double_is_the_three_operations_its_kernel_name_lists(nb):
    # The prose names Inductor's kernel triton_poi_fused_add_mul_relu_0: the operations it fuses.
    graph = torch.fx.symbolic_trace(nb.add_relu_double).graph
    assert sorted(node.target.__name__ for node in graph.nodes if node.op == "call_function") == [
        "add", "mul", "relu"]
    assert nb.add_relu_double(torch.tensor([1.0, -3.0]), torch.tensor([0.5, 1.0])).tolist() == [3.0, 0.0]


@pytest.fixture
def drawn():
    """The figure a drawing function of the notebook made (it draws on a new one), closed after."""
    import matplotlib.pyplot as plt

    plt.close("all")
    yield plt.gcf
    plt.close("all")


@pytest.mark.parametrize("n, block, programs, masked", [(10, 4, 3, 2), (8, 4, 2, 0), (9, 4, 3, 3)])
def test_the_grid_of_programs_masks_exactly_the_positions_past_the_end(nb, drawn, n, block, programs,
                                                                       masked):
    nb.draw_grid_of_programs(n, block)
    (axis,) = drawn().axes
    squares = [patch for patch in axis.patches if patch.get_width() == 0.9]
    labels = [text.get_text() for text in axis.texts]
    assert len(squares) == programs * block and labels.count("masked") == masked
    assert [label for label in labels if label != "masked"] == [str(p) for p in range(n)]
    assert sum(square.get_hatch() == "//" for square in squares) == masked
    assert axis.get_title().endswith(f"{programs} programs") and axis.get_xlabel() and axis.get_ylabel()


def test_the_tiles_of_a_and_b_read_for_one_tile_of_c(nb, drawn):
    nb.draw_tiles(M=6, N=8, K=4, block=2, tile=(1, 2))
    a, b, c = drawn().axes
    white = (1.0, 1.0, 1.0, 1.0)
    used = {name: [patch.get_xy() for patch in axis.patches if patch.get_facecolor() != white]
            for name, axis in (("A", a), ("B", b), ("C", c))}
    assert used == {"A": [(0, 2), (2, 2)],  # row of tiles 1 of A, K = 4 in 2 steps
                    "B": [(4, 0), (4, 2)],  # column of tiles 2 of B
                    "C": [(4, 2)]}  # the tile (1, 2) of C
    assert [t.get_text() for t in a.texts] == ["k = 0", "k = 1"] == [t.get_text() for t in b.texts]
    assert len(c.texts) == 0 and [axis.get_title() for axis in (a, b, c)] == ["A", "B", "C = A · B"]


# --- Byte counts and block sizes --------------------------------------------------------------------

def test_softmax_traffic_counts_every_kernel(nb):
    rows, cols = 3, 7
    unfused = nb.softmax_traffic(rows, cols, fused=False)
    assert len(unfused) == 5
    assert sum(read for _, read, _ in unfused) == 4 * (5 * rows * cols + 2 * rows)
    assert sum(written for _, _, written in unfused) == 4 * (3 * rows * cols + 2 * rows)
    (fused,) = nb.softmax_traffic(rows, cols, fused=True)
    assert fused[1:] == (4 * rows * cols, 4 * rows * cols)
    assert nb.softmax_traffic(rows, cols, fused=True, bytes_per_number=2)[0][1] == 2 * rows * cols
    table = nb.traffic_table(1000, 1000)
    moved = (table.read_MB + table.written_MB).groupby(level="version", sort=False).sum()
    assert moved.iloc[0] / moved.iloc[1] == pytest.approx(4, rel=0.01)


def test_matmul_traffic_at_the_tile_boundaries(nb):
    M, N, K = 64, 48, 32
    assert nb.matmul_traffic(M, N, K, 1, 1) == 4 * 2 * M * N * K  # one element per program
    assert nb.matmul_traffic(M, N, K, M, N) == 4 * (M * K + K * N)  # one tile: every number once
    assert nb.matmul_traffic(M, N + 1, K, M, N) == 4 * (2 * M * K + K * (N + 1))  # a second column
    assert nb.matmul_traffic(M + 1, N, K, M, N) == 4 * ((M + 1) * K + 2 * K * N)  # a second row
    assert nb.matmul_traffic(M, N, K, 32, 16) < nb.matmul_traffic(M, N, K, 16, 16)


@pytest.mark.parametrize("blocks, allowed", [((16, 16, 16), True), ((32, 64, 128), True),
                                             ((8, 16, 16), False), ((16, 15, 16), False),
                                             ((16, 16, 48), False), ((16, 16, 17), False)])
def test_block_problem_at_its_boundaries(nb, blocks, allowed):
    assert (nb.block_problem(*blocks) is None) == allowed


# --- Step 3 on a GPU, with stand-ins ----------------------------------------------------------------

# Step 3 reads the datasheet table 01 carries too (tools/shared_cells/datasheet.py); its rows are tested in
# tests/test_01_check_gpu.py. Here: the copy gives Step 3 one peak per model, memory and form factor.
@pytest.mark.parametrize("name, peaks", [
    ("Tesla T4", (320, 8.1)), ("NVIDIA A100-SXM4-40GB", (1555, 19.5)),
    ("NVIDIA A100-SXM4-80GB", (2039, 19.5)), ("NVIDIA A100 80GB PCIe", (1935, 19.5)),
    ("Tesla V100-SXM2-16GB", (900, 15.7)), ("Tesla V100-PCIE-32GB", (900, 14.0)),
    ("NVIDIA L40S", None), ("AMD Instinct MI300X", None),  # L4 must not match L40S
    ("NVIDIA H100 80GB HBM3", (3350, 67.0)), ("NVIDIA H100 PCIe", (2000, 51.0)),  # SXM5 names none
    ("NVIDIA H100 NVL", None),
])
def test_the_datasheet_copy_gives_step_3_the_peaks_of_the_model_memory_and_form_factor(nb, name, peaks):
    found = nb.datasheet(name)
    assert (found and found[:2]) == peaks


def test_the_datasheet_copy_keeps_notebook_01s_other_helpers_working(nb):
    assert nb.published_peak("Tesla T4") == (8.1, "https://www.nvidia.com/en-us/data-center/tesla-t4/")
    assert nb.datasheet_table("Tesla T4", 4050.0).iloc[0]["share_of_peak_pct"] == 50
    assert nb.datasheet_table("NVIDIA L40S", 1.0) is None


def test_speed_table_from_stand_in_timings(nb, capsys):
    x = y = torch.ones(1000)
    candidates = nb.speed_candidates(x, y, torch.ones(100, 1000), compiled_softmax=None)
    assert [c[1] for c in candidates].count("torch.compile of the five") == 1
    assert [c for c in candidates if c[1] == "torch.compile of the five"][0][2] is None

    def seconds_of(function):  # stand-in for time_it: 1 ms, and one version that fails
        if function is candidates[1][2]:
            raise RuntimeError("launch failed")
        return 1e-3

    table = nb.speed_table(candidates, seconds_of, (320, 8.1, "https://www.nvidia.com/"))
    vector = table.loc[("vector add", "PyTorch x + y")]
    assert vector.GB_per_s == pytest.approx(3 * 1000 * 4 / 1e-3 / 1e9, abs=0.01)
    assert vector.share_of_peak_pct == pytest.approx(100 * vector.GB_per_s / 320, abs=0.01)
    assert math.isnan(table.loc[("vector add", "your add_kernel")].ms)
    assert "not timed, RuntimeError" in capsys.readouterr().out
    assert math.isnan(table.loc[("row softmax", "torch.compile of the five")].ms)
    unfused = table.loc[("row softmax", "five PyTorch operations")].GB_per_s
    # the five operations move about four times the bytes: in the same time, four times the GB/s
    assert unfused == pytest.approx(4 * table.loc[("row softmax", "torch.softmax")].GB_per_s, rel=0.01)
    no_peaks = nb.speed_table(candidates[:1], lambda f: 1e-3, None)
    assert math.isnan(no_peaks.share_of_peak_pct.iloc[0])


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


def test_no_timing_message_says_why(nb):
    assert "mean nothing" in nb.no_timing_message("interpreter")
    assert "Without a working Triton" in nb.no_timing_message("shown")


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
    assert table.share_of_peak_pct.iloc[0] == round(100 * flops / 4e-3 / 1e12 / 8.1, 2)
    (unknown,), _ = run_matmul_speed_cell(nb, "compiled", "NVIDIA L40S")
    assert unknown.share_of_peak_pct.isna().all()
    shown, printed = run_matmul_speed_cell(nb, "interpreter")
    assert shown == [] and printed == nb.no_timing_message("interpreter") + "\n"


# --- The figures the core reports: report_figures once, near the end of the core ----------

def test_kernel_figures_keep_each_check_and_on_a_gpu_each_of_your_kernels_speeds(nb):
    checks = {"vector add": "passed", "row softmax": "failed"}
    assert nb.kernel_figures(checks, None) == {"check vector add": "passed",
                                               "check row softmax": "failed"}
    x = y = torch.ones(1000)
    candidates = nb.speed_candidates(x, y, torch.ones(10, 100), None)
    speeds = nb.speed_table(candidates, lambda f: 1e-3, (320, 8.1, "page"))
    figures = nb.kernel_figures({}, speeds)
    assert figures["add_kernel GB_per_s"] == speeds.loc[("vector add", "your add_kernel")].GB_per_s
    assert figures["add_kernel share_of_peak_pct"] == pytest.approx(100 * 0.012 / 320, abs=0.01)
    assert set(figures) == {f"{kernel} {column}" for kernel in ("add_kernel", "softmax_kernel")
                            for column in ("GB_per_s", "share_of_peak_pct")}
    unknown = nb.kernel_figures({}, nb.speed_table(candidates, lambda f: 1e-3, None))
    assert unknown["softmax_kernel share_of_peak_pct"] is None  # NaN is no JSON number
    assert isinstance(unknown["softmax_kernel GB_per_s"], float)


@pytest.mark.parametrize("mode, fallback", [("compiled", None),
                                            ("interpreter", "Triton interpreter on the CPU"),
                                            ("shown", "shown, not run")])
def test_the_core_reports_its_figures_once_with_what_stood_in(nb, mode, fallback):
    reported = []
    speeds = None
    if mode == "compiled":
        candidates = nb.speed_candidates(torch.ones(100), torch.ones(100), torch.ones(4, 10), None)
        speeds = nb.speed_table(candidates, lambda f: 2e-3, nb.datasheet("Tesla T4"))
    namespace = {**vars(nb), "TRITON_MODE": mode, "speeds": speeds, "CHECKS": {"vector add": "passed"},
                 "report_figures": lambda fallback=None, **figures: reported.append((fallback, figures))}
    run_cell("09", "report", namespace)
    ((said, figures),) = reported
    assert said == fallback and figures["check vector add"] == "passed"
    assert ("add_kernel GB_per_s" in figures) == (mode == "compiled")
    json.dumps(figures, allow_nan=False)  # plain numbers and strings


# --- Step 4: Inductor's plan and its generated code --------------------------------------------------

@pytest.mark.gpu_branch("09", "inductor_plan: device_type == 'cuda' and has_triton")
@pytest.mark.gpu_branch("09", "inductor_plan: device_type == 'cuda'")
@pytest.mark.gpu_branch("09", "inductor_plan: device_type == 'cpu' and cpp_compiler")
@pytest.mark.gpu_branch("09", "inductor_plan: device_type == 'cpu'")
def test_inductor_plan_for_each_device(nb):
    assert nb.inductor_plan("cuda", None, True) == (True, "Inductor writes Triton kernels for your GPU")
    assert nb.inductor_plan("cuda", "/usr/bin/g++", False)[0] is False
    assert nb.inductor_plan("cpu", "/usr/bin/g++", False)[0] is True  # no Triton needed on a CPU
    assert "g++" in nb.inductor_plan("cpu", "/usr/bin/g++", True)[1]
    assert nb.inductor_plan("cpu", None, True)[0] is False
    assert nb.inductor_plan("mps", "/usr/bin/clang++", False)[0] is False


PREFIX = ("V1123 19:42:28.446000 16573 /venv/lib/python3.11/site-packages/torch/_inductor/"
          "codecache.py:2145] [0/0] [__output_code] ")


def as_log(code):
    """Lines as the output_code log prints them: each with the logger's prefix."""
    return "\n".join(PREFIX + line for line in textwrap.dedent(code).strip("\n").splitlines())


# Shaped as torch/_inductor/codegen/triton.py writes a kernel into the wrapper (async_compile.triton
# with the name, the source between ''' and ''', then device_str), and codegen/cpp.py a C++ one
# (async_compile.cpp_pybinding with the argument types and r''').
TRITON_LOG = as_log('''
    Output code:
    from torch._inductor.async_compile import AsyncCompile
    async_compile = AsyncCompile()

    # kernel path: /tmp/torchinductor_user/ab/cab.py
    triton_poi_fused_add_mul_relu_0 = async_compile.triton('triton_poi_fused_add_mul_relu_0', \'\'\'
    import triton
    import triton.language as tl

    @triton_heuristics.pointwise(size_hints={'x': 1024}, filename=__file__)
    @triton.jit
    def triton_poi_fused_add_mul_relu_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK : tl.constexpr):
        xnumel = 1000
        xoffset = tl.program_id(0) * XBLOCK
        xindex = xoffset + tl.arange(0, XBLOCK)[:]
        xmask = xindex < xnumel
        tl.store(out_ptr0 + (x0), tmp6, xmask)
    \'\'\', device_str='cuda')


    async_compile.wait(globals())
    ''')
CPP_LOG = as_log('''
    Output code:
    cpp_fused_add_mul_relu_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r\'\'\'
    #include <torch/csrc/inductor/cpp_prefix.h>
    extern "C"  void  kernel(const float* in_ptr0,
                           float* out_ptr0)
    {
    }
    \'\'\')
    ''')


def test_generated_kernels_from_a_triton_log(nb):
    (kernel,) = nb.generated_kernels(TRITON_LOG)
    name, language, source = kernel
    assert name == "triton_poi_fused_add_mul_relu_0" and language == "python"
    assert source.startswith("@triton.jit") and source.endswith("tl.store(out_ptr0 + (x0), tmp6, xmask)")
    assert "V1123" not in source and "device_str" not in source


def test_generated_kernels_from_a_cpp_log_and_from_two(nb):
    (kernel,) = nb.generated_kernels(CPP_LOG)
    assert kernel[:2] == ("cpp_fused_add_mul_relu_0", "cpp")
    assert kernel[2].startswith("#include") and kernel[2].endswith("}")
    assert [k[0] for k in nb.generated_kernels(TRITON_LOG + "\n" + CPP_LOG)] == [
        "triton_poi_fused_add_mul_relu_0", "cpp_fused_add_mul_relu_0"]
    assert nb.generated_kernels("") == []


# --- The kernels themselves, and the exercises' checks, under Triton's interpreter ---------------------

# A file, not `python -c`: @triton.jit reads each kernel's source, so the wrong kernels below need one.
RUNNER = r'''
import builtins, json, os, sys
os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported, as the notebook does
import torch
import triton
import triton.language as tl

# The notebook's definitions from load_helpers' file, as tests/notebook_code.py runs them, with the real
# triton and tl (the notebook imports them in its plan cell, whose work load_helpers leaves out).
# Triton's interpreter recompiles each kernel from that file, so coverage.py, started here when the
# test run measures the helpers, counts the kernels' lines in the report.
helpers, data_file = sys.argv[1], sys.argv[2]
builtins.triton, builtins.tl = triton, tl
if data_file:
    import coverage
    measurement = coverage.Coverage(data_file=data_file, data_suffix=True, branch=True,
                                    include=[helpers], config_file=False)
    measurement.start()
with open(helpers) as source:
    exec(compile(source.read(), helpers, "exec"), globals())
TRITON_MODE, device, known_problem = "interpreter", torch.device("cpu"), None  # the plan cell's work

failures = []
def expect(name, status, verdict):
    if status != "passed":
        failures.append(verdict)

for n in (1, 255, 256, 257, 1000):  # inside one block, exactly full blocks, one past a block
    x, y = torch.randn(n), torch.randn(n)
    expect(n, *check_kernel(f"add n={n}", lambda: add(x, y), x + y, "interpreter")[:2])
for rows, cols in ((3, 1), (3, 64), (3, 65), (2, 1000)):
    m = torch.randn(rows, cols)
    expect(cols, *check_kernel(f"softmax {rows}x{cols}", lambda: softmax(m), torch.softmax(m, 1),
                               "interpreter")[:2])
    expect(cols, *check_kernel(f"in steps {rows}x{cols}", lambda: softmax_in_steps(m),
                               torch.softmax(m, 1), "interpreter")[:2])
for (M, N, K), blocks in (((32, 32, 32), (32, 32, 32)), ((33, 31, 17), (32, 32, 32)),
                          ((1, 1, 1), (16, 16, 16)), ((48, 40, 56), (16, 16, 16)),
                          ((20, 70, 40), (16, 64, 32))):
    a, b = torch.randn(M, K), torch.randn(K, N)
    expect(M, *check_kernel(f"matmul {M}x{N}x{K} {blocks}", lambda: matmul(a, b, blocks), a @ b,
                            "interpreter", **matmul_tolerance("interpreter", None))[:2])


# Kernels a learner is likely to write for the exercises
@triton.jit
def forgot_the_double_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x + y, 0.0), mask=mask)


@triton.jit
def store_without_mask_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x + y, 0.0) * 2)


@triton.jit
def masked_positions_as_zero_kernel(out_ptr, x_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * row_stride + cols, mask=cols < n_cols)
    tl.store(out_ptr + row, tl.max(x, axis=0))


@triton.jit
def rows_n_cols_apart_kernel(out_ptr, x_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    tl.store(out_ptr + row, tl.max(x, axis=0))


exercises = {"fused-kernel answer": check_fused_kernel(add_relu_double_kernel_answer),
             "fused-kernel starter": check_fused_kernel(add_relu_double_kernel),
             "forgot the * 2": check_fused_kernel(forgot_the_double_kernel),
             "store without its mask": check_fused_kernel(store_without_mask_kernel),
             "row-max answer": check_row_max(row_max_kernel_answer),
             "row-max starter": check_row_max(row_max_kernel),
             "masked positions as 0": check_row_max(masked_positions_as_zero_kernel),
             "rows n_cols apart": check_row_max(rows_n_cols_apart_kernel)}
if data_file:
    measurement.stop()
    measurement.save()
print(json.dumps({"failures": failures, "exercises": exercises}))
'''


@pytest.fixture(scope="module")
def under_the_interpreter(request, tmp_path_factory):
    '''What RUNNER reports: the kernels' failed checks, and the exercises' checks' verdicts.'''
    if importlib.util.find_spec("triton") is None:
        pytest.skip("needs triton installed")
    measurement = request.config.helper_coverage  # None when the run does not measure the helpers
    data_file = measurement.coverage.config.data_file if measurement is not None else ""
    runner = tmp_path_factory.mktemp("interpreter") / "run_kernels.py"
    runner.write_text(RUNNER)
    result = subprocess.run([sys.executable, str(runner), str(write_helper_file("09")), data_file],
                            env={**os.environ, "TRITON_INTERPRET": "1"},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_kernels_match_pytorch_under_the_interpreter_at_their_block_boundaries(under_the_interpreter):
    assert under_the_interpreter["failures"] == []


@pytest.mark.exercise("09", "fused-kernel")
def test_exercise_1_tells_a_kernel_without_its_double_and_a_store_without_its_mask(under_the_interpreter):
    said = under_the_interpreter["exercises"]
    assert said["fused-kernel answer"] == ("PASSED: your kernel matches relu(x + y) * 2 under Triton's "
                                           "interpreter on 1000, 256 and 1 numbers, in one launch each.")
    assert said["fused-kernel starter"] == "NOT DONE YET: replace the ... in add_relu_double_kernel."
    assert re.fullmatch(r"NOT YET RIGHT: on 1000 numbers, \d+ results differ\. At position \d+, "
                        r"x = -?\d\.\d{3} and y = -?\d\.\d{3} give (\d+\.\d{3}), but relu\(x \+ y\) \* 2 is "
                        r"\d+\.\d{3}\.", said["forgot the * 2"])
    assert said["store without its mask"] == ("NOT YET RIGHT: on 1000 numbers your kernel wrote past the end "
                                              "of out: give tl.store the mask too (mask=mask).")


@pytest.mark.exercise("09", "row-max")
def test_exercise_2_tells_masked_positions_read_as_zero_and_rows_n_cols_apart(under_the_interpreter):
    said = under_the_interpreter["exercises"]
    assert said["row-max answer"].startswith("PASSED: your kernel finds the maximum of every row")
    assert said["row-max starter"] == "NOT DONE YET: replace the ... in row_max_kernel."
    assert re.fullmatch(r"NOT YET RIGHT: on 3 rows of 100 negative numbers, row 0: your kernel gives "
                        r"0\.000, its maximum is -0\.\d{3}; the masked positions count as 0 unless the "
                        r"load fills them with -inf\.", said["masked positions as 0"])
    assert re.fullmatch(r"NOT YET RIGHT: on the first 64 columns of a 4 x 80 matrix, row [123]: your kernel "
                        r"gives -?\d\.\d{3}, its maximum is -?\d\.\d{3}; a row starts row_stride \(80\) "
                        r"elements after the one before\.", said["rows n_cols apart"])


# --- The exercises' checks in this process, with kernels of the test's own ---------------------------

def exercise(nb, name, **names):
    """The namespace of exercise `name`'s check cell, run on the CPU as on a GPU (TRITON_MODE
    'compiled'), with `names` beside the notebook's helpers; kernels are the test's stand-ins."""
    namespace = {**vars(nb), "device": torch.device("cpu"), "TRITON_MODE": "compiled",
                 "known_problem": None, "triton": STAND_IN_LAUNCH, **names}
    run_cell("09", f"exercise-{name}-check", namespace)
    return namespace


class ElementwiseStandIn:
    """Stands in for a compiled add_relu_double_kernel: kernel[grid](x, y, out, n, BLOCK=...) runs the
    grid's programs one by one, each on its block; masked=False stores whole blocks, past the end too."""

    def __init__(self, formula, masked=True, error=None):
        self.formula, self.masked, self.error = formula, masked, error
        self.launched = []  # (x, y) of each launch, the first n numbers of each

    def __getitem__(self, grid):
        def launch(x, y, out, n, BLOCK):
            self.launched.append((x[:n].clone(), y[:n].clone()))
            if self.error:
                raise self.error
            for program in range(grid[0]):
                start = program * BLOCK
                stop = min(start + BLOCK, n) if self.masked else start + BLOCK
                out[start:stop] = self.formula(x[start:stop], y[start:stop])
        return launch


def relu_double(x, y):
    return torch.relu(x + y) * 2


def unfinished_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK):
    offsets = ...  # the starter's `...`, not yet replaced
    return offsets


def test_a_kernel_is_unfinished_while_its_source_holds_the_starters_ellipsis(nb):
    assert nb.still_has_ellipsis(unfinished_kernel)
    assert nb.still_has_ellipsis(types.SimpleNamespace(fn=unfinished_kernel))  # what @triton.jit makes
    assert not nb.still_has_ellipsis(nb.add_kernel)
    assert not nb.still_has_ellipsis(ElementwiseStandIn(relu_double))  # no source: judged by its results


@pytest.mark.exercise("09", "fused-kernel")
def test_exercise_1s_check_on_a_gpu_passes_a_right_kernel_and_names_each_wrong_one(nb):
    check = exercise(nb, "fused-kernel")["check_fused_kernel"]
    assert check(ElementwiseStandIn(relu_double)).startswith(
        "PASSED: your kernel matches relu(x + y) * 2 on the GPU on 1000, 256 and 1 numbers")
    assert check(ElementwiseStandIn(relu_double, masked=False)) == (
        "NOT YET RIGHT: on 1000 numbers your kernel wrote past the end of out: give tl.store the mask "
        "too (mask=mask).")
    assert check(ElementwiseStandIn(relu_double), block=1024).endswith("on 1000, 1024 and 1 numbers, in "
                                                                        "one launch each.")
    only_the_full_blocks = ElementwiseStandIn(lambda x, y: relu_double(x, y) * (x.numel() > 1))
    assert check(only_the_full_blocks).startswith("NOT YET RIGHT: on 1 numbers, 1 results differ.")
    forgot_the_double = ElementwiseStandIn(lambda x, y: torch.relu(x + y))
    said = check(forgot_the_double)
    x, y = forgot_the_double.launched[0]  # the first launch, on 1000 numbers, is the one judged
    differ = (x + y > 0).nonzero().flatten()  # where relu(x + y) is not twice itself
    i = int(differ[0])
    assert said == (f"NOT YET RIGHT: on 1000 numbers, {len(differ)} results differ. At position {i}, "
                    f"x = {x[i]:.3f} and y = {y[i]:.3f} give {torch.relu(x + y)[i]:.3f}, but relu(x + y) * 2 "
                    f"is {relu_double(x, y)[i]:.3f}.")
    assert 0 < len(differ) < 1000 and len(forgot_the_double.launched) == 1
    error = RuntimeError("at 4:8:\n    x = tl.load(x_pt + offsets)\nNameError: x_pt is not defined")
    assert check(ElementwiseStandIn(relu_double, error=error)) == (
        "NOT YET RIGHT: on 1000 numbers, launching your kernel raised RuntimeError: NameError: x_pt is "
        "not defined")
    known = exercise(nb, "fused-kernel", known_problem="triton 3.1.0 computes wrong numbers")
    assert known["check_fused_kernel"](ElementwiseStandIn(relu_double, error=error)).endswith(
        "not defined (known problem: triton 3.1.0 computes wrong numbers)")
    shown = exercise(nb, "fused-kernel", TRITON_MODE="shown")["check_fused_kernel"]
    assert shown(ElementwiseStandIn(relu_double)) == ("your fused kernel: not run (no Triton), so the "
                                                      "check cannot launch it.")
    assert shown(unfinished_kernel).startswith("NOT DONE YET")


class RowMaxStandIn:
    """Stands in for a compiled row_max_kernel: each program reads its row (a strided view here), the
    positions past n_cols as `fill`, and stores the maximum at out[row], or `spread` numbers from it."""

    def __init__(self, fill=-math.inf, spread=1, error=None):
        self.fill, self.spread, self.error = fill, spread, error

    def __getitem__(self, grid):
        def launch(out, x, n_cols, row_stride, BLOCK):
            if self.error:
                raise self.error
            for row in range(grid[0]):
                block = torch.full((BLOCK,), self.fill)
                block[:n_cols] = x[row, :n_cols]
                out[row:row + self.spread] = block.max()
        return launch


@pytest.mark.exercise("09", "row-max")
def test_exercise_2s_check_on_a_gpu_passes_a_right_kernel_and_names_each_wrong_one(nb):
    check = exercise(nb, "row-max")["check_row_max"]
    assert check(RowMaxStandIn()) == ("PASSED: your kernel finds the maximum of every row, in rows of "
                                      "negative numbers and in rows row_stride apart.")
    assert check(RowMaxStandIn(fill=0.0)).endswith("the masked positions count as 0 unless the load "
                                                   "fills them with -inf.")
    assert check(RowMaxStandIn(spread=128)) == (
        "NOT YET RIGHT: on 3 rows of 100 negative numbers your kernel wrote past the last row's place "
        "in out: store one number per program, at out_ptr + row.")
    assert check(RowMaxStandIn(error=ValueError("boom"))) == (
        "NOT YET RIGHT: on 3 rows of 100 negative numbers, launching your kernel raised ValueError: boom")
    shown = exercise(nb, "row-max", TRITON_MODE="shown")["check_row_max"]
    assert shown(RowMaxStandIn()).startswith("your row maximum: not run (no Triton)")
    assert check(unfinished_kernel) == "NOT DONE YET: replace the ... in row_max_kernel."


def test_exercise_2s_matrices_hold_negative_rows_and_rows_a_stride_apart(nb):
    namespace = exercise(nb, "row-max")
    (_, negative, cols), (_, wide, used) = namespace["row_max_cases"](torch.Generator().manual_seed(1))
    assert (negative < 0).all() and cols == negative.shape[1] and cols & (cols - 1)
    assert wide.shape[1] > used and used & (used - 1) == 0


@pytest.mark.exercise("09", "bytes-moved")
def test_exercise_3_tells_a_count_of_the_reads_alone(nb):
    namespace = exercise(nb, "bytes-moved")
    run_cell("09", "exercise-bytes-moved-answer", namespace)
    check = namespace["check_bytes_moved"]
    assert check(namespace["bytes_moved_answer"]) == ("PASSED: 28,000 bytes in three kernels, 12,000 in "
                                                      "one, for 1000 numbers: 2.3 times fewer.")

    def reads_only(n, fused):  # what the kernels read, not what they write
        return (2 if fused else 2 + 1 + 1) * n * 4

    assert check(reads_only) == (
        "NOT YET RIGHT: bytes_moved(1000, fused=False) says 16,000, but the three PyTorch kernels move "
        "28,000 bytes (-12,000): count what each kernel reads and what it writes, 4 bytes a number.")
    assert check(lambda n, fused: 28 * n if not fused else 3 * n).startswith(
        "NOT YET RIGHT: bytes_moved(1000, fused=True) says 3,000, but your one kernel moves 12,000")
    assert check(lambda n, fused: ...).startswith("NOT DONE YET")
    assert check(lambda n, fused: "28000") == ("NOT YET RIGHT: bytes_moved(1000, fused=False) returned "
                                               "'28000': return a number of bytes.")

    def a_name_not_defined(n, fused):  # an error of the learner's own
        return n * BYTES_PER_NUMBER * (3 if fused else 7)  # noqa: F821

    assert check(a_name_not_defined) == ("NOT YET RIGHT: bytes_moved(1000, fused=False) raised NameError: "
                                         "name 'BYTES_PER_NUMBER' is not defined")


def test_the_byte_counter_agrees_with_steps_2_count_of_the_softmax(nb):
    # The counter of exercise 3 and softmax_traffic of Step 2 count the same way, independently.
    namespace = exercise(nb, "bytes-moved")
    counted = namespace["ByteCounter"](torch.fx.symbolic_trace(nb.softmax_in_steps)).run(torch.ones(3, 7))
    assert counted == sum(read + written for _, read, written in nb.softmax_traffic(3, 7, fused=False))
    assert namespace["counted_bytes"](10, False) == 280 and namespace["counted_bytes"](10, True) == 120


def test_the_notebook_imports_triton_only_after_setting_the_variable():
    source = cell_source("09", "plan")
    assert source.index('os.environ["TRITON_INTERPRET"] = "1"') < source.index("import triton")
    code = [cell.source for cell in read(notebook_path("09")).cells if cell.cell_type == "code"]
    before_plan = "\n".join(code[:code.index(source)])
    assert "import triton" not in before_plan and "torch.compile" not in before_plan
    assert "torch._dynamo" not in before_plan and "torch._inductor" not in before_plan


@pytest.mark.parametrize("version, problem", [(None, "not installed"), ("3.1.9", "3.2 or newer is needed"),
                                              ("3.2.0", None), ("3.8.0+git", None)])
def test_install_cell_treats_triton_as_optional_from_3_2(nb, version, problem):
    versions = {"torch": "2.14.1", "numpy": "2.4.6", "pandas": "3.1.1", "matplotlib": "3.11.2",
                "triton": version}

    def installed(name):
        if versions.get(name) is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    problems, limits = nb.package_problems(nb.PACKAGES, installed)
    assert limits == {}
    assert (problems.get("triton") is None) == (problem is None)
    if problem:
        assert problem in problems["triton"]
        report = " ".join(nb.setup_report(problems, nb.PACKAGES, hosted=True).split())
        assert "Everything else still works: without triton, the kernels are shown, not run" in report


# --- A Triton that is installed but cannot be imported, for real -------------------------------------
# As tests/test_broken_packages.py does for fastai: a throwaway environment whose triton has its real
# metadata (importlib.metadata says 3.8.0 is installed, so the install cell is content) but whose code
# raises ImportError, as a Triton built for another PyTorch, or a broken triton-windows, does. Notebook 09
# runs alone in it, as on Kaggle with Internet off, and must read to the end with its kernels shown.

BROKEN_TRITON = "cannot import name 'knobs' from partially initialized module 'triton'"


def environment_with_a_triton_that_cannot_be_imported(folder):
    from support.environments import environment_with_a_broken

    return environment_with_a_broken("triton", folder, BROKEN_TRITON)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton's metadata to copy")
def test_notebook_09_with_a_triton_that_cannot_be_imported_shows_its_kernels_to_the_end(tmp_path):
    from support.environments import errors, run_offline_on_kaggle, shown_text

    python = environment_with_a_triton_that_cannot_be_imported(tmp_path / "venv")
    said = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('triton'))"],
                          capture_output=True, text=True, check=True)
    version = said.stdout.strip()
    failed = subprocess.run([str(python), "-c", "import triton"], capture_output=True, text=True)
    assert failed.returncode != 0 and BROKEN_TRITON in failed.stderr

    folder = tmp_path / "run09"
    folder.mkdir()
    cells = run_offline_on_kaggle(python, "09", folder)
    assert errors(cells) == [], "Run All must reach the end: no NameError after the plan cell"
    assert all(cell["count"] is not None for cell in cells), "every code cell must have run"
    assert "Packages ready" in shown_text(cells[0])  # the install cell leaves the import to the plan cell
    texts = [" ".join(shown_text(cell).split()) for cell in cells]
    (plan,) = [text for text in texts if text.startswith(f"Triton {version}, ")]
    assert plan.startswith(f"Triton {version}, shown: triton is installed, but importing it fails "
                           f"(ImportError: {BROKEN_TRITON}), so the kernels are shown, not run.")
    assert "-m pip install --force-reinstall" in plan and plan.endswith("restart the Jupyter kernel.")
    assert sum("not run (no Triton)" in text for text in texts) >= 4, "each kernel's check says so"
    assert not any("matches PyTorch" in text for text in texts)
    assert any(text.startswith("Without a working Triton nothing runs") for text in texts)
