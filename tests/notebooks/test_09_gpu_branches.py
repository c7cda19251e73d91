"""Notebook 09's GPU branches, each executed on the CPU (tests/collection/test_gpu_branches.py lists
them): its decisions called as a GPU machine calls them, with stand-ins shaped like torch.cuda's answers
where the decision asks the device (get_device_capability returns (major, minor))."""
import types

import pytest
import torch

from support.notebook_09 import stand_in_triton
from support.notebook_code import load_helpers, run_cell


@pytest.fixture(scope="module")
def nb():
    """The notebook's helpers, its kernels loaded as plain functions (support/notebook_09.py)."""
    with stand_in_triton():
        return load_helpers("09")


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


# --- On a GPU, Triton builds each kernel's launcher with a C compiler ---------------------------------

@pytest.mark.parametrize("mode, c_compiler, problem", [
    ("compiled", None, True), ("compiled", "/usr/bin/gcc", False),
    ("interpreter", None, False), ("shown", None, False)])  # only compiled kernels need one
def test_launcher_problem_only_for_compiled_kernels_without_a_c_compiler(nb, mode, c_compiler, problem):
    said = nb.launcher_problem(mode, c_compiler)
    assert (said is not None) == problem
    if problem:
        assert said.startswith("no C compiler found") and "gcc" in said


@pytest.mark.parametrize("c_compiler", [None, "/usr/bin/gcc"])
def test_the_launcher_cell_on_a_stand_in_cuda_machine_names_a_missing_c_compiler(nb, c_compiler):
    namespace = {**vars(nb), "TRITON_MODE": "compiled", "known_problem": None,
                 "find_c_compiler": lambda: c_compiler}
    printed = run_cell("09", "launcher", namespace)
    if c_compiler:
        assert printed == "" and namespace["known_problem"] is None
    else:
        assert namespace["known_problem"] == nb.launcher_problem("compiled", None)
        assert printed.startswith("Known problem: no C compiler found")
        # every check after it names the cause with its FAILED verdict
        verdict = nb.check_kernel("k", lambda: 1 / 0, None, "compiled", namespace["known_problem"],
                                  checks={})[1]
        assert "Known cause: no C compiler found" in verdict


def test_the_launcher_cell_leaves_the_interpreters_known_problem_alone(nb):
    namespace = {**vars(nb), "TRITON_MODE": "interpreter", "known_problem": "old triton",
                 "find_c_compiler": lambda: None}
    assert run_cell("09", "launcher", namespace) == ""
    assert namespace["known_problem"] == "old triton"


# Shaped as the output_code log writes a Triton kernel (tests/notebooks/test_09_helpers.py has a
# whole one): the logger's prefix, the kernel's name, async_compile.triton and its source.
LOGGED_KERNEL = """[__output_code] triton_poi_fused_add_mul_relu_0 = async_compile.triton('k', '''
[__output_code] @triton.jit
[__output_code] def triton_poi_fused_add_mul_relu_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK):
[__output_code]     xmask = xindex < xnumel
[__output_code] ''', device_str='cuda')"""


def run_step_4(nb, device_type, cpp_compiler, c_compiler, mode):
    """Step 4's cell with a stand-in torch.compile that logs a kernel as Inductor does: what
    they printed, what they displayed, and the functions compiled."""
    import sys

    compiled, shown = [], []

    def compile(function):
        compiled.append(function)
        print(LOGGED_KERNEL, file=sys.stderr)  # the cell keeps what goes to stderr as the log
        return function

    stand_in_torch = types.SimpleNamespace(
        compile=compile, relu=torch.relu, testing=torch.testing,
        _dynamo=types.SimpleNamespace(reset=lambda: None),
        _logging=types.SimpleNamespace(set_logs=lambda **logs: None))
    namespace = {**vars(nb), "torch": stand_in_torch, "device": torch.device(device_type),
                 "TRITON_MODE": mode, "find_cpp_compiler": lambda: cpp_compiler,
                 "find_c_compiler": lambda: c_compiler, "x": torch.ones(3), "y": -torch.ones(3),
                 "display": shown.append}
    printed = run_cell("09", "show-code", namespace)
    return printed, shown, compiled


def test_step_4_on_a_stand_in_cuda_machine_compiles_with_a_c_compiler_and_shows_the_kernel(nb):
    printed, shown, compiled = run_step_4(nb, "cuda", None, "/usr/bin/gcc", "compiled")
    assert printed.startswith("Backend inductor: Inductor writes Triton kernels for the GPU; Triton "
                              "builds their launchers with /usr/bin/gcc.")
    assert "Inductor wrote 1 kernel(s) for the three operations: triton_poi_fused_add_mul_relu_0" in printed
    assert [function.__name__ for function in compiled] == ["add_relu_double"]
    assert len(shown) == 1 and shown[0].data.startswith("@triton.jit")


def test_step_4_on_a_stand_in_cuda_machine_without_a_c_compiler_compiles_nothing_and_says_why(nb):
    printed, shown, compiled = run_step_4(nb, "cuda", "/usr/bin/g++", None, "compiled")
    assert printed.startswith("Backend aot_eager: a C compiler missing, so no Inductor")
    assert compiled == [] and shown == [] and "Inductor wrote" not in printed


@pytest.mark.parametrize("device_type, cpp_compiler, mode, inductor", [
    ("cuda", "/usr/bin/g++", "shown", False),  # no Triton: no GPU kernels, whatever the compilers
    ("cpu", "/usr/bin/g++", "shown", True),  # a CPU needs no Triton, only a C++ compiler
    ("cpu", None, "interpreter", False),
    ("mps", "/usr/bin/clang++", "interpreter", False)])
def test_step_4_compiles_only_where_inductor_can_write_kernels(nb, device_type, cpp_compiler, mode,
                                                               inductor):
    printed, _, compiled = run_step_4(nb, device_type, cpp_compiler, "/usr/bin/gcc", mode)
    assert printed.startswith(f"Backend {'inductor' if inductor else 'aot_eager'}: ")
    assert bool(compiled) == inductor
