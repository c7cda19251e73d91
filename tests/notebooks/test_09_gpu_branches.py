"""Notebook 09's GPU branches, each executed on the CPU (tests/collection/test_gpu_branches.py lists
them): its decisions called as a GPU machine calls them, with stand-ins shaped like torch.cuda's answers
where the decision asks the device (get_device_capability returns (major, minor))."""
import types

import pytest
import torch

from support.notebook_09 import stand_in_triton
from support.notebook_code import load_helpers


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
