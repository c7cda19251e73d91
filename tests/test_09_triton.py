"""Notebook 09's helpers, its decisions at their boundaries, its GPU branches with stand-ins, and its
three Triton kernels run for real under Triton's interpreter at the sizes where masks matter.

The notebook defines its kernels with `@triton.jit` and `tl.constexpr` at the top level, while it
imports triton only when it is installed (inside an `if`, which load_helpers skips). So the helpers
are loaded with a stand-in `triton`/`tl` put into builtins for the moment of loading: the kernels
become plain functions, and the pure helpers are what these tests call. The kernels themselves run in
a subprocess that sets TRITON_INTERPRET=1 before it imports triton, as the notebook does: in this
process another test may already have imported triton (torch.compile does), and then Triton's own
functions (tl.max, tl.sum) would not run in the interpreter. So the coverage report never counts the
three kernels' bodies (add_kernel, softmax_kernel, matmul_kernel): coverage.py measures this process
only. Their launch functions (add, softmax, matmul) also run here, with kernels that record the grid
and the arguments they are launched with.
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

import notebook_code as nc
from notebook_code import cell_source, helper_file, load_helpers, notebook_path, read, run_cell

STAND_IN_TRITON = types.SimpleNamespace(jit=lambda function: function, constexpr=int)

# What the core teaches, each in a visible code cell (tests/test_learner_first.py checks it): a kernel
# with @triton.jit, its program id, its block of positions, masked loads and stores, tl.dot on tiles,
# and the launch of a kernel on a grid.
TAUGHT_CALLS = [
    r"@triton\.jit\ndef \w+_kernel\(",
    r"tl\.program_id\(0\)",
    r"tl\.arange\(0, BLOCK\)",
    r"tl\.load\([^\n]*mask=mask",
    r"tl\.store\([^\n]*mask=mask",
    r"tl\.dot\(a, b\)",
    r"\w+_kernel\[grid\]\(",
]


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
            # Step 5's C++ loop takes 8 or 16 numbers at a time: the prose's "shorter last round"
            assert sizes["vector"] % 8 != 0
            assert sizes["softmax"][1] != nb.softmax_block(sizes["softmax"][1])
            if mode != "compiled":
                assert any(size % 32 for size in sizes["matmul"])
                assert sizes["vector"] <= 200_000 and max(sizes["matmul"]) <= 256
    assert nb.problem_sizes("compiled", False)["vector"] > nb.problem_sizes("interpreter", False)["vector"]
    assert nb.problem_sizes("interpreter", True)["vector"] < nb.problem_sizes("interpreter", False)["vector"]


def test_check_kernel_passes_fails_and_skips(nb, monkeypatch):
    monkeypatch.setattr(nb, "CHECKS", {})
    monkeypatch.setitem(nb.check_kernel.__globals__, "CHECKS", nb.CHECKS)
    expected = torch.arange(5.0)
    status, verdict, result = nb.check_kernel("k", lambda: expected.clone(), expected, "interpreter")
    assert status == "passed" and "interpreter" in verdict and torch.equal(result, expected)
    assert "on the GPU" in nb.check_kernel("k", lambda: expected.clone(), expected, "compiled")[1]
    # A broken interpreter: all zeros, or an exception; the result is never handed back.
    status, verdict, result = nb.check_kernel("k", lambda: torch.zeros(5), expected, "interpreter",
                                              known_problem="old triton")
    assert status == "failed" and result is None
    assert "Mismatched elements" in verdict and "Known cause: old triton" in verdict

    def broken():
        raise TypeError("only 0-dimensional arrays can be converted to Python scalars")

    status, verdict, result = nb.check_kernel("k", broken, expected, "interpreter")
    assert status == "failed" and "TypeError" in verdict and "Known cause" not in verdict
    called = []
    status, verdict, result = nb.check_kernel("k", lambda: called.append(1), expected, "shown")
    assert status == "not run" and called == [] and result is None
    assert nb.CHECKS == {"k": "not run"}  # the last check under each name, for report_figures
    nb.check_kernel("other", lambda: expected.clone(), expected, "compiled")
    assert nb.CHECKS == {"k": "not run", "other": "passed"}


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


@pytest.fixture
def launched(nb, monkeypatch):
    """The notebook's kernels replaced by RecordingKernels, and `triton` by one with triton.cdiv."""
    kernels = {name: RecordingKernel()
               for name in ("add_kernel", "softmax_kernel", "matmul_kernel", "add_relu_double_kernel")}
    functions = nb.add.__globals__
    for name, kernel in kernels.items():
        monkeypatch.setitem(functions, name, kernel)
    cdiv = lambda x, y: (x + y - 1) // y  # noqa: E731 (triton/__init__.py's cdiv)
    monkeypatch.setitem(functions, "triton", types.SimpleNamespace(cdiv=cdiv))
    return kernels


def test_add_launches_one_program_per_block_also_for_a_part_filled_last_block(nb, launched):
    x, y = torch.ones(257), torch.ones(257)
    for n, programs in ((257, 2), (256, 1)):
        out = nb.add(x[:n], y[:n], block=256)
        grid, args, meta = launched["add_kernel"].launches[-1]
        assert grid == (programs,) and meta == {"BLOCK": 256}
        assert args[3] == n and args[2] is out and out.shape == (n,)


def test_your_fused_kernel_launches_one_program_per_block(nb, launched):
    x, y = torch.ones(513), torch.ones(513)
    out = nb.add_relu_double_fused(x, y)
    ((grid, args, meta),) = launched["add_relu_double_kernel"].launches
    assert grid == (3,) and meta == {"BLOCK": 256}
    assert args[0] is x and args[1] is y and args[2] is out and args[3] == 513 and out.shape == (513,)
    nb.add_relu_double_fused(x[:512], y[:512], block=512)
    assert launched["add_relu_double_kernel"].launches[-1][0] == (1,)


class ComputingKernel:
    """Stands in for a compiled elementwise kernel: `kernel[grid](x, y, out, n, BLOCK=...)` writes
    `formula(x, y)` into out, as the real one does program by program."""

    def __init__(self, formula):
        self.formula = formula

    def __getitem__(self, grid):
        def launch(x, y, out, n, BLOCK):
            assert grid == ((n + BLOCK - 1) // BLOCK,)
            out.copy_(self.formula(x, y))
        return launch


@pytest.mark.parametrize("formula, verdict", [
    (lambda x, y: torch.maximum(x + y, torch.tensor(0.0)) * 2, "your fused kernel: matches PyTorch "),
    (lambda x, y: torch.maximum(x + y, torch.tensor(0.0)), "your fused kernel: FAILED, AssertionError"),
])
def test_your_turn_cell_checks_your_kernel_against_the_three_pytorch_operations(nb, formula, verdict):
    x, y = torch.tensor([1.0, -3.0, 0.5, 2.0]), torch.tensor([0.5, 1.0, -2.0, -1.0])
    cdiv = lambda x, y: (x + y - 1) // y  # noqa: E731 (triton/__init__.py's cdiv)
    namespace = {**vars(nb), "x": x, "y": y, "TRITON_MODE": "compiled", "known_problem": None,
                 "add_relu_double_kernel": ComputingKernel(formula),
                 "triton": types.SimpleNamespace(cdiv=cdiv)}
    printed = run_cell("09", "yourturn-check", namespace)
    assert printed.startswith(verdict), printed


def test_softmax_launches_one_program_per_row_of_a_contiguous_copy(nb, launched):
    x = torch.randn(100, 3).T  # 3 rows of 100, not contiguous
    out = nb.softmax(x)
    ((grid, (out_arg, x_arg, cols, row_stride), meta),) = launched["softmax_kernel"].launches
    assert grid == (3,) and cols == 100 and meta == {"BLOCK": 128}
    assert x_arg.is_contiguous() and torch.equal(x_arg, x) and row_stride == 100 and out_arg is out


def test_matmul_launches_one_program_per_tile_of_the_result(nb, launched):
    a, b = torch.randn(33, 17), torch.randn(31, 17).T  # b not contiguous: its strides are passed
    c = nb.matmul(a, b, blocks=(16, 32, 64))
    ((grid, args, meta),) = launched["matmul_kernel"].launches
    assert grid == (3, 1) and args[3:6] == (33, 31, 17)
    assert args[6:12] == (17, 1, 1, 17, 31, 1) and args[2] is c and c.dtype == torch.float32
    assert meta == {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64}


@pytest.mark.parametrize("blocks, reason", [
    ((48, 32, 32), "48 is not a power of two"),
    ((32, 32, 8), "8 is below 16, the tile size tl.dot accepts on every Triton release")])
def test_matmul_refuses_block_sizes_triton_cannot_use_in_plain_words_before_any_launch(
        nb, launched, blocks, reason):
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    with pytest.raises(ValueError, match=re.escape(f"block sizes {blocks} cannot be used: {reason}")):
        nb.matmul(a, b, blocks=blocks)
    assert launched["matmul_kernel"].launches == []
    nb.matmul(a, b, blocks=(16, 16, 16))  # the smallest allowed tile launches
    assert len(launched["matmul_kernel"].launches) == 1


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

@pytest.mark.parametrize("n_cols, block", [(1, 1), (2, 2), (3, 4), (64, 64), (65, 128), (1000, 1024)])
def test_softmax_block_is_the_next_power_of_two(nb, n_cols, block):
    assert nb.softmax_block(n_cols) == block


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


# --- Step 4 on a GPU, with stand-ins ----------------------------------------------------------------

# Step 4 reads the datasheet table 01 carries too (tools/shared_cells/datasheet.py); its rows are tested in
# tests/test_01_check_gpu.py. Here: the copy gives Step 4 one peak per model, memory and form factor.
@pytest.mark.parametrize("name, peaks", [
    ("Tesla T4", (320, 8.1)), ("NVIDIA A100-SXM4-40GB", (1555, 19.5)),
    ("NVIDIA A100-SXM4-80GB", (2039, 19.5)), ("NVIDIA A100 80GB PCIe", (1935, 19.5)),
    ("Tesla V100-SXM2-16GB", (900, 15.7)), ("Tesla V100-PCIE-32GB", (900, 14.0)),
    ("NVIDIA L40S", None), ("AMD Instinct MI300X", None),  # L4 must not match L40S
    ("NVIDIA H100 80GB HBM3", (3350, 67.0)), ("NVIDIA H100 PCIe", (2000, 51.0)),  # SXM5 names none
    ("NVIDIA H100 NVL", None),
])
def test_the_datasheet_copy_gives_step_4_the_peaks_of_the_model_memory_and_form_factor(nb, name, peaks):
    found = nb.datasheet(name)
    assert (found and found[:2]) == peaks


def test_the_datasheet_copy_keeps_notebook_01s_other_helpers_working(nb):
    assert nb.published_peak("Tesla T4") == (8.1, "https://www.nvidia.com/en-us/data-center/tesla-t4/")
    assert nb.datasheet_table("Tesla T4", 4050.0).iloc[0]["share_of_peak_pct"] == 50
    assert nb.datasheet_table("NVIDIA L40S", 1.0) is None


def test_speed_table_from_stand_in_timings(nb, capsys):
    x = y = torch.ones(1000)
    matrix, a, b = torch.ones(10, 100), torch.ones(8, 4), torch.ones(4, 6)
    candidates = nb.speed_candidates(x, y, matrix, a, b, compiled_softmax=None)
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
    product = table.loc[("matrix product", "PyTorch a @ b (cuBLAS)")]
    assert product.TFLOP_per_s == pytest.approx(round(2 * 8 * 4 * 6 / 1e-3 / 1e12, 2))
    assert product.share_of_peak_pct == pytest.approx(round(100 * 2 * 8 * 4 * 6 / 1e-3 / 1e12 / 8.1, 2))
    unfused = table.loc[("row softmax", "five PyTorch operations")].GB_per_s
    assert unfused > table.loc[("row softmax", "torch.softmax")].GB_per_s  # more bytes in the same time
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
                 "x": torch.ones(n), "y": torch.ones(n), "matrix": torch.ones(4, 10),
                 "a": torch.ones(8, 4), "b": torch.ones(4, 6)}
    return shown, run_cell("09", "speed", namespace)


@pytest.mark.parametrize("gpu_name, known", [("Tesla T4", True), ("NVIDIA L40S", False)])
def test_step_4_gpu_branch_runs_with_stand_ins(nb, gpu_name, known):
    (table,), printed = run_speed_cell(nb, "compiled", gpu_name)
    assert len(table) == 8 and table.ms.eq(2.0).all()
    assert table.share_of_peak_pct.notna().all() == known
    assert (f"{gpu_name} is not in the datasheet table" in printed) != known


def test_step_4_compares_an_a100_80gb_with_its_own_bandwidth(nb):
    # The 80 GB SXM module moves 2,039 GB/s (NVIDIA's datasheet), the 40 GB card 1,555 GB/s.
    (table,), _ = run_speed_cell(nb, "compiled", "NVIDIA A100-SXM4-80GB", n=10**7)
    vector = table.loc[("vector add", "your add_kernel")]
    assert vector.GB_per_s == 60.0  # 3 vectors of 4e7 bytes in the stand-in time_it's 2 ms
    assert vector.share_of_peak_pct == round(100 * 60 / 2039, 2)
    (table_40,), _ = run_speed_cell(nb, "compiled", "NVIDIA A100-SXM4-40GB", n=10**7)
    assert table_40.loc[("vector add", "your add_kernel")].share_of_peak_pct > vector.share_of_peak_pct


@pytest.mark.parametrize("mode", ["interpreter", "shown"])
def test_step_4_without_a_gpu_times_nothing_and_says_why(nb, mode):
    shown, printed = run_speed_cell(nb, mode)
    assert shown == [] and printed == nb.no_timing_message(mode) + "\n"


def test_no_timing_message_says_why(nb):
    assert "mean nothing" in nb.no_timing_message("interpreter")
    assert "Without a working Triton" in nb.no_timing_message("shown")


# --- The figures the core reports: report_figures once, near the end of the core ----------

def test_kernel_figures_keep_each_check_and_on_a_gpu_each_of_your_kernels_speeds(nb):
    checks = {"vector add": "passed", "matrix product": "failed"}
    assert nb.kernel_figures(checks, None) == {"check vector add": "passed",
                                               "check matrix product": "failed"}
    x = y = torch.ones(1000)
    candidates = nb.speed_candidates(x, y, torch.ones(10, 100), torch.ones(8, 4), torch.ones(4, 6), None)
    speeds = nb.speed_table(candidates, lambda f: 1e-3, (320, 8.1, "page"))
    figures = nb.kernel_figures({}, speeds)
    assert figures["add_kernel GB_per_s"] == speeds.loc[("vector add", "your add_kernel")].GB_per_s
    assert figures["add_kernel share_of_peak_pct"] == pytest.approx(100 * 0.012 / 320, abs=0.01)
    assert set(figures) == {f"{kernel} {column}" for kernel, unit in (
        ("add_kernel", "GB_per_s"), ("softmax_kernel", "GB_per_s"), ("matmul_kernel", "TFLOP_per_s"))
        for column in (unit, "share_of_peak_pct")}
    unknown = nb.kernel_figures({}, nb.speed_table(candidates, lambda f: 1e-3, None))
    assert unknown["matmul_kernel share_of_peak_pct"] is None  # NaN is no JSON number
    assert isinstance(unknown["matmul_kernel TFLOP_per_s"], float)


@pytest.mark.parametrize("mode, fallback", [("compiled", None),
                                            ("interpreter", "Triton interpreter on the CPU"),
                                            ("shown", "shown, not run")])
def test_the_core_reports_its_figures_once_with_what_stood_in(nb, mode, fallback):
    reported = []
    speeds = None
    if mode == "compiled":
        candidates = nb.speed_candidates(torch.ones(100), torch.ones(100), torch.ones(4, 10),
                                         torch.ones(8, 4), torch.ones(4, 6), None)
        speeds = nb.speed_table(candidates, lambda f: 2e-3, nb.datasheet("Tesla T4"))
    namespace = {**vars(nb), "TRITON_MODE": mode, "speeds": speeds, "CHECKS": {"vector add": "passed"},
                 "report_figures": lambda fallback=None, **figures: reported.append((fallback, figures))}
    run_cell("09", "report", namespace)
    ((said, figures),) = reported
    assert said == fallback and figures["check vector add"] == "passed"
    assert ("add_kernel GB_per_s" in figures) == (mode == "compiled")
    json.dumps(figures, allow_nan=False)  # plain numbers and strings


def test_the_report_cell_is_the_last_code_cell_of_the_core():
    notebook = read(notebook_path("09"))
    core = [cell for cell in nc.core_cells(notebook) if cell.cell_type == "code"]
    assert core[-1].get("id") == "report"
    calls = [cell.get("id") for cell in notebook.cells
             if cell.cell_type == "code" and "report_figures(" in cell.source]
    assert calls == ["report"] or calls == ["cell-03", "report"]


# --- Step 5: Inductor's plan and its generated code --------------------------------------------------

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


def test_find_cpp_compiler_follows_cxx_and_the_platform(nb):
    seen = []
    nb.find_cpp_compiler("linux", {}, lambda name: seen.append(name))
    nb.find_cpp_compiler("darwin", {}, lambda name: seen.append(name))
    nb.find_cpp_compiler("win32", {}, lambda name: seen.append(name))
    nb.find_cpp_compiler("linux", {"CXX": "clang++-19"}, lambda name: seen.append(name))
    assert seen == ["g++", "clang++", "cl", "clang++-19"]


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


# --- The kernels themselves, under Triton's interpreter ----------------------------------------------

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
for n in (1, 255, 256, 257, 1000):
    x, y = torch.randn(n), torch.randn(n)
    expect(n, *check_kernel(f"fused n={n}", lambda: add_relu_double_fused(x, y),
                            add_relu_double(x, y), "interpreter")[:2])
for (M, N, K), blocks in (((32, 32, 32), (32, 32, 32)), ((33, 31, 17), (32, 32, 32)),
                          ((1, 1, 1), (16, 16, 16)), ((48, 40, 56), (16, 16, 16)),
                          ((20, 70, 40), (16, 64, 32))):
    a, b = torch.randn(M, K), torch.randn(K, N)
    expect(M, *check_kernel(f"matmul {M}x{N}x{K} {blocks}", lambda: matmul(a, b, blocks), a @ b,
                            "interpreter", **matmul_tolerance("interpreter", None))[:2])
if data_file:
    measurement.stop()
    measurement.save()
print(json.dumps(failures))
'''


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton installed")
def test_the_kernels_match_pytorch_under_the_interpreter_at_their_block_boundaries(nb, request):
    measurement = request.config.helper_coverage  # None when the run does not measure the helpers
    data_file = measurement.coverage.config.data_file if measurement is not None else ""
    environment = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-c", RUNNER, str(helper_file("09")), data_file],
                            env=environment,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


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
    from test_missing_packages import environment_with_a_broken

    return environment_with_a_broken("triton", folder, BROKEN_TRITON)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton's metadata to copy")
def test_notebook_09_with_a_triton_that_cannot_be_imported_shows_its_kernels_to_the_end(tmp_path):
    from test_missing_packages import errors, run_alone, text_of

    python = environment_with_a_triton_that_cannot_be_imported(tmp_path / "venv")
    said = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('triton'))"],
                          capture_output=True, text=True, check=True)
    version = said.stdout.strip()
    failed = subprocess.run([str(python), "-c", "import triton"], capture_output=True, text=True)
    assert failed.returncode != 0 and BROKEN_TRITON in failed.stderr

    folder = tmp_path / "run09"
    folder.mkdir()
    cells = run_alone(python, "09", folder)
    assert errors(cells) == [], "Run All must reach the end: no NameError after the plan cell"
    assert all(cell["count"] is not None for cell in cells), "every code cell must have run"
    assert "Packages ready" in text_of(cells[0])  # the install cell leaves the import to the plan cell
    texts = [" ".join(text_of(cell).split()) for cell in cells]
    (plan,) = [text for text in texts if text.startswith(f"Triton {version}, ")]
    assert plan.startswith(f"Triton {version}, shown: triton is installed, but importing it fails "
                           f"(ImportError: {BROKEN_TRITON}), so the kernels are shown, not run.")
    assert "-m pip install --force-reinstall" in plan and plan.endswith("restart the Jupyter kernel.")
    assert sum("not run (no Triton)" in text for text in texts) >= 4, "each kernel's check says so"
    assert not any("matches PyTorch" in text for text in texts)
    assert any(text.startswith("Without a working Triton nothing runs") for text in texts)
