"""Notebook 08's helpers called with made-up inputs, run for real on the CPU where PyTorch allows it:
counting the bytes of a training step (weights, gradients, optimizer state, activations seen through
saved-tensor hooks), the remedies (checkpointing, gradient accumulation, autocast in bfloat16, 16-bit
weights in float16 with Adam's eps) and their verdicts, Step 2's declared budget, its tries and their
verdicts, and the figures of a run in which no try fit."""
import pytest
import torch
from torch import nn

from support.notebook_08 import tiny_batch, tiny_model
from support.notebook_code import load_helpers

nb = load_helpers("08")


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
    model = tiny_model(nb)
    inputs, labels = tiny_batch(nb)
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
    model = tiny_model(nb)
    adam = torch.optim.Adam(model.parameters())
    small, large = (nb.memory_of_step(model, adam, *tiny_batch(nb, batch)) for batch in (4, 16))
    assert {k: small[k] for k in ("weights", "gradients", "optimizer_state")} == \
        {k: large[k] for k in ("weights", "gradients", "optimizer_state")}
    assert 3.5 < large["activations"] / small["activations"] <= 4.0


def test_set_to_none_frees_the_gradients_that_zero_filling_keeps():
    model = tiny_model(nb)
    adam = torch.optim.Adam(model.parameters())
    for set_to_none, held in [(True, 0), (False, 4 * sum(p.numel() for p in model.parameters()))]:
        nb.memory_of_step(model, adam, *tiny_batch(nb))
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


def test_checkpointing_keeps_less_and_gives_the_same_gradients():
    model = tiny_model(nb)
    inputs, labels = tiny_batch(nb)
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
    model = tiny_model(nb)
    inputs, labels = tiny_batch(nb, 16)
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
    model = tiny_model(nb)
    inputs, labels = tiny_batch(nb, 16)
    adam = torch.optim.Adam(model.parameters())
    baseline = nb.memory_of_step(model, adam, inputs, labels)
    autocast = nb.remedy_step(model, adam, inputs, labels, dtype=dtype)
    assert all(autocast[k] == baseline[k] for k in ("weights", "gradients", "optimizer_state"))
    assert autocast["activations"] < baseline["activations"]
    low_model = tiny_model(nb).to(dtype)
    low_adam = torch.optim.Adam(low_model.parameters(), eps=1e-4)
    low = nb.remedy_step(low_model, low_adam, inputs.to(dtype), labels)
    assert low["weights"] * 2 == baseline["weights"] and low["gradients"] * 2 == baseline["gradients"]
    assert low["optimizer_state"] < baseline["optimizer_state"] * 0.55


def test_accumulated_gradients_equal_one_batch_only_when_weighted_by_samples():
    model = tiny_model(nb)
    inputs, labels = tiny_batch(nb, 16)
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
    model = tiny_model(nb)
    inputs, _ = tiny_batch(nb)
    import contextlib
    assert nb.forward_only(model, inputs, contextlib.nullcontext)["activations"] > 0
    assert nb.forward_only(model, inputs, torch.no_grad)["activations"] == 0
    assert nb.forward_only(model, inputs, torch.inference_mode)["activations"] == 0


# 16-bit weights and autocast: what the cells read from their own measurements


def train_float16(eps, steps=2):
    """A tiny model wholly in float16 on the CPU, trained `steps` optimizer steps with Adam(eps)."""
    model = tiny_model(nb).to(torch.float16)
    adam = torch.optim.Adam(model.parameters(), lr=1e-3, eps=eps)
    inputs, labels = tiny_batch(nb, 16)
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


# Step 2: the declared budget, the tries and their verdicts (the CUDA side: test_08_gpu_branches.py)

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


def test_memory_figures_when_no_try_fit():
    counts = {"weights": 1e6, "gradients": 1e6, "optimizer_state": 2e6, "activations": 5e5}
    attempts = {"baseline (float32)": attempt(False), "+ checkpointing": attempt(False)}
    figures = nb.memory_figures(counts, attempts, 3e6, 4)
    assert figures["step2_fit_with"] is None and figures["step2_fit_peak_MB"] is None
    assert figures["step2_out_of_memory"] == ["baseline (float32)", "+ checkpointing"]
    assert figures["activations_MB"] == 0.5 and figures["step2_limit_MB"] == 3.0
    declared = {"baseline (float32)": attempt(False, real=False), "+ checkpointing": attempt(True, real=False)}
    assert nb.memory_figures(counts, declared, 3e6, 4)["step2_fit_peak_MB"] is None  # no allocator peak
