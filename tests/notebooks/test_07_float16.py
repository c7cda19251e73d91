"""Notebook 07's Going deeper C, float16 for real on the CPU: what rounds to 0 and to inf, the table of
values on both sides of the limits, and the GradScaler that keeps small gradients and skips the steps that
overflow."""
import math

import pytest
import torch
from torch import nn

from support.notebook_code import load_helpers, run_cell

nb = load_helpers("07")
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def pictures():
    """Step 3's made-up pictures."""
    return nb.make_pictures(256)


# --- Going deeper C: float16 on run_on, for real on the CPU ---------------------------------------

def float16(value):
    """`value` stored in float16 and read back, as PyTorch rounds it."""
    return torch.tensor(value, dtype=torch.float64).to(torch.float16).item()


def test_float16_rounds_to_0_at_and_below_half_its_smallest_number():
    info = torch.finfo(torch.float16)
    smallest = info.tiny * info.eps  # the smallest float16 above 0 (a subnormal one)
    threshold = 2.0 ** -25
    assert smallest == 2.0 ** -24 and threshold == smallest / 2, "half the smallest number above 0"
    # float32 gradients, as autocast's backward hands them to float16: 2**-25 is the largest that gives 0
    gradients = torch.tensor([threshold, -threshold, smallest * 0.75], dtype=torch.float32)
    gradients = torch.cat([gradients, torch.nextafter(gradients[:1], torch.tensor([1.0]))])
    assert gradients.to(torch.float16).tolist() == [0.0, 0.0, smallest, smallest]


def test_the_table_shows_values_on_both_sides_of_the_limit_the_prose_states():
    namespace = {**vars(nb), "device": torch.device("cpu")}
    run_cell("07", "float16-table", namespace)
    values = namespace["values"]
    below = max(value for value in values if value <= 2.0 ** -25)
    above = min(value for value in values if value > 2.0 ** -25)
    assert below >= 2.5e-8 and above <= 3.5e-8, "one value each side of the limit, close to it"
    assert float16(below) == 0 and nb.float16_fate(below) == "rounds to 0"
    assert float16(above) > 0 and nb.float16_fate(above) == "rounded, to fewer digits"


@pytest.mark.parametrize("value", [
    0.0, 0.1, 2048.0, 2049.0, 65504.0, 65519.99, 65520.0, 65536.0, 1e5, -65520.0, -65504.0,
    2.0**-24, 2.0**-25, 2.0**-25 * 1.0001, 2.0**-25 * 0.9999, 1e-8, -1e-8, 1e-6,
    torch.finfo(torch.float16).tiny, torch.finfo(torch.float16).tiny * 0.999])
def test_float16_fate_says_what_the_conversion_really_does(value):
    stored = torch.tensor(value, dtype=torch.float64).to(torch.float16).item()
    fate = nb.float16_fate(value)
    assert (fate == "overflows to inf") == math.isinf(stored)
    assert (fate == "rounds to 0") == (stored == 0 and value != 0)
    assert (fate == "exact") == (stored == value)
    assert (fate == "rounded, to fewer digits") == (
        stored not in (0, value) and abs(value) < torch.finfo(torch.float16).tiny)


def test_stored_as_shows_the_three_formats():
    cpu = torch.device("cpu")
    assert nb.stored_as([65520.0, 2049.0], torch.float16, cpu) == ["inf", "2048"]
    assert nb.stored_as([65520.0, 2049.0], torch.bfloat16, cpu) == ["65536", "2048"]
    assert nb.stored_as([65520.0, 2049.0], torch.float32, cpu) == ["65520", "2049"]
    assert nb.stored_as([2.9e-8, 3e-8], torch.float16, cpu) == ["0", "5.96046e-08"]


def test_a_grad_scaler_keeps_small_float16_gradients(pictures):
    inputs, labels = pictures[0] / 255, pictures[1]
    float32 = nb.zero_gradient_percent(inputs, labels, CPU, 1e-5, False)
    float16 = nb.zero_gradient_percent(inputs, labels, CPU, 1e-5, True)
    scaled = nb.zero_gradient_percent(inputs, labels, CPU, 1e-5, True, torch.amp.GradScaler("cpu"))
    assert float16 > float32 + 50, "without a scaler most float16 gradients underflow to 0"
    assert scaled < float32 + 1, "with one, nearly all are as in float32"


def test_the_scaler_skips_exactly_the_steps_that_overflow_and_adjusts_its_scale(pictures):
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24, growth_interval=10)
    rows = nb.train_float16(nb.make_classifier(nn.LogSoftmax(dim=1)), pictures[0] / 255,
                            pictures[1], scaler, steps=30, device=CPU)
    skipped = [row["step"] for row in rows if row["skipped"]]
    assert skipped[:1] == [0], "a scale of 2**24 overflows at once"
    assert all(row["weights_changed"] != row["skipped"] for row in rows)
    for row, following in zip(rows, rows[1:]):
        if row["skipped"]:
            assert following["scale"] == row["scale"] / 2
    good_run = next(index for index, row in enumerate(rows) if not row["skipped"])
    assert rows[good_run + 10]["scale"] == 2 * rows[good_run]["scale"] or any(
        row["skipped"] for row in rows[good_run:good_run + 10]), "doubles after 10 good steps"
