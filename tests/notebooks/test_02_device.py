"""Unit tests for the helpers of notebook 02 (tensors and models on the device), with made-up inputs.

The helpers are loaded from the notebook itself (definitions only, never its work), so these tests
check exactly the code a learner runs. They need no GPU: a GPU's side of a cell runs here with
stand-ins shaped like torch.cuda, the largest-batch finder with fake steps that raise
torch.OutOfMemoryError above a size, and the errors and the exercises' checks with the `meta` device
standing in for a second device. The device choice (pick_device, from the shared setup cell) is tested
once, in test_shared_setup.py.
"""
import ast
import math
import pickle
import re
import time
import weakref

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from support.notebook_code import (INSTALL_CELL_FIRST_LINE, SHARED_CELL_FIRST_LINE, TorchWithAStandInGpu,
                           core_cells, is_folded, load_helpers, notebook_path, read, run_cell)

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


class MovedByTo:
    """A batch tensor that notes each .to(device, non_blocking=...) made on it, then gives the tensor."""

    def __init__(self, tensor, events):
        self.tensor, self.events = tensor, events

    def to(self, device, non_blocking=False):
        self.events.append(("to", torch.device(device).type, non_blocking))
        return self.tensor


class SteppingOptimizer:
    """Wraps an optimizer and notes each step in the events."""

    def __init__(self, optimizer, events):
        self.optimizer, self.events = optimizer, events

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self):
        self.events.append("step")
        self.optimizer.step()


@pytest.mark.parametrize("non_blocking", [True, False])
def test_train_epochs_reads_the_clock_only_after_synchronize_and_moves_every_batch(nb, monkeypatch,
                                                                                  non_blocking):
    """On a CUDA GPU work is queued: the clock must start after one synchronize and stop after another
    that follows the last optimizer step; every batch goes through .to(device, non_blocking). The
    device is a CUDA one, with torch.cuda.synchronize, the clock and the loss's zero standing in."""
    events, readings = [], iter(range(100))
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append(("sync", device)))
    monkeypatch.setattr(time, "perf_counter", lambda: events.append("clock") or float(next(readings)))
    real_zeros = torch.zeros
    monkeypatch.setattr(torch, "zeros", lambda *size, device=None, **kwargs: real_zeros(*size, **kwargs))
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    batches = [(MovedByTo(torch.randn(4, 3), events), MovedByTo(torch.randn(4, 1), events))
               for _ in range(2)]
    optimizer = SteppingOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), events)
    rows = nb.train_epochs(model, batches, nn.MSELoss(), optimizer, cuda, epochs=2,
                           non_blocking=non_blocking)
    moves = [("to", "cuda", non_blocking)] * 2
    one_epoch = [("sync", cuda), "clock", *moves, "step", *moves, "step", ("sync", cuda), "clock"]
    assert events == one_epoch * 2
    assert [row["seconds"] for row in rows] == [1.0, 1.0] and [row["epoch"] for row in rows] == [1, 2]


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


def test_loss_verdict_names_the_runs_whose_loss_did_not_go_down(nb):
    runs = [{"run": "a", "first_loss": 1.4, "last_loss": 0.5}, {"run": "b", "first_loss": 1.4,
                                                                 "last_loss": 1.2}]
    assert nb.loss_verdict(runs) == ("Every run's loss went down, to 0.50, 1.20; a blind guess among 4 "
                                     "labels scores ln 4 = 1.39.")
    runs[1]["last_loss"] = 1.4  # the same is not lower
    assert nb.loss_verdict(runs) == "The loss did NOT go down in: b."


def test_the_core_reports_its_training_runs_and_what_stood_in(nb):
    """Issue 32: one report_figures call, in the core, with the time per epoch of Step 3's runs;
    `fallback` says when the `meta` device stood in for the GPU's errors."""
    runs = [{"run": "data on device, OnDeviceBatches", "ms_per_epoch": 40.123, "last_loss": 0.123456}]
    for elsewhere, fallback in [(META, "the meta device stood in for a GPU's errors"),
                                (torch.device("cuda", 0), None), (torch.device("mps"), None)]:
        reported = []
        namespace = {**vars(nb), "elsewhere": elsewhere, "runs": runs,
                     "report_figures": lambda fallback=None, **figures: reported.append((fallback, figures))}
        run_cell("02", "report", namespace)
        assert reported == [(fallback, {"epoch_ms": {"data on device, OnDeviceBatches": 40.12},
                                        "last_loss": {"data on device, OnDeviceBatches": 0.1235}})]
    notebook = read(notebook_path("02"))
    calls = [cell.get("id") for cell in notebook.cells if cell.cell_type == "code"
             and "report_figures(" in cell.source and not cell.source.startswith(SHARED_CELL_FIRST_LINE)]
    assert calls == ["report"] and "report" in [cell.get("id") for cell in core_cells(notebook)]


# --- Step 4: the real errors on a GPU, the `meta` stand-in without one --------------------------------

# PyTorch's own messages on a CUDA GPU: aten/src/ATen/native/tensor_numpy.cpp and TensorIterator.cpp
# (TensorIterator takes the first non-CPU device as the common one, so the order of the operands
# does not change the message).
CUDA_NUMPY_ERROR = ("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
                    "tensor to host memory first.")
CUDA_MISMATCH_ERROR = ("Expected all tensors to be on the same device, but found at least two devices, "
                       "cuda:0 and cpu!")


class StandInCudaTensor:
    """A tensor on cuda:0, as far as the cells of Step 4 use one, failing as the real one does."""
    device = torch.device("cuda", 0)

    def numpy(self):
        raise TypeError(CUDA_NUMPY_ERROR)

    def __add__(self, other):
        raise RuntimeError(CUDA_MISMATCH_ERROR)

    __radd__ = __add__


def test_on_a_cuda_gpu_the_mismatch_and_numpy_cells_raise_the_real_errors(nb):
    namespace = {**vars(nb), "device": torch.device("cuda", 0),
                 "torch": TorchWithAStandInGpu("ones", StandInCudaTensor)}
    printed = run_cell("02", "mismatch-error", namespace)
    assert namespace["elsewhere"] == torch.device("cuda", 0)
    assert printed.splitlines() == ["elsewhere: cuda:0 ", f"RuntimeError: {CUDA_MISMATCH_ERROR}"]
    assert run_cell("02", "numpy-error", namespace) == f"TypeError: {CUDA_NUMPY_ERROR}\n"


def test_without_a_gpu_the_same_cells_use_the_named_meta_stand_in(nb):
    namespace = {**vars(nb), "device": CPU}
    printed = run_cell("02", "mismatch-error", namespace)
    assert printed.startswith("elsewhere: meta (the stand-in: no GPU)")
    assert "RuntimeError: " in printed and "meta" in printed.splitlines()[1]
    assert "can't convert meta device type tensor to numpy" in run_cell("02", "numpy-error", namespace)


# What `mps` (a Mac's GPU) says to float64, which it does not have (aten/src/ATen/mps: "MPS framework").
MPS_FLOAT64_ERROR = ("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
                     "Please use float32 instead.")


def test_the_thrown_away_move_runs_on_a_mac_whose_gpu_has_no_float64(nb, monkeypatch):
    """On a Mac, `elsewhere` is `mps`, which refuses float64: the cell's dtype change must be one every device
    has. `meta` plays the Mac's GPU here, with Tensor.to refusing float64 there as `mps` does."""
    real_to = torch.Tensor.to

    def to_as_on_a_mac(self, *args, **kwargs):
        moved = real_to(self, *args, **kwargs)
        if moved.device.type == "meta" and moved.dtype == torch.float64:
            raise TypeError(MPS_FLOAT64_ERROR)
        return moved

    monkeypatch.setattr(torch.Tensor, "to", to_as_on_a_mac)
    namespace = {**vars(nb), "device": META, "elsewhere": META}
    printed = run_cell("02", "lost-move", namespace).splitlines()
    assert printed[0].endswith("shape (4, 10), torch.float32, on cpu")  # the bug: nothing changed
    assert printed[1].endswith("shape (4, 10), torch.float16, on meta")


def test_the_core_mixes_devices_through_not_the_cpu_only():
    """No visible cell of the core names `meta` itself: on a GPU every error shown is the real one."""
    for cell in core_cells(read(notebook_path("02"))):
        if cell.cell_type == "code" and not is_folded(cell):
            assert not re.search(r'(device=|\.to\()\s*"meta"', cell.source), cell.get("id")


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


def _displayed(statement):
    """The expression a cell shows as its result, or None (a call to print, plt.show or display)."""
    if not isinstance(statement, ast.Expr):
        return None
    if isinstance(statement.value, ast.Call) and ast.unparse(statement.value.func) in {
            "print", "plt.show", "display"}:
        return None
    return statement.value


def test_every_table_the_notebook_shows_goes_through_rounded_columns():
    shown = 0
    for cell in read(notebook_path("02")).cells:
        if cell.cell_type != "code" or cell.source.startswith((SHARED_CELL_FIRST_LINE,
                                                               INSTALL_CELL_FIRST_LINE)):
            continue  # the collection's own cells: report_figures displays a record, not a table
        tree = ast.parse(cell.source)
        results = [_displayed(tree.body[-1])] if tree.body else []
        results += [call.args[0] for call in ast.walk(tree) if isinstance(call, ast.Call)
                    and ast.unparse(call.func) == "display"]
        for result in filter(None, results):
            if cell.get("id", "").startswith("exercise-"):
                continue  # an exercise's cell shows its check's Feedback
            assert isinstance(result, ast.Call) and ast.unparse(result.func) == "rounded_columns", (
                f"cell {cell.get('id')} shows {ast.unparse(result)!r} without rounding it through rounded_columns()")
            shown += 1
    assert shown > 0


# --- Going deeper A: what copies cost -------------------------------------------------------------

def test_step_a_times_the_cpu_work_the_copy_and_the_device_separately(nb, monkeypatch):
    # `meta` stands in for the GPU: a copy to it and creation on it are real, and need no GPU.
    real_randn, made = torch.randn, []

    def counting_randn(*shape, **kwargs):
        made.append(torch.device(kwargs.get("device") or "cpu"))
        return real_randn(*shape, **kwargs)

    timed = []

    def time_it(run, device, repeats=3, warmup=1):  # stands in for the shared cell's timer
        made.clear()
        result = run()
        timed.append((list(made), result.device, repeats))
        return 0.001 * len(timed)

    monkeypatch.setattr(torch, "randn", counting_randn)
    namespace = {**vars(nb), "device": META, "FAST": True, "time_it": time_it}
    printed = run_cell("02", "creation-times", namespace)
    assert timed == [([CPU], CPU, 5),  # the CPU makes the numbers
                     ([], META, 5),  # the copy alone: nothing is generated
                     ([META], META, 5)]  # made on the device
    assert list(namespace["creation_ms"].values()) == [1.0, 2.0, 3.0]
    assert "1.00 ms to make 1 MiB of random numbers plus 2.00 ms to copy them to meta" in " ".join(
        printed.split())


@pytest.mark.gpu_branch("02", "creation_story: device.type == 'cpu'")
@pytest.mark.parametrize("on_cpu, copy, larger", [(2.0, 1.0, "making the numbers on the CPU"),
                                                   (1.0, 1.0, "the copy"), (1.0, 2.0, "the copy")])
def test_creation_story_names_the_larger_part_of_the_detour(nb, on_cpu, copy, larger):
    ms = {"make on the CPU": on_cpu, "copy": copy, "make on the device": 0.25}
    story = " ".join(nb.creation_story(ms, 16, torch.device("cuda")).split())
    assert f"{on_cpu:.2f} ms to make 16 MiB of random numbers plus {copy:.2f} ms to copy them" in story
    assert f"{on_cpu + copy:.2f} ms in all" in story and "directly: 0.25 ms" in story
    assert story.endswith(f"The larger part of the detour is {larger}.")


def test_creation_story_on_the_cpu_says_nothing_is_copied(nb):
    story = " ".join(nb.creation_story({"a": 1.0, "b": 0.001, "c": 1.1}, 16, CPU).split())
    assert story.startswith("device is the CPU: .to(device) copies nothing")
    assert "detour" not in story


@pytest.mark.gpu_branch("02", "draw_where_tensors_live: device.type == 'cuda'")
@pytest.mark.gpu_branch("02", "draw_where_tensors_live: device.type == 'cpu'")
@pytest.mark.parametrize("device, says", [("cpu", "device is cpu: no separate GPU memory"),
                                          ("cuda", "device is cuda: the right box is its memory"),
                                          ("mps", "device is mps: its copies work differently")])
def test_the_figure_draws_pageable_pinned_and_gpu_memory_and_the_copies(nb, device, says):
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
    figure = nb.draw_where_tensors_live(torch.device(device))
    try:
        [axes] = figure.axes
        words = " ".join(" ".join(text.get_text() for text in axes.texts).split())
        for shown in ("CPU memory (RAM)", "GPU memory", "pageable memory",
                      "pinned (page-locked) memory", "DataLoader(pin_memory=True)", "PCIe bus",
                      ".to(device, non_blocking=True)", "the CPU waits", "the CPU goes on", ".cpu()",
                      "torch.randn(..., device=device)"):
            assert shown in words, shown
        assert says in axes.get_title() and axes.get_title().startswith("Where a tensor lives")
        assert sum(isinstance(patch, FancyBboxPatch) for patch in axes.patches) == 6
        assert sum(isinstance(patch, FancyArrowPatch) for patch in axes.patches) == 3
    finally:
        plt.close(figure)


RUNS = pd.DataFrame({
    "run": ["data on device, DataLoader", "data on device, OnDeviceBatches", "data on CPU, moved per batch"],
    "first_loss": [1.41, 1.41, 1.42], "last_loss": [0.3, 0.3, 0.4], "ms_per_epoch": [40.0, 10.0, 120.0]})


def test_feeding_story_prints_short_lines_that_read_the_table(nb):
    lines = nb.feeding_story(RUNS, CPU).splitlines()
    assert lines == ["Every run's loss went down.", "DataLoader / OnDeviceBatches: 4.0x the time per epoch.",
                     "Moved per batch / data on device: 3.00x; device is the CPU: nothing is copied, so that "
                     "gap is noise."]
    assert all(len(line) <= 100 for line in lines)
    stuck = RUNS.assign(last_loss=[0.3, 9.0, 0.4])
    assert nb.feeding_story(stuck, CPU).startswith(
        "The loss did NOT go down in: data on device, OnDeviceBatches.")
    without_copies = nb.feeding_story(RUNS.iloc[:2], torch.device("cuda")).splitlines()
    assert len(without_copies) == 2 and "Moved per batch" not in " ".join(without_copies)


# On a GPU the line about the copies follows the measured ratio of "moved per batch" to "data on
# device, DataLoader" on each side of its boundaries (1.2 and 1 / 1.2): a ratio near 1.0 on a T4 must not
# be read as a cost of the copies.
@pytest.mark.gpu_branch("02", "copy_verdict: device.type == 'cpu'")
@pytest.mark.parametrize("moved_ms, verdict", [
    (48.0, "on cuda, the copies cost a clear share of the time."),  # 1.20: the boundary itself
    (47.85, "on cuda, the copies cost a clear share of the time."),  # 1.196, printed 1.20: read as printed
    (120.0, "on cuda, the copies cost a clear share of the time."),
    (47.6, "no clear cost of the copies on cuda at this size (within 20%)."),  # 1.19
    (40.0, "no clear cost of the copies on cuda at this size (within 20%)."),  # 1.00
    (33.6, "no clear cost of the copies on cuda at this size (within 20%)."),  # 0.84, above 1 / 1.2
    (33.2, "faster than with the data on the device: timing noise, not a gain."),  # 0.83, below it
    (10.0, "faster than with the data on the device: timing noise, not a gain."),
])
def test_the_line_about_copies_follows_the_measured_ratio_on_a_gpu(nb, moved_ms, verdict):
    runs = RUNS.assign(ms_per_epoch=[40.0, 10.0, moved_ms])
    lines = nb.feeding_story(runs, torch.device("cuda")).splitlines()
    assert lines[2] == f"Moved per batch / data on device: {moved_ms / 40:.2f}x; {verdict}"
    assert "nothing is copied" not in " ".join(lines)
    on_a_mac = nb.feeding_story(runs, torch.device("mps")).splitlines()[2]  # copies to mps are real too
    assert on_a_mac == lines[2].replace("on cuda", "on mps")
    on_cpu = nb.feeding_story(runs, CPU).splitlines()[2]
    assert on_cpu.endswith("device is the CPU: nothing is copied, so that gap is noise.")
    assert nb.COPY_COST_RATIO == 1.2


class RecordingDataLoader:
    """Stands in for DataLoader: notes its arguments; batches come from a plain DataLoader, unpinned."""
    made = []

    def __init__(self, dataset, batch_size=1, shuffle=False, pin_memory=False):
        RecordingDataLoader.made.append({"pin_memory": pin_memory, "over": dataset.tensors[0].device.type})
        self.loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)

    def __iter__(self):
        return iter(self.loader)


def recording_train_epochs(calls):
    """Stands in for train_epochs: notes the device and non_blocking of each run, returns two rows."""
    def train_epochs(model, batches, loss_fn, optimizer, device, epochs, non_blocking=False):
        calls.append((type(batches).__name__, device, non_blocking))
        return [{"epoch": 1, "loss": 2.0, "seconds": 0.2}, {"epoch": 2, "loss": 1.0, "seconds": 0.1}]
    return train_epochs


class StaysOnTheCpu(torch.Tensor):
    """A tensor whose .to(a GPU) hands back its plain CPU self: cells that move data run on a CPU."""

    def to(self, *args, **kwargs):
        return self.as_subclass(torch.Tensor)


@pytest.mark.parametrize("device_type, pinned", [("cuda", True), ("cpu", False), ("mps", False)])
def test_the_cpu_dataloader_pins_and_copies_non_blocking_only_on_a_cuda_gpu(nb, device_type, pinned):
    RecordingDataLoader.made.clear()
    calls, device = [], torch.device(device_type)
    images = torch.randn(8, 3, 32, 32).as_subclass(StaysOnTheCpu)
    labels = torch.randint(0, 4, (8,)).as_subclass(StaysOnTheCpu)
    namespace = {**vars(nb), "device": device, "DataLoader": RecordingDataLoader, "images": images,
                 "labels": labels, "FAST": True, "new_cnn": lambda device: nb.SmallCNN(),
                 "train_epochs": recording_train_epochs(calls)}
    printed = run_cell("02", "feeding-ways", namespace)
    assert [made["pin_memory"] for made in RecordingDataLoader.made] == [False, pinned]
    assert calls == [("RecordingDataLoader", device, False), ("OnDeviceBatches", device, False),
                     ("RecordingDataLoader", device, True)]  # only the CPU's batches: non_blocking
    assert printed.startswith("from the CPU's DataLoader: shape (8, 3, 32, 32), torch.float32, on cpu | pinned:")
    assert "Every run's loss went down." in printed


def test_the_chart_shows_the_time_per_epoch_of_each_way_on_a_log_scale(nb):
    import matplotlib.pyplot as plt
    figure = nb.epoch_time_chart(RUNS, torch.device("cuda"))
    try:
        [axes] = figure.axes
        assert [label.get_text() for label in axes.get_yticklabels()] == list(RUNS["run"])
        assert [text.get_text() for text in axes.texts] == ["40.0 ms", "10.0 ms", "120.0 ms"]
        assert axes.get_xscale() == "log" and "time per epoch, ms" in axes.get_xlabel()
        assert axes.get_title().startswith("Time per epoch on cuda")
        low, high = axes.get_xlim()
        assert low < 10.0 and high > 120.0
    finally:
        plt.close(figure)


# --- Going deeper B: GPU memory, and the largest batch that fits ---------------------------------

def test_every_torch_cuda_call_exists_and_is_not_deprecated():
    names = set()
    for cell in read(notebook_path("02")).cells:
        if cell.cell_type == "code":
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "torch.cuda":
                    names.add(node.attr)
    assert {"memory_allocated", "memory_reserved", "max_memory_allocated", "mem_get_info",
            "reset_peak_memory_stats", "empty_cache"} <= names
    for name in names:
        function = getattr(torch.cuda, name)
        assert not (function.__doc__ or "").lstrip().startswith("Deprecated"), name
    assert torch.cuda.OutOfMemoryError is torch.OutOfMemoryError
    assert issubclass(torch.OutOfMemoryError, RuntimeError)


class FakeBlock:
    """What the fake torch.empty returns: an object whose deletion the fake allocator notices."""


class FakeCachingAllocator:
    """Stands in for CUDA's caching allocator: blocks freed by `del` stay reserved until empty_cache."""

    def __init__(self, live_mib=10, cached_mib=30, total_mib=15000):
        self.allocated = live_mib * 2**20
        self.reserved = (live_mib + cached_mib) * 2**20
        self.peak = self.allocated
        self.total = total_mib * 2**20

    def empty(self, count, dtype=torch.float32, device=None):
        size = count * torch.empty(0, dtype=dtype).element_size()
        if self.reserved - self.allocated < size:  # the cache cannot serve it: ask the driver
            self.reserved += size
        self.allocated += size
        self.peak = max(self.peak, self.allocated)
        block = FakeBlock()
        weakref.finalize(block, self.free, size)
        return block

    def free(self, size):
        self.allocated -= size

    def install(self, monkeypatch):
        real_empty = torch.empty
        monkeypatch.setattr(torch, "empty", lambda *shape, **kw: (
            self.empty(shape[0], kw.get("dtype", torch.float32), kw["device"])
            if "device" in kw and torch.device(kw["device"]).type == "cuda" else real_empty(*shape, **kw)))
        cuda = {"memory_allocated": lambda device=None: self.allocated,
                "memory_reserved": lambda device=None: self.reserved,
                "max_memory_allocated": lambda device=None: self.peak,
                "reset_peak_memory_stats": lambda device=None: setattr(self, "peak", self.allocated),
                "empty_cache": lambda: setattr(self, "reserved", self.allocated),
                "mem_get_info": lambda device=None: (self.total - self.reserved, self.total)}
        for name, fake in cuda.items():
            monkeypatch.setattr(torch.cuda, name, fake)

        def deprecated(*args, **kwargs):
            raise AssertionError("memory_cached is deprecated: use memory_reserved")
        monkeypatch.setattr(torch.cuda, "memory_cached", deprecated)


def test_memory_walkthrough_shows_allocated_reserved_and_peak_as_cuda_does(nb, monkeypatch):
    FakeCachingAllocator(live_mib=10, cached_mib=30).install(monkeypatch)
    table = nb.memory_walkthrough(torch.device("cuda"), size_mib=256)
    assert table["moment"].tolist() == ["start", "after allocating 256 MiB", "after del",
                                        "after empty_cache()"]
    assert table["allocated_MiB"].tolist() == [10, 266, 10, 10]
    assert table["reserved_MiB"].tolist() == [10, 266, 266, 10]  # the cache is emptied at the start
    assert table["peak_allocated_MiB"].tolist() == [10, 266, 266, 266]
    assert table["gpu_total_MiB"].tolist() == [15000] * 4
    assert table["gpu_free_MiB"].tolist() == [14990, 14734, 14734, 14990]


def test_memory_story_reads_the_numbers_of_its_table(nb, monkeypatch):
    FakeCachingAllocator(live_mib=10, cached_mib=30).install(monkeypatch)
    story = nb.memory_story(nb.memory_walkthrough(torch.device("cuda"))).splitlines()
    assert story == ["allocated_MiB: +256.0 with the tensor, -256.0 after del.",
                     "reserved_MiB: +256.0 with the tensor, +0.0 after del (cached), -256.0 after empty_cache().",
                     "peak_allocated_MiB: 266.0 once the tensor is gone; the GPU has 14,990.0 of 15,000.0 MiB "
                     "free."]


@pytest.mark.gpu_branch("02", "cell memory-table: device.type == 'cuda'")
def test_the_memory_cell_on_a_cuda_gpu(nb, monkeypatch):
    FakeCachingAllocator(live_mib=10, cached_mib=30).install(monkeypatch)
    shown = []
    printed = run_cell("02", "memory-table", {**vars(nb), "device": torch.device("cuda"),
                                              "display": shown.append})
    [table] = shown
    assert table["allocated_MiB"].tolist() == [10, 266, 10, 10]
    assert printed.startswith("allocated_MiB: +256.0 with the tensor, -256.0 after del.")


def test_the_memory_cell_without_cuda_makes_no_numbers_up(nb, monkeypatch):
    def no_counters(*args, **kwargs):
        raise AssertionError("a CUDA memory counter was read without CUDA")
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "mem_get_info"):
        monkeypatch.setattr(torch.cuda, name, no_counters)
    for device in ("cpu", "mps"):
        printed = run_cell("02", "memory-table", {**vars(nb), "device": torch.device(device), "display": print})
        assert printed == f"Skipped: device is {device}, not a CUDA GPU; no memory numbers are made up.\n"


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


def test_the_quoted_torch_load_warning_is_still_pytorchs_own():
    """The notebook quotes torch.load's documentation (its wording is a promise in tests/promises.py)."""
    assert "Never load data from an untrusted source" in torch.load.__doc__


@pytest.mark.gpu_branch("02", "gpu_checkpoint_error: torch.cuda.is_available()")
@pytest.mark.parametrize("cuda_available", [False, True])
def test_gpu_checkpoint_error_is_pytorchs_own_and_only_without_cuda(nb, monkeypatch, cuda_available):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_available)
    error = nb.gpu_checkpoint_error()
    if cuda_available:
        assert error is None  # with CUDA the checkpoint loads: nothing is tried
    else:
        assert isinstance(error, RuntimeError) and "map_location" in str(error)


@pytest.mark.parametrize("cuda_available, start", [
    (True, "CUDA is available, so a checkpoint saved on cuda:0 loads"),
    (False, "RuntimeError: Attempting to deserialize object on a CUDA device")])
def test_loading_a_gpu_checkpoint_with_and_without_cuda(nb, monkeypatch, cuda_available, start):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_available)
    assert run_cell("02", "restore-error", dict(vars(nb))).startswith(start)


# --- Going deeper D and E: more devices, a tour of architectures ---------------------------------

@pytest.mark.gpu_branch("02", "cell more-gpus: device.type != 'cpu'")
def test_the_gpus_this_process_can_use_are_listed(nb, monkeypatch):
    monkeypatch.setattr(torch.accelerator, "device_count", lambda: 2)  # Kaggle's T4 x2
    printed = run_cell("02", "more-gpus", {**vars(nb), "device": torch.device("cuda")})
    assert ("2 accelerator(s) this process can use: [device(type='cuda', index=0), "
            "device(type='cuda', index=1)]") in printed
    monkeypatch.setattr(torch.accelerator, "device_count", lambda: 1)  # a Mac: one mps device
    printed = run_cell("02", "more-gpus", {**vars(nb), "device": torch.device("mps")})
    assert "1 accelerator(s) this process can use: [device(type='mps', index=0)]" in printed
    printed = run_cell("02", "more-gpus", {**vars(nb), "device": CPU})
    assert "0 accelerator(s) this process can use: CPU only" in printed


def test_forward_seconds_times_an_eval_forward_pass_without_gradients(nb):
    seen = []
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    model.register_forward_hook(lambda module, args, output: seen.append(
        (output.requires_grad, torch.is_inference_mode_enabled())))
    seconds = nb.forward_seconds(model, torch.randn(2, 4), CPU)
    assert seconds > 0 and not model.training
    assert seen == [(False, True)] * 6  # one warm-up run, then the 5 timed runs


@pytest.mark.gpu_branch("02", "tour_row: device.type != 'cpu'")
def test_the_tour_times_a_cpu_copy_of_each_model_off_the_cpu(nb, monkeypatch):
    """With a CUDA device, tour_row times the model on it and a copy on the CPU. The model and inputs
    stay on the CPU here; torch.cuda.synchronize stands in, so the timing around it runs."""
    synchronized, forwards = [], []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synchronized.append(device))
    model, inputs = nn.Linear(4, 2), torch.randn(3, 4)
    model.register_forward_hook(lambda module, args, output: forwards.append(module))
    row = nb.tour_row("linear", model, inputs, model(inputs), torch.device("cuda"))
    assert row["params"] == 10 and row["output_shape"] == (3, 2) and row["input_shape"] == (3, 4)
    assert row["cuda_forward_ms"] > 0 and row["cpu_forward_ms"] > 0
    copies = [module for module in forwards if module is not model]
    assert len(copies) == 6 and all(module.weight.device == CPU for module in copies)  # the CPU copy
    assert synchronized and set(synchronized) == {torch.device("cuda")}  # only the CUDA timing waits
    synchronized.clear()
    on_cpu = nb.tour_row("linear", model, inputs, model(inputs), CPU)
    assert [key for key in on_cpu if key.endswith("_forward_ms")] == ["cpu_forward_ms"]
    assert synchronized == []


# --- Exercises: each check says what is wrong with a likely wrong answer --------------------------

def test_the_exercise_starters_say_not_done_yet_and_the_answers_pass(nb):
    for check, starter, answer, *given in [
            (nb.check_to_device, nb.to_device, nb.to_device_answer),
            (nb.check_start_state, nb.start_state, nb.start_state_answer),
            (nb.check_accuracy_on_device, nb.accuracy_on_device, nb.accuracy_on_device_answer, nb.new_cnn(CPU))]:
        assert check(starter, *given, CPU).startswith("NOT DONE YET")
        assert check(answer, *given, CPU).startswith("PASSED")


@pytest.mark.exercise("02", "to-device")
def test_exercise_1_a_move_whose_result_is_thrown_away(nb):
    def forgets_the_result(batch, device):
        for tensor in (batch.values() if isinstance(batch, dict) else batch):
            tensor.to(device)
        return batch

    assert nb.check_to_device(forgets_the_result, CPU) == (
        "NOT YET RIGHT: for a list, 2 of 2 tensors are still on cpu, not meta: .to() returns a moved "
        "copy; keep it.")


def test_exercise_1_a_dataloader_gives_a_list_batch_that_the_answer_keeps_a_list(nb):
    """The check's premise: default_collate makes a list of tuple samples, so the check tries a list,
    and the answer gives each kind of batch back as it came."""
    batch = next(iter(DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 3), torch.arange(4)),
                                 batch_size=2)))
    assert type(batch) is list
    images, labels = torch.randn(2, 3), torch.arange(2)
    for given in ([images, labels], (images, labels), {"images": images, "labels": labels}):
        moved = nb.to_device_answer(given, META)
        assert type(moved) is type(given)
        assert all(tensor.device == META for tensor in (moved.values() if isinstance(moved, dict) else moved))
    assert nb.check_to_device(nb.to_device_answer, CPU) == (
        "PASSED: a list, a tuple and a dict moved to meta and cpu, each kept its kind, every tensor and "
        "number kept.")


@pytest.mark.exercise("02", "to-device")
def test_exercise_1_an_answer_for_one_kind_of_batch_is_told_which_kind_it_failed_on(nb):
    def tuples_only(batch, device):
        return tuple(tensor.to(device) for tensor in batch)

    assert nb.check_to_device(tuples_only, CPU) == (
        "NOT YET RIGHT: for a list, to_device returned a tuple, not a list: return the kind it was "
        "given, so that the code after it works as before (type(batch)(...) makes a list of a list, a "
        "tuple of a tuple).")

    def a_list_for_every_sequence(batch, device):  # a list is not what a tuple's reader gets back
        if isinstance(batch, dict):
            return {name: tensor.to(device) for name, tensor in batch.items()}
        return [tensor.to(device) for tensor in batch]

    assert nb.check_to_device(a_list_for_every_sequence, CPU) == (
        "NOT YET RIGHT: for a tuple, to_device returned a list, not a tuple: return the kind it was "
        "given, so that the code after it works as before (type(batch)(...) makes a list of a list, a "
        "tuple of a tuple).")

    def sequences_only(batch, device):  # iterating a dict gives its keys, strings
        return type(batch)(tensor.to(device) for tensor in batch)

    assert nb.check_to_device(sequences_only, CPU) == (
        "NOT YET RIGHT: for a dict batch, to_device raised AttributeError: 'str' object has no "
        "attribute 'to'. Handle a list, a tuple and a dict: isinstance(batch, dict) tells them apart.")

    def tuples_and_dicts_only(batch, device):  # a list falls through to the dict's branch
        if isinstance(batch, tuple):
            return tuple(tensor.to(device) for tensor in batch)
        return {name: tensor.to(device) for name, tensor in batch.items()}

    assert nb.check_to_device(tuples_and_dicts_only, CPU) == (
        "NOT YET RIGHT: for a list batch, to_device raised AttributeError: 'list' object has no "
        "attribute 'items'. Handle a list, a tuple and a dict: isinstance(batch, dict) tells them "
        "apart.")


@pytest.mark.exercise("02", "to-device")
def test_exercise_1_each_other_mistake_gets_its_message(nb):
    def renames(batch, device):
        if isinstance(batch, dict):
            return {name.upper(): tensor.to(device) for name, tensor in batch.items()}
        return type(batch)(tensor.to(device) for tensor in batch)

    assert nb.check_to_device(renames, CPU) == (
        "NOT YET RIGHT: for a dict, the keys are ['IMAGES', 'LABELS'], not ['images', 'labels'].")

    def doubles(batch, device):
        if isinstance(batch, dict):
            return {name: 2 * tensor.to(device) for name, tensor in batch.items()}
        return type(batch)(2 * tensor.to(device) for tensor in batch)

    assert nb.check_to_device(doubles, CPU) == "NOT YET RIGHT: for a list on cpu, the numbers changed."

    def forgets_to_return(batch, device):
        moved = {name: tensor.to(device) for name, tensor in dict(enumerate(batch)).items()}

    assert nb.check_to_device(forgets_to_return, CPU) == (
        "NOT YET RIGHT: to_device returned None: return the moved batch.")

    def a_generator(batch, device):
        return (tensor.to(device) for tensor in batch)

    assert nb.check_to_device(a_generator, CPU) == (
        "NOT YET RIGHT: for a list, to_device returned a generator, not a list: return the kind it was "
        "given, so that the code after it works as before (type(batch)(...) makes a list of a list, a "
        "tuple of a tuple).")


@pytest.mark.exercise("02", "start-state")
def test_exercise_2_a_state_made_on_the_cpu(nb):
    def on_the_cpu(sequence, hidden_size):
        return torch.zeros(len(sequence), hidden_size)

    assert nb.check_start_state(on_the_cpu, CPU).startswith(
        "NOT YET RIGHT: for a sequence on meta, the state is on cpu, so TinyRNN's forward stops with the "
        "mismatch error")

    def ones(sequence, hidden_size):
        return torch.ones(len(sequence), hidden_size, device=sequence.device)

    assert nb.check_start_state(ones, CPU).startswith("NOT YET RIGHT: on cpu, TinyRNN's output is off by up to")

    def one_state_for_all(sequence, hidden_size):
        return torch.zeros(hidden_size, device=sequence.device)

    assert nb.check_start_state(one_state_for_all, CPU) == (
        "NOT YET RIGHT: for a batch of 5 sequences and hidden_size 16 the state has shape (16,), not (5, 16).")


@pytest.mark.exercise("02", "accuracy")
def test_exercise_3_batches_that_are_never_moved(nb):
    def never_moves(model, batches, device):
        right, seen = torch.zeros((), device=device), 0
        for inputs, labels in batches:
            right += (model(inputs).argmax(dim=1) == labels).sum()
            seen += len(labels)
        return right.item() / seen

    assert nb.check_accuracy_on_device(never_moves, nb.new_cnn(CPU), CPU) == (
        "NOT YET RIGHT: with device meta, the batches reached the model on cpu: move every batch with "
        ".to(device), and keep the result.")

    def a_tensor(model, batches, device):
        right, seen = torch.zeros((), device=device), 0
        for inputs, labels in batches:
            right += (model(inputs.to(device)).argmax(dim=1) == labels.to(device)).sum()
            seen += len(labels)
        return right / seen

    assert nb.check_accuracy_on_device(a_tensor, nb.new_cnn(CPU), CPU) == (
        "NOT YET RIGHT: accuracy_on_device returned a tensor on cpu: read the number with .item().")

    def counts_batches_not_samples(model, batches, device):
        right, seen = torch.zeros((), device=device), 0
        for inputs, labels in batches:
            right += (model(inputs.to(device)).argmax(dim=1) == labels.to(device)).sum()
            seen += 1
        return right.item() / seen

    assert nb.check_accuracy_on_device(counts_batches_not_samples, nb.new_cnn(CPU), CPU).startswith(
        "NOT YET RIGHT: on 160 images, accuracy_on_device says")


@pytest.mark.exercise("02", "start-state")
def test_exercise_2_a_state_that_is_no_tensor_is_told_so(nb):
    assert nb.check_start_state(lambda sequence, hidden_size: [0.0] * 2, CPU) == (
        "NOT YET RIGHT: start_state returned [0.0, 0.0] (a list), not a tensor.")
    assert nb.check_start_state(lambda sequence, hidden_size: None, CPU) == (
        "NOT YET RIGHT: start_state returned None (a NoneType), not a tensor.")

    def wrong_argument(sequence, hidden_size):
        return torch.zeros(len(sequence), hidden_size, device=sequence.devce)

    said = nb.check_start_state(wrong_argument, CPU)
    assert said.startswith("NOT YET RIGHT: your wrong_argument raised AttributeError: "), said


@pytest.mark.exercise("02", "accuracy")
def test_exercise_3_each_other_mistake_gets_its_message(nb):
    assert nb.check_accuracy_on_device(lambda model, batches, device: 0.25, nb.new_cnn(CPU), CPU) == (
        "NOT YET RIGHT: accuracy_on_device never called the model on a batch.")

    def counts(model, batches, device):
        right = torch.zeros((), device=device)
        for inputs, labels in batches:
            right += (model(inputs.to(device)).argmax(dim=1) == labels.to(device)).sum()
        return int(right.item())

    said = nb.check_accuracy_on_device(counts, nb.new_cnn(CPU), CPU)
    shown = said.split("accuracy_on_device returned ")[1].rsplit(", not a float", 1)[0]  # the count, and "(a int)"
    assert shown.split(" ")[0].isdigit() and "int" in shown
    assert said == f"NOT YET RIGHT: accuracy_on_device returned {shown}, not a float between 0 and 1.", said

    def raises_on_the_model(model, batches, device):
        for inputs, labels in batches:
            model(inputs.to(device)).argmax(dim=2)

    said = nb.check_accuracy_on_device(raises_on_the_model, nb.new_cnn(CPU), CPU)
    assert said.startswith("NOT YET RIGHT: your raises_on_the_model raised "), said
