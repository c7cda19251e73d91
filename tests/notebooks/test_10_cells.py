"""Notebook 10's cells run whole on the CPU (notebook_code.run_cell) with stand-ins for what only a
measurement gives: what each takes and prints. Inference tensors kept on the device (the meta device
stands in for a GPU), the eval-mode and load cells judging at the tolerance of the device's float32 (a
stand-in model answers as TF32 convolutions may), and the two cells that hand the figures to
report_figures: the core's at its end, Going deeper's after it."""
import json
import math
import types

import pytest
import torch
from torch import nn

from support.notebook_code import load_helpers, run_cell


@pytest.fixture(scope="module")
def nb():
    return load_helpers("10")


# --- Going deeper A: inference tensors stay on the device -----------------------------------------

def test_the_inference_tensor_cell_keeps_every_tensor_on_the_device(nb):
    # PyTorch's "meta" device stands in for a GPU: like a CUDA tensor, a meta tensor cannot meet a CPU
    # tensor in one operation, so a tensor the cell made on the CPU fails here as it would on a T4.
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 10)).to("meta").eval()
    namespace = {**vars(nb), "device": torch.device("meta"), "model": model,
                 "images": torch.randn(8, 3, 2, 2, device="meta")}
    printed = run_cell("10", "inference-tensors", namespace)
    assert printed.splitlines() == ["RuntimeError: Inference tensors cannot be saved for backward",
                                    "Inference mode in the main thread: True; in a new thread: False"]
    assert namespace["weights"].grad.device.type == "meta", "the clone's backward pass ran"


# --- Steps 1 and 4: the checks at the tolerance of the device's float32 ---------------------------

class TF32Like:
    """A stand-in model whose answer to a picture in a batch of several differs from its answer alone
    by 5e-4, as convolutions in TF32 may (another algorithm per batch size): beyond float32's
    tolerance, within TF32's."""

    def __call__(self, images):
        return images.flatten(1)[:, :3] + (5e-4 if len(images) > 1 else 0.0)


@pytest.mark.parametrize("kind, verdict", [
    ("tf32", "eval mode: the same answer every time"), ("float32", "eval mode: the answers still differ")])
def test_the_eval_mode_cell_judges_at_the_tolerance_of_the_devices_float32(nb, kind, verdict):
    class TwoModes(TF32Like):
        def train(self):
            return self

    namespace = {**vars(nb), "model": TwoModes(), "device": torch.device("cpu"), "IMAGE": (3, 2, 2),
                 "copy": types.SimpleNamespace(deepcopy=lambda model: model),
                 "display": lambda table: None, "float32_kind": lambda device: kind}
    printed = run_cell("10", "eval-mode", namespace).splitlines()
    assert printed[0].startswith("train mode: two calls differ by up to ")
    assert printed[1].startswith("eval mode: two calls differ by up to ") and len(printed) == 3
    assert printed[-1].startswith(verdict)


@pytest.mark.parametrize("kind, verdict", [
    ("tf32", "Every request of all 6 runs answered exactly once, as if alone."),
    ("float32", "an answer differs from its answer alone")])
def test_the_load_cell_checks_the_answers_at_the_tolerance_of_the_devices_float32(nb, kind, verdict):
    model, requests = TF32Like(), torch.randn(8, 3, 2, 2)

    def run_load(batcher, images, arrivals):  # the notebook's, refusing traffic that would last long
        assert arrivals[-1] < 10, f"8 requests at rates of several hundred per second took {arrivals[-1]} s"
        return nb.run_load(batcher, images, arrivals)

    namespace = {**vars(nb), "model": model, "device": torch.device("cpu"), "requests": requests,
                 "run_load": run_load,
                 "alone": torch.cat([model(image.unsqueeze(0)) for image in requests]),
                 "latencies": [0.002] * 8, "LOAD_REQUESTS": 8, "MAX_BATCH": 4,
                 "float32_kind": lambda device: kind}
    assert run_cell("10", "load", namespace).startswith(verdict)
    batched = [row["mean_batch"] for row in namespace["load_rows"] if row["server"] == "dynamic batcher"]
    assert len(batched) == 3 and max(batched) > 1, "the batcher answered some requests together"
    row = namespace["load_rows"][0]
    assert row["slower_than_p99"] == 0 and row["lag_ms"] >= 0, "p99 of 8 requests rests on none"
    rates = sorted({row["rate_per_s"] for row in namespace["load_rows"]})
    assert rates == [round(f * namespace["capacity"]) for f in (0.3, 0.9, 1.5)], "times the measured one"
    assert {row["verdict"].split(":")[0] for row in namespace["load_rows"]} <= {"kept up", "over capacity"}


# --- The figures: the core's, then Going deeper's -------------------------------------------------

def test_the_core_hands_the_figures_it_measured_to_report_figures_as_plain_json(nb):
    reported = []
    load_rows = [{"rate_per_s": 300, "server": "one at a time", "p50_ms": 1.0, "p99_ms": 2.0},
                 {"rate_per_s": 300, "server": "dynamic batcher", "p50_ms": 1.23456, "p99_ms": 2.5}]
    namespace = {**vars(nb), "report_figures": lambda fallback=None, **figures: reported.append((fallback, figures)),
                 "load_rows": load_rows, "latencies": [0.001, 0.002, 0.003], "first_s": 0.25,
                 "knee": 3.456, "capacity": 412.04}
    assert run_cell("10", "report-figures", namespace) == ""
    assert reported == [(None, {
        "first_request_ms": 250.0, "single_request_p50_ms": 2.0, "knee_batch": 3.46, "capacity_per_s": 412.0,
        "p50_ms": {"one at a time at 300 per s": 1.0, "dynamic batcher at 300 per s": 1.235},
        "p99_ms": {"one at a time at 300 per s": 2.0, "dynamic batcher at 300 per s": 2.5}})]
    reported.clear()
    namespace["knee"] = math.inf  # a sweep without arithmetic: no knee, which JSON cannot write as inf
    run_cell("10", "report-figures", namespace)
    [(_, figures)] = reported
    assert figures["knee_batch"] is None
    json.dumps(figures, allow_nan=False)  # plain numbers and strings


def test_going_deeper_reports_what_stood_in_the_round_trips_and_the_cold_starts(nb):
    reported = []
    namespace = {**vars(nb), "report_figures": lambda **kwargs: reported.append(kwargs),
                 "backend": "aot_eager", "build": False, "device": torch.device("cpu"),
                 "reference": torch.eye(2), "results": {"torch.export file": {"answers": torch.eye(2)}},
                 "cold": {"file, fresh process": {"load_s": 1.0, "first_call_s": 0.5}}}
    assert run_cell("10", "figures", namespace) == ""
    [figures] = reported
    assert set(figures) == {"fallback", "round_trip", "cold_start_s"}
    assert figures["cold_start_s"] == {"file, fresh process": 1.5}
    assert figures["round_trip"]["torch.export file"].startswith(
        "torch.export file, fresh process: within float32's tolerance")
    assert figures["fallback"].startswith("torch.compile with aot_eager instead of Inductor")
    json.dumps(figures, allow_nan=False)
