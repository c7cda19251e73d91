"""Notebook 08's exercises: each check given a likely wrong answer, and the notebook's own answer."""
import copy

import pytest
import torch
from torch import nn

from support.notebook_code import load_helpers, run_cell

nb = load_helpers("08")


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
