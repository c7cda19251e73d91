"""Unit tests for the helpers of notebook 02 (tensors and models on the device), with made-up inputs.

The helpers are loaded from the notebook itself (definitions only, never its work), so these tests
check exactly the code a learner runs. They need no GPU: the largest-batch finder is tested with fake
steps that raise torch.OutOfMemoryError above a size, and the cross-device load with the CPU and the
`meta` device. The device choice (pick_device, from the shared setup cell) is tested once, in
test_shared_setup.py.
"""
import math
import pickle
import weakref

import pytest
import torch
from torch import nn

from notebook_code import load_helpers


@pytest.fixture(scope="module")
def nb():
    return load_helpers("02")


# --- the largest-batch finder ------------------------------------------------------------------------

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
    largest, attempts = nb.largest_batch_that_fits(step_that_fits_up_to(limit, tried), torch.device("cpu"),
                                                   start=1, max_batch=4096)
    assert largest == limit
    assert [size for size, _ in attempts] == tried  # the log lists every call, in order
    assert all(fitted == (size <= limit) for size, fitted in attempts)
    assert all(1 <= size <= 4096 for size in tried)
    assert len(tried) <= 2 * math.ceil(math.log2(4096)) + 1


def test_largest_batch_stops_at_the_cap_when_everything_fits(nb):
    largest, attempts = nb.largest_batch_that_fits(step_that_fits_up_to(10**9), torch.device("cpu"),
                                                   start=3, max_batch=100)
    assert largest == 100
    assert all(fitted for _, fitted in attempts)
    assert attempts[-1][0] == 100


def test_largest_batch_is_zero_when_even_the_first_size_fails(nb):
    largest, attempts = nb.largest_batch_that_fits(step_that_fits_up_to(3), torch.device("cpu"), start=8)
    assert largest == 0
    assert attempts == [(8, False)]


def test_largest_batch_does_not_swallow_other_errors(nb):
    def broken_step(batch_size):
        raise ValueError("a bug in the step, not a memory problem")

    with pytest.raises(ValueError):
        nb.largest_batch_that_fits(broken_step, torch.device("cpu"))


@pytest.mark.parametrize("device_type, expect_calls", [("cuda", True), ("cpu", False), ("mps", False)])
def test_cuda_cache_is_emptied_after_each_failure_and_only_on_cuda(nb, monkeypatch, device_type, expect_calls):
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    _, attempts = nb.largest_batch_that_fits(step_that_fits_up_to(37), torch.device(device_type), max_batch=256)
    failures = sum(not fitted for _, fitted in attempts)
    assert failures > 0
    assert len(calls) == (failures if expect_calls else 0)


def test_failed_step_is_released_before_memory_is_freed(nb, monkeypatch):
    """Recovery must happen outside `except`, or the exception keeps the failed step's tensors alive."""
    alive_at_free_time = []
    last_batch = {}

    def step_holding_a_tensor(batch_size):
        activations = torch.empty(batch_size, 4)  # stands in for the failed step's GPU tensors
        last_batch["ref"] = weakref.ref(activations)
        if batch_size > 5:
            raise torch.OutOfMemoryError("fake")

    def spy_free(device):
        alive_at_free_time.append(last_batch["ref"]() is not None)

    namespace = nb.largest_batch_that_fits.__globals__
    monkeypatch.setitem(namespace, "free_cached_memory", spy_free)
    largest, _ = nb.largest_batch_that_fits(step_holding_a_tensor, torch.device("cpu"), max_batch=64)
    assert largest == 5
    assert alive_at_free_time and not any(alive_at_free_time)


def test_simulated_step_is_what_the_notebook_says(nb):
    step = nb.simulated_try_batch(300)
    step(300)  # fits
    with pytest.raises(torch.OutOfMemoryError, match="simulated"):
        step(301)


# --- saving and loading across devices ----------------------------------------------------------------

def make_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))


def test_cpu_checkpoint_records_cpu_and_reloads_the_same_weights(nb, tmp_path):
    trained = make_model(seed=1)
    path = nb.save_weights(trained, tmp_path / "weights.pt")
    assert nb.saved_devices(path) == ["cpu"] * len(trained.state_dict())

    fresh = make_model(seed=2)
    assert not torch.equal(fresh[0].weight, trained[0].weight)
    loaded = nb.load_weights(fresh, path, torch.device("cpu"))
    assert loaded is fresh
    for name, tensor in trained.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_load_weights_puts_the_model_on_the_requested_device(nb, tmp_path):
    path = nb.save_weights(make_model(seed=1), tmp_path / "weights.pt")  # saved on the CPU
    loaded = nb.load_weights(make_model(seed=2), path, torch.device("meta"))  # a second device every install has
    assert nb.model_device(loaded) == torch.device("meta")
    assert {p.device.type for p in loaded.parameters()} == {"meta"}


def test_load_weights_maps_storages_and_loads_weights_only(nb, tmp_path, monkeypatch):
    path = nb.save_weights(make_model(seed=1), tmp_path / "weights.pt")
    seen = []
    real_load = torch.load

    def spy_load(*args, **kwargs):
        seen.append(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy_load)
    nb.load_weights(make_model(seed=2), path, torch.device("cpu"))
    assert len(seen) == 1
    assert seen[0].get("map_location") == torch.device("cpu")
    assert seen[0].get("weights_only") is True


class NotAWeight:
    """An arbitrary Python object: weights_only=True must refuse to unpickle it."""


def test_load_weights_refuses_a_checkpoint_that_holds_arbitrary_objects(nb, tmp_path):
    path = tmp_path / "suspicious.pt"
    torch.save({"0.weight": torch.zeros(3, 4), "payload": NotAWeight()}, path)
    with pytest.raises(pickle.UnpicklingError):
        nb.load_weights(make_model(seed=2), path, torch.device("cpu"))


# --- smaller helpers the notebook's steps rely on -----------------------------------------------------

def test_on_device_batches_cover_every_sample_once(nb):
    inputs = torch.arange(10).float().unsqueeze(1)
    targets = torch.arange(10)
    batches = nb.OnDeviceBatches(inputs, targets, batch_size=4)
    seen = torch.cat([batch_targets for _, batch_targets in batches])
    assert len(batches) == 3
    assert sorted(seen.tolist()) == list(range(10))
    for batch_inputs, batch_targets in batches:
        assert torch.equal(batch_inputs.squeeze(1).long(), batch_targets)  # inputs stay paired with targets


def test_quadrant_images_are_brighter_in_the_labelled_quarter(nb):
    images, labels = nb.make_quadrant_images(400, 32, torch.Generator().manual_seed(0))
    quarters = torch.stack([images[:, :, :16, :16], images[:, :, :16, 16:], images[:, :, 16:, :16], images[:, :, 16:, 16:]])
    brightest = quarters.mean(dim=(2, 3, 4)).argmax(dim=0)
    assert images.shape == (400, 3, 32, 32)
    assert (brightest == labels).float().mean() > 0.95


def test_train_epochs_lowers_the_loss_of_a_tiny_regression(nb):
    inputs, targets, _, _ = nb.make_regression_data(256, 3, torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = nb.OnDeviceBatches(inputs, targets, batch_size=32)
    rows = nb.train_epochs(model, batches, nn.MSELoss(), optimizer, torch.device("cpu"), epochs=3)
    assert [row["epoch"] for row in rows] == [1, 2, 3]
    assert rows[-1]["loss"] < rows[0]["loss"] / 5
    assert all(row["seconds"] > 0 for row in rows)
