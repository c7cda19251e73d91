"""Notebook 08: counting the bytes of a training step, running out of memory and the remedies that make
room (the core); the exercises' checks; and Going deeper's parts (the allocator's peak, each remedy
alone, FSDP2).

The helpers run for real on the CPU where PyTorch allows it (saved-tensor hooks, checkpointing,
autocast in bfloat16 and float16, 16-bit weights in float16 with Adam's eps, Step 2's story against a
declared budget); the CUDA-only calls (mem_get_info, a torch.OutOfMemoryError, the allocator's peak and
cache, memory snapshots, autocast to float16 on a T4, NCCL) run against stand-ins shaped like the real
API that record how they are called. One test starts the FSDP2 script with torchrun on 2 CPU processes
over gloo, as Going deeper C does, and checks what the notebook's own run does not print: the optimizer
bytes of the shards and that every process reports the same losses.

The plumbing 08 shares with notebook 06 (tools/shared_cells/process_plumbing.py and torchrun_helpers.py:
run_launchers, is_alive, stop_processes, torchrun_plan, torchrun_command, parse_results, ...) is tested
once, in tests/shared_cells/; 08's own fsdp_launch_plan, which gives the shared torchrun_plan this
notebook's reasons, is tested here.
"""
import ast
import copy
import gc
import inspect
import os
import shlex
import socket
import subprocess
import sys
import weakref

import pandas as pd
import pytest
import torch
import torch.distributed.run
from torch import nn

from support.notebook_code import code_cells, load_helpers, notebook_path, read, run_cell

nb = load_helpers("08")
SCRIPT_TEXT = nb.SCRIPT_TOP + nb.SCRIPT_MODEL + nb.SCRIPT_MAIN


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return nb.make_transformer(16, 16, 2, 2)


def tiny_batch(batch=8, seed=0):
    return nb.make_batch(batch, seed, 8, 16)


# Counting bytes


def test_storage_bytes_counts_shared_memory_once_and_skips_what_is_not_a_tensor():
    whole = torch.zeros(10)  # 40 bytes
    assert nb.storage_bytes([whole, whole[:5], whole.view(2, 5), None]) == 40
    assert nb.storage_bytes([torch.zeros(10), torch.zeros(3, dtype=torch.float16)]) == 46
    assert nb.storage_bytes([]) == 0


def test_saved_activations_sees_what_autograd_keeps_but_not_the_weights():
    layer = nn.Linear(4, 3)
    inputs = torch.randn(5, 4)
    with nb.SavedActivations(layer) as saved:
        layer(inputs).sum()  # linear keeps its input (and its weight, counted as a weight)
    assert saved.bytes == inputs.numel() * 4
    with nb.SavedActivations(layer) as saved, torch.no_grad():
        layer(inputs).sum()
    assert saved.bytes == 0


def test_saved_activations_counts_views_of_one_tensor_once():
    inputs = torch.randn(6, 4, requires_grad=True)
    with nb.SavedActivations(nn.Linear(1, 1)) as saved:
        (inputs[:3] * inputs[3:]).sum()  # mul keeps both halves: two views of one storage
    assert saved.bytes == inputs.numel() * 4


def test_memory_of_step_reads_optimizer_state_from_the_optimizer():
    model = tiny_model()
    inputs, labels = tiny_batch()
    weights = sum(p.numel() for p in model.parameters())
    tensors = len(list(model.parameters()))
    plain = nb.memory_of_step(model, torch.optim.SGD(model.parameters(), lr=0.1), inputs, labels)
    momentum = nb.memory_of_step(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                 inputs, labels)
    adam = nb.memory_of_step(model, torch.optim.Adam(model.parameters()), inputs, labels)
    assert plain["weights"] == plain["gradients"] == 4 * weights
    assert plain["optimizer_state"] == 0  # plain SGD keeps nothing between steps
    assert momentum["optimizer_state"] == 4 * weights  # one momentum per weight
    assert adam["optimizer_state"] == 8 * weights + 4 * tensors  # two averages, a step counter each
    assert adam["activations"] > 0 and adam["activations"] == momentum["activations"]


def test_the_activations_grow_with_the_batch_and_nothing_else_does():
    model = tiny_model()
    adam = torch.optim.Adam(model.parameters())
    small, large = (nb.memory_of_step(model, adam, *tiny_batch(batch)) for batch in (4, 16))
    assert {k: small[k] for k in ("weights", "gradients", "optimizer_state")} == \
        {k: large[k] for k in ("weights", "gradients", "optimizer_state")}
    assert 3.5 < large["activations"] / small["activations"] <= 4.0


def test_set_to_none_frees_the_gradients_that_zero_filling_keeps():
    model = tiny_model()
    adam = torch.optim.Adam(model.parameters())
    for set_to_none, held in [(True, 0), (False, 4 * sum(p.numel() for p in model.parameters()))]:
        nb.memory_of_step(model, adam, *tiny_batch())
        adam.zero_grad(set_to_none=set_to_none)
        assert nb.storage_bytes(p.grad for p in model.parameters()) == held


def test_make_batch_makes_the_same_batch_on_the_device_it_is_given():
    inputs, labels = nb.make_batch(4, 3, 8, 16, torch.device("meta"))
    assert inputs.device.type == labels.device.type == "meta"
    assert inputs.shape == (4, 8, 16) and labels.shape == (4,) and labels.dtype == torch.long
    on_cpu, cpu_labels = nb.make_batch(4, 3, 8, 16)
    assert torch.equal(labels_of(on_cpu), cpu_labels) and set(cpu_labels.tolist()) <= {0, 1}
    assert torch.equal(on_cpu, nb.make_batch(4, 3, 8, 16, "cpu")[0])  # the seed decides, not the device
    assert not torch.equal(on_cpu, nb.make_batch(4, 4, 8, 16)[0])


def labels_of(inputs):
    """The class make_batch gives each sample: do its first numbers add up above 0?"""
    return (inputs[:, :, 0].sum(dim=1) > 0).long()


def test_in_mb_gives_megabytes_of_10_to_the_6_bytes_rounded_to_two_places():
    assert in_mb_row({"weights": 1_234_567, "gradients": 6_000}) == {"weights": 1.23, "gradients": 0.01}
    rows = nb.in_mb({"batch 8": {"activations": 2_000_000}, "batch 16": {"activations": 4_004_999}})
    assert rows.loc["activations"].to_dict() == {"batch 8": 2.0, "batch 16": 4.0}


def in_mb_row(row):
    """nb.in_mb of one row (a dictionary of bytes), as the dictionary of megabytes it shows."""
    table = nb.in_mb([row])
    assert list(table.columns) == list(row)
    return table.iloc[0].to_dict()


def test_checkpointed_uses_the_non_reentrant_variant_which_trains_on_inputs_without_gradients():
    """The reentrant variant passes no gradient to the weights when no input requires one (it warns
    "None of the inputs have requires_grad=True"); the non-reentrant one, which 08 teaches, does."""
    layer = nb.TransformerLayer(16)
    nb.Checkpointed(layer)(torch.randn(2, 4, 16)).sum().backward()
    assert all(weight.grad is not None for weight in layer.parameters())
    reentrant = nb.TransformerLayer(16)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
        output = torch.utils.checkpoint.checkpoint(reentrant, torch.randn(2, 4, 16), use_reentrant=True)
    assert not output.requires_grad, "the reentrant variant leaves the weights out: what this tells apart"


@pytest.mark.parametrize("measured, holds", [(17.0, True), (17.001, False), (15.0, True), (14.999, False)])
def test_bytes_per_weight_verdict_at_its_tolerance(measured, holds):
    counted = {"weights": 4 * 1000, "gradients": 4 * 1000, "optimizer_state": (measured - 8) * 1000,
               "activations": 10 ** 9}  # the activations do not count per weight
    text = nb.bytes_per_weight_verdict(counted, 1000, 16, tolerance=1 / 16)
    assert ("holds" in text) == holds


COUNTED = {"weights": 40, "gradients": 60, "optimizer_state": 40, "activations": 20}  # low 100, high 160


@pytest.mark.parametrize("peak, expected", [(89.99, "Lower than counted"), (90.01, "agrees"),
                                            (200.0, "agrees"), (200.01, "Much more")])
def test_peak_verdict_at_its_edges(peak, expected):
    assert expected in nb.peak_verdict(COUNTED, peak, "cuda")


def test_peak_verdict_without_cuda_says_what_a_gpu_would_show():
    text = nb.peak_verdict(COUNTED, None, "mps")
    assert "No CUDA GPU (mps)" in text and "max_memory_allocated" in text


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


def test_snapshot_sketch_follows_a_training_step():
    counts = {"weights": 4e6, "gradients": 4e6, "optimizer_state": 8e6, "activations": 20e6}
    sketch = nb.snapshot_sketch(counts, steps=2, points=10)
    assert len(sketch) == 2 * (2 * 10 + 1)
    first_step = sketch.iloc[:20]
    assert (first_step["optimizer state"] == 0).all() and sketch.iloc[20]["optimizer state"] == 8
    assert sketch["activations"].max() == 20 and sketch.iloc[10]["activations"] == 20  # backward starts
    assert sketch.iloc[10]["gradients"] == 0 and sketch.iloc[19]["activations"] == pytest.approx(2)
    assert (sketch.iloc[:10]["gradients"] == 0).all() and sketch.iloc[20]["gradients"] == 4
    assert (sketch["weights"] == 4).all()


# The remedies


def test_measure_all_counts_once_and_times_the_steps_in_turns():
    calls = []
    steps = {"a": lambda: calls.append("a") or {"weights": 1}, "b": lambda: calls.append("b") or {"weights": 2}}
    results = nb.measure_all(steps, torch.device("cpu"), repeats=3)
    assert calls == ["a", "b"] * 4
    assert results["b"]["weights"] == 2 and results["a"]["step_ms"] >= 0


def test_compare_to_baseline_gives_mb_saved_and_time_cost():
    results = {"baseline": {"weights": 4e6, "gradients": 4e6, "optimizer_state": 8e6, "activations": 20e6,
                            "step_ms": 100.0},
               "smaller": {"weights": 4e6, "gradients": 4e6, "optimizer_state": 8e6, "activations": 5e6,
                           "step_ms": 130.0}}
    table = nb.compare_to_baseline(results)
    assert table.loc["baseline", "total_MB"] == 36.0 and table.loc["smaller", "saved_MB"] == 15.0
    assert table.loc["smaller", "time_cost_%"] == 30.0 and table.loc["baseline", "time_cost_%"] == 0.0


@pytest.mark.parametrize("saved, cost, text", [
    (1.0, 5.0, "x: saves 1.0 MB, about as fast."), (1.0, 5.01, "x: saves 1.0 MB, 5 % slower."),
    (0.0, -5.0, "x: saves nothing (0.0 MB more), about as fast."),
    (0.5, -5.01, "x: saves 0.5 MB, 5 % faster.")])
def test_describe_remedy_at_its_edges(saved, cost, text):
    assert nb.describe_remedy("x", {"saved_MB": saved, "time_cost_%": cost}) == text


@pytest.mark.gpu_branch(
    "08", "low_precision_dtype: device_type == 'cuda' and capability is not None and (tuple(capability) < (8, 0))")
@pytest.mark.parametrize("device_type, capability, dtype", [
    ("cuda", (7, 5), torch.float16), ("cuda", (8, 0), torch.bfloat16), ("cuda", (7, 9), torch.float16),
    ("cuda", None, torch.bfloat16), ("cpu", None, torch.bfloat16), ("mps", None, torch.bfloat16)])
def test_low_precision_dtype_is_float16_only_before_capability_8(device_type, capability, dtype):
    assert nb.low_precision_dtype(device_type, capability) == dtype


def test_checkpointing_keeps_less_and_gives_the_same_gradients():
    model = tiny_model()
    inputs, labels = tiny_batch()
    sgd = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the weights stay, the gradients stay
    plain = nb.memory_of_step(model, sgd, inputs, labels)
    plain_gradients = [p.grad.clone() for p in model.parameters()]
    checkpointed = nb.with_checkpointing(model)
    assert [type(m).__name__ for m in checkpointed][1:3] == ["Checkpointed", "Checkpointed"]
    assert set(checkpointed.parameters()) == set(model.parameters())  # the same weights
    kept = nb.memory_of_step(checkpointed, sgd, inputs, labels)
    assert kept["activations"] < plain["activations"] / 2
    for gradient, p in zip(plain_gradients, model.parameters()):
        torch.testing.assert_close(p.grad, gradient)


def test_remedy_step_with_4_parts_keeps_one_part_and_gives_the_batch_gradients():
    model = tiny_model()
    inputs, labels = tiny_batch(16)
    sgd = torch.optim.SGD(model.parameters(), lr=0.0)
    whole = nb.memory_of_step(model, sgd, inputs, labels)
    assert nb.remedy_step(model, sgd, inputs, labels) == whole  # no remedy: Step 1's training step
    whole_gradients = [p.grad.clone() for p in model.parameters()]
    parts = nb.remedy_step(model, sgd, inputs, labels, parts=4)
    assert whole["activations"] / 4.5 < parts["activations"] < whole["activations"] / 3
    assert nb.largest_difference([p.grad for p in model.parameters()], whole_gradients) \
        < nb.ACCUMULATION_TOLERANCE


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])  # float16: the T4's branch
def test_autocast_shrinks_activations_only_and_16_bit_weights_halve_everything(dtype):
    model = tiny_model()
    inputs, labels = tiny_batch(16)
    adam = torch.optim.Adam(model.parameters())
    baseline = nb.memory_of_step(model, adam, inputs, labels)
    autocast = nb.remedy_step(model, adam, inputs, labels, dtype=dtype)
    assert all(autocast[k] == baseline[k] for k in ("weights", "gradients", "optimizer_state"))
    assert autocast["activations"] < baseline["activations"]
    low_model = tiny_model().to(dtype)
    low_adam = torch.optim.Adam(low_model.parameters(), eps=1e-4)
    low = nb.remedy_step(low_model, low_adam, inputs.to(dtype), labels)
    assert low["weights"] * 2 == baseline["weights"] and low["gradients"] * 2 == baseline["gradients"]
    assert low["optimizer_state"] < baseline["optimizer_state"] * 0.55


def test_remedy_step_asks_autocast_for_the_device_of_its_inputs(monkeypatch):
    autocasts = record_autocast(monkeypatch)
    model, (inputs, labels) = tiny_model(), tiny_batch(8)
    nb.remedy_step(model, torch.optim.SGD(model.parameters(), lr=0.0), inputs, labels, parts=2)
    nb.remedy_step(model, torch.optim.SGD(model.parameters(), lr=0.0), inputs, labels,
                   dtype=torch.float16)
    assert autocasts == [("cpu", None, False), ("cpu", None, False), ("cpu", torch.float16, True)]


def test_accumulated_gradients_equal_one_batch_only_when_weighted_by_samples():
    model = tiny_model()
    inputs, labels = tiny_batch(16)
    one = nb.accumulated_gradients(model, inputs, labels, [16])
    for sizes in ([4, 4, 4, 4], [12, 4], [15, 1]):
        right = nb.accumulated_gradients(model, inputs, labels, sizes, per_sample=True)
        assert nb.largest_difference(right, one) < nb.ACCUMULATION_TOLERANCE, sizes
    equal_parts_mistake = nb.accumulated_gradients(model, inputs, labels, [8, 8], per_sample=False)
    assert nb.largest_difference(equal_parts_mistake, one) < nb.ACCUMULATION_TOLERANCE
    mistake = nb.accumulated_gradients(model, inputs, labels, [12, 4], per_sample=False)
    assert nb.largest_difference(mistake, one) > 100 * nb.ACCUMULATION_TOLERANCE


def test_largest_difference_is_relative_to_the_largest_gradient():
    reference = [torch.tensor([1.0, -2.0]), torch.tensor([0.5])]
    assert nb.largest_difference([torch.tensor([1.0, -4.0]), torch.tensor([0.5])], reference) == 1.0
    assert nb.largest_difference(reference, reference) == 0.0


def test_forward_only_keeps_nothing_without_grad():
    model = tiny_model()
    inputs, _ = tiny_batch()
    import contextlib
    assert nb.forward_only(model, inputs, contextlib.nullcontext)["activations"] > 0
    assert nb.forward_only(model, inputs, torch.no_grad)["activations"] == 0
    assert nb.forward_only(model, inputs, torch.inference_mode)["activations"] == 0


# 16-bit weights and autocast: what the cells read from their own measurements


def train_float16(eps, steps=2):
    """A tiny model wholly in float16 on the CPU, trained `steps` optimizer steps with Adam(eps)."""
    model = tiny_model().to(torch.float16)
    adam = torch.optim.Adam(model.parameters(), lr=1e-3, eps=eps)
    inputs, labels = tiny_batch(16)
    for _ in range(steps):
        nb.memory_of_step(model, adam, inputs.to(torch.float16), labels)
    return model


def test_float16_weights_need_an_eps_float16_can_hold():
    # float16 rounds anything below about 3e-8 to 0 (2**-25; above it, values round up to the smallest
    # float16, 2**-24): Adam's default eps=1e-8 becomes 0 in its float16 state, small squared gradients
    # underflow, and the update divides by zero (torch/optim/adam.py)
    assert torch.tensor(2.9e-8, dtype=torch.float16).item() == 0.0
    assert torch.tensor(3.0e-8, dtype=torch.float16).item() == 2**-24
    assert torch.tensor(1e-8, dtype=torch.float16).item() == 0.0
    assert torch.tensor(1e-4, dtype=torch.float16).item() > 0.0
    broken = nb.weights_finite_verdict(train_float16(eps=1e-8), 2)
    assert broken.startswith("16-bit weights: ") and "became inf or NaN in 2 optimizer steps" in broken
    assert nb.weights_finite_verdict(train_float16(eps=1e-4), 2) == \
        "16-bit weights: every weight is still finite after 2 optimizer steps."


def test_weights_finite_verdict_counts_each_weight_that_is_no_longer_a_number():
    model = nn.Linear(2, 2)
    assert "still finite" in nb.weights_finite_verdict(model, 1)
    with torch.no_grad():
        model.weight[0, 0] = float("nan")
        model.bias[1] = float("inf")
    assert nb.weights_finite_verdict(model, 1).startswith("16-bit weights: 2 weights became inf or NaN")
    with torch.no_grad():
        model.bias[1] = 0.0
    assert nb.weights_finite_verdict(model, 1).startswith("16-bit weights: 1 weights became inf or NaN")


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


# Step 2: running out of memory, for real on a CUDA GPU, against a declared budget elsewhere

COUNTS = {"weights": 1_000, "gradients": 1_000, "optimizer_state": 2_000, "activations": 8_000}


@pytest.mark.parametrize("memory, layers", [(25_000, 2), (25_001, 3), (12_500, 1), (1, 1), (0, 1)])
def test_layers_to_fill_reads_the_bytes_per_layer_of_the_count(memory, layers):
    # counted: 2 layers, a batch of 4; per layer for a batch of 12: (1,000 + 8,000 * 12 / 4) / 2 = 12,500
    assert nb.layers_to_fill(memory, COUNTS, 2, 4, 12) == layers


def test_declared_budget_is_the_state_plus_a_share_of_the_activations():
    assert nb.declared_budget(COUNTS, 10) == 4_000 + 8_000 / 10
    assert nb.declared_budget(COUNTS, 1) == sum(COUNTS.values())


@pytest.mark.parametrize("device_type", ["cpu", "mps"])
@pytest.mark.parametrize("counted, fit", [(100, True), (101, False)])
def test_without_cuda_a_try_fits_when_its_counted_bytes_are_within_the_budget(counted, fit, device_type):
    result = nb.try_to_train(lambda: {"weights": counted - 1, "activations": 1}, 100,
                             torch.device(device_type), cuda=None)  # never touched without CUDA
    assert result == {"fit": fit, "counted": counted, "peak": None, "error": None}


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


def test_fit_verdict_says_what_each_kind_of_try_did():
    limit = 2e9
    assert nb.fit_verdict("+ x", {"fit": True, "counted": 1.5e9, "peak": None, "error": None}, limit) == \
        "+ x: 1500.0 MB, within the 2000.0 MB budget."
    assert nb.fit_verdict("+ x", {"fit": False, "counted": 2.5e9, "peak": None, "error": None}, limit) == \
        "+ x: 2500.0 MB, over the 2000.0 MB budget."
    assert nb.fit_verdict("+ x", {"fit": True, "counted": 1.5e9, "peak": 1.75e9, "error": None}, limit) == \
        "+ x: trained. Allocator peak 1.75 GB, counted 1.50 GB, free 2.00 GB."
    assert nb.fit_verdict("+ x", {"fit": False, "counted": None, "peak": 1.99e9, "error": "CUDA out"}, limit) \
        == "+ x: torch.OutOfMemoryError with 1.99 GB allocated, 2.00 GB free."


def attempt(fit, real=True):
    return {"fit": fit, "counted": 1.0 if fit else None, "peak": 2.0 if real else None,
            "error": None if fit else "CUDA out of memory."}


def test_combination_verdict_names_the_remedies_up_to_the_first_that_fit():
    tries = {"baseline (float32)": attempt(False), "+ autocast (float16)": attempt(False),
             "+ 4 micro-batches": attempt(True), "+ checkpointing": attempt(True)}
    assert nb.fitted_with(tries) == "+ 4 micro-batches"
    assert nb.combination_verdict(tries) == \
        "The training step trains on this GPU with: autocast (float16), 4 micro-batches."
    assert nb.combination_verdict({"baseline (float32)": attempt(True)}) == \
        "The training step trains on this GPU with: no remedy."
    declared = {"baseline (float32)": attempt(False, real=False), "+ checkpointing": attempt(True, real=False)}
    assert nb.combination_verdict(declared) == \
        "The training step fits the declared budget (nothing real was raised) with: checkpointing."
    none_fit = {"baseline (float32)": attempt(False), "+ checkpointing": attempt(False)}
    assert nb.fitted_with(none_fit) is None and nb.combination_verdict(none_fit).startswith("No try fit")


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
    model = tiny_model()
    inputs, labels = tiny_batch(8)
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


# FSDP2: the version gate, the checks, ZeRO


@pytest.mark.gpu_branch(
    "08", "fsdp_gate: backend == 'gloo' and version_tuple(version) < version_tuple(FSDP2_GLOO_FIRST)")
@pytest.mark.parametrize("version, backend, runs", [
    ("2.6.0", "gloo", False), ("2.6.0+cpu", "gloo", False), ("2.6.9", "gloo", False),
    ("2.7.0", "gloo", True), ("2.7.0a0+git1234", "gloo", True), ("2.14.1+cu130", "gloo", True),
    ("2.6.0+cu124", "nccl", True)])
def test_fsdp_gate_at_the_first_release_that_runs_fsdp2_over_gloo(version, backend, runs):
    run, why = nb.fsdp_gate(version, backend)
    assert run == runs
    assert ("record_event" in why and "torch>=2.7" in why) == (not runs)


def test_fsdp_gate_without_torch_distributed():
    run, why = nb.fsdp_gate("2.14.1", "gloo", distributed_available=False)
    assert not run and "no torch.distributed" in why


@pytest.mark.parametrize("part, ok", [(110.0, True), (110.001, False), (90.0, True), (89.999, False)])
def test_about_one_share_at_its_slack(part, ok):
    assert nb.about_one_share(part, 200, 2, slack=0.1) == ok


def fsdp_result(rank, weights, optimizer, losses=(1.0, 0.9), step_ms=10.0):
    return {"rank": rank, "weights_bytes": weights, "gradients_bytes": weights, "optimizer_bytes": optimizer,
            "losses": list(losses), "step_ms": step_ms}


def test_shards_verdict_wants_shards_that_add_up_and_are_about_even():
    reference = [fsdp_result(0, 1000, 2008)]
    ok, text = nb.shards_verdict([fsdp_result(0, 500, 1004), fsdp_result(1, 500, 1004)], reference)
    assert ok and "True" in text
    assert not nb.shards_verdict([fsdp_result(0, 500, 1004), fsdp_result(1, 499, 1004)], reference)[0]
    assert not nb.shards_verdict([fsdp_result(0, 600, 1004), fsdp_result(1, 400, 1004)], reference)[0]
    assert not nb.shards_verdict([fsdp_result(0, 500, 1300), fsdp_result(1, 500, 700)], reference)[0]
    assert nb.shards_verdict([], reference) == (False, "A torchrun process reported no result: see its output above.")
    table = nb.shard_table([fsdp_result(0, 500, 1004), fsdp_result(1, 500, 1004)], reference)
    assert list(table["weights_share_%"]) == [50.0, 50.0] and table.loc[1, "optimizer_share_%"] == 50.0
    assert nb.shard_table([], reference).empty


@pytest.mark.parametrize("sharded, agree", [([4.0, 5.0], True), ([4.0, 5.01], False), ([4.0, 3.0], True),
                                            ([4.0, 2.99], False), ([4.0], False)])
def test_losses_verdict_at_its_tolerance(sharded, agree):
    assert nb.losses_verdict([4.0, 4.0], sharded, rtol=0.25)[0] == agree
    assert not nb.losses_verdict([], [], rtol=0.25)[0]


# The FSDP2 script


def function_source(name, text=SCRIPT_TEXT):
    tree = ast.parse(text)
    node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name)
    return ast.get_source_segment(text, node)


def test_the_script_carries_the_notebooks_own_model_code():
    compile(SCRIPT_TEXT, "08_train_fsdp.py", "exec")
    notebook_defs = {}
    for source in code_cells(read(notebook_path("08"))):
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                notebook_defs.setdefault(node.name, ast.dump(node))
    for name in ("TransformerLayer", "MeanOverTokens", "make_transformer", "make_batch", "shard_model"):
        assert ast.dump(ast.parse(function_source(name)).body[0]) == notebook_defs[name], name


def test_the_script_shards_each_layer_then_the_model_and_builds_the_optimizer_after():
    assert "from torch.distributed.fsdp import fully_shard" in SCRIPT_TEXT
    assert "from torch.distributed.device_mesh import init_device_mesh" in SCRIPT_TEXT
    main = function_source("main")
    assert main.index("init_device_mesh(device.type, (world_size,))") < main.index("shard_model(model, mesh)") \
        < main.index("torch.optim.Adam(model.parameters()")
    assert ast.unparse(ast.parse(main).body[0].body[-1]) == "leave_process_group()"


def test_shard_model_shards_each_transformer_layer_then_the_whole_model(monkeypatch):
    # fully_shard stands in for PyTorch's own (which needs a process group), in the namespace the taught
    # script's function reads: a parameter would put plumbing into the lines 08 teaches
    calls = []
    monkeypatch.setitem(nb.shard_model.__globals__, "fully_shard",
                        lambda module, mesh: calls.append((type(module).__name__, mesh)))
    model = tiny_model()
    assert nb.shard_model(model, "the mesh") is model
    assert calls == [("TransformerLayer", "the mesh"), ("TransformerLayer", "the mesh"),
                     ("Sequential", "the mesh")]


@pytest.mark.gpu_branch("08", "SCRIPT_MAIN.leave_process_group: gloo")
@pytest.mark.parametrize("backend, calls", [
    ("gloo", ["get_backend", "barrier", "destroy_process_group", "flush", "flush", "_exit(0)"]),
    ("nccl", ["get_backend", "barrier", "destroy_process_group"])])
def test_leave_process_group_exits_at_once_on_gloo_only(backend, calls):
    done = []

    class Dist:
        get_backend = staticmethod(lambda: done.append("get_backend") or backend)
        barrier = staticmethod(lambda: done.append("barrier"))
        destroy_process_group = staticmethod(lambda: done.append("destroy_process_group"))

    stream = type("Stream", (), {"flush": lambda self: done.append("flush")})()
    namespace = {"dist": Dist, "sys": type("Sys", (), {"stdout": stream, "stderr": stream}),
                 "os": type("Os", (), {"_exit": staticmethod(lambda code: done.append(f"_exit({code})"))})}
    exec(function_source("leave_process_group"), namespace)
    namespace["leave_process_group"]()
    assert done == calls


@pytest.mark.gpu_branch("08", "SCRIPT_MAIN.start_process_group: use_gpu")
@pytest.mark.gpu_branch("08", "SCRIPT_MAIN.start_process_group: use_gpu (2)")
@pytest.mark.gpu_branch("08", "SCRIPT_MAIN.start_process_group: use_gpu (3)")
@pytest.mark.parametrize("gpu, cpu_only, backend, device", [
    (True, False, "nccl", "cuda:1"), (True, True, "gloo", "cpu"), (False, False, "gloo", "cpu")])
def test_start_process_group_picks_nccl_and_the_local_gpu_only_with_cuda(gpu, cpu_only, backend, device):
    done = []

    class Cuda:
        is_available = staticmethod(lambda: gpu)
        set_device = staticmethod(lambda d: done.append(f"set_device({d})"))

    class Dist:
        @staticmethod
        def init_process_group(name, timeout):
            done.append(f"init_process_group({name}, {timeout.total_seconds():.0f})")

    stand_in_torch = type("Torch", (), {"cuda": Cuda, "device": torch.device})
    import datetime
    namespace = {"torch": stand_in_torch, "dist": Dist, "datetime": datetime,
                 "os": type("Os", (), {"environ": {**os.environ, "LOCAL_RANK": "1"}})}
    exec(function_source("start_process_group"), namespace)
    assert str(namespace["start_process_group"](cpu_only, 120)) == device
    expected = ([f"set_device({device})"] if backend == "nccl" else []) + [f"init_process_group({backend}, 120)"]
    assert done == expected


def test_local_bytes_counts_only_the_local_shard_of_a_sharded_tensor():
    namespace = {"torch": torch}
    exec(function_source("local_bytes"), namespace)

    class Sharded(torch.Tensor):  # shaped like a DTensor: the whole shape, to_local() the shard
        pass

    whole = torch.zeros(10).as_subclass(Sharded)
    whole.to_local = lambda: torch.zeros(5)
    assert namespace["local_bytes"]([whole, torch.zeros(3, dtype=torch.float16), None]) == 26


def test_the_written_script_parses_its_options(tmp_path):
    script = nb.write_script(tmp_path / "08_train_fsdp.py", [nb.SCRIPT_TOP, nb.SCRIPT_MODEL, nb.SCRIPT_MAIN])
    help_text = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                               timeout=300, check=True).stdout
    for option in ("--width", "--depth", "--batch", "--sequence", "--steps", "--no-fsdp", "--cpu",
                   "--timeout-s"):
        assert option in help_text


def test_fsdp_launch_plan_is_the_shared_plan_in_its_own_words():
    # one decision (tools/shared_cells/torchrun_helpers.py's torchrun_plan, tested there); 08's words
    for gpus, accelerator in [(0, "cpu"), (0, "mps"), (1, "cuda"), (2, "cuda")]:
        plan = nb.fsdp_launch_plan(gpus, 2, accelerator, os_name="posix")
        shared = nb.torchrun_plan(gpus, 2, accelerator, "posix", one_gpu_why="", mps_why="")
        assert {k: v for k, v in plan.items() if k != "why"} == {k: v for k, v in shared.items() if k != "why"}
    assert "sharding needs two devices" in nb.fsdp_launch_plan(1, 2)["why"]
    assert "FSDP" in nb.fsdp_launch_plan(0, 2, "mps")["why"]


def test_port_is_free_sees_a_listening_socket():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert not nb.port_is_free(port)
    assert nb.port_is_free(port)


def test_fsdp2_on_two_cpu_processes_holds_half_and_matches_one_process(tmp_path):
    script = nb.write_script(tmp_path / "08_train_fsdp.py", [nb.SCRIPT_TOP, nb.SCRIPT_MODEL, nb.SCRIPT_MAIN])
    args = ["--width", 32, "--depth", 1, "--batch", 8, "--sequence", 8, "--steps", 2, "--cpu"]
    results = []
    for nproc, extra in [(1, ["--no-fsdp"]), (2, [])]:
        port = nb.free_port()
        command = nb.torchrun_command(script, nproc, script_args=[*args, *extra], endpoint=f"127.0.0.1:{port}",
                                      run_id="test08", log_dir=tmp_path / str(nproc))
        run = nb.run_launchers([command], time_limit_s=240, env=nb.launch_env(1), echo=False)
        assert run["returncodes"] == [0] and run["stopped"] is None, run["output"][-20:]
        assert len(run["started"]) >= nproc and run["leftovers"] == []
        assert all(not nb.is_alive(pid) for pid in run["started"]) and nb.port_is_free(port)
        results.append(nb.parse_results(run["output"]))
    reference, sharded = results
    assert [r["rank"] for r in sharded] == [0, 1] and reference[0]["world_size"] == 1
    assert nb.shards_verdict(sharded, reference)[0]
    assert sum(r["optimizer_bytes"] for r in sharded) > reference[0]["optimizer_bytes"]  # step counters
    assert nb.losses_verdict(reference[0]["losses"], sharded[0]["losses"])[0]
    assert sharded[0]["losses"] == sharded[1]["losses"]  # every process reports the mean of all


# --- The side a Windows machine and a GPU machine take, run with stand-ins ---------------------------

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
    model, (inputs, labels) = tiny_model(), tiny_batch()
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


def stand_in_launches(outputs):
    """run_launchers that records each launch (its commands and OMP_NUM_THREADS) and returns what
    the real one returns, with the next lines of `outputs` as the programs' output."""
    launched = []

    def run_launchers(commands, time_limit_s, env=None, patience_s=15, echo=True):
        launched.append({"commands": commands, "threads": env["OMP_NUM_THREADS"]})
        return {"output": [(0, line) for line in outputs.pop(0)], "returncodes": [0], "stopped": None,
                "seconds": 5.0, "ended_s": [5.0], "started": [], "leftovers": []}
    return run_launchers, launched


@pytest.mark.gpu_branch("08", "cell fsdp-runs: plan['backend'] == 'gloo'")
@pytest.mark.parametrize("gpu_count, one_process_threads", [(2, "1"), (1, "8"), (0, "8")])
def test_step_4_gives_the_one_process_reference_one_thread_beside_a_gpu_and_every_core_on_gloo(
        tmp_path, gpu_count, one_process_threads):
    plan = nb.fsdp_launch_plan(gpu_count, 8, "cuda" if gpu_count else "cpu")
    run_launchers, launched = stand_in_launches([[], []])
    ports = iter([29511, 29512])
    namespace = {**vars(nb), "plan": plan, "can_shard": True, "BATCH": 16, "WIDTH": 64, "DEPTH": 2,
                 "SEQUENCE": 32, "FAST": True, "CPU_CORES": 8, "TIME_LIMIT_S": 240,
                 "script_path": tmp_path / "08_train_fsdp.py", "DATA_DIR": tmp_path,
                 "run_launchers": run_launchers, "free_port": lambda: next(ports)}
    printed = run_cell("08", "fsdp-runs", namespace)
    reference, sharded = launched
    [one], [many] = reference["commands"], sharded["commands"]
    assert reference["threads"] == one_process_threads and sharded["threads"] == str(plan["threads"])
    assert "--nproc-per-node=1" in one and "--no-fsdp" in one
    assert f"--nproc-per-node={plan['nproc']}" in many and "--no-fsdp" not in many
    assert all(("--cpu" in command) is (gpu_count == 1) for command in (one, many))
    assert "--rdzv-endpoint=127.0.0.1:29511" in one and printed.count("$ ") == 2
    assert all("--steps 3" in shlex.join(command) for command in (one, many))  # FSDP_STEPS in fast mode
    assert list(namespace["runs"]) == ["one process", f"FSDP2, {plan['nproc']} processes"]
    namespace = {**namespace, "can_shard": False, "run_launchers": None}
    run_cell("08", "fsdp-runs", namespace)
    assert namespace["runs"] == {}  # the gate said no: nothing is launched


@pytest.mark.parametrize("runs, alive, free, verdict", [
    ({}, set(), {1}, "Part C started no torchrun, so nothing can be left over."),
    ({"FSDP2": {"port": 1}}, set(), {1}, "No process or port of part C's torchrun runs is left over."),
    ({"FSDP2": {"port": 1}}, {42}, {1}, "Left over from part C's torchrun runs"),
    ({"FSDP2": {"port": 1}}, set(), set(), "Left over from part C's torchrun runs"),
    ({"one": {"port": 1}, "two": {"port": 2}}, set(), {2}, "Left over from part C's torchrun runs"),  # one port taken
    ({"one": {"port": 1}, "two": {"port": 2}}, set(), {1, 2}, "No process or port")])
def test_the_leftover_check_of_08_prints_its_verdict_for_processes_and_ports(runs, alive, free, verdict):
    runs = {name: {**run, "seconds": 1.0, "returncodes": [0], "started": [42]} for name, run in runs.items()}
    namespace = {**vars(nb), "pd": pd, "runs": runs, "is_alive": lambda pid: pid in alive,
                 "port_is_free": lambda port: port in free}
    assert run_cell("08", "fsdp-leftovers", namespace).startswith(verdict)


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


def test_memory_figures_when_no_try_fit():
    counts = {"weights": 1e6, "gradients": 1e6, "optimizer_state": 2e6, "activations": 5e5}
    attempts = {"baseline (float32)": attempt(False), "+ checkpointing": attempt(False)}
    figures = nb.memory_figures(counts, attempts, 3e6, 4)
    assert figures["step2_fit_with"] is None and figures["step2_fit_peak_MB"] is None
    assert figures["step2_out_of_memory"] == ["baseline (float32)", "+ checkpointing"]
    assert figures["activations_MB"] == 0.5 and figures["step2_limit_MB"] == 3.0
    declared = {"baseline (float32)": attempt(False, real=False), "+ checkpointing": attempt(True, real=False)}
    assert nb.memory_figures(counts, declared, 3e6, 4)["step2_fit_peak_MB"] is None  # no allocator peak


# --- The exercises: each check against a likely wrong answer, and the notebook's own answer ----------

def exercise(name, **more):
    """The namespace of exercise `name`'s check and answer cells, run on the CPU with `more` beside
    the notebook's helpers."""
    namespace = {**vars(nb), "device": torch.device("cpu"), **more}
    run_cell("08", f"exercise-{name}-check", namespace)
    run_cell("08", f"exercise-{name}-answer", namespace)
    return namespace


@pytest.mark.exercise("08", "predicted-bytes")
def test_exercise_1_tells_a_prediction_of_4_bytes_a_number_where_bfloat16_takes_2():
    namespace = exercise("predicted-bytes")
    check = namespace["check_predicted_bytes"]
    assert check(namespace["predicted_bytes_answer"]).startswith("PASSED: your predictions match")

    def four_bytes_each(model, optimizer_name):  # right for float32 only
        numbers = sum(p.numel() for p in model.parameters())
        return 4 * numbers * (2 + {"SGD": 0, "SGD with momentum": 1, "Adam": 2}[optimizer_name])

    bfloat16_model, counted = namespace["counted_step_bytes"]("Adam", torch.bfloat16)
    predicted = four_bytes_each(bfloat16_model, "Adam")
    assert abs(predicted / counted - 2) < 0.01, "twice the count: bfloat16 takes 2 bytes a number"
    assert check(four_bytes_each) == (
        f"NOT YET RIGHT: Adam with bfloat16 weights: you predicted {predicted:,.0f} bytes, the count is "
        f"{counted:,.0f} (+100 %). Each number takes p.element_size() bytes; a gradient is one number per "
        f"weight, and the optimizer keeps 0, 1 or 2 more.")
    assert check(lambda model, optimizer_name: ...).startswith("NOT DONE YET")

    def momentum_forgotten(model, optimizer_name):  # the dict lacks one of the three names
        weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        return weight_bytes * (2 + {"SGD": 0, "Adam": 2}[optimizer_name])

    assert check(momentum_forgotten) == (
        "NOT YET RIGHT: predicted_bytes(model, 'SGD with momentum') raised KeyError: 'SGD with momentum'")

    def return_forgotten(model, optimizer_name):
        weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        weight_bytes * (2 + {"SGD": 0, "SGD with momentum": 1, "Adam": 2}[optimizer_name])

    assert check(return_forgotten) == ("NOT YET RIGHT: predicted_bytes(model, 'SGD') returned None (a "
                                       "NoneType), not a number of bytes.")
    assert check(lambda model, optimizer_name: "4 KB") == (
        "NOT YET RIGHT: predicted_bytes(model, 'SGD') returned '4 KB' (a str), not a number of bytes.")


def catches_nothing(train_step, batch_sizes):
    for batch in sorted(batch_sizes, reverse=True):
        train_step(batch)
        return batch
    return None


def smallest_first(train_step, batch_sizes):
    for batch in sorted(batch_sizes):
        try:
            train_step(batch)
            return batch
        except torch.OutOfMemoryError:
            pass
    return None


@pytest.mark.exercise("08", "largest-batch")
def test_exercise_2_tells_an_error_that_escapes_and_a_batch_that_is_not_the_largest():
    namespace = exercise("largest-batch", FEATURES=16, CLASSES=2)
    check = namespace["check_largest_fitting_batch"]
    assert check(namespace["largest_fitting_batch_answer"]) == \
        "PASSED: 8 of [2, 4, 8, 16, 32, 64], and None when no size fits."
    assert check(catches_nothing).startswith(
        "NOT YET RIGHT: torch.OutOfMemoryError escaped from train_step(64): catch it")
    assert check(smallest_first) == ("NOT YET RIGHT: with sizes [2, 4, 8, 16, 32, 64] it returned 2, "
                                     "but the largest that trains is 8 (it tried [2]).")
    assert check(lambda train_step, batch_sizes: ...).startswith("NOT DONE YET")
    assert check(lambda train_step, batch_sizes: train_step("8")) == \
        "NOT YET RIGHT: largest_fitting_batch raised KeyError: '8'"


def test_exercise_2s_made_up_gpu_raises_pytorchs_error_above_its_budget_only():
    namespace = {**vars(nb), "device": torch.device("cpu")}
    run_cell("08", "exercise-largest-batch-check", namespace)
    train_step = namespace["out_of_memory_step"]({4: 10, 8: 11}, 10)
    assert train_step(4) == 10
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate 0.0 MB"):
        train_step(8)
    assert train_step.calls == [4, 8]


def transformers_first(model):
    """Every second transformer layer wrapped, but the layers put back in another order."""
    transformers = [layer for layer in model if isinstance(layer, nb.TransformerLayer)]
    rest = [layer for layer in model if not isinstance(layer, nb.TransformerLayer)]
    return nn.Sequential(*[nb.Checkpointed(layer) if index % 2 == 0 else layer
                           for index, layer in enumerate(transformers)], *rest)


def transformers_only(model):
    """Every second transformer layer wrapped, and the other layers left out."""
    transformers = [layer for layer in model if isinstance(layer, nb.TransformerLayer)]
    return nn.Sequential(*[nb.Checkpointed(layer) if index % 2 == 0 else layer
                           for index, layer in enumerate(transformers)])


def wrapped_in_place(model):
    """Every second transformer layer wrapped inside the model it was given."""
    seen = 0
    for index, layer in enumerate(model):
        if isinstance(layer, nb.TransformerLayer):
            if seen % 2 == 0:
                model[index] = nb.Checkpointed(layer)
            seen += 1
    return model


def gradients_of(model, batch, weights):
    """The gradients of `weights` after a backward pass of `model` on `batch`, as one flat tensor."""
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
    return torch.cat([p.grad.flatten() for p in weights])


@pytest.mark.exercise("08", "every-second-layer")
def test_exercise_3_tells_checkpointing_every_layer_and_a_copy_of_the_weights():
    torch.manual_seed(0)
    model = nb.make_transformer(16, 16, 3, 2)  # 16 features, 16 wide: the layers run in any order
    namespace = exercise("every-second-layer", model=model, BATCH=8, SEQUENCE=8, FEATURES=16)
    check = namespace["check_every_second_layer"]
    passed = check(namespace["checkpoint_every_second_answer"])
    assert passed.startswith("PASSED: 2 of 3 layers checkpointed") and "with the same gradients" in passed
    assert check(nb.with_checkpointing) == ("NOT YET RIGHT: 3 of 3 transformer layers are checkpointed "
                                            "([True, True, True]); wanted [True, False, True]: the first, "
                                            "the third, ...")
    copied = check(lambda model: namespace["checkpoint_every_second_answer"](copy.deepcopy(model)))
    assert copied == ("NOT YET RIGHT: the new model has weights of its own: wrap the model's own layers (no "
                      "copies), so that both train the same weights.")
    assert check(lambda model: ...).startswith("NOT DONE YET")
    assert check(lambda model: list(model)) == (
        f"NOT YET RIGHT: it returned {nb.short(list(model))}; return an nn.Sequential, as with_checkpointing "
        f"does.")
    assert nb.short(list(model)).endswith(" (a list)")

    def return_forgotten(model):
        nn.Sequential(*[nb.Checkpointed(layer) if index in (1, 3) else layer
                        for index, layer in enumerate(model)])

    assert check(return_forgotten) == ("NOT YET RIGHT: it returned None (a NoneType); return an nn.Sequential, "
                                       "as with_checkpointing does.")
    assert len(list(model.parameters())) == 6 + 3 * 12, "2 Linear layers and a LayerNorm, 3 layers of 12"
    assert check(transformers_only) == ("NOT YET RIGHT: the new model leaves out 6 of the model's 42 weight "
                                        "tensors: keep every layer, in its order.")
    batch = nb.make_batch(8, 4, 8, 16, torch.device("cpu"))
    plain = gradients_of(model, batch, list(model.parameters()))
    reordered = gradients_of(transformers_first(model), batch, list(model.parameters()))
    off = (reordered - plain).abs().max() / plain.abs().max()
    assert check(transformers_first) == (f"NOT YET RIGHT: the gradients of your model differ from the plain "
                                         f"model's by {off:.1e} of the largest.")
    assert off > 1e-4
    # Wrapping inside the model it was given changes Step 1's model too: said, however it is wrapped
    assert check(wrapped_in_place) == (
        "NOT YET RIGHT: it changed the model it was given: Step 1's model now has checkpointed layers too. "
        "Build a new nn.Sequential, as with_checkpointing does, and run Step 1's cells again to get the "
        "plain model back.")
    assert check(namespace["checkpoint_every_second_answer"]).startswith("NOT YET RIGHT: it changed the model")
