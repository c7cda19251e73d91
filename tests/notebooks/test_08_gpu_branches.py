"""Notebook 08's CUDA side, run with stand-ins shaped like the real API that record how they are called
(torch.cuda's memory calls, a torch.OutOfMemoryError, the allocator's peak and cache, memory snapshots,
autocast to float16 on a T4), and the other side of each cell on the CPU: Step 2 running out of memory
on a small GPU and its remedies until one trains, the same story against a declared budget, Going deeper
B's timing of each remedy, and the figures the core reports with what stood in."""
import gc
import inspect
import sys
import weakref

import pytest
import torch
from torch import nn

from support.notebook_08 import tiny_batch, tiny_model
from support.notebook_code import load_helpers, run_cell

nb = load_helpers("08")


class StandInCuda:
    """Shaped like torch.cuda: synchronize, reset_peak_memory_stats and max_memory_allocated."""

    def __init__(self, peak):
        self.calls, self.peak = [], peak

    def synchronize(self, device=None):
        self.calls.append("synchronize")

    def reset_peak_memory_stats(self, device=None):
        self.calls.append(f"reset_peak_memory_stats({device})")

    def max_memory_allocated(self, device=None):
        self.calls.append(f"max_memory_allocated({device})")
        return self.peak


def test_the_stand_in_has_the_signatures_of_torch_cuda():
    for name in ("synchronize", "reset_peak_memory_stats", "max_memory_allocated", "mem_get_info"):
        assert list(inspect.signature(getattr(torch.cuda, name)).parameters) == ["device"]
    assert list(inspect.signature(torch.cuda.empty_cache).parameters) == []
    assert issubclass(torch.OutOfMemoryError, RuntimeError) and torch.cuda.OutOfMemoryError is torch.OutOfMemoryError


def optimizer_state(optimizer):
    """Every tensor an optimizer keeps between training steps (what kept_bytes counts)."""
    return [value for state in optimizer.state.values() for value in state.values()
            if isinstance(value, torch.Tensor)]


def reachable_tensor_bytes(values):
    """Bytes of the tensors a notebook's variables keep alive, as the allocator would count them on a
    GPU: modules' weights and gradients, optimizers' state, tensors, and what dicts and lists hold."""
    tensors = []

    def visit(value, depth=0):
        if isinstance(value, nn.Module):
            tensors.extend([*value.parameters(), *(p.grad for p in value.parameters())])
        elif isinstance(value, torch.optim.Optimizer):
            tensors.extend(optimizer_state(value))
        elif isinstance(value, torch.Tensor):
            tensors.append(value)
        elif isinstance(value, (dict, list, tuple)) and depth < 3:
            for item in (value.values() if isinstance(value, dict) else value):
                visit(item, depth + 1)

    for value in values:
        visit(value)
    return nb.storage_bytes(tensors)


@pytest.mark.gpu_branch("08", "allocator_peak_bytes: device.type != 'cuda'")
def test_when_the_peak_is_measured_only_what_the_count_sees_is_on_the_device(monkeypatch):
    # Step 1's count runs for real, then Going deeper A's peak cell on a stand-in CUDA allocator: at
    # reset_peak_memory_stats it holds every tensor the notebook's variables keep alive; during the
    # training step it adds that step's activations. Earlier cells' optimizers (SGD's momentum, a
    # second Adam) and batches left on the device made the peak "Much more than counted" on a T4.
    namespace = {**vars(nb), "device": torch.device("cpu"), "FEATURES": 16, "WIDTH": 32, "DEPTH": 2,
                 "CLASSES": 2, "BATCH": 8, "BATCH_SIZES": [4, 8], "SEQUENCE": 8,
                 "plot_by_batch": lambda by_batch, weight_count: None,
                 "make_batch": lambda *args: nb.make_batch(*args[:4])}  # the stand-in GPU is the CPU
    run_cell("08", "count-run", namespace)
    held = {}

    class Allocator(StandInCuda):
        def reset_peak_memory_stats(self, device=None):
            super().reset_peak_memory_stats(device)
            held["at_reset"] = reachable_tensor_bytes(namespace.values())

        def max_memory_allocated(self, device=None):
            super().max_memory_allocated(device)
            return held["at_reset"] + namespace["adam_counts"]["activations"]

    allocator = Allocator(peak=None)
    for name in ("synchronize", "reset_peak_memory_stats", "max_memory_allocated"):
        monkeypatch.setattr(torch.cuda, name, getattr(allocator, name))
    namespace["device"] = torch.device("cuda", 0)
    printed = run_cell("08", "allocator-peak", namespace)
    model, adam = namespace["model"], namespace["adam"]
    expected = nb.storage_bytes([*model.parameters(), *(p.grad for p in model.parameters()),
                                 *optimizer_state(adam), namespace["inputs"], namespace["labels"]])
    assert held["at_reset"] == expected  # no other optimizer's state, no leftover batch
    assert "It agrees" in printed


@pytest.mark.gpu_branch("08", "allocator_peak_bytes: device.type != 'cuda'")
def test_allocator_peak_resets_runs_and_reads_the_peak_on_cuda_only():
    cuda, ran = StandInCuda(peak=12345), []
    device = torch.device("cuda", 0)
    assert nb.allocator_peak_bytes(lambda: ran.append("run"), device, cuda=cuda) == 12345
    assert cuda.calls == ["synchronize", "reset_peak_memory_stats(cuda:0)", "synchronize",
                          "max_memory_allocated(cuda:0)"] and ran == ["run"]
    cpu_cuda = StandInCuda(peak=1)
    assert nb.allocator_peak_bytes(lambda: ran.append("run"), torch.device("cpu"), cuda=cpu_cuda) is None
    assert cpu_cuda.calls == [] and ran == ["run"]


class StandInMemory:
    """Shaped like torch.cuda.memory's _record_memory_history and _dump_snapshot."""

    def __init__(self):
        self.calls = []

    def _record_memory_history(self, enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                               device=None):
        self.calls.append(("record", enabled, max_entries, stacks))

    def _dump_snapshot(self, filename="dump_snapshot.pickle"):
        self.calls.append(("dump", filename))
        with open(filename, "wb") as file:
            file.write(b"x" * 1000)


def test_the_snapshot_stand_in_accepts_what_the_real_functions_accept():
    real = inspect.signature(torch.cuda.memory._record_memory_history).parameters
    assert {"enabled", "max_entries", "stacks"} <= set(real) and real["enabled"].default == "all"
    assert real["stacks"].default == "all"  # C++ frames too, unless the notebook says "python"
    assert "filename" in inspect.signature(torch.cuda.memory._dump_snapshot).parameters


@pytest.mark.gpu_branch("08", "record_snapshot: device.type != 'cuda'")
def test_record_snapshot_records_dumps_and_stops_recording(tmp_path):
    memory, ran = StandInMemory(), []
    path = tmp_path / "snap.pickle"
    text = nb.record_snapshot(lambda: ran.append("run"), path, torch.device("cuda", 0), memory=memory)
    assert memory.calls == [("record", "all", 100_000, "python"), ("dump", str(path)),
                            ("record", None, sys.maxsize, "all")]
    assert ran == ["run"] and "pytorch.org/memory_viz" in text and path.stat().st_size == 1000


def test_record_snapshot_stops_recording_when_the_run_fails(tmp_path):
    memory = StandInMemory()

    def failing():
        raise RuntimeError("CUDA out of memory")

    with pytest.raises(RuntimeError):
        nb.record_snapshot(failing, tmp_path / "s.pickle", torch.device("cuda", 0), memory=memory)
    assert memory.calls[-1] == ("record", None, sys.maxsize, "all")


def test_record_snapshot_without_cuda_records_nothing(tmp_path):
    memory, ran = StandInMemory(), []
    text = nb.record_snapshot(lambda: ran.append("run"), tmp_path / "s", torch.device("cpu"), memory=memory)
    assert memory.calls == [] and ran == [] and "No CUDA GPU (cpu)" in text


@pytest.mark.gpu_branch(
    "08", "low_precision_dtype: device_type == 'cuda' and capability is not None and (tuple(capability) < (8, 0))")
@pytest.mark.parametrize("device_type, capability, dtype", [
    ("cuda", (7, 5), torch.float16), ("cuda", (8, 0), torch.bfloat16), ("cuda", (7, 9), torch.float16),
    ("cuda", None, torch.bfloat16), ("cpu", None, torch.bfloat16), ("mps", None, torch.bfloat16)])
def test_low_precision_dtype_is_float16_only_before_capability_8(device_type, capability, dtype):
    assert nb.low_precision_dtype(device_type, capability) == dtype


def test_remedy_step_asks_autocast_for_the_device_of_its_inputs(monkeypatch):
    autocasts = record_autocast(monkeypatch)
    model, (inputs, labels) = tiny_model(nb), tiny_batch(nb, 8)
    nb.remedy_step(model, torch.optim.SGD(model.parameters(), lr=0.0), inputs, labels, parts=2)
    nb.remedy_step(model, torch.optim.SGD(model.parameters(), lr=0.0), inputs, labels,
                   dtype=torch.float16)
    assert autocasts == [("cpu", None, False), ("cpu", None, False), ("cpu", torch.float16, True)]


@pytest.mark.gpu_branch("08", "autocast_verdict: device_type == 'cpu'")
@pytest.mark.parametrize("cost, device_type, start, reason", [
    (-5.01, "cuda", "Autocast was 5 % faster", "enough work"),
    (-5.0, "cuda", "Autocast was not faster (-5 %)", "too little work per kernel"),
    (12.0, "cuda", "Autocast was not faster (+12 %)", "launches and casts dominate"),
    (-5.0, "cpu", "Autocast was not faster (-5 %)", "on a CPU is often slower"),
    (-30.0, "cpu", "Autocast was 30 % faster", "enough work")])
def test_autocast_verdict_reads_the_measurement(cost, device_type, start, reason):
    text = nb.autocast_verdict(cost, device_type)
    assert text.startswith(start) and reason in text, text


def test_after_an_out_of_memory_error_the_failed_steps_tensors_are_freed_before_the_cache_is_emptied():
    # A training step that runs out of memory leaves its tensors in the frames of the error's
    # traceback, and autograd's objects can hold them in reference cycles (made here on purpose):
    # only once the error is dropped and the garbage collected does empty_cache give them back.
    alive_at_empty_cache = []
    kept = []

    class Cuda(StandInCuda):
        def empty_cache(self):
            self.calls.append("empty_cache")
            alive_at_empty_cache.append([ref() is not None for ref in kept])

    def forward():
        activations = torch.ones(1000)
        cycle = {"activations": activations}
        cycle["itself"] = cycle  # freed by the garbage collector only
        kept.append(weakref.ref(activations))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")

    cuda = Cuda(peak=12345)
    result = nb.try_to_train(forward, 100, torch.device("cuda", 0), cuda=cuda)
    assert result == {"fit": False, "counted": None, "peak": 12345,
                      "error": "CUDA out of memory. Tried to allocate 2.00 GiB."}  # the text, not the error
    assert cuda.calls == ["reset_peak_memory_stats(cuda:0)", "max_memory_allocated(cuda:0)", "empty_cache"]
    assert alive_at_empty_cache == [[False]]


@pytest.mark.gpu_branch("08", "release_memory: device.type == 'cuda'")
@pytest.mark.parametrize("device_type, emptied", [("cuda", 1), ("cpu", 0), ("mps", 0)])
def test_release_memory_hands_the_cache_back_on_cuda_only(monkeypatch, device_type, emptied):
    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    nb.release_memory(torch.device(device_type))
    assert len(calls) == emptied


class SmallGpu:
    """Stand-ins for torch.cuda's memory calls on a GPU with `free` bytes free: mem_get_info(device)
    -> (free, total) bytes, empty_cache(), reset_peak_memory_stats(device), max_memory_allocated(device)
    and synchronize(device). A training step (run for real on the CPU) that needs more than `free`
    bytes raises torch.OutOfMemoryError with PyTorch's message, as the caching allocator does."""

    def __init__(self, free, total):
        self.free, self.total, self.calls, self.peak = free, total, [], 0

    def mem_get_info(self, device=None):
        self.calls.append(f"mem_get_info({device})")
        return self.free, self.total

    def empty_cache(self):
        self.calls.append("empty_cache")

    def reset_peak_memory_stats(self, device=None):
        self.calls.append(f"reset_peak_memory_stats({device})")
        self.peak = 0

    def max_memory_allocated(self, device=None):
        self.calls.append(f"max_memory_allocated({device})")
        return self.peak

    def synchronize(self, device=None):
        self.calls.append("synchronize")

    def runs(self, step):
        """`step` (a training step returning its counted bytes), as if its tensors lived on this GPU."""
        def on_the_gpu(*args, **kwargs):
            kept = step(*args, **kwargs)
            needed = sum(kept.values())
            if needed > self.free:
                self.peak = self.free - 1024
                self.calls.append("OutOfMemoryError")
                raise torch.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {(needed - self.free) / 2**20:.2f} MiB. GPU 0 "
                    f"has a total capacity of {self.total / 2**30:.2f} GiB of which 1.00 KiB is free. "
                    f"Of the allocated memory {self.peak / 2**20:.2f} MiB is allocated by PyTorch, and "
                    "0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory "
                    "is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
                    "fragmentation.")
            self.peak = max(self.peak, needed)
            return kept
        return on_the_gpu


def weak_tensors(model):
    """Weak references to a model's weights and gradients: they die when nothing else holds them."""
    return [weakref.ref(tensor) for p in model.parameters() for tensor in (p, p.grad)
            if tensor is not None]


class StaysOnTheCpu(nn.Sequential):
    """make_transformer's model, whose .to(device) keeps it on the CPU: the stand-in GPU is the CPU."""

    def to(self, *args, **kwargs):
        return self


def step_2_namespace(device, **more):
    """What Step 2's cells find when they run: Step 1's count of a tiny model, its sizes."""
    model = tiny_model(nb)
    inputs, labels = tiny_batch(nb, 8)
    counts = nb.memory_of_step(model, torch.optim.Adam(model.parameters()), inputs, labels)
    sizes = {"FEATURES": 16, "WIDTH": 16, "DEPTH": 2, "CLASSES": 2, "SEQUENCE": 8, "BATCH": 8,
             "OVERSIZE": 10, "DEEP_BATCH": 256}
    return {**vars(nb), **sizes, "device": device, "adam_counts": counts,
            "make_transformer": lambda *args: StaysOnTheCpu(*nb.make_transformer(*args)),
            "make_batch": lambda batch, seed, sequence, features, device: nb.make_batch(
                batch, seed, sequence, features), **more}


@pytest.mark.gpu_branch("08", "cell step-2-size: device.type == 'cuda'")
@pytest.mark.gpu_branch("08", "cell step-3-tries: device.type == 'cuda'")
@pytest.mark.gpu_branch("08", "limit_text: device_type == 'cuda'")
@pytest.mark.gpu_branch("08", "try_to_train: device.type != 'cuda'")
def test_step_2_on_a_cuda_gpu_runs_out_of_memory_for_real_then_remedies_until_one_trains(monkeypatch):
    cuda = torch.device("cuda", 0)
    namespace = step_2_namespace(cuda)
    per_layer = (namespace["adam_counts"]["weights"]
                 + namespace["adam_counts"]["activations"] * 256 / 8) / 2
    gpu = SmallGpu(free=int(0.3 * per_layer), total=15 * 2**30)  # 10 times that: 3 layers
    for name in ("mem_get_info", "empty_cache", "reset_peak_memory_stats", "max_memory_allocated",
                 "synchronize"):
        monkeypatch.setattr(torch.cuda, name, getattr(gpu, name))
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: asked.append(device) or (7, 5))
    autocasts = record_autocast(monkeypatch)
    namespace.update(memory_of_step=gpu.runs(nb.memory_of_step), remedy_step=gpu.runs(nb.remedy_step))

    sizing = run_cell("08", "step-2-size", namespace)
    assert gpu.calls[:2] == ["empty_cache", "mem_get_info(cuda:0)"]  # the cache counts as free first
    assert namespace["deep_depth"] == 3 and namespace["deep_batch"] == 256 and namespace["limit"] == gpu.free
    assert sizing.startswith(f"{gpu.free / 1e9:.1f} GB free: Step 2's model has 3 layers")

    gpu.calls.clear()
    first = run_cell("08", "step-2-baseline", namespace).splitlines()
    assert first[0].startswith("baseline (float32): torch.OutOfMemoryError with ")
    assert first[1].startswith("CUDA out of memory. Tried to allocate ")  # the message, shown whole
    assert gpu.calls == ["reset_peak_memory_stats(cuda:0)", "OutOfMemoryError", "max_memory_allocated(cuda:0)",
                         "empty_cache"]

    gpu.calls.clear()
    deep_tensors = weak_tensors(namespace["deep_model"])
    printed = run_cell("08", "step-3-tries", namespace).splitlines()
    attempts = namespace["attempts"]
    assert asked == [cuda] and namespace["low"] == torch.float16  # a T4's compute capability: 7.5
    assert list(attempts) == ["baseline (float32)", "+ autocast (float16)", "+ 4 micro-batches",
                              "+ checkpointing"]
    assert [result["fit"] for result in attempts.values()] == [False, False, False, True]
    assert all(result["error"].startswith("CUDA out of memory.") for result in list(attempts.values())[:3])
    trained = attempts["+ checkpointing"]
    assert trained["peak"] == trained["counted"] <= gpu.free and trained["error"] is None
    assert printed[1] == ("+ 4 micro-batches: torch.OutOfMemoryError with "
                          f"{(gpu.free - 1024) / 1e9:.2f} GB allocated, {gpu.free / 1e9:.2f} GB free.")
    assert printed[2].startswith("+ checkpointing: trained. Allocator peak ")
    assert printed[3] == ("The training step trains on this GPU with: autocast (float16), 4 micro-batches, "
                          "checkpointing.")
    # every try: peak reset before it; after each, garbage freed and the cache handed back
    assert gpu.calls.count("reset_peak_memory_stats(cuda:0)") == 3
    assert gpu.calls.count("empty_cache") == 3 + 1  # after each try, and release_memory at the end
    assert {call[1:] for call in autocasts if call[2]} == {(torch.float16, True)}  # the T4's format
    assert len([call for call in autocasts if call[2]]) == 1 + 4 + 4  # 4 micro-batches in the last two
    # Step 2's model is freed: no variable left by the cell (a loop variable, say) still holds its
    # weights or gradients, which on a GPU would stay allocated for the rest of the notebook
    assert "deep_model" not in namespace and "deep_adam" not in namespace
    gc.collect()
    assert not [tensor for tensor in deep_tensors if tensor() is not None]


def test_step_2_without_cuda_tells_the_same_story_against_a_declared_budget(monkeypatch):
    def no_cuda(*args, **kwargs):
        raise AssertionError("no CUDA call without CUDA")

    for name in ("mem_get_info", "empty_cache", "reset_peak_memory_stats", "max_memory_allocated"):
        monkeypatch.setattr(torch.cuda, name, no_cuda)
    namespace = step_2_namespace(torch.device("cpu"))
    sizing = run_cell("08", "step-2-size", namespace)
    counts = namespace["adam_counts"]
    assert namespace["limit"] == nb.declared_budget(counts, 10) and namespace["deep_depth"] == 2
    assert namespace["deep_batch"] == 8  # Step 1's batch: on a CPU each try costs little
    assert sizing.startswith("No CUDA GPU, so no real out-of-memory error: a declared budget of ")
    first = run_cell("08", "step-2-baseline", namespace).splitlines()
    assert first == [f"baseline (float32): {namespace['attempts']['baseline (float32)']['counted'] / 1e6:.1f} MB, "
                     f"over the {namespace['limit'] / 1e6:.1f} MB budget.", ""]
    printed = run_cell("08", "step-3-tries", namespace).splitlines()
    attempts = namespace["attempts"]
    assert namespace["low"] == torch.bfloat16
    assert all(result["peak"] is None and result["error"] is None for result in attempts.values())
    counted = [result["counted"] for result in attempts.values()]
    assert counted == sorted(counted, reverse=True)  # each remedy keeps less than the one before
    assert attempts["+ checkpointing"]["fit"] and not attempts["+ 4 micro-batches"]["fit"]
    assert printed[-1].startswith("The training step fits the declared budget (nothing real was raised)")


def test_the_tries_stop_at_the_first_that_fits():
    # With a budget just below the baseline's count, the first remedy (autocast) already fits: the cell
    # stops there and tries nothing more.
    namespace = step_2_namespace(torch.device("cpu"))
    run_cell("08", "step-2-size", namespace)
    run_cell("08", "step-2-baseline", namespace)
    namespace["limit"] = namespace["attempts"]["baseline (float32)"]["counted"] - 1
    printed = run_cell("08", "step-3-tries", namespace).splitlines()
    assert list(namespace["attempts"]) == ["baseline (float32)", "+ autocast (bfloat16)"]
    assert printed[-1] == ("The training step fits the declared budget (nothing real was raised) with: "
                           "autocast (bfloat16).")


@pytest.mark.parametrize("device_type, low", [
    ("cuda", torch.float16),  # a T4: no bfloat16 before compute capability 8.0 (Step 3 chose it)
    ("cuda", torch.bfloat16),  # an A100
    ("mps", torch.bfloat16),
    ("cpu", torch.bfloat16),
])
def test_going_deeper_b_times_each_remedy_in_the_16_bit_format_step_3_chose_synchronizing_each(
        monkeypatch, device_type, low):
    # torch.cuda.synchronize(device) and torch.mps.synchronize() -> None. The training steps run on the
    # CPU: the cell only times with `device`, it moves nothing.
    synchronized = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synchronized.append(device))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: synchronized.append(torch.device("mps")))
    autocasts = record_autocast(monkeypatch)
    model, (inputs, labels) = tiny_model(nb), tiny_batch(nb)
    device = torch.device(device_type)
    name = str(low).removeprefix("torch.")
    namespace = {**vars(nb), "device": device, "model": model, "inputs": inputs, "labels": labels,
                 "adam": torch.optim.Adam(model.parameters(), lr=1e-3), "FAST": True, "low": low,
                 "low_name": name}
    printed = run_cell("08", "remedies-alone-run", namespace)
    repeats = namespace["REPEATS"]
    assert list(namespace["remedy_table"].index) == [
        "baseline", "activation checkpointing", "gradient accumulation, 4 parts", f"autocast ({name})",
        f"16-bit weights ({name})"]
    assert {p.dtype for p in namespace["low_model"].parameters()} == {low}
    assert 2 * nb.storage_bytes(namespace["low_model"].parameters()) == nb.storage_bytes(model.parameters())
    assert namespace["low_adam"].defaults["eps"] == 1e-4  # float16 holds it; 1e-8 rounds to 0
    assert synchronized == ([device] * 2 * 5 * repeats if device_type != "cpu" else [])  # around each
    # autocast to the chosen 16-bit format, in the autocast row only: counted once, timed `repeats` times
    assert {call[1:] for call in autocasts if call[2]} == {(low, True)}
    assert sum(call[2] for call in autocasts) == 1 + repeats
    lines = printed.splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == list(namespace["remedy_table"].index[1:])
    assert lines[4] == f"16-bit weights: every weight is still finite after {1 + repeats} optimizer steps."
    # the verdict reads autocast's own row of this run's table, not another row's time
    autocast_cost = namespace["remedy_table"].loc[f"autocast ({name})", "time_cost_%"]
    assert lines[5] == nb.autocast_verdict(autocast_cost, device_type)


def record_autocast(monkeypatch):
    """Replace torch.autocast by a stand-in that records (device_type, dtype, enabled) and changes
    nothing, as a CUDA autocast does to CPU tensors; returns the list of calls."""
    calls = []

    class Autocast:
        def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
            calls.append((device_type, dtype, enabled))

        def __enter__(self):
            return self

        def __exit__(self, *error):
            return False

    monkeypatch.setattr(torch, "autocast", Autocast)
    return calls


def test_the_autocast_stand_in_takes_what_torch_autocast_takes():
    parameters = list(inspect.signature(torch.autocast.__init__).parameters)
    assert parameters[:5] == ["self", "device_type", "dtype", "enabled", "cache_enabled"]


@pytest.mark.gpu_branch("08", "figures_fallback: device_type == 'cuda'")
@pytest.mark.parametrize("device_type, fallback", [
    ("cuda", None), ("cpu", "declared memory budget"), ("mps", "declared memory budget")])
def test_figures_fallback_names_the_stand_in(device_type, fallback):
    assert nb.figures_fallback(device_type) == fallback


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_the_core_reports_the_figures_it_measured_once(device_type):
    reported = []
    attempts = {"baseline (float32)": {"fit": False, "counted": None, "peak": 2e9, "error": "CUDA out"},
                "+ checkpointing": {"fit": True, "counted": 1.2e9, "peak": 1.3e9, "error": None}}
    namespace = {**vars(nb), "device": torch.device(device_type),
                 "adam_counts": {"weights": 4e6, "gradients": 4e6, "optimizer_state": 8e6, "activations": 2e7},
                 "attempts": attempts, "limit": 2.1e9, "deep_depth": 40,
                 "report_figures": lambda fallback=None, **figures: reported.append((fallback, figures))}
    assert run_cell("08", "figures", namespace) == ""  # it shows nothing a learner reads
    [(fallback, figures)] = reported
    assert fallback == nb.figures_fallback(device_type)
    assert figures == {"weights_MB": 4.0, "gradients_MB": 4.0, "optimizer_state_MB": 8.0, "activations_MB": 20.0,
                       "step2_layers": 40, "step2_limit_MB": 2100.0, "step2_out_of_memory": ["baseline (float32)"],
                       "step2_fit_with": "+ checkpointing", "step2_fit_peak_MB": 1300.0}
