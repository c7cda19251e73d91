"""Notebook 09's helpers called with made-up inputs, each at the edges of its conditions: why Triton cannot
be imported and the command that repairs it, the interpreter's known problems, the problem sizes, the
check that guards every kernel's result, the byte counts and block sizes, the drawings, the datasheet
copy, the speed table and the figures it gives, Inductor's generated kernels read from its log, and the
install cell's treatment of Triton as optional. The kernels are loaded as plain functions
(support/notebook_09.py); test_09_interpreter.py runs them."""
import importlib.metadata
import importlib.util
import math
import textwrap

import pytest
import torch

from support.notebook_09 import stand_in_triton
from support.notebook_code import load_helpers, load_shared

SHARED_DATASHEET = load_shared("datasheet.py")  # the shared cell's own lookup, which 09 carries a copy of
T4_GB_PER_S, T4_TFLOPS, T4_PAGE = SHARED_DATASHEET.datasheet("Tesla T4")

@pytest.fixture(scope="module")
def nb():
    """The notebook's helpers, its kernels loaded as plain functions (support/notebook_09.py)."""
    with stand_in_triton():
        return load_helpers("09")


# --- Why Triton cannot run, and the interpreter's known problems ---------------------------------

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


def test_installed_version_reads_the_metadata_or_says_none(nb):
    assert nb.installed_version("torch") == importlib.metadata.version("torch")
    assert nb.installed_version("no-such-package-nb09") is None


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


# --- The sizes, and the check that guards every result --------------------------------------------

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


def test_softmax_in_steps_matches_torch_and_stays_finite_for_large_scores(nb):
    scores = torch.tensor([[1000.0, 1001.0, 999.0], [0.0, -1.0, 2.0]])
    torch.testing.assert_close(nb.softmax_in_steps(scores), torch.softmax(scores, dim=1))


def test_add_relu_double_is_the_three_operations_its_kernel_name_lists(nb):
    # The prose names Inductor's kernel triton_poi_fused_add_mul_relu_0: the operations it fuses.
    graph = torch.fx.symbolic_trace(nb.add_relu_double).graph
    assert sorted(node.target.__name__ for node in graph.nodes if node.op == "call_function") == [
        "add", "mul", "relu"]
    assert nb.add_relu_double(torch.tensor([1.0, -3.0]), torch.tensor([0.5, 1.0])).tolist() == [3.0, 0.0]


# --- The drawings ---------------------------------------------------------------------------------

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


# --- Byte counts and block sizes ------------------------------------------------------------------

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


# --- Step 3: the datasheet's peaks, the speed table and the figures it gives ----------------------

# Step 3 reads the datasheet table 01 carries too (tools/shared_cells/datasheet.py): its rows and its
# lookup are tested once, in tests/shared_cells/test_datasheet.py. Here, without the table's figures (a
# row added for a new GPU changes nothing here): 09's copy answers as the shared file does, for device
# names of each form the table tells apart, and finds the class's T4, whose peaks Step 3 compares with.
@pytest.mark.parametrize("name", [
    "Tesla T4", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe",
    "Tesla V100-SXM2-16GB", "Tesla V100-PCIE-32GB", "NVIDIA L40S", "AMD Instinct MI300X",
    "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA L4",
])
def test_the_datasheet_copy_answers_as_the_shared_cell_does(nb, name):
    assert nb.datasheet(name) == SHARED_DATASHEET.datasheet(name)


def test_the_datasheet_copy_gives_step_3_the_t4s_peaks(nb):
    bandwidth, tflops, page = nb.datasheet("Tesla T4")
    assert bandwidth > 0 and tflops > 0 and page.startswith("https://")


def test_the_datasheet_copy_keeps_notebook_01s_other_helpers_working(nb):
    assert nb.published_peak("Tesla T4") == (T4_TFLOPS, T4_PAGE)
    # a measured half of the peak (GFLOP/s) reads as 50 %
    assert nb.datasheet_table("Tesla T4", T4_TFLOPS * 500).iloc[0]["share_of_peak_pct"] == pytest.approx(50)
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

    table = nb.speed_table(candidates, seconds_of, "Tesla T4")
    vector = table.loc[("vector add", "PyTorch x + y")]
    assert vector.GB_per_s == pytest.approx(3 * 1000 * 4 / 1e-3 / 1e9, abs=0.01)
    assert vector.share_of_peak_pct == pytest.approx(100 * vector.GB_per_s / T4_GB_PER_S, abs=0.01)
    assert math.isnan(table.loc[("vector add", "your add_kernel")].ms)
    assert "not timed, RuntimeError" in capsys.readouterr().out
    assert math.isnan(table.loc[("row softmax", "torch.compile of the five")].ms)
    unfused = table.loc[("row softmax", "five PyTorch operations")].GB_per_s
    # the five operations move about four times the bytes: in the same time, four times the GB/s
    assert unfused == pytest.approx(4 * table.loc[("row softmax", "torch.softmax")].GB_per_s, rel=0.01)
    capsys.readouterr()
    no_peaks = nb.speed_table(candidates[:1], lambda f: 1e-3, "NVIDIA L40S")
    assert capsys.readouterr().out.startswith("NVIDIA L40S is not in the datasheet table")
    assert math.isnan(no_peaks.share_of_peak_pct.iloc[0])


def test_no_timing_message_says_why(nb):
    assert "mean nothing" in nb.no_timing_message("interpreter")
    assert "Without a working Triton" in nb.no_timing_message("shown")


def test_kernel_figures_keep_each_check_and_on_a_gpu_each_of_your_kernels_speeds(nb):
    checks = {"vector add": "passed", "row softmax": "failed"}
    assert nb.kernel_figures(checks, None) == {"check vector add": "passed",
                                               "check row softmax": "failed"}
    x = y = torch.ones(1000)
    candidates = nb.speed_candidates(x, y, torch.ones(10, 100), None)
    speeds = nb.speed_table(candidates, lambda f: 1e-3, "Tesla T4")
    figures = nb.kernel_figures({}, speeds)
    assert figures["add_kernel GB_per_s"] == speeds.loc[("vector add", "your add_kernel")].GB_per_s
    assert figures["add_kernel share_of_peak_pct"] == pytest.approx(100 * 0.012 / T4_GB_PER_S, abs=0.01)
    assert set(figures) == {f"{kernel} {column}" for kernel in ("add_kernel", "softmax_kernel")
                            for column in ("GB_per_s", "share_of_peak_pct")}
    unknown = nb.kernel_figures({}, nb.speed_table(candidates, lambda f: 1e-3, "NVIDIA L40S"))
    assert unknown["softmax_kernel share_of_peak_pct"] is None  # NaN is no JSON number
    assert isinstance(unknown["softmax_kernel GB_per_s"], float)


# --- Step 4: Inductor's generated code, read from its log -----------------------------------------

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
