"""Notebook 07's Going deeper E on the CPU: seeded runs agree to the bit, deterministic algorithms raise
inside and are restored after, the operations PyTorch warns about, and the verdicts on determinism."""
import types
import warnings

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from support.notebook_code import load_helpers, run_cell
from support.pytorch_messages import ADAPTIVE_POOL_WARNING, CUBLAS_WARNING

nb = load_helpers("07")
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def pictures():
    """Step 3's made-up pictures."""
    return nb.make_pictures(256)


# --- Going deeper E: seeds and deterministic algorithms -------------------------------------------

def test_seeded_runs_agree_to_the_bit_and_other_seeds_do_not(pictures):
    inputs, labels = pictures[0] / 255, pictures[1]
    first, again = nb.seeded_run(inputs, labels, 0, 10), nb.seeded_run(inputs, labels, 0, 10)
    other = nb.seeded_run(inputs, labels, 1, 10)
    assert nb.compare_weights(first, again) == {"identical_to_the_bit": True, "largest_difference": 0.0}
    assert nb.compare_weights(first, other)["identical_to_the_bit"] is False


def test_compare_weights_sees_a_single_last_bit():
    first = {"w": torch.ones(3), "b": torch.zeros(2)}
    nudged = {"w": first["w"].clone(), "b": first["b"].clone()}
    nudged["w"][1] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))
    result = nb.compare_weights(first, nudged)
    assert result["identical_to_the_bit"] is False and 0 < result["largest_difference"] < 1e-6


def test_seed_everything_seeds_python_numpy_and_torch():
    import random

    import numpy as np

    def draws():
        nb.seed_everything(7)
        return random.random(), np.random.rand(), torch.rand(1).item()

    assert draws() == draws()


def test_deterministic_algorithms_raise_inside_and_restore_after():
    before = torch.are_deterministic_algorithms_enabled()
    with nb.deterministic_algorithms():
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
        with pytest.raises(RuntimeError, match="does not have a deterministic implementation"):
            torch.zeros(4).put_(torch.tensor([1, 1]), torch.tensor([1.0, 2.0]))
    assert torch.are_deterministic_algorithms_enabled() == before
    torch.use_deterministic_algorithms(False)
    try:
        with pytest.raises(ValueError):
            with nb.deterministic_algorithms(warn_only=True):
                assert torch.are_deterministic_algorithms_enabled()
                assert torch.is_deterministic_algorithms_warn_only_enabled()
                raise ValueError("the block fails")
        assert not torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
        torch.use_deterministic_algorithms(True, warn_only=True)
        with nb.deterministic_algorithms():
            assert not torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled(), "the old warn_only comes back"
    finally:
        torch.use_deterministic_algorithms(before)


class OperationsSeen(TorchDispatchMode):
    """Records the ATen operation of every call PyTorch dispatches inside its `with` block, the
    backward pass's too (on the CPU autograd runs them in the calling thread)."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def test_the_cnn_of_part_e_ends_with_adaptive_avg_pool_and_repeats_with_strict_deterministic_algorithms(
        pictures):
    inputs, labels = pictures[0][:128] / 255, pictures[1][:128]
    with OperationsSeen() as operations:
        weights = nb.seeded_run(inputs, labels, 0, 4)
    assert weights["1.weight"].shape == (8, 1, 3, 3), "a convolution first"
    assert weights["6.weight"].shape == (3, 8 * 2 * 2), "AdaptiveAvgPool2d(2): 2 x 2 per channel"
    # The operation whose CUDA kernel, adaptive_avg_pool2d_backward_cuda, has no deterministic version
    # and warns on a T4. AdaptiveAvgPool2d(1), as in ResNet, is computed as a mean (aten's
    # adaptive_avg_pool2d, for an output of 1 x 1) and would warn about nothing there.
    assert "aten._adaptive_avg_pool2d_backward" in operations.seen
    with OperationsSeen() as resnet_pool:
        nn.AdaptiveAvgPool2d(1)(torch.ones(2, 8, 8, 8, requires_grad=True)).sum().backward()
    assert "aten._adaptive_avg_pool2d_backward" not in resnet_pool.seen and "aten.mean" in resnet_pool.seen
    with warnings.catch_warnings(record=True) as caught, nb.deterministic_algorithms():
        warnings.simplefilter("always")
        again = [nb.seeded_run(inputs, labels, 0, 4) for _ in range(2)]  # raises where none exists
    assert nb.warned_operations(caught) == []
    assert nb.compare_weights(*again)["identical_to_the_bit"]
    assert nb.compare_weights(weights, again[0])["identical_to_the_bit"], "the same on the CPU either way"


TOO_LATE = "cuBLAS (CUBLAS_WORKSPACE_CONFIG not set before the first CUDA matrix product)"


def caught_warning(text):
    """Shaped like what warnings.catch_warnings(record=True) collects: .message is the warning."""
    return types.SimpleNamespace(message=UserWarning(text))


def test_warned_operations_name_what_pytorch_warns_about_once_each():
    with warnings.catch_warnings(record=True) as caught, nb.deterministic_algorithms(warn_only=True):
        warnings.simplefilter("always")
        for _ in range(2):  # a real warning, on the CPU: put_ has no deterministic version anywhere
            torch.zeros(4).put_(torch.tensor([1, 1]), torch.tensor([1.0, 2.0]))
        warnings.warn("an unrelated warning", UserWarning)
    assert nb.warned_operations(caught) == ["put_"]
    shaped = [caught_warning(ADAPTIVE_POOL_WARNING), caught_warning(CUBLAS_WARNING),
              caught_warning(ADAPTIVE_POOL_WARNING), caught_warning("no deterministic words here")]
    assert nb.warned_operations(shaped) == ["adaptive_avg_pool2d_backward_cuda", TOO_LATE]
    assert nb.warned_operations([]) == []


def test_determinism_verdict_for_each_case():
    same = {"identical_to_the_bit": True, "largest_difference": 0.0}
    differ = {"identical_to_the_bit": False, "largest_difference": 0.00123}
    assert nb.determinism_verdict("cpu", same, []) == (
        "Deterministic algorithms on cpu: identical to the bit; no operation warned.")
    assert nb.determinism_verdict("cuda", same, ["adaptive_avg_pool2d_backward_cuda", "x"]) == (
        "Deterministic algorithms on cuda: identical to the bit; without a deterministic version "
        "(a warning): adaptive_avg_pool2d_backward_cuda, x.")
    warned = nb.determinism_verdict("cuda", differ, [TOO_LATE])
    assert "DIFFER by up to 0.0012" in warned and TOO_LATE in warned and warned.endswith("the difference.")
    unwarned = nb.determinism_verdict("cuda", differ, [])
    assert "DIFFER" in unwarned and unwarned.endswith("report it as a PyTorch bug.")


def test_runs_that_differ_counts_runs_unlike_the_first():
    outputs = iter([torch.tensor([1.0]), torch.tensor([1.0]), torch.tensor([2.0]),
                    torch.tensor([1.0]), torch.tensor([3.0])])
    assert nb.runs_that_differ(lambda: next(outputs)) == 2
    assert nb.runs_that_differ(lambda: torch.ones(3)) == 0
    places, numbers = torch.randint(0, 10, (10_000,)), torch.randn(10_000)
    assert nb.runs_that_differ(lambda: torch.zeros(10).index_add_(0, places, numbers)) == 0


def test_the_nondeterminism_cell_on_a_cpu_sums_the_same_way_every_run():
    namespace = {**vars(nb), "device": CPU}
    printed = run_cell("07", "index-add-runs", namespace)
    assert "Every run was identical on cpu" in printed
    places, numbers = namespace["places"], namespace["numbers"]
    expected = torch.zeros(10, dtype=torch.float64).index_add_(0, places, numbers.double())
    torch.testing.assert_close(nb.add_into(places, numbers).double(), expected, rtol=0, atol=1e-3)
    assert torch.equal(nb.add_into(places, numbers), namespace["add_into"](places, numbers))
