"""Notebook 02's helpers called with made-up inputs on the CPU (and on the `meta` device, a second
device every install has): the training loop, the model factory and the loss verdict of Step 3, the
figures the core reports, rounding the tables, and Going deeper's batches sliced on the device, story of
where random numbers are made, saving and loading weights, timing a forward pass."""
import pickle

import pandas as pd
import pytest
import torch
from torch import nn

from support.notebook_code import load_helpers, run_cell

CPU, META = torch.device("cpu"), torch.device("meta")


@pytest.fixture(scope="module")
def nb():
    return load_helpers("02")


# --- Step 3: the batches, the training loop, the model factory ----------------------------------------

def test_on_device_batches_cover_every_sample_once_and_keep_inputs_with_their_targets(nb):
    inputs, targets = torch.arange(10).float().unsqueeze(1), torch.arange(10)
    batches = nb.OnDeviceBatches(inputs, targets, batch_size=4)
    sizes = [len(batch_targets) for _, batch_targets in batches]
    seen = torch.cat([batch_targets for _, batch_targets in batches])
    assert sizes == [4, 4, 2] and sorted(seen.tolist()) == list(range(10))
    for batch_inputs, batch_targets in batches:
        assert torch.equal(batch_inputs.squeeze(1).long(), batch_targets)
    orders = {tuple(torch.cat([t for _, t in batches]).tolist()) for _ in range(5)}
    assert len(orders) > 1, "the batches are shuffled anew on every pass"


def test_on_device_batches_slice_on_the_inputs_device(nb):
    batches = nb.OnDeviceBatches(torch.zeros(6, 2, device=META), torch.zeros(6, device=META), 4)
    assert [(x.device.type, y.device.type, len(y)) for x, y in batches] == [("meta", "meta", 4),
                                                                            ("meta", "meta", 2)]


def test_quadrant_images_are_brighter_in_the_labelled_quarter(nb):
    images, labels = nb.make_quadrant_images(400, 32, torch.Generator().manual_seed(0))
    quarters = torch.stack([images[:, :, :16, :16], images[:, :, :16, 16:],
                            images[:, :, 16:, :16], images[:, :, 16:, 16:]])
    brightest = quarters.mean(dim=(2, 3, 4)).argmax(dim=0)
    assert images.shape == (400, 3, 32, 32)
    assert (brightest == labels).float().mean() > 0.95


def test_train_epochs_learns_on_its_device_and_reads_each_loss_as_a_python_number(nb):
    inputs = torch.randn(256, 3, generator=torch.Generator().manual_seed(0))
    targets = inputs @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    start = [parameter.detach().clone() for parameter in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.eval()  # train_epochs switches the model to training mode itself
    rows = nb.train_epochs(model, nb.OnDeviceBatches(inputs, targets, batch_size=32), nn.MSELoss(),
                           optimizer, CPU, epochs=3, non_blocking=True)
    losses = [row["loss"] for row in rows]
    assert [row["epoch"] for row in rows] == [1, 2, 3] and all(row["seconds"] > 0 for row in rows)
    assert all(type(loss) is float for loss in losses)
    assert losses[2] < losses[1] < losses[0] and losses[-1] < losses[0] / 5
    assert all(not torch.equal(a, b) for a, b in zip(start, model.parameters()))
    assert model.training and nb.model_device(model) == CPU


def test_new_cnn_is_made_on_its_device_from_the_same_weights_every_time(nb):
    first, second = nb.new_cnn(CPU), nb.new_cnn(CPU)
    assert torch.equal(first.classifier[1].weight, second.classifier[1].weight)
    assert {parameter.device for parameter in nb.new_cnn(META).parameters()} == {META}


@pytest.mark.parametrize("size", [32, 64])
def test_small_cnn_classifies_images_of_its_size_into_four_classes(nb, size):
    assert nb.SmallCNN(size=size)(torch.randn(5, 3, size, size)).shape == (5, 4)


def test_summarize_run_reports_milliseconds_per_epoch(nb):
    rows = [{"epoch": 1, "loss": 2.0, "seconds": 0.5}, {"epoch": 2, "loss": 1.0, "seconds": 0.25},
            {"epoch": 3, "loss": 0.5, "seconds": 0.75}]
    assert nb.summarize_run("r", rows) == {"run": "r", "first_loss": 2.0, "last_loss": 0.5,
                                           "ms_per_epoch": 500.0}


def test_loss_verdict_says_whether_the_loss_went_down_over_the_epochs(nb):
    rows = [{"epoch": 1, "loss": 1.4, "seconds": 0.1}, {"epoch": 2, "loss": 0.9, "seconds": 0.1},
            {"epoch": 3, "loss": 0.5, "seconds": 0.1}]
    assert nb.loss_verdict(rows) == ("The loss went down, from 1.40 to 0.50; a blind guess among 4 "
                                     "labels scores ln 4 = 1.39.")
    rows[-1]["loss"] = 1.4  # the same is not lower
    assert nb.loss_verdict(rows) == "The loss did NOT go down: 1.40 -> 1.40."
    assert nb.loss_verdict(rows[:2]).startswith("The loss went down")  # 1.4 -> 0.9


def test_the_core_reports_its_training_run_and_what_stood_in(nb):
    """Issue 32: the report_figures call hands on the median time per epoch of Step 3's run and its
    last loss; `fallback` says when the `meta` device stood in for the GPU's errors (one call, in the
    core: tests/collection/test_figures_rule.py)."""
    rows = [{"epoch": 1, "loss": 1.3, "seconds": 0.050}, {"epoch": 2, "loss": 0.9, "seconds": 0.040123},
            {"epoch": 3, "loss": 0.123456, "seconds": 0.030}]
    for elsewhere, fallback in [(META, "the meta device stood in for a GPU's errors"),
                                (torch.device("cuda", 0), None), (torch.device("mps"), None)]:
        reported = []
        namespace = {**vars(nb), "elsewhere": elsewhere, "rows": rows,
                     "report_figures": lambda fallback=None, **figures: reported.append((fallback, figures))}
        run_cell("02", "report", namespace)
        assert reported == [(fallback, {"epoch_ms": 40.12, "last_loss": 0.1235})]


# --- every table a learner reads is rounded --------------------------------------------------

def test_rounded_columns_rounds_every_float_column_and_leaves_the_rest(nb):
    table = pd.DataFrame({"run": ["a", "b"], "ms": [37.500000001, 2.2512345], "count": [3, 4],
                          "loss": [0.0123456, 1.3862944], "fitted": [True, False]})
    shown = nb.rounded_columns(table)
    assert shown["ms"].tolist() == [37.5, 2.25]
    assert shown["loss"].tolist() == [0.0123, 1.3863]
    assert shown["run"].tolist() == ["a", "b"] and shown["count"].tolist() == [3, 4]
    assert shown["fitted"].tolist() == [True, False]
    assert table["ms"].iloc[0] == 37.500000001  # the caller's table is left alone
    assert "37.500000" not in shown.to_string()


def test_rounded_columns_copes_with_zeros_huge_and_tiny_values(nb):
    shown = nb.rounded_columns(pd.DataFrame({"a": [0.0, 0.0], "b": [0.0, 123456.789]}))
    assert shown["a"].tolist() == [0.0, 0.0]
    assert shown["b"].tolist() == [0.0, 123457.0]
    shown = nb.rounded_columns(pd.DataFrame({"tiny": [0.0000123, 1.0], "big": [123456.7, 7.5]}))
    assert shown["tiny"].tolist() == [0.0, 1.0]  # 4 decimals at most
    assert shown["big"].tolist() == [123456.7, 7.5]  # the smallest, 7.5, asks for 2 decimals


def test_creation_story_on_the_cpu_says_nothing_is_copied(nb):
    story = " ".join(nb.creation_story({"a": 1.0, "b": 0.001, "c": 1.1}, 16, CPU).split())
    assert story.startswith("device is the CPU: .to(device) copies nothing")
    assert "detour" not in story


# --- Going deeper C: saving and loading across devices -------------------------------------------

def make_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))


def test_cpu_checkpoint_records_cpu_and_reloads_the_same_weights(nb, tmp_path):
    trained = make_model(seed=1)
    path = nb.save_weights(trained, tmp_path / "weights.pt")
    assert nb.saved_devices(path) == ["cpu"] * len(trained.state_dict())
    fresh = make_model(seed=2)
    assert not torch.equal(fresh[0].weight, trained[0].weight)
    loaded = nb.load_weights(fresh, path, CPU)
    assert loaded is fresh
    for name, tensor in trained.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_load_weights_puts_the_model_on_the_requested_device(nb, tmp_path):
    path = nb.save_weights(make_model(seed=1), tmp_path / "weights.pt")  # saved on the CPU
    loaded = nb.load_weights(make_model(seed=2), path, META)  # `meta`: a second device every install has
    assert nb.model_device(loaded) == META
    assert {p.device.type for p in loaded.parameters()} == {"meta"}


def test_load_weights_maps_storages_and_loads_weights_only(nb, tmp_path, monkeypatch):
    path = nb.save_weights(make_model(seed=1), tmp_path / "weights.pt")
    seen = []
    real_load = torch.load

    def spy_load(*args, **kwargs):
        seen.append(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy_load)
    nb.load_weights(make_model(seed=2), path, CPU)
    assert len(seen) == 1
    assert seen[0].get("map_location") == CPU and seen[0].get("weights_only") is True


class NotAWeight:
    """An arbitrary Python object: weights_only=True must refuse to unpickle it."""


def test_load_weights_refuses_a_checkpoint_that_holds_arbitrary_objects(nb, tmp_path):
    path = tmp_path / "suspicious.pt"
    torch.save({"0.weight": torch.zeros(3, 4), "payload": NotAWeight()}, path)
    with pytest.raises(pickle.UnpicklingError):
        nb.load_weights(make_model(seed=2), path, CPU)


def test_forward_seconds_times_an_eval_forward_pass_without_gradients(nb):
    seen = []
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    model.register_forward_hook(lambda module, args, output: seen.append(
        (output.requires_grad, torch.is_inference_mode_enabled())))
    seconds = nb.forward_seconds(model, torch.randn(2, 4), CPU)
    assert seconds > 0 and not model.training
    assert seen == [(False, True)] * 6  # one warm-up run, then the 5 timed runs
