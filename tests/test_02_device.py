"""Unit tests for the helpers of notebook 02 (tensors and models on the device), with made-up inputs.

The helpers are loaded from the notebook itself (definitions only, never its work), so these tests
check exactly the code a learner runs. They need no GPU: the largest-batch finder is tested with fake
steps that raise torch.OutOfMemoryError above a size, and the cross-device load with the CPU and the
`meta` device. The device choice (pick_device, from the shared setup cell) is tested once, in
test_shared_setup.py.
"""
import ast
import math
import pickle
import re
import types
import weakref

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from notebook_code import (INSTALL_CELL_FIRST_LINE, SHARED_CELL_FIRST_LINE, core_cells,
                           load_helpers, notebook_path, read, run_cell)


@pytest.fixture(scope="module")
def nb():
    return load_helpers("02")


# The calls notebook 02 teaches, each in a visible code cell of its core (checked by
# tests/test_learner_first.py). Those whose effect a CPU cannot show (synchronize around the clock,
# non_blocking, pin_memory, the CUDA memory counters) are tested below with recording stand-ins.
TAUGHT_CALLS = [
    r"on_cpu\.to\(device\)",
    r"torch\.randn\(side, side, device=device\)",
    r"\.item\(\)",
    r"\.cpu\(\)\.numpy\(\)",
    r"model\.to\(device\)",
    r"def train_epochs\(.*synchronize\(device\).*time\.perf_counter\(\).*"
    r"\.to\(device, non_blocking=non_blocking\).*synchronize\(device\)[^\n]*\n\s+seconds = time\.perf_counter\(\)",
    r"DataLoader\(.*pin_memory=use_pinned_memory",
    r"non_blocking=True",
    r"torch\.cuda\.memory_allocated\(device\)",
    r"torch\.cuda\.memory_reserved\(device\)",
    r"torch\.cuda\.max_memory_allocated\(device\)",
    r"torch\.cuda\.empty_cache\(\)",
    r"torch\.save\(model\.state_dict\(\), path\)",
    r"torch\.load\(path, map_location=device, weights_only=True\)",
]


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
    largest, attempts = nb.largest_batch_that_fits(step_that_fits_up_to(limit, tried),
                                                   torch.device("cpu"), start=1, max_batch=4096)
    assert largest == limit
    assert [size for size, _ in attempts] == tried  # the log lists every call, in order
    assert all(fitted == (size <= limit) for size, fitted in attempts)
    assert all(1 <= size <= 4096 for size in tried)
    assert len(tried) <= 2 * math.ceil(math.log2(4096)) + 1


def test_largest_batch_stops_at_the_cap_when_everything_fits(nb):
    largest, attempts = nb.largest_batch_that_fits(step_that_fits_up_to(10**9),
                                                   torch.device("cpu"), start=3, max_batch=100)
    assert largest == 100
    assert all(fitted for _, fitted in attempts)
    assert attempts[-1][0] == 100


def test_largest_batch_is_zero_when_even_the_first_size_fails(nb):
    largest, attempts = nb.largest_batch_that_fits(step_that_fits_up_to(3), torch.device("cpu"),
                                                   start=8)
    assert largest == 0
    assert attempts == [(8, False)]


def test_largest_batch_does_not_swallow_other_errors(nb):
    def broken_step(batch_size):
        raise ValueError("a bug in the step, not a memory problem")

    with pytest.raises(ValueError):
        nb.largest_batch_that_fits(broken_step, torch.device("cpu"))


@pytest.mark.gpu_branch("02", "free_cached_memory: device.type == 'cuda'")
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
    # `meta` is a second device every install has
    loaded = nb.load_weights(make_model(seed=2), path, torch.device("meta"))
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
        # inputs stay paired with their targets
        assert torch.equal(batch_inputs.squeeze(1).long(), batch_targets)


def test_quadrant_images_are_brighter_in_the_labelled_quarter(nb):
    images, labels = nb.make_quadrant_images(400, 32, torch.Generator().manual_seed(0))
    quarters = torch.stack([images[:, :, :16, :16], images[:, :, :16, 16:],
                            images[:, :, 16:, :16], images[:, :, 16:, 16:]])
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


# --- weights_only is much safer, not safe ----------------------------------------------------

TORCH_LOAD_WARNING = "Never load data from an untrusted source"


def notebook_text(kind):
    """The sources of every cell of `kind` ('markdown' or 'code') of notebook 02, one string each."""
    return [cell.source for cell in read(notebook_path("02")).cells if cell.cell_type == kind]


def one_line(text):
    """`text` with every run of white space (line breaks too) turned into one space."""
    return " ".join(text.split())


def test_the_quoted_torch_load_warning_is_pytorchs_own_wording():
    assert TORCH_LOAD_WARNING in torch.load.__doc__
    assert any(TORCH_LOAD_WARNING in one_line(text) for text in notebook_text("markdown"))


def test_weights_only_is_never_called_safe():
    """'much safer' is right; 'safe' or 'safely' next to weights_only is not (torch.load's own docs)."""
    for text in notebook_text("markdown") + notebook_text("code"):
        for sentence in re.split(r"(?<=[.;:!?])\s+", one_line(text)):
            if "weights_only" not in sentence:
                continue
            claims = re.findall(r"\b(?:safe|safely)\b", sentence.replace("not safe", ""))
            assert not claims, f"weights_only called safe: {sentence!r}"
    markdown = " ".join(notebook_text("markdown"))
    assert "much safer" in markdown and "untrusted" in markdown


# --- every table a learner reads is rounded --------------------------------------------------

def test_readable_rounds_every_float_column_and_leaves_the_rest():
    table = pd.DataFrame({"run": ["a", "b"], "ms": [37.500000001, 2.2512345], "count": [3, 4],
                          "loss": [0.0123456, 1.3862944], "fitted": [True, False]})
    shown = load_helpers("02").readable(table)
    assert shown["ms"].tolist() == [37.5, 2.25]
    assert shown["loss"].tolist() == [0.0123, 1.3863]
    assert shown["run"].tolist() == ["a", "b"] and shown["count"].tolist() == [3, 4]
    assert shown["fitted"].tolist() == [True, False]
    assert table["ms"].iloc[0] == 37.500000001  # the caller's table is left alone
    assert "37.500000" not in shown.to_string()


def test_readable_copes_with_zeros_and_huge_values():
    shown = load_helpers("02").readable(pd.DataFrame({"a": [0.0, 0.0], "b": [0.0, 123456.789]}))
    assert shown["a"].tolist() == [0.0, 0.0]
    assert shown["b"].tolist() == [0.0, 123457.0]


def _displayed(statement):
    """The expression a cell shows as its result, or None (a call to print, plt.show or display)."""
    if not isinstance(statement, ast.Expr):
        return None
    if isinstance(statement.value, ast.Call) and ast.unparse(statement.value.func) in {
            "print", "plt.show", "display"}:
        return None
    return statement.value


def test_every_table_the_notebook_shows_goes_through_readable():
    shown = 0
    for source in notebook_text("code"):
        if source.startswith((SHARED_CELL_FIRST_LINE, INSTALL_CELL_FIRST_LINE)):
            continue  # the collection's own cells: report_figures displays a record, not a table
        tree = ast.parse(source)
        results = [_displayed(tree.body[-1])] if tree.body else []
        results += [call.args[0] for call in ast.walk(tree) if isinstance(call, ast.Call)
                    and ast.unparse(call.func) == "display"]
        for result in filter(None, results):
            assert isinstance(result, ast.Call) and ast.unparse(result.func) == "readable", (
                f"a cell shows {ast.unparse(result)!r} without rounding it through readable()")
            shown += 1
    assert shown >= 6  # creation times, three training tables, memory, tour, batch search


def test_summarize_run_reports_milliseconds_per_epoch(nb):
    rows = [{"epoch": 1, "loss": 2.0, "seconds": 0.5}, {"epoch": 2, "loss": 1.0, "seconds": 0.25},
            {"epoch": 3, "loss": 0.5, "seconds": 0.75}]
    assert nb.summarize_run("r", rows) == {"run": "r", "first_loss": 2.0, "last_loss": 0.5,
                                           "ms_per_epoch": 500.0}


# --- the GPU-only branches, against PyTorch's documented API ---------------------------------

def test_every_torch_cuda_call_exists_and_is_not_deprecated():
    names = set()
    for source in notebook_text("code"):
        for node in ast.walk(ast.parse(source)):
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


@pytest.mark.gpu_branch("02", "gpu_checkpoint_error: torch.cuda.is_available()")
@pytest.mark.parametrize("cuda_available", [False, True])
def test_gpu_checkpoint_error_is_pytorchs_own_and_only_without_cuda(nb, monkeypatch, cuda_available):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_available)
    error = nb.gpu_checkpoint_error()
    if cuda_available:
        assert error is None  # with CUDA the checkpoint loads: nothing is tried
    else:
        assert isinstance(error, RuntimeError) and "map_location" in str(error)


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
    simulated = nb.search_story(300, attempts, torch.device("cpu"), 4096)
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

    synchronized = []
    monkeypatch.setitem(nb.make_training_step.__globals__, "synchronize", synchronized.append)
    step = nb.make_training_step(torch.device("cpu"), image_side=16)
    monkeypatch.setattr(torch, "randn", same_batch_every_time)
    model = step_model(step)
    before = [parameter.detach().clone() for parameter in model.parameters()]
    step(3)
    first = [parameter.grad.clone() for parameter in model.parameters()]
    step(3)
    second = [parameter.grad for parameter in model.parameters()]
    assert batches == [((3, 3, 16, 16), torch.device("cpu"))] * 2  # the batch size asked for
    assert synchronized == [torch.device("cpu")] * 2  # waits for the device: OOM surfaces in the step
    assert all(g.abs().sum() > 0 for g in first)  # backward reached every parameter
    assert all(torch.equal(a, b) for a, b in zip(first, second))  # zeroed, not accumulated
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # a probe: no update


def test_training_step_for_the_search_keeps_model_and_batch_on_its_device(nb, monkeypatch):
    # `meta` is a second device every install has: shapes and dtypes, no numbers.
    monkeypatch.setitem(nb.make_training_step.__globals__, "synchronize", lambda device: None)
    step = nb.make_training_step(torch.device("meta"), image_side=16)
    step(4)
    model = step_model(step)
    assert {parameter.device.type for parameter in model.parameters()} == {"meta"}
    assert {parameter.grad.device.type for parameter in model.parameters()} == {"meta"}


def test_train_epochs_learns_on_its_device_and_reads_each_loss_as_a_python_number(nb):
    inputs, targets, _, _ = nb.make_regression_data(256, 3, torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    start = [parameter.detach().clone() for parameter in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = nb.OnDeviceBatches(inputs, targets, batch_size=32)
    model.eval()  # train_epochs switches the model to training mode itself
    rows = nb.train_epochs(model, batches, nn.MSELoss(), optimizer, torch.device("cpu"), epochs=3,
                           non_blocking=True)
    losses = [row["loss"] for row in rows]
    assert all(type(loss) is float for loss in losses)
    assert losses[2] < losses[1] < losses[0]
    assert all(not torch.equal(a, b) for a, b in zip(start, model.parameters()))
    assert model.training and nb.model_device(model) == torch.device("cpu")


RUNS = pd.DataFrame({
    "run": ["regression, data on device, DataLoader", "regression, data on device, sliced batches",
            "regression, data on CPU, moved per batch", "CNN, data on device, sliced batches",
            "CNN, data on CPU, moved per batch"],
    "first_loss": [8.0, 8.0, 8.0, 1.41, 1.42], "last_loss": [0.5, 0.5, 0.5, 0.3, 0.4],
    "ms_per_epoch": [40.0, 10.0, 120.0, 50.0, 90.0]})


def test_feeding_story_prints_short_lines_that_read_the_table(nb):
    lines = nb.feeding_story(RUNS, torch.device("cpu")).splitlines()
    assert lines == ["Every run's loss went down.", "DataLoader / sliced batches: 4.0x the time per epoch.",
                     "Moved per batch / data on device: 3.00x; device is the CPU: nothing is copied, so that "
                     "gap is noise.", "CNN loss: 1.41 -> 0.30 (a blind guess: ln 4 = 1.39)."]
    assert all(len(line) <= 100 for line in lines)
    stuck = RUNS.assign(last_loss=[0.5, 9.0, 0.5, 0.3, 0.4])
    assert nb.feeding_story(stuck, torch.device("cpu")).startswith(
        "The loss did NOT go down in: regression, data on device, sliced batches.")


# On a GPU the line about the copies follows the measured ratio of "moved per batch" to "data
# on device, DataLoader" on each side of its boundaries (1.2 and 1 / 1.2): a ratio near 1.0 on a T4 must not
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
    runs = RUNS.assign(ms_per_epoch=[40.0, 10.0, moved_ms, 50.0, 90.0])
    lines = nb.feeding_story(runs, torch.device("cuda")).splitlines()
    assert lines[2] == f"Moved per batch / data on device: {moved_ms / 40:.2f}x; {verdict}"
    assert "nothing is copied" not in " ".join(lines)
    on_a_mac = nb.feeding_story(runs, torch.device("mps")).splitlines()[2]  # copies to mps are real too
    assert on_a_mac == lines[2].replace("on cuda", "on mps")
    on_cpu = nb.feeding_story(runs, torch.device("cpu")).splitlines()[2]
    assert on_cpu.endswith("device is the CPU: nothing is copied, so that gap is noise.")
    assert nb.COPY_COST_RATIO == 1.2


# --- learner first ---------------------------------------------------------------------------

def _visible_code_cells():
    return [source for source in notebook_text("code") if not source.startswith("#@title")]


def test_each_visible_code_cell_is_short():
    """Notebook 02's own rule; test_learner_first.py checks the budget of visible lines in all."""
    sizes = [sum(1 for line in source.splitlines() if line.strip()) for source in _visible_code_cells()]
    assert max(sizes) <= 20  # the timed training loop and the memory counters are the longest


# --- the real device-mismatch errors on a GPU, the `meta` stand-in without one ----------------

# PyTorch's own messages on a CUDA GPU: aten/src/ATen/native/tensor_numpy.cpp and TensorIterator.cpp
# (TensorIterator takes the first non-CPU device as the common one, so the order of the operands
# does not change the message).
CUDA_NUMPY_ERROR = ("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
                    "tensor to host memory first.")
CUDA_MISMATCH_ERROR = ("Expected all tensors to be on the same device, but found at least two devices, "
                       "cuda:0 and cpu!")


class StandInCudaTensor:
    """A tensor on cuda:0, as far as the cells of Steps 1 and 2 use one, failing as the real one does."""
    device = torch.device("cuda", 0)

    def numpy(self):
        raise TypeError(CUDA_NUMPY_ERROR)

    def __add__(self, other):
        raise RuntimeError(CUDA_MISMATCH_ERROR)

    __radd__ = __add__


class TorchWithAStandInGpu:
    """`torch` for a cell, except that torch.ones(..., device=<a CUDA device>) gives a stand-in."""

    def __getattr__(self, name):
        return getattr(torch, name)

    def ones(self, *size, device=None, **kwargs):
        if device is not None and torch.device(device).type == "cuda":
            return StandInCudaTensor()
        return torch.ones(*size, device=device, **kwargs)


@pytest.mark.gpu_branch("02", "not_the_cpu: device.type == 'cpu'")
@pytest.mark.parametrize("device, other", [("cpu", "meta"), ("cuda", "cuda"), ("cuda:1", "cuda:1"),
                                           ("mps", "mps"), ("xpu", "xpu")])
def test_not_the_cpu_is_the_gpu_itself_and_meta_only_without_one(nb, device, other):
    assert nb.not_the_cpu(torch.device(device)) == torch.device(other)


def test_on_a_cuda_gpu_the_numpy_and_mismatch_cells_raise_the_real_errors(nb):
    namespace = {**vars(nb), "device": torch.device("cuda", 0), "torch": TorchWithAStandInGpu()}
    printed = run_cell("02", "cell-15", namespace)
    assert namespace["elsewhere"] == torch.device("cuda", 0)
    assert printed.splitlines() == ["elsewhere: cuda:0 ", f"TypeError: {CUDA_NUMPY_ERROR}"]
    printed = run_cell("02", "cell-17", namespace)
    assert printed.strip() == f"RuntimeError: {CUDA_MISMATCH_ERROR}"
    assert "meta" not in printed


def test_without_a_gpu_the_same_cells_use_the_named_meta_stand_in(nb):
    namespace = {**vars(nb), "device": torch.device("cpu")}
    printed = run_cell("02", "cell-15", namespace)
    assert printed.startswith("elsewhere: meta (the stand-in: no GPU)")
    assert "can't convert meta device type tensor to numpy" in printed
    printed = run_cell("02", "cell-17", namespace)
    assert printed.startswith("RuntimeError: ") and "meta" in printed and "cpu" in printed


# What `mps` (a Mac's GPU) says to float64, which it does not have (aten/src/ATen/mps: "MPS framework").
MPS_FLOAT64_ERROR = ("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
                     "Please use float32 instead.")


def test_step_3s_dtype_change_runs_on_a_mac_whose_gpu_has_no_float64(nb, monkeypatch):
    """On a Mac, `elsewhere` is `mps`, which refuses float64: the cell's dtype change must be one every device
    has. `meta` plays the Mac's GPU here, with Tensor.to refusing float64 there as `mps` does."""
    real_to = torch.Tensor.to

    def to_as_on_a_mac(self, *args, **kwargs):
        moved = real_to(self, *args, **kwargs)
        if moved.device.type == "meta" and moved.dtype == torch.float64:
            raise TypeError(MPS_FLOAT64_ERROR)
        return moved

    monkeypatch.setattr(torch.Tensor, "to", to_as_on_a_mac)
    on_the_mac = torch.device("meta")
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1)).to(on_the_mac)
    namespace = {**vars(nb), "device": on_the_mac, "elsewhere": on_the_mac, "model": model}
    printed = run_cell("02", "cell-21", namespace).splitlines()
    assert printed[0].endswith("shape (4, 10), torch.float32, on cpu")  # the bug: nothing changed
    assert printed[1].endswith("shape (4, 10), torch.float16, on meta")
    assert printed[2].endswith("torch.float16")
    assert next(namespace["model"].parameters()).dtype == torch.float32  # back to the usual dtype


def test_the_core_mixes_devices_through_not_the_cpu_only():
    """No cell of the core names `meta` itself: on a GPU every mismatch is the real one."""
    notebook = read(notebook_path("02"))
    summary = next(i for i, cell in enumerate(notebook.cells)
                   if cell.cell_type == "markdown" and "## Summary" in cell.source)
    for cell in notebook.cells[:summary]:
        if cell.cell_type == "code" and not cell.source.startswith("#@title"):
            assert not re.search(r'(device=|\.to\()\s*"meta"', cell.source), cell.source


# --- Step 1 times making on the CPU, the copy, and making on the device as three rows -------

def test_step_1_times_the_cpu_work_the_copy_and_the_device_separately(nb, monkeypatch):
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
    namespace = {**vars(nb), "device": torch.device("meta"), "FAST": True, "time_it": time_it}
    printed = run_cell("02", "cell-07", namespace)
    meta, cpu = torch.device("meta"), torch.device("cpu")
    assert timed == [([cpu], cpu, 5),  # the CPU makes the numbers
                     ([], meta, 5),  # the copy alone: nothing is generated
                     ([meta], meta, 5)]  # made on the device
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
    story = " ".join(nb.creation_story({"a": 1.0, "b": 0.001, "c": 1.1}, 16, torch.device("cpu")).split())
    assert story.startswith("device is the CPU: .to(device) copies nothing")
    assert "detour" not in story


# --- the figure of where a tensor lives -------------------------------------------------------

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


# --- the `device.type == "cuda"` cells, run with stand-ins shaped like torch.cuda ------------

@pytest.mark.gpu_branch("02", "cell cell-39c: device.type == 'cuda'")
def test_step_5_memory_cell_on_a_cuda_gpu(nb, monkeypatch):
    FakeCachingAllocator(live_mib=10, cached_mib=30).install(monkeypatch)
    shown = []
    printed = run_cell("02", "cell-39c", {**vars(nb), "device": torch.device("cuda"), "display": shown.append})
    [table] = shown
    assert table["allocated_MiB"].tolist() == [10, 266, 10, 10]
    assert printed.startswith("allocated_MiB: +256.0 with the tensor, -256.0 after del.")


def test_step_5_memory_cell_without_cuda_makes_no_numbers_up(nb, monkeypatch):
    def no_counters(*args, **kwargs):
        raise AssertionError("a CUDA memory counter was read without CUDA")
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "mem_get_info"):
        monkeypatch.setattr(torch.cuda, name, no_counters)
    for device in ("cpu", "mps"):
        printed = run_cell("02", "cell-39c", {**vars(nb), "device": torch.device(device), "display": print})
        assert printed == f"Skipped: device is {device}, not a CUDA GPU; no memory numbers are made up.\n"


# The real message of CUDA's caching allocator (c10/cuda/CUDACachingAllocator.cpp), for a T4.
T4_OUT_OF_MEMORY = ("CUDA out of memory. Tried to allocate 1.53 GiB. GPU 0 has a total capacity of 14.74 GiB "
                    "of which 1.02 GiB is free. Of the allocated memory 12.10 GiB is allocated by PyTorch, "
                    "and 1.43 GiB is reserved by PyTorch but unallocated.")


@pytest.mark.gpu_branch("02", "cell cell-43c: device.type == 'cuda'")
def test_going_deeper_b_searches_for_real_on_a_cuda_gpu(nb, monkeypatch):
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

    shown = []
    namespace = {**vars(nb), "device": torch.device("cuda"), "make_training_step": make_training_step,
                 "display": shown.append}
    printed = " ".join(run_cell("02", "cell-43c", namespace).split())
    assert calls[:2] == ["reset", ("make_training_step", torch.device("cuda"))]  # peak counted afresh
    tries = [call for call in calls if isinstance(call, int)]
    failures = [size for size in tries if size > 700]
    assert calls.count("empty_cache") == len(failures) > 0  # the cache is emptied after each failure
    assert printed.startswith("MEASURED on Tesla T4: the largest batch that fits is 700 images.")
    assert "Peak allocated: 14,100 MiB" in printed and f"It took {len(tries)} tries" in printed
    assert namespace["largest"] == 700 and "SIMULATION" not in printed


def test_going_deeper_b_simulates_without_cuda(nb, monkeypatch):
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: pytest.fail("no CUDA"))
    namespace = {**vars(nb), "device": torch.device("cpu")}
    printed = run_cell("02", "cell-43c", namespace)
    assert printed.startswith("SIMULATION") and namespace["largest"] == 300


@pytest.mark.parametrize("cuda_available, start", [
    (True, "CUDA is available, so a checkpoint saved on cuda:0 loads"),
    (False, "RuntimeError: Attempting to deserialize object on a CUDA device")])
def test_going_deeper_c_loading_a_gpu_checkpoint_with_and_without_cuda(nb, monkeypatch, cuda_available,
                                                                       start):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_available)
    assert run_cell("02", "cell-48f", dict(vars(nb))).startswith(start)


@pytest.mark.gpu_branch("02", "cell cell-49: device.type != 'cpu'")
def test_going_deeper_d_lists_each_gpu_this_process_can_use(nb, monkeypatch):
    monkeypatch.setattr(torch.accelerator, "device_count", lambda: 2)  # Kaggle's T4 x2
    printed = run_cell("02", "cell-49", {**vars(nb), "device": torch.device("cuda")})
    assert ("2 accelerator(s) this process can use: [device(type='cuda', index=0), "
            "device(type='cuda', index=1)]") in printed
    monkeypatch.setattr(torch.accelerator, "device_count", lambda: 1)  # a Mac: one mps device
    printed = run_cell("02", "cell-49", {**vars(nb), "device": torch.device("mps")})
    assert "1 accelerator(s) this process can use: [device(type='mps', index=0)]" in printed
    printed = run_cell("02", "cell-49", {**vars(nb), "device": torch.device("cpu")})
    assert "0 accelerator(s) this process can use: CPU only" in printed


@pytest.mark.gpu_branch("02", "tour_row: device.type != 'cpu'")
def test_going_deeper_a_times_a_cpu_copy_of_each_model_off_the_cpu(nb, monkeypatch):
    timed = []

    def forward_seconds(model, inputs, device):  # stands in for the timed forward pass
        timed.append((next(model.parameters()).device.type, inputs.device.type, device.type))
        return 0.002 if device.type == "cuda" else 0.010

    monkeypatch.setitem(nb.tour_row.__globals__, "forward_seconds", forward_seconds)
    model, inputs = nn.Linear(4, 2), torch.randn(3, 4)
    row = nb.tour_row("linear", model, inputs, model(inputs), torch.device("cuda"))
    assert row["cuda_forward_ms"] == 2.0 and row["cpu_forward_ms"] == 10.0
    assert timed == [("cpu", "cpu", "cuda"), ("cpu", "cpu", "cpu")]
    assert row["params"] == 10 and row["output_shape"] == (3, 2)
    timed.clear()
    on_cpu = nb.tour_row("linear", model, inputs, model(inputs), torch.device("cpu"))
    assert [key for key in on_cpu if key.endswith("_forward_ms")] == ["cpu_forward_ms"]
    assert timed == [("cpu", "cpu", "cpu")]  # timed once: no second copy on the CPU


# --- every condition of the helpers on both sides ----------------------------------------------

def test_readable_keeps_at_most_four_decimals_and_no_fewer_than_zero(nb):
    shown = nb.readable(pd.DataFrame({"tiny": [0.0000123, 1.0], "big": [123456.7, 7.5]}))
    assert shown["tiny"].tolist() == [0.0, 1.0]  # 4 decimals at most
    assert shown["big"].tolist() == [123456.7, 7.5]  # the smallest, 7.5, asks for 2 decimals


def test_feeding_story_without_a_moved_run_or_cnn_rows(nb):
    runs = pd.DataFrame({"run": ["regression, data on device, DataLoader",
                                 "regression, data on device, sliced batches"],
                         "first_loss": [8.0, 8.0], "last_loss": [0.5, 0.5], "ms_per_epoch": [40.0, 10.0]})
    story = " ".join(nb.feeding_story(runs, torch.device("cuda")).split())
    assert "DataLoader / sliced batches: 4.0x" in story
    assert "Moving each batch" not in story and "nothing is copied" not in story and "CNN" not in story


def test_on_device_batches_keep_the_order_without_shuffle(nb):
    batches = nb.OnDeviceBatches(torch.arange(5.0), torch.arange(5), batch_size=2, shuffle=False)
    assert [targets.tolist() for _, targets in batches] == [[0, 1], [2, 3], [4]]


def test_largest_batch_when_the_first_size_is_the_cap(nb):
    largest, attempts = nb.largest_batch_that_fits(step_that_fits_up_to(10), torch.device("cpu"),
                                                   start=8, max_batch=8)
    assert largest == 8 and attempts == [(8, True)]


@pytest.mark.parametrize("device_type, words", [("cuda", "an NVIDIA GPU"), ("mps", "Apple Silicon"),
                                                ("cpu", "the CPU: PyTorch found no GPU")])
def test_device_kinds_in_plain_words(nb, device_type, words):
    assert words in nb.DEVICE_KINDS[device_type] and "xpu" not in nb.DEVICE_KINDS


# --- the helpers that time a forward pass and a training loop ------------------------------------------


def test_forward_seconds_times_an_eval_forward_pass_without_gradients(nb, monkeypatch):
    seen = []

    def time_it(run, device, repeats=3, warmup=1):
        output = run()
        seen.append((output.requires_grad, device, repeats))
        return 0.004

    monkeypatch.setitem(nb.forward_seconds.__globals__, "time_it", time_it)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    assert nb.forward_seconds(model, torch.randn(2, 4), torch.device("cpu")) == 0.004
    assert not model.training and seen == [(False, torch.device("cpu"), 5)]


def test_new_regression_model_starts_from_the_same_weights_on_its_device(nb):
    first, second = nb.new_regression_model(torch.device("cpu")), nb.new_regression_model("meta")
    assert torch.equal(first.weight, nb.new_regression_model(torch.device("cpu")).weight)
    assert (first.in_features, first.out_features) == (10, 1) and second.weight.device.type == "meta"


@pytest.mark.parametrize("size", [32, 64])
def test_small_cnn_classifies_images_of_its_size_into_four_classes(nb, size):
    model = nb.SmallCNN(size=size)
    assert model(torch.randn(5, 3, size, size)).shape == (5, 4)
    assert torch.equal(nb.new_cnn(torch.device("cpu")).classifier[1].weight,
                       nb.new_cnn(torch.device("cpu")).classifier[1].weight)  # the same start


# --- the timed loop in view, tested where a CPU cannot show what it does -------------------------

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
def test_train_epochs_reads_the_clock_only_after_synchronize_and_passes_non_blocking(nb, monkeypatch,
                                                                                      non_blocking):
    """On a GPU, work is queued: the clock must start after one synchronize and stop after another that
    follows the last optimizer step; non_blocking must reach every .to() of a batch."""
    events, readings = [], iter(range(100))
    functions = nb.train_epochs.__globals__
    monkeypatch.setitem(functions, "synchronize", lambda device: events.append(("synchronize", device)))
    monkeypatch.setitem(functions, "time", types.SimpleNamespace(
        perf_counter=lambda: events.append("clock") or float(next(readings))))
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    batches = [(MovedByTo(torch.randn(4, 3), events), MovedByTo(torch.randn(4, 1), events)) for _ in range(2)]
    optimizer = SteppingOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), events)
    device = torch.device("cpu")
    rows = nb.train_epochs(model, batches, nn.MSELoss(), optimizer, device, epochs=2,
                           non_blocking=non_blocking)
    moves = [("to", "cpu", non_blocking)] * 2
    one_epoch = [("synchronize", device), "clock", *moves, "step", *moves, "step", ("synchronize", device),
                 "clock"]
    assert events == one_epoch * 2
    assert [row["seconds"] for row in rows] == [1.0, 1.0] and [row["epoch"] for row in rows] == [1, 2]


class RecordingDataLoader:
    """Stands in for DataLoader: notes its arguments; batches come from a plain DataLoader, unpinned."""
    made = []

    def __init__(self, dataset, batch_size=1, shuffle=False, pin_memory=False):
        RecordingDataLoader.made.append({"pin_memory": pin_memory, "batch_size": batch_size, "shuffle": shuffle})
        self.loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)

    def __iter__(self):
        return iter(self.loader)


def recording_train_epochs(calls):
    """Stands in for train_epochs: notes the device and non_blocking of each run, returns two rows."""
    def train_epochs(model, batches, loss_fn, optimizer, device, epochs, non_blocking=False):
        calls.append((device, non_blocking))
        return [{"epoch": 1, "loss": 2.0, "seconds": 0.2}, {"epoch": 2, "loss": 1.0, "seconds": 0.1}]
    return train_epochs


class StaysOnTheCpu(torch.Tensor):
    """A tensor whose .to(a GPU) hands back its plain CPU self: cells that move data run on a CPU."""

    def to(self, *args, **kwargs):
        return self.as_subclass(torch.Tensor)


@pytest.mark.parametrize("device_type, pinned", [("cuda", True), ("cpu", False), ("mps", False)])
def test_way_2_pins_the_dataloaders_batches_and_copies_them_non_blocking_on_a_cuda_gpu(nb, device_type,
                                                                                     pinned):
    RecordingDataLoader.made.clear()
    calls, device = [], torch.device(device_type)
    inputs, targets, true_weight, _ = nb.make_regression_data(64, 10, torch.Generator().manual_seed(0))
    namespace = {**vars(nb), "device": device, "DataLoader": RecordingDataLoader,
                 "regression_inputs": inputs, "regression_targets": targets, "true_weight": true_weight,
                 "batch_size": 16, "regression_epochs": 2, "runs": [],
                 "new_regression_model": lambda device: nn.Linear(10, 1),
                 "train_epochs": recording_train_epochs(calls)}
    run_cell("02", "cell-31", namespace)
    assert RecordingDataLoader.made == [{"pin_memory": pinned, "batch_size": 16, "shuffle": True}]
    assert calls == [(device, True)]  # moved per batch, with non_blocking=True
    images = torch.randn(8, 3, 32, 32).as_subclass(StaysOnTheCpu)
    labels = torch.randint(0, 4, (8,)).as_subclass(StaysOnTheCpu)
    namespace.update(images=images, labels=labels, FAST=True, new_cnn=lambda device: nb.SmallCNN(),
                     runs=[{"run": name, "first_loss": 2.0, "last_loss": 1.0, "ms_per_epoch": ms}
                           for name, ms in (("regression, data on device, DataLoader", 40.0),
                                            ("regression, data on device, sliced batches", 10.0))])
    calls.clear()
    printed = run_cell("02", "cell-33b", namespace)
    assert RecordingDataLoader.made[1:] == [{"pin_memory": pinned, "batch_size": 16, "shuffle": True}]
    assert calls == [(device, False), (device, True)]  # sliced on the device, then moved per batch
    assert printed.startswith("Every run's loss went down.")


def test_the_figure_of_where_a_tensor_lives_comes_at_step_1s_first_move():
    notebook = read(notebook_path("02"))
    ids = [cell.get("id") for cell in notebook.cells]
    first_move = next(cell.get("id") for cell in notebook.cells
                      if cell.cell_type == "code" and not cell.source.startswith("#@title")
                      and ".to(device)" in cell.source)
    assert first_move == "cell-05" and ids.index("cell-30-figure") == ids.index("cell-05") + 1
    assert "## Step 1 " in notebook.cells[ids.index("cell-05") - 1].source


def test_step_4_charts_the_time_per_epoch_not_the_loss():
    import matplotlib.pyplot as plt
    nb = load_helpers("02")
    figure = nb.epoch_time_chart(RUNS, torch.device("cuda"))
    try:
        [axes] = figure.axes
        assert [label.get_text() for label in axes.get_yticklabels()] == list(RUNS["run"])
        assert [text.get_text() for text in axes.texts] == ["40.0 ms", "10.0 ms", "120.0 ms", "50.0 ms",
                                                           "90.0 ms"]
        assert axes.get_xscale() == "log" and "time per epoch, ms" in axes.get_xlabel()
        assert axes.get_title().startswith("Time per epoch on cuda")
        low, high = axes.get_xlim()
        assert low < 10.0 and high > 120.0
    finally:
        plt.close(figure)
    chart_cells = [cell.source for cell in core_cells(read(notebook_path("02")))
                   if cell.cell_type == "code" and "plt.show()" in cell.source]
    assert not any("loss" in source for source in chart_cells if "epoch_time_chart" in source)
    assert any("epoch_time_chart(pd.DataFrame(runs), device)" in source for source in chart_cells)


@pytest.mark.parametrize("elsewhere, pinned, fallback", [
    (torch.device("meta"), False, "the meta device stood in for a GPU's errors"),
    (torch.device("cuda", 0), True, None),
    (torch.device("mps"), False, None),  # a Mac's real errors: nothing stood in
])
def test_the_core_reports_the_figures_it_measured_once(nb, elsewhere, pinned, fallback):
    """Issue 32: one report_figures call near the end of the core, with Step 1's and Step 4's timings;
    `fallback` says when the `meta` device stood in for the GPU's errors."""
    reported = []
    first_inputs = types.SimpleNamespace(is_pinned=lambda: pinned)
    namespace = {**vars(nb), "elsewhere": elsewhere, "first_inputs": first_inputs, "weight_gap": 0.012345,
                 "report_figures": lambda fallback=None, **figures: reported.append((fallback, figures)),
                 "creation_ms": {"torch.randn(...): make on the CPU": 1.23456, "copy: x": 0.5},
                 "runs": [{"run": "regression, data on device, DataLoader", "ms_per_epoch": 40.123}]}
    run_cell("02", "cell-45c", namespace)
    assert reported == [(fallback, {"creation_ms": {"torch.randn(...)": 1.235, "copy": 0.5},
                                    "epoch_ms": {"regression, data on device, DataLoader": 40.12},
                                    "weight_gap": 0.0123, "pinned_batches": pinned})]
    notebook = read(notebook_path("02"))
    assert "cell-45c" in [cell.get("id") for cell in core_cells(notebook)]
    calls = [cell.get("id") for cell in notebook.cells if cell.cell_type == "code"
             and "report_figures(" in cell.source and not cell.source.startswith(SHARED_CELL_FIRST_LINE)]
    assert calls == ["cell-45c"]


def test_no_dtype_is_chosen_by_is_bf16_supported_alone():
    """A T4 answers True through emulation (torch/cuda/__init__.py: is_bf16_supported counts it by
    default); 02 chooses no dtype by it."""
    assert not any("is_bf16_supported" in source for source in notebook_text("code"))
