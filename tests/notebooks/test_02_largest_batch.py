"""Notebook 02's search for the largest batch that fits (Going deeper B): largest_batch_that_fits with
made-up training steps that raise torch.OutOfMemoryError above a size, CUDA's cache emptied after each
failure (on a CUDA GPU only) once the failed step is released, the training step it tries, and the cell
that searches for real on a CUDA GPU and simulates the search elsewhere. Its GPU branches are claimed
here, beside the other tests of the same search."""
import math
import weakref

import pytest
import torch
from torch import nn

from support.notebook_code import load_helpers, run_cell

CPU, META = torch.device("cpu"), torch.device("meta")


@pytest.fixture(scope="module")
def nb():
    return load_helpers("02")


def step_that_fits_up_to(limit, tried=None):
    """A fake training step: records the size, raises torch.OutOfMemoryError above `limit`."""
    def try_batch(batch_size):
        if tried is not None:
            tried.append(batch_size)
        if batch_size > limit:
            raise torch.OutOfMemoryError(f"fake: {batch_size} > {limit}")
    return try_batch


@pytest.mark.parametrize("limit", [1, 2, 3, 37, 300, 1000, 4095])
def test_largest_batch_finds_the_exact_limit_in_few_tries(nb, limit):
    tried = []
    largest, attempts = nb.largest_batch_that_fits(step_that_fits_up_to(limit, tried), CPU, start=1,
                                                   max_batch=4096)
    assert largest == limit
    assert [size for size, _ in attempts] == tried  # the log lists every call, in order
    assert all(fitted == (size <= limit) for size, fitted in attempts)
    assert all(1 <= size <= 4096 for size in tried)
    assert len(tried) <= 2 * math.ceil(math.log2(4096)) + 1


def test_largest_batch_stops_at_the_cap_when_everything_fits(nb):
    largest, attempts = nb.largest_batch_that_fits(step_that_fits_up_to(10**9), CPU, start=3, max_batch=100)
    assert largest == 100 and all(fitted for _, fitted in attempts) and attempts[-1][0] == 100
    largest, attempts = nb.largest_batch_that_fits(step_that_fits_up_to(10), CPU, start=8, max_batch=8)
    assert largest == 8 and attempts == [(8, True)]  # the first size is the cap


def test_largest_batch_is_zero_when_even_the_first_size_fails(nb):
    largest, attempts = nb.largest_batch_that_fits(step_that_fits_up_to(3), CPU, start=8)
    assert largest == 0 and attempts == [(8, False)]


def test_largest_batch_does_not_swallow_other_errors(nb):
    def broken_step(batch_size):
        raise ValueError("a bug in the step, not a memory problem")

    with pytest.raises(ValueError):
        nb.largest_batch_that_fits(broken_step, CPU)


@pytest.mark.gpu_branch("02", "fits_in_memory: ran_out and device.type == 'cuda'")
@pytest.mark.parametrize("device_type, expect_calls", [("cuda", True), ("cpu", False), ("mps", False)])
def test_cuda_cache_is_emptied_after_each_failure_and_only_on_cuda(nb, monkeypatch, device_type,
                                                                  expect_calls):
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    _, attempts = nb.largest_batch_that_fits(step_that_fits_up_to(37), torch.device(device_type),
                                             max_batch=256)
    failures = sum(not fitted for _, fitted in attempts)
    assert failures > 0
    assert len(calls) == (failures if expect_calls else 0)


def test_failed_step_is_released_before_memory_is_freed(nb, monkeypatch):
    """Recovery must happen outside `except`, or the exception keeps the failed step's tensors alive:
    when torch.cuda.empty_cache runs (on a CUDA device), the failed step's tensor is gone."""
    alive_at_free_time = []
    last_batch = {}

    def step_holding_a_tensor(batch_size):
        activations = torch.empty(batch_size, 4)  # stands in for the failed step's GPU tensors
        last_batch["ref"] = weakref.ref(activations)
        if batch_size > 5:
            raise torch.OutOfMemoryError("fake")

    monkeypatch.setattr(torch.cuda, "empty_cache",
                        lambda: alive_at_free_time.append(last_batch["ref"]() is not None))
    largest, _ = nb.largest_batch_that_fits(step_holding_a_tensor, torch.device("cuda"), max_batch=64)
    assert largest == 5
    assert alive_at_free_time and not any(alive_at_free_time)


def test_simulated_step_is_what_the_notebook_says(nb):
    step = nb.simulated_try_batch(300)
    step(300)  # fits
    with pytest.raises(torch.OutOfMemoryError, match="simulated"):
        step(301)


@pytest.mark.gpu_branch("02", "search_story: device.type == 'cuda'")
def test_search_story_labels_measured_and_simulated_results(nb, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 14000 * 2**20)
    attempts = [(1, True), (2, True), (4, False), (3, True)]
    measured = " ".join(nb.search_story(3, attempts, torch.device("cuda"), 4096).split())
    assert measured.startswith("MEASURED on Tesla T4: the largest batch that fits is 3 images.")
    assert "Peak allocated: 14,000 MiB" in measured and "4 tries" in measured
    capped = nb.search_story(4096, attempts, torch.device("cuda"), 4096)
    assert "the cap" in capped
    simulated = nb.search_story(300, attempts, CPU, 4096)
    assert simulated.startswith("SIMULATION") and "MEASURED" not in simulated


def step_model(step):
    """The model inside a try_batch function made by make_training_step."""
    return next(cell.cell_contents for cell in step.__closure__
                if isinstance(cell.cell_contents, nn.Module))


def test_training_step_for_the_search_runs_forward_and_backward_without_accumulating(nb, monkeypatch):
    batches = []
    real_randn = torch.randn

    def same_batch_every_time(*shape, device=None, **kwargs):  # note what the step asks for
        batches.append((shape, torch.device(device)))
        return real_randn(*shape, generator=torch.Generator().manual_seed(1), **kwargs).to(device)

    step = nb.make_training_step(CPU, image_side=16)
    monkeypatch.setattr(torch, "randn", same_batch_every_time)
    model = step_model(step)
    before = [parameter.detach().clone() for parameter in model.parameters()]
    step(3)
    first = [parameter.grad.clone() for parameter in model.parameters()]
    step(3)
    second = [parameter.grad for parameter in model.parameters()]
    assert batches == [((3, 3, 16, 16), CPU)] * 2  # the batch size asked for
    assert all(g.abs().sum() > 0 for g in first)  # backward reached every parameter
    assert all(torch.equal(a, b) for a, b in zip(first, second))  # zeroed, not accumulated
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # a probe: no update


def test_training_step_for_the_search_keeps_model_and_batch_on_its_device_and_waits_for_it(nb, monkeypatch):
    # `meta` is a second device every install has: shapes and dtypes, no numbers. synchronize(meta) asks
    # torch.accelerator, which stands in here: the step waits for its device, so an OOM surfaces in it.
    synchronized = []
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda device=None: synchronized.append(device))
    step = nb.make_training_step(META, image_side=16)
    step(4)
    model = step_model(step)
    assert {parameter.device.type for parameter in model.parameters()} == {"meta"}
    assert {parameter.grad.device.type for parameter in model.parameters()} == {"meta"}
    assert synchronized == [META]


# The real message of CUDA's caching allocator (c10/cuda/CUDACachingAllocator.cpp), for a T4.
T4_OUT_OF_MEMORY = ("CUDA out of memory. Tried to allocate 1.53 GiB. GPU 0 has a total capacity of 14.74 GiB "
                    "of which 1.02 GiB is free. Of the allocated memory 12.10 GiB is allocated by PyTorch, "
                    "and 1.43 GiB is reserved by PyTorch but unallocated.")


@pytest.mark.gpu_branch("02", "cell batch-search: device.type == 'cuda'")
def test_the_search_is_real_on_a_cuda_gpu(nb, monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 14100 * 2**20)

    def make_training_step(device):  # stands in for the conv net's real step on the T4
        calls.append(("make_training_step", device))

        def try_batch(batch_size):
            calls.append(batch_size)
            if batch_size > 700:
                raise torch.OutOfMemoryError(T4_OUT_OF_MEMORY)
        return try_batch

    namespace = {**vars(nb), "device": torch.device("cuda"), "make_training_step": make_training_step}
    printed = " ".join(run_cell("02", "batch-search", namespace).split())
    assert calls[:2] == ["reset", ("make_training_step", torch.device("cuda"))]  # peak counted afresh
    tries = [call for call in calls if isinstance(call, int)]
    failures = [size for size in tries if size > 700]
    assert calls.count("empty_cache") == len(failures) > 0  # the cache is emptied after each failure
    assert printed.startswith("MEASURED on Tesla T4: the largest batch that fits is 700 images.")
    assert "Peak allocated: 14,100 MiB" in printed and f"It took {len(tries)} tries" in printed
    assert namespace["largest"] == 700 and "SIMULATION" not in printed


def test_the_search_is_simulated_without_cuda(nb, monkeypatch):
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: pytest.fail("no CUDA"))
    namespace = {**vars(nb), "device": CPU}
    printed = run_cell("02", "batch-search", namespace)
    assert printed.startswith("SIMULATION") and namespace["largest"] == 300
