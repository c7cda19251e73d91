"""Notebook 10's helpers and decisions at their boundaries, its dynamic batcher with stand-in models, its
exercises' checks against likely wrong answers, and its GPU branches run with stand-ins shaped like
PyTorch's API (torch.cuda's streams and graphs, pinned memory, torch.compile's arguments). The notebook
itself runs in nbval on the CPU (the batcher under Poisson traffic, export, the fresh process); nothing
here is timed beyond generous bounds on the batcher's wait limit."""
import json
import math
import sys
import threading
import time
import types
from concurrent.futures import Future

import pytest
import torch
from torch import nn

from support.notebook_code import load_helpers, run_cell


@pytest.fixture(scope="module")
def nb():
    return load_helpers("10")


# --- Step 1 and 2: the verdicts and the percentiles -----------------------------------------------------

def test_mode_verdict_holds_at_its_tolerance_on_both_measures(nb):
    assert nb.mode_verdict(0.0, 1e-5).startswith("eval mode: the same answer every time")
    assert nb.mode_verdict(1e-5, 0.0).startswith("eval mode: the same answer every time")
    assert "still differ by up to 2e-05" in nb.mode_verdict(2e-5, 0.0)
    assert "still differ" in nb.mode_verdict(0.0, 1.1e-5)
    # where convolutions run in TF32 (compute capability 8.0 and newer), TF32's atol of 1e-3
    assert nb.mode_verdict(1e-3, 5e-4, "tf32").startswith("eval mode: the same answer every time")
    assert "still differ by up to 0.0011" in nb.mode_verdict(1.1e-3, 0.0, "tf32")
    assert "still differ" in nb.mode_verdict(0.0, 1.1e-3, "tf32")


def test_percentile_is_the_nearest_rank(nb):
    values = list(range(100, 0, -1))  # 1..100, unsorted
    assert [nb.percentile(values, p) for p in (50, 95, 99, 100)] == [50, 95, 99, 100]
    ten = [float(v) for v in range(1, 11)]
    assert nb.percentile(ten, 99) == 10 and nb.percentile(ten, 50) == 5 and nb.percentile(ten, 51) == 6
    assert nb.percentile([7.0], 99) == 7.0 and nb.percentile(ten, 0) == 1


def test_latency_table_reports_milliseconds_the_first_request_and_how_many_were_slower(nb):
    table = nb.latency_table([0.001] * 98 + [0.002, 0.010], first_s=0.05)
    ms = table["ms"]
    assert (ms.p50, ms.p95, ms.p99, ms.slowest) == (1.0, 1.0, 2.0, 10.0)
    assert ms["first (Step 1)"] == 50.0 and ms["mean"] == pytest.approx(1.1)
    slower = table["requests_slower"]
    assert (slower.p50, slower.p95, slower.p99, slower.slowest) == (50, 5, 1, 0)
    assert slower.isna().tolist() == [False] * 4 + [True, True], "no count for the mean and the first"


@pytest.mark.parametrize("count, point, slower", [
    (400, 99, 4), (300, 99, 3), (2000, 99, 20), (1999, 99, 19), (100, 99, 1), (100, 50, 50),
    (101, 50, 50), (1, 99, 0), (20, 95, 1)])
def test_tail_size_counts_the_values_ranked_above_a_percentile(nb, count, point, slower):
    assert nb.tail_size(count, point) == slower
    values = list(range(count))
    assert sum(value > nb.percentile(values, point) for value in values) == slower


@pytest.mark.gpu_branch("10", "request_counts: device_type != 'cpu'")
def test_on_a_gpu_p99_rests_on_at_least_20_requests_in_both_steps(nb):
    for device_type in ("cuda", "mps"):
        single, load = nb.request_counts(False, device_type)
        assert nb.tail_size(single, 99) >= 20 and nb.tail_size(load, 99) >= 20
        assert (single, load) == (2000, 2000), "about 2,000: p99 on 20, not many more minutes"
    assert nb.request_counts(False, "cpu") == (400, 300)  # each takes longer on a CPU: it says so
    assert nb.request_counts(True, "cuda") == nb.request_counts(True, "cpu") == (100, 100)


def test_step_2_sends_untimed_warm_up_requests_before_the_timed_ones(nb):
    calls, clock = [], FakeClock()

    def one_request(model, image, device):  # 1 ms per request on the fake clock
        calls.append(image.item())
        clock.now += 0.001
        return image.reshape(1, 1)

    namespace = {**vars(nb), "time": clock, "one_request": one_request, "model": None,
                 "torch": types.SimpleNamespace(randn=lambda count, *shape: torch.arange(float(count)),
                                                cat=torch.cat),
                 "REQUESTS": 30, "WARM_UP": 5, "first_s": 0.5, "device": torch.device("cpu"),
                 "draw_latencies": lambda latencies, first_s, device: None}
    run_cell("10", "requests", namespace)
    assert calls == list(range(5)) + list(range(30)), "the warm-up first, then every request, timed"
    assert namespace["latencies"] == [pytest.approx(0.001)] * 30
    assert torch.equal(namespace["alone"], torch.arange(30.0).reshape(30, 1))


def test_time_mode_times_calls_of_the_model_it_is_given_under_the_mode_it_is_given(nb):
    seen = []
    model = lambda batch: seen.append((len(batch), torch.is_inference_mode_enabled()))  # noqa: E731
    seconds = nb.time_mode(torch.inference_mode, model, torch.zeros(1, 3), torch.device("cpu"), calls=4)()
    assert seen == [(1, True)] * 8, "time_it's warm-up round, then the timed one, of 4 calls each"
    assert 0 <= seconds < 1
    seen.clear()
    nb.time_mode(torch.no_grad, model, torch.zeros(2, 3), torch.device("cpu"), calls=1)()
    assert seen == [(2, False)] * 2


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


# --- Step 3: the two-number fit and the knee --------------------------------------------------------------

SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def test_the_sum_form_recovers_both_numbers_and_keeps_no_negative_term(nb):
    fixed, per_image = nb.fit_batch_cost(SIZES, [2e-4 + b * 5e-5 for b in SIZES])
    assert fixed == pytest.approx(2e-4) and per_image == pytest.approx(5e-5)
    # a curve through the origin with a little noise would fit a negative fixed cost: kept at 0
    fixed, per_image = nb.fit_batch_cost(SIZES, [b * 5e-5 * (0.98 if b < 3 else 1) for b in SIZES])
    assert fixed == 0.0 and per_image == pytest.approx(5e-5, rel=0.05)
    fixed, per_image = nb.fit_batch_cost(SIZES, [1e-3 * (1.01 if b == 256 else 1) for b in SIZES])
    assert per_image >= 0 and fixed == pytest.approx(1e-3, rel=0.02)


def test_the_overlap_form_finds_the_split_and_the_knee_is_where_the_terms_meet(nb):
    seconds = [max(1e-3, b * 2e-5) for b in SIZES]  # a GPU: flat up to 50 pictures
    fixed, per_image = nb.fit_batch_cost(SIZES, seconds, overlap=True)
    assert fixed == pytest.approx(1e-3) and per_image == pytest.approx(2e-5)
    assert nb.knee_batch_size(fixed, per_image) == pytest.approx(50)
    all_flat = nb.fit_batch_cost(SIZES, [1e-3] * len(SIZES), overlap=True)
    assert all_flat == (pytest.approx(1e-3), 0.0)
    assert nb.knee_batch_size(1e-3, 0.0) == float("inf") and nb.knee_batch_size(0.0, 1e-5) == 0.0
    # one picture alone costs less than a picture in a large batch (as on a CPU whose caches overflow):
    # no batch is fixed-cost bound, so the best fit has no fixed cost and the knee is at 0
    cheaper_alone = [0.5e-4 if b == 1 else b * 1e-4 for b in SIZES]
    fixed, per_image = nb.fit_batch_cost(SIZES, cheaper_alone, overlap=True)
    assert fixed == 0.0 and per_image == pytest.approx(1e5 / 1.2e9)
    assert nb.knee_batch_size(fixed, per_image) == 0.0


@pytest.mark.parametrize("knee, expected", [
    (1.9, "Fixed cost 0.020 ms per batch, 2.0 effective GFLOP/s: knee at batch 1.9, so batching buys "
          "little."),
    (2.0, "Fixed cost 0.020 ms per batch, 2.0 effective GFLOP/s: knee at batch 2.0; up to it, a larger "
          "batch costs little extra time."),
    (256.0, "Fixed cost 0.020 ms per batch, 2.0 effective GFLOP/s: knee at batch 256.0; up to it, a "
            "larger batch costs little extra time."),
    (256.5, "Fixed cost 0.020 ms per batch; no knee up to batch 256: each batch cost about the fixed cost."),
    (float("inf"), "Fixed cost 0.020 ms per batch; no knee up to batch 256: each batch cost about the fixed "
                   "cost."),
])
def test_knee_line_says_what_the_knee_means_on_each_side_of_2_and_of_the_largest_batch(nb, knee, expected):
    # 2e6 FLOP per picture in 1 ms per picture: 2 GFLOP/s
    assert nb.knee_line(2e-5, 1e-3, knee, 2e6, 256) == expected


def test_knee_line_reads_a_fit_without_a_fixed_cost_and_one_without_arithmetic(nb):
    assert nb.knee_line(0.0, 1e-3, 0.0, 2e6, 64).endswith("knee at batch 0.0, so batching buys little.")
    assert "no knee up to batch 64" in nb.knee_line(1e-3, 0.0, float("inf"), 2e6, 64)


def test_flops_per_image_counts_two_per_multiply_add_of_convolutions_and_linear_layers(nb):
    model = nn.Sequential(nn.Conv2d(3, 32, 3, 1, padding=1, bias=False), nn.ReLU(),
                          nn.Conv2d(32, 8, 3, 2, padding=1, groups=2), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 10))
    expected = 2 * (32 * 32 * 32 * 3 * 9) + 2 * (8 * 16 * 16 * 16 * 9) + 2 * 8 * 10
    assert nb.flops_per_image(model) == expected
    assert not any(layer._forward_hooks for layer in model.modules()), "the counting hooks are removed"


# --- Step 4: the batcher, its answers and its wait limit ------------------------------------------------

class RecordingModel:
    """A stand-in model: each output row is its picture's sum times 2; records every batch it got, the
    thread that called it and whether inference mode was on there. A picture holding -1 fails its
    batch, as a model may fail (a bad input, out of memory)."""

    def __init__(self):
        self.batches, self.inference_mode, self.threads = [], [], []

    def __call__(self, images):
        self.batches.append(len(images))
        self.inference_mode.append(torch.is_inference_mode_enabled())
        self.threads.append(threading.get_ident())
        if (images == -1).any():
            raise ValueError("this batch cannot be answered")
        return images.flatten(1).sum(dim=1, keepdim=True) * 2


def test_every_request_is_answered_once_with_its_own_answer_in_batches_of_at_most_the_maximum(nb):
    model = RecordingModel()
    batcher = nb.DynamicBatcher(model, torch.device("cpu"), max_batch_size=4,
                                max_queue_delay_microseconds=200_000)
    images = torch.arange(30.0).reshape(30, 1, 1)
    futures = [batcher.submit(i, image) for i, image in enumerate(images)]
    answers = [future.result(timeout=30) for future in futures]
    batcher.close()
    assert not batcher.thread.is_alive()
    assert sorted(batcher.served) == list(range(30)) and len(batcher.served) == 30
    assert torch.equal(torch.stack(answers), images.flatten(1) * 2)
    served = model.batches[4:]  # after the warm-up's batches of 1, 2, 3 and 4
    assert max(served) == 4 and sum(served) == 30 and batcher.batch_sizes == served
    assert all(model.inference_mode), "the serving thread switches inference mode on for itself"
    assert sorted(batcher.answered_at) == list(range(30))


def test_the_batcher_warms_up_every_batch_size_in_its_serving_thread_before_taking_traffic(nb):
    # Step 4 times sizes 1 to MAX_BATCH, and a first call at a new size pays oneDNN's or cuDNN's
    # set-up; PyTorch keeps cuDNN's plans per thread (aten/src/ATen/native/cudnn/Conv_v8.cpp:
    # thread_local BenchmarkCache), so the warm-up runs in the thread that serves.
    model = RecordingModel()
    batcher = nb.DynamicBatcher(model, torch.device("cpu"), max_batch_size=5,
                                max_queue_delay_microseconds=1000)
    assert model.batches == [1, 2, 3, 4, 5], "every size it can form, before the constructor returns"
    assert set(model.threads) == {batcher.thread.ident} and all(model.inference_mode)
    assert batcher.batch_sizes == [] and batcher.served == [], "the warm-up is not traffic"
    batcher.close()
    alone = nb.DynamicBatcher(RecordingModel(), torch.device("cpu"), max_batch_size=1,
                              max_queue_delay_microseconds=0)
    assert alone.model.batches == [1]
    alone.close()


def test_a_failed_warm_up_raises_where_the_batcher_is_made(nb):
    class Broken:
        def __call__(self, images):
            raise RuntimeError("CUDA error: out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        nb.DynamicBatcher(Broken(), torch.device("cpu"), max_batch_size=2)


def test_a_failed_batch_fails_each_of_its_requests_at_once_and_the_server_goes_on(nb):
    model = RecordingModel()
    batcher = nb.DynamicBatcher(model, torch.device("cpu"), max_batch_size=3,
                                max_queue_delay_microseconds=60_000_000)  # full batches only
    failed = [batcher.submit(i, torch.tensor([value])) for i, value in enumerate([1.0, -1.0, 2.0])]
    for future in failed:  # before the fix, the serving thread died and each waited its whole timeout
        with pytest.raises(ValueError, match="this batch cannot be answered"):
            future.result(timeout=20)
    later = [batcher.submit(i, torch.tensor([3.0])) for i in range(3, 6)]
    assert [future.result(timeout=20).item() for future in later] == [6.0] * 3
    batcher.close()
    assert batcher.served == [3, 4, 5] and batcher.batch_sizes == [3]


class AnswersOneTooFew(RecordingModel):
    """A stand-in model that, for a batch holding a picture of -2, returns one answer fewer than it got
    pictures: the batcher has set the first answers when it finds the last one missing."""

    def __call__(self, images):
        outputs = super().__call__(images)
        return outputs[:-1] if (images == -2).any() else outputs


def test_a_batch_that_fails_after_part_of_it_was_answered_keeps_those_answers_and_the_server_goes_on(nb):
    model = AnswersOneTooFew()
    batcher = nb.DynamicBatcher(model, torch.device("cpu"), max_batch_size=3,
                                max_queue_delay_microseconds=60_000_000)  # full batches only
    futures = [batcher.submit(i, torch.tensor([value])) for i, value in enumerate([1.0, -2.0, 2.0])]
    assert [future.result(timeout=20).item() for future in futures[:2]] == [2.0, -4.0]
    with pytest.raises(ValueError, match="zip"):  # no answer for it: an error, not a wait
        futures[2].result(timeout=20)
    # before the fix, set_exception on the answered futures raised InvalidStateError in the serving
    # thread, which died: every later request waited its whole timeout
    later = [batcher.submit(i, torch.tensor([3.0])) for i in range(3, 6)]
    assert [future.result(timeout=20).item() for future in later] == [6.0] * 3
    batcher.close()
    assert model.batches[3:] == [3, 3]


def test_a_cancelled_request_is_dropped_before_the_model_runs_and_the_server_goes_on(nb):
    model = RecordingModel()
    batcher = nb.DynamicBatcher(model, torch.device("cpu"), max_batch_size=3,
                                max_queue_delay_microseconds=60_000_000)  # full batches only
    first, cancelled = batcher.submit(0, torch.tensor([1.0])), batcher.submit(1, torch.tensor([5.0]))
    assert cancelled.cancel(), "it waits in the queue, so it can still be cancelled"
    last = batcher.submit(2, torch.tensor([2.0]))  # the batch is full: the server answers it
    assert [first.result(timeout=20).item(), last.result(timeout=20).item()] == [2.0, 4.0]
    assert cancelled.cancelled() and model.batches[3:] == [2], "the model answered the two still wanted"
    later = [batcher.submit(i, torch.tensor([3.0])) for i in range(3, 6)]
    assert [future.result(timeout=20).item() for future in later] == [6.0] * 3
    batcher.close()
    assert batcher.served == [0, 2, 3, 4, 5] and sorted(batcher.answered_at) == [0, 2, 3, 4, 5]


def test_a_batch_whose_every_request_was_cancelled_calls_no_model_and_the_server_goes_on(nb):
    model = RecordingModel()
    batcher = nb.DynamicBatcher(model, torch.device("cpu"), max_batch_size=3,
                                max_queue_delay_microseconds=200_000)  # closes 0.2 s after its first
    assert batcher.submit(0, torch.tensor([1.0])).cancel()  # long before its batch closes
    time.sleep(0.5)  # the batch closed, holding only the cancelled request
    assert batcher.submit(1, torch.tensor([2.0])).result(timeout=20).item() == 4.0
    batcher.close()
    assert model.batches[3:] == [1] and batcher.served == [1], "the model never saw the cancelled one"


def test_a_batch_with_a_cancelled_request_that_fails_fails_the_others_and_the_server_goes_on(nb):
    model = RecordingModel()
    batcher = nb.DynamicBatcher(model, torch.device("cpu"), max_batch_size=3,
                                max_queue_delay_microseconds=60_000_000)  # full batches only
    failing = [batcher.submit(0, torch.tensor([-1.0])), batcher.submit(1, torch.tensor([5.0]))]
    assert failing[1].cancel()
    failing.append(batcher.submit(2, torch.tensor([2.0])))
    for future in (failing[0], failing[2]):
        with pytest.raises(ValueError, match="this batch cannot be answered"):
            future.result(timeout=20)
    assert failing[1].cancelled(), "a cancelled request stays cancelled"
    later = [batcher.submit(i, torch.tensor([3.0])) for i in range(3, 6)]
    assert [future.result(timeout=20).item() for future in later] == [6.0] * 3
    batcher.close()


class CallbacksLater(Future):
    """A concurrent.futures.Future whose done callbacks run only when the test says so. CPython's
    Future.set_result wakes the thread waiting in result() (notify_all, inside its lock) and only
    then runs the callbacks (_invoke_callbacks, after the lock): a waiter may read what a callback
    writes before it is written. Here it always can, deterministically."""

    held = []

    def _invoke_callbacks(self):
        CallbacksLater.held.append(self)


def test_the_batcher_stamps_each_answer_before_it_sets_the_future(nb, monkeypatch):
    batcher = nb.DynamicBatcher(RecordingModel(), torch.device("cpu"), max_batch_size=3,
                                max_queue_delay_microseconds=60_000_000)
    stamped_when_set = []

    class Checks(Future):
        def set_result(self, result):
            stamped_when_set.append(sorted(batcher.answered_at))
            super().set_result(result)

    monkeypatch.setattr(nb.concurrent.futures, "Future", Checks)
    futures = [batcher.submit(i, torch.ones(1)) for i in range(3)]
    [future.result(timeout=20) for future in futures]
    batcher.close()
    assert stamped_when_set == [[0, 1, 2]] * 3, "every stamp of the batch exists before any Future is set"


def test_a_lone_request_waits_for_the_delay_and_a_full_batch_does_not(nb):
    delay_s = 0.3
    batcher = nb.DynamicBatcher(RecordingModel(), torch.device("cpu"), max_batch_size=3,
                                max_queue_delay_microseconds=int(delay_s * 1e6))
    started = time.perf_counter()
    batcher.submit(0, torch.ones(1)).result(timeout=30)
    waited = time.perf_counter() - started
    assert delay_s <= waited < delay_s + 10, "no answer before the delay, when the batch is not full"
    assert batcher.batch_sizes == [1]
    patient = nb.DynamicBatcher(RecordingModel(), torch.device("cpu"), max_batch_size=3,
                                max_queue_delay_microseconds=60_000_000)  # a minute
    started = time.perf_counter()
    futures = [patient.submit(i, torch.ones(1)) for i in range(3)]
    [future.result(timeout=30) for future in futures]
    assert time.perf_counter() - started < 30, "a full batch is answered without waiting the delay"
    assert patient.batch_sizes == [3]
    batcher.close()
    patient.close()


def test_close_answers_what_is_waiting_before_the_thread_ends(nb):
    batcher = nb.DynamicBatcher(RecordingModel(), torch.device("cpu"), max_batch_size=8,
                                max_queue_delay_microseconds=60_000_000)
    futures = [batcher.submit(i, torch.ones(1)) for i in range(2)]
    closing = threading.Thread(target=batcher.close, daemon=True)  # a bug here would hang, not fail
    closing.start()  # the stop signal arrives while the first batch waits for more requests
    closing.join(timeout=60)
    assert not closing.is_alive() and not batcher.thread.is_alive(), "close() ends the serving thread"
    assert [future.result(timeout=1).item() for future in futures] == [2.0, 2.0]


def test_the_cell_that_uses_the_batcher_submits_five_requests_and_reads_five_answers(nb):
    model = RecordingModel()
    namespace = {**vars(nb), "model": model, "device": torch.device("cpu"), "MAX_BATCH": 8,
                 "requests": torch.arange(7.0).reshape(7, 1, 1)}
    printed = run_cell("10", "batcher-use", namespace)
    batcher = namespace["batcher"]
    assert not batcher.thread.is_alive(), "the cell closes the batcher"
    assert sum(batcher.batch_sizes) == 5 and sorted(batcher.served) == [0, 1, 2, 3, 4]
    assert [answer.item() for answer in namespace["answers"]] == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert printed == f"5 requests, answered in batches of {batcher.batch_sizes}\n"


def test_load_row_reports_the_percentiles_the_tail_the_rate_the_lag_and_the_mean_batch(nb):
    row = nb.load_row(299.6, "dynamic batcher", [0.001] * 99 + [0.009], busy_s=0.5, lag_s=0.0002,
                      batch_sizes=[1, 2, 3])
    assert row == {"rate_per_s": 300, "server": "dynamic batcher", "p50_ms": 1.0, "p99_ms": 1.0,
                   "slower_than_p99": 1, "served_per_s": 200.0, "lag_ms": pytest.approx(0.2),
                   "mean_batch": 2, "verdict": "over capacity: served 67%"}


@pytest.mark.parametrize("busy_s, verdict", [
    (0.4, "kept up"),  # 100 requests at 250 per second arrive within 0.396 s: 250 per second served
    (0.44, "kept up"),  # 227 per second: 91 % of the rate
    (0.45, "over capacity: served 89%"),  # 222 per second
    (0.82, "over capacity: served 49%"),  # a queue that grew (one run: 125 served of 244 offered)
])
def test_a_row_that_served_clearly_less_than_it_was_offered_says_over_capacity(nb, busy_s, verdict):
    for server in ("one at a time", "dynamic batcher"):  # the same words for both: not "batching failed"
        row = nb.load_row(250.0, server, [0.001] * 100, busy_s=busy_s, lag_s=0.0, batch_sizes=[1])
        assert row["verdict"] == verdict


def test_load_verdict_counts_90_percent_of_the_rate_as_kept_up(nb):
    assert nb.load_verdict(244.0, 244.0) == "kept up"
    assert nb.load_verdict(244.0, 250.0) == "kept up"
    assert nb.load_verdict(100.0, 90.0) == "kept up", "the boundary: the last latency is all it may lose"
    assert nb.load_verdict(100.0, 89.0) == "over capacity: served 89%"
    assert nb.load_verdict(244.0, 125.0) == "over capacity: served 51%"


def test_answers_verdict_finds_missing_doubled_and_wrong_answers(nb):
    alone = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    answers = list(alone.clone())
    assert nb.answers_verdict([2, 0, 1], answers, alone) is None
    assert nb.answers_verdict([0, 1], answers, alone) == "requests answered never: [2], more than once: []"
    assert "more than once: [1]" in nb.answers_verdict([0, 1, 1, 2], answers, alone)
    # float32's tolerance for 4.0: atol 1e-5 + rtol 1e-4 × 4 = 4.1e-4
    within, outside = list(alone.clone()), list(alone.clone())
    within[1] = within[1] + torch.tensor([0.0, 3e-4])
    outside[1] = outside[1] + torch.tensor([0.0, 6e-4])
    assert nb.answers_verdict([0, 1, 2], within, alone) is None
    assert nb.answers_verdict([0, 1, 2], outside, alone).startswith("an answer differs from its answer alone")
    # TF32's for 4.0: atol 1e-3 + rtol 1e-2 × 4 = 4.1e-2
    assert nb.answers_verdict([0, 1, 2], outside, alone, "tf32") is None
    beyond_tf32 = list(alone.clone())
    beyond_tf32[1] = beyond_tf32[1] + torch.tensor([0.0, 6e-2])
    assert nb.answers_verdict([0, 1, 2], beyond_tf32, alone, "tf32").startswith("an answer differs")


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
    assert run_cell("10", "eval-mode", namespace).startswith(verdict)


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


def test_arrival_rates_and_poisson_arrivals(nb):
    assert nb.arrival_rates(500.0) == pytest.approx([150, 450, 750])  # times the measured capacity
    arrivals = nb.poisson_arrivals(1000.0, 20_000, seed=3)
    gaps = arrivals[1:] - arrivals[:-1]
    assert arrivals[0] == 0 and (gaps > 0).all()
    assert gaps.mean() == pytest.approx(1e-3, rel=0.03)
    assert gaps.std() == pytest.approx(1e-3, rel=0.05), "exponential gaps: the spread equals the mean"
    assert (nb.poisson_arrivals(5.0, 10, seed=1) == nb.poisson_arrivals(5.0, 10, seed=1)).all()


@pytest.mark.parametrize("count", [2, 100, 300, 2000])
def test_the_arrivals_offer_exactly_the_rate_they_are_made_for(nb, count):
    # 100 exponential gaps drawn with seed 0 average nearly a fifth more than asked (their sum is 117
    # mean gaps, not 99): a server keeping up would seem to serve only 85 % of the rate
    arrivals = nb.poisson_arrivals(300.0, count)
    assert arrivals[0] == 0 and (count - 1) / arrivals[-1] == pytest.approx(300.0)
    assert len(arrivals) == count and (arrivals[1:] > arrivals[:-1]).all()
    assert list(nb.poisson_arrivals(300.0, 1)) == [0.0]


class FakeClock:
    """time.perf_counter and time.sleep on a clock that moves only when told to: sleep(s) moves it
    by s, as if the sleep were exact."""

    def __init__(self):
        self.now = 100.0

    def perf_counter(self):
        return self.now

    def sleep(self, seconds):
        assert seconds > 0
        self.now += seconds


def test_run_load_submits_on_time_in_order_and_counts_latency_from_the_planned_arrival(nb):
    clock = FakeClock()

    class TakesTwoMilliseconds:
        """Answers each request 2 ms after it is submitted, on the fake clock."""

        def __init__(self):
            self.submitted = []

        def submit(self, request_id, image):
            self.submitted.append((request_id, clock.now))
            clock.now += 0.002
            self.answered_at[request_id] = clock.now
            future = Future()
            future.set_result(image * 3)
            return future

    batcher = TakesTwoMilliseconds()
    batcher.answered_at = {}
    start = clock.now + 0.005
    answers, latencies, busy_s, lag_s = nb.run_load(batcher, torch.arange(4.0), [0.0, 0.001, 0.010, 0.011],
                                                    now=clock.perf_counter, sleep=clock.sleep)
    assert [a.item() for a in answers] == [0.0, 3.0, 6.0, 9.0]
    # request 1 is planned 1 ms after request 0 but submitted when request 0 is answered, 2 ms after
    assert batcher.submitted == [(0, pytest.approx(start)), (1, pytest.approx(start + 0.002)),
                                 (2, pytest.approx(start + 0.010)), (3, pytest.approx(start + 0.012))]
    assert latencies == pytest.approx([0.002, 0.003, 0.002, 0.003]), "from the planned arrival"
    assert busy_s == pytest.approx(0.014), "from the first planned arrival to the last answer"
    assert lag_s == pytest.approx(0.001), "the generator submitted requests 1 and 3 a millisecond late"


def test_run_load_reads_the_time_the_batcher_stamped_not_a_done_callbacks(nb):
    # The race of issue 37: stamping each answer's time in future.add_done_callback and reading the
    # stamps once every result() returned finds a stamp still None (a TypeError) whenever set_result
    # has woken the waiter but not yet run the callbacks. CallbacksLater makes that certain.
    clock = FakeClock()

    class AnswersWhenAllArrived:
        """Answers every request together once the last one arrives, 4 ms later on the fake clock,
        stamping each answer's time before it sets the Future, as DynamicBatcher does."""

        def __init__(self, count):
            self.count, self.waiting, self.answered_at = count, [], {}

        def submit(self, request_id, image):
            future = CallbacksLater()
            self.waiting.append((request_id, image, future))
            if len(self.waiting) == self.count:
                clock.now += 0.004
                for waiting_id, waiting_image, waiting_future in self.waiting:
                    self.answered_at[waiting_id] = clock.now
                    waiting_future.set_result(waiting_image * 2)
            return future

    CallbacksLater.held.clear()
    answers, latencies, busy_s, lag_s = nb.run_load(AnswersWhenAllArrived(3), torch.arange(3.0),
                                                    [0.0, 0.001, 0.002], clock.perf_counter, clock.sleep)
    assert [answer.item() for answer in answers] == [0.0, 2.0, 4.0]
    assert latencies == pytest.approx([0.006, 0.005, 0.004]) and busy_s == pytest.approx(0.006)
    assert lag_s == 0.0


def test_run_load_with_the_real_batcher_when_callbacks_come_late(nb, monkeypatch):
    monkeypatch.setattr(nb.concurrent.futures, "Future", CallbacksLater)
    batcher = nb.DynamicBatcher(RecordingModel(), torch.device("cpu"), max_batch_size=4,
                                max_queue_delay_microseconds=60_000_000)  # answers full batches only
    answers, latencies, busy_s, lag_s = nb.run_load(batcher, torch.arange(4.0).reshape(4, 1),
                                                    [0.0] * 4)
    batcher.close()
    assert [answer.item() for answer in answers] == [0.0, 2.0, 4.0, 6.0]
    assert len(latencies) == 4 and all(0 <= latency < 10 for latency in latencies)
    assert 0 <= busy_s < 10 and 0 <= lag_s < 10


def test_measure_capacity_times_one_at_a_time_with_every_request_waiting(nb):
    class TakesFiveMilliseconds(RecordingModel):
        def __call__(self, images):
            time.sleep(0.005)
            return super().__call__(images)

    model = TakesFiveMilliseconds()
    capacity = nb.measure_capacity(model, torch.device("cpu"), torch.ones(40, 1))
    assert model.batches == [1] * 41, "the warm-up, then one request at a time"
    assert 20 < capacity <= 200, "at most 1 / 5 ms, less the queue and the hand-off between threads"


# --- Going deeper B: backends, tolerances, the check and the timing table -----------------------------


@pytest.mark.gpu_branch("10", "float32_kind: device.type != 'cuda'")
@pytest.mark.gpu_branch("10", "float32_kind: major >= 8 and torch.backends.cudnn.allow_tf32")
@pytest.mark.parametrize("capability, allow_tf32, kind", [
    ((7, 5), True, "float32"),  # a T4: no TF32
    ((8, 0), True, "tf32"),  # an A100 with cuDNN's default
    ((8, 0), False, "float32"),
])
def test_float32_kind_is_tf32_only_on_compute_capability_8_with_cudnn_allowing_it(
        nb, monkeypatch, capability, allow_tf32, kind):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: asked.append(device)
                        or capability)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", allow_tf32)
    assert nb.float32_kind(torch.device("cuda")) == kind
    assert asked == [torch.device("cuda")]
    assert nb.float32_kind(torch.device("cpu")) == "float32" and len(asked) == 1


def test_the_tolerance_follows_the_number_format(nb):
    assert nb.tolerance(torch.float32) == ("float32", 1e-4, 1e-5)
    assert nb.tolerance(torch.float32, "tf32") == ("tf32", 1e-2, 1e-3)
    assert nb.tolerance(torch.float16, "tf32") == ("float16", 1e-2, 1e-2)
    assert nb.tolerance(torch.bfloat16) == ("bfloat16", 5e-2, 5e-2)


def test_agreement_checks_the_stated_tolerance_on_both_sides_and_counts_the_top_1(nb):
    reference = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    inside = reference + torch.tensor([[1e-5, 0.0], [0.0, 0.0]])  # within atol 1e-5 + rtol 1e-4
    outside = reference + torch.tensor([[2e-4, 0.0], [0.0, 0.0]])
    assert nb.agreement("x", reference, inside, torch.float32) == (
        "x: within float32's tolerance (rtol 0.0001, atol 1e-05); top-1 agrees on 2 of 2 pictures.")
    assert nb.agreement("x", reference, outside, torch.float32).startswith(
        "x: OUTSIDE float32's tolerance (largest difference 0.0002)")
    assert "within float16's" in nb.agreement("x", reference, outside.half(), torch.float16)
    flipped = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    assert nb.agreement("x", reference, flipped, torch.float32).endswith("top-1 agrees on 1 of 2 pictures.")


def test_speedup_table_pairs_the_rounds_with_the_baseline(nb):
    seconds = {"base": [2.0, 4.0, 3.0], "fast": [1.0, 1.0, 1.5]}
    table = nb.speedup_table(seconds, "base", batch_size=10)
    assert table.loc["fast", "speedup_x"] == 2.0
    assert (table.loc["fast", "slowest_round_x"], table.loc["fast", "fastest_round_x"]) == (2.0, 4.0)
    assert table.loc["base", "ms_per_batch"] == 3000.0 and table.loc["base", "images_per_s"] == 3.33


def test_time_variant_times_the_net_in_its_own_number_format_on_the_device_it_is_given(nb):
    seen = []

    class Half(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(1, dtype=torch.float16))

        def forward(self, inputs):
            seen.append((inputs.dtype, torch.is_inference_mode_enabled()))
            return inputs

    seconds = nb.time_variant(Half(), torch.ones(2, 3), torch.device("cpu"), calls=3)()
    assert seen == [(torch.float16, True)] * 5, "two warm-up calls, then three timed ones"
    assert 0 <= seconds < 1


# --- Going deeper C: the plan, the fresh process and the shipped file's check ---------------------------

@pytest.mark.gpu_branch("10", "aoti_plan: device_type == 'cuda' and (not has_triton)")
@pytest.mark.gpu_branch("10", "aoti_plan: device_type == 'cuda' and (not toolkit)")
@pytest.mark.gpu_branch("10", "aoti_plan: device_type not in ('cpu', 'cuda')")
def test_aoti_plan_builds_only_where_it_can_and_says_why_not(nb):
    assert nb.aoti_plan(False, "cpu", "/usr/bin/g++", False, "2.6.0") == (True, "")
    assert nb.aoti_plan(False, "cuda", "g++", True, "2.14.1+cu130", toolkit="/usr/local/cuda") == (True, "")
    # a pip-only GPU machine: the wheels bring the CUDA runtime, not the toolkit whose headers
    # AOTInductor compiles with (torch.utils.cpp_extension.CUDA_HOME is None there)
    plan = nb.aoti_plan(False, "cuda", "g++", True, "2.14.1+cu130", toolkit=None)
    assert plan[0] is False and plan[1].startswith("no CUDA toolkit found") and "CUDA_HOME" in plan[1]
    assert nb.aoti_plan(False, "cpu", "g++", True, "2.14.1", toolkit=None)[0], "a CPU needs no toolkit"
    assert "fast mode" in nb.aoti_plan(True, "cpu", "g++", True, "2.14.1")[1]
    assert nb.aoti_plan(False, "cpu", "g++", True, "2.5.1")[1] == "PyTorch 2.5.1 is older than 2.6"
    assert "no C++ compiler" in nb.aoti_plan(False, "cpu", None, True, "2.14.1")[1]
    assert "Triton is missing" in nb.aoti_plan(False, "cuda", "g++", False, "2.14.1")[1]
    assert nb.aoti_plan(False, "cpu", "g++", False, "2.14.1")[0], "Triton matters only on a GPU"
    assert "for mps" in nb.aoti_plan(False, "mps", "g++", True, "2.14.1")[1]
    assert "for mps" in nb.aoti_plan(False, "mps", "g++", False, "2.14.1")[1], "Triton: only for CUDA"


def test_build_failure_is_one_line_with_the_errors_type_and_last_line(nb):
    class InductorError(RuntimeError):  # torch._inductor.exc.InductorError wraps what failed
        pass

    error = InductorError("OSError: CUDA_HOME environment variable is not set. Please set it to your "
                          "CUDA install root.\n")
    assert nb.build_failure(error) == ("the build failed (InductorError: OSError: CUDA_HOME environment "
                                       "variable is not set. Please set it to your CUDA install root.)")
    assert nb.build_failure(RuntimeError("a\n\n  b  \n")) == "the build failed (RuntimeError: b)"
    assert nb.build_failure(OSError()) == "the build failed (OSError: no message)"


@pytest.mark.parametrize("toolkit, build_raises, printed, built", [
    ("/usr/local/cuda", False, "AOTInductor package built in 0 s.", True),
    (None, False, "AOTInductor: not built, no CUDA toolkit found", False),  # asked before building
    ("/usr/local/cuda", True, "AOTInductor: not built, the build failed (InductorError: OSError: "
                              "CUDA_HOME environment variable is not set.", False),
])
def test_the_export_cell_on_a_cuda_gpu_checks_the_toolkit_and_catches_a_failed_build(
        nb, monkeypatch, tmp_path, toolkit, build_raises, printed, built):
    # Stand-ins shaped like torch.export.export / save and torch._inductor.aoti_compile_and_package,
    # which raises torch._inductor.exc.InductorError around cpp_extension's OSError where the toolkit
    # that CUDA_HOME names lacks its headers.
    class InductorError(RuntimeError):
        pass

    built_with = []

    def aoti_compile_and_package(exported, package_path):
        built_with.append(package_path)
        if build_raises:
            raise InductorError("OSError: CUDA_HOME environment variable is not set.")

    monkeypatch.setattr(torch.export, "export", lambda model, args, dynamic_shapes: "exported program")
    monkeypatch.setattr(torch.export, "save", lambda exported, path: None)
    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", aoti_compile_and_package,
                        raising=False)
    namespace = {**vars(nb), "FAST": False, "device": torch.device("cuda"), "model": None,
                 "requests": StandInRequests(), "DATA_DIR": tmp_path, "GPU_TOOLKIT": toolkit,
                 "find_cpp_compiler": lambda: "/usr/bin/g++",
                 "importlib": types.SimpleNamespace(util=types.SimpleNamespace(find_spec=lambda n: n))}
    assert run_cell("10", "export", namespace).startswith(printed)
    assert namespace["build"] is built and len(built_with) == (toolkit is not None)


@pytest.mark.parametrize("path, loader", [("model.aoti.pt2", "aoti"), ("model.pt2", "export")])
def test_first_answer_loads_each_kind_of_file_with_its_own_loader(nb, monkeypatch, tmp_path, path, loader):
    used = []
    model = lambda images: images * 2  # noqa: E731
    monkeypatch.setattr(torch._inductor, "aoti_load_package", lambda p: used.append(("aoti", p)) or model,
                        raising=False)
    monkeypatch.setattr(torch.export, "load", lambda p: used.append(("export", p))
                        or types.SimpleNamespace(module=lambda: model))
    images = tmp_path / "images.pt"
    torch.save(torch.ones(3, 2), images)
    result = nb.first_answer(str(tmp_path / path), str(images))
    assert used == [(loader, str(tmp_path / path))]
    assert torch.equal(result["answers"], torch.full((3, 2), 2.0))
    assert result["load_s"] >= 0 and result["first_call_s"] >= 0


def fake_subprocess_run(behaviour):
    """A stand-in for subprocess.run(command, check=True, capture_output=True, text=True, timeout=...):
    'ok' writes the result file the script would write, 'fail' raises CalledProcessError with stderr,
    'slow' raises TimeoutExpired, as the real one does."""
    import subprocess

    calls = []

    def run(command, check, capture_output, text, timeout):
        calls.append({"command": command, "check": check, "timeout": timeout,
                      "script": open(command[1]).read()})
        if behaviour == "fail":
            raise subprocess.CalledProcessError(1, command, "", "Traceback ...\nRuntimeError: bad file\n")
        if behaviour == "slow":
            raise subprocess.TimeoutExpired(command, timeout)
        torch.save({"answers": torch.load(command[3]) + 1, "load_s": 0.5, "first_call_s": 0.1}, command[4])
        return subprocess.CompletedProcess(command, 0, "", "")
    return run, calls


@pytest.mark.parametrize("behaviour, expected", [
    ("ok", None), ("fail", "RuntimeError: bad file"),
    ("slow", "no answer within 7 s; the process was stopped")])
def test_run_in_fresh_process_runs_the_functions_source_with_a_time_limit_and_leaves_nothing(
        nb, monkeypatch, behaviour, expected):
    run, calls = fake_subprocess_run(behaviour)
    monkeypatch.setattr(nb.subprocess, "run", run)
    result = nb.run_in_fresh_process(nb.first_answer, "shipped.pt2", torch.zeros(2, 3), time_limit_s=7)
    [call] = calls
    assert call["command"][0] == sys.executable and call["command"][2] == "shipped.pt2"
    assert call["check"] is True and call["timeout"] == 7
    assert call["script"].startswith("def first_answer(path, images_path):")
    assert "result = first_answer(sys.argv[1], sys.argv[2])" in call["script"]
    assert result["folder_gone"] is True and result["process_s"] >= 0
    if expected is None:
        assert torch.equal(result["answers"], torch.ones(2, 3))
    else:
        assert result["error"] == expected


def test_round_trip_verdict_reports_the_error_or_the_check(nb):
    reference = torch.eye(3)
    assert nb.round_trip_verdict("file", {"error": "bad"}, reference) == "file, fresh process: FAILED (bad)"
    assert nb.round_trip_verdict("file", {"answers": reference.clone()}, reference).startswith(
        "file, fresh process: within float32's tolerance")
    assert "OUTSIDE" in nb.round_trip_verdict("file", {"answers": reference * 1.01}, reference)


def test_cold_starts_lists_the_compile_and_each_fresh_process(nb):
    results = {"file": {"load_s": 1.0, "first_call_s": 0.2, "process_s": 4.0},
               "broken": {"error": "bad", "process_s": 2.0}}
    cold = nb.cold_starts(results, "torch.compile (inductor), this process", 30.0)
    assert cold == {"torch.compile (inductor), this process": {"first_call_s": 30.0},
                    "file, fresh process": {"load_s": 1.0, "first_call_s": 0.2, "process_s": 4.0},
                    "broken, fresh process": {"load_s": None, "first_call_s": None, "process_s": 2.0}}


@pytest.mark.gpu_branch("10", "fallbacks: device_type == 'cuda'")
def test_fallbacks_name_each_stand_in_and_nothing_when_none_ran(nb):
    assert nb.fallbacks("inductor", True, "cuda") is None
    assert nb.fallbacks("aot_eager", True, "cuda") == "torch.compile with aot_eager instead of Inductor"
    assert nb.fallbacks("inductor", False, "cuda") == "no AOTInductor package"
    assert nb.fallbacks("inductor", True, "cpu") == "no float16 and no pinned copy (no CUDA GPU)"
    assert nb.fallbacks("inductor", True, "mps") == "no float16 and no pinned copy (no CUDA GPU)"


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


# --- Going deeper A: the batcher's code, shown ------------------------------------------------------------

def test_show_source_shows_a_methods_code_dedented_as_python(nb):
    shown = nb.show_source(nb.DynamicBatcher.answer)
    assert shown.data.startswith("def answer(self, batch):") and shown.language == "python"
    assert "future.set_result(output)" in shown.data


# --- The exercises: each check against the wrong answer a learner is likely to write --------------------

def measured_sweep(ms_by_size):
    import pandas as pd

    return pd.DataFrame({"ms_per_batch": ms_by_size}).rename_axis("batch_size")


@pytest.mark.exercise("10", "budget")
def test_check_largest_batch_says_to_look_at_every_row_to_an_answer_that_stops_at_the_first_too_slow(nb):
    def stops_at_the_first_too_slow(sweep, budget_ms):  # assumes time grows with the batch
        best = None
        for size, ms in sweep.ms_per_batch.items():
            if ms > budget_ms:
                break
            best = size
        return best

    measured = measured_sweep({1: 0.5, 2: 0.6, 4: 0.9, 8: 1.6})  # growing: no row after a slower one
    feedback = nb.check_largest_batch(stops_at_the_first_too_slow, measured)
    assert feedback.startswith("NOT YET RIGHT: with a budget of 2 ms on a made-up sweep, it gives 4, "
                               "but batch 16 takes 2 ms, within the budget")
    assert "look at every row" in feedback
    assert nb.check_largest_batch(nb.largest_batch_answer, measured) == (
        "PASSED. Within 1 ms, twice one picture's time on your sweep, batches of up to 4 fit: 2.2 times "
        "the pictures per second of one at a time.")


@pytest.mark.exercise("10", "budget")
def test_check_largest_batch_on_each_kind_of_wrong_answer(nb):
    measured = measured_sweep({1: 0.5, 2: 0.6})
    assert nb.check_largest_batch(lambda sweep, budget_ms: ..., measured).startswith("NOT DONE YET")
    strictly_below = nb.check_largest_batch(
        lambda sweep, budget_ms: max([size for size, ms in sweep.ms_per_batch.items() if ms < budget_ms],
                                     default=None), measured)
    assert strictly_below.startswith("NOT YET RIGHT: with a budget of 0.5 ms on Step 3's sweep, it gives "
                                     "None, but batch 1 takes 0.5 ms, within the budget")
    assert "count a time equal to the budget as within it" in strictly_below
    assert "not even one picture fits: the answer is None" in nb.check_largest_batch(
        lambda sweep, budget_ms: 1, measured)
    assert "batch 2 takes 0.6 ms, over the budget: the answer is 1." in nb.check_largest_batch(
        lambda sweep, budget_ms: 2 if budget_ms > 0.3 else None, measured)
    assert "which is no batch size of the sweep" in nb.check_largest_batch(
        lambda sweep, budget_ms: 0.5 if budget_ms > 0.3 else None, measured)


@pytest.mark.exercise("10", "budget")
def test_check_largest_batch_says_which_budget_an_answer_raised_at_and_where(nb):
    def max_of_what_fits(sweep, budget_ms):  # max() of nothing raises when no batch fits
        return max(size for size, ms in sweep.ms_per_batch.items() if ms <= budget_ms)

    feedback = nb.check_largest_batch(max_of_what_fits, measured_sweep({1: 0.5, 2: 0.6}))
    assert feedback.startswith("NOT YET RIGHT: with a budget of 0.25 ms on Step 3's sweep, your "
                               "max_of_what_fits raised ValueError: max() ")
    assert feedback.endswith(" of its cell: `return max(size for size, ms in sweep.ms_per_batch.items() "
                             "if ms <= budget_ms)`."), "the line that raised, as the learner wrote it"


@pytest.mark.exercise("10", "join")
def test_check_joins_batch_says_the_delay_counts_from_the_first_request_not_the_latest(nb):
    def from_the_latest(arrival, first_at, last_at, size, max_batch_size, max_delay_s):
        return size < max_batch_size and arrival - last_at <= max_delay_s

    assert nb.check_joins_batch(from_the_latest) == (
        "NOT YET RIGHT: requests arriving at [0, 0.6, 1.2, 1.8, 2.4] ms, with max_batch_size 8 and a "
        "delay of 1 ms, form batches of [5] with your rule; Step 4's forms [2, 2, 1]: the delay counts "
        "from the batch's first request (first_at), not from the latest.")


@pytest.mark.exercise("10", "join")
def test_check_joins_batch_on_its_other_lessons_and_on_step_4s_traffic(nb):
    def no_limit(arrival, first_at, last_at, size, max_batch_size, max_delay_s):
        return arrival - first_at <= max_delay_s

    def strictly_within(arrival, first_at, last_at, size, max_batch_size, max_delay_s):
        return size < max_batch_size and arrival - first_at < max_delay_s

    assert nb.check_joins_batch(lambda *args: ...).startswith("NOT DONE YET")
    assert nb.check_joins_batch(no_limit).endswith("a batch holds at most max_batch_size requests.")
    assert nb.check_joins_batch(strictly_within).endswith(
        "requests already waiting together share a batch, even with no delay.")
    def five_arguments(arrival, first_at, size, max_batch_size, max_delay_s):  # last_at left out
        return size < max_batch_size and arrival - first_at <= max_delay_s

    assert nb.check_joins_batch(five_arguments) == (  # the shared setup's safety net answers
        "NOT YET RIGHT: checking your answer stopped with TypeError: "
        "test_check_joins_batch_on_its_other_lessons_and_on_step_4s_traffic.<locals>.five_arguments() "
        "takes 5 positional arguments but 6 were given.")
    assert nb.check_joins_batch(nb.joins_batch_answer) == "PASSED."
    traffic = [0.0, 0.0005, 0.001, 0.0035, 0.004]  # 1,000 per second
    feedback = nb.check_joins_batch(nb.joins_batch_answer, traffic, delay_s=0.0006, max_batch_size=32)
    assert feedback.startswith("PASSED. If answering took no time, Step 4's fastest traffic (1,000 "
                               "requests per second) would form batches of 1.0 requests on average with "
                               "no delay, 1.7 with Step 4's (600 µs) and 5.0 with ten times that.")
    assert nb.batches_formed(traffic, nb.joins_by_the_rule, 32, 0.0006) == [2, 1, 2]
    assert nb.batches_formed(traffic, nb.joins_by_the_rule, 2, 0.006) == [2, 2, 1]


@pytest.fixture(scope="module")
def eval_model(nb):
    return nb.make_model().eval()


@pytest.mark.exercise("10", "pad")
def test_check_pad_batch_says_that_padding_to_the_largest_size_wastes_compute(nb, eval_model):
    def to_the_largest(images, sizes=(8, 16, 32)):
        return torch.cat([images, torch.zeros(max(sizes) - len(images), *images.shape[1:])])

    assert nb.check_pad_batch(to_the_largest, eval_model, torch.device("cpu")) == (
        "NOT YET RIGHT: a batch of 1 became shape (32, 3, 32, 32); the smallest of (8, 16, 32) that "
        "holds it is 8, so (8, 3, 32, 32): padding to the largest size wastes compute.")


@pytest.mark.exercise("10", "pad")
def test_check_pad_batch_on_its_other_wrong_answers_and_the_notebooks_answer(nb, eval_model):
    cpu = torch.device("cpu")

    def zeros_first(images, sizes=(8, 16, 32)):
        size = nb.padded_size(len(images), sizes)
        return torch.cat([torch.zeros(size - len(images), *images.shape[1:]), images])

    assert nb.check_pad_batch(lambda images, sizes: ..., eval_model, cpu).startswith("NOT DONE YET")
    assert nb.check_pad_batch(lambda images, sizes: images, eval_model, cpu) == (
        "NOT YET RIGHT: a batch of 1 became shape (1, 3, 32, 32); the smallest of (8, 16, 32) that holds "
        "it is 8, so (8, 3, 32, 32).")
    assert nb.check_pad_batch(zeros_first, eval_model, cpu) == (
        "NOT YET RIGHT: padding a batch of 1, its pictures changed: keep them first, in order, and put "
        "the zeros after them.")
    in_train_mode = nb.make_model().train()  # dropout: the answers change from call to call
    assert nb.check_pad_batch(nb.pad_batch_answer, in_train_mode, cpu) == (
        "NOT YET RIGHT: the answers to 5 pictures changed once padded: is the model in eval mode "
        "(Step 1)?")
    assert nb.check_pad_batch(nb.pad_batch_answer, eval_model, cpu, formed=[1, 3, 3, 9, 32, 7]) == (
        "PASSED. Padded, 5 pictures get the answers they get alone, within float32's tolerance. Step "
        "4's busiest run formed batches of 5 sizes; padded, they take 3 of (8, 16, 32): one warm-up per "
        "size, and with reduce-overhead on a GPU one CUDA graph per size.")
    assert [nb.padded_size(count, (8, 16, 32)) for count in (1, 8, 9, 16, 17, 32)] == [8, 8, 16, 16, 32, 32]


@pytest.mark.exercise("10", "pad")
def test_check_pad_batch_says_float64_zeros_make_a_float64_batch_before_the_model_sees_it(nb, eval_model):
    import numpy as np

    def with_numpy_zeros(images, sizes=(8, 16, 32)):  # np.zeros is float64; torch.cat promotes
        size = min(size for size in sizes if size >= len(images))
        return torch.cat([images, torch.from_numpy(np.zeros((size - len(images), 3, 32, 32)))])

    # before, the contents passed (torch.equal of float64 and float32 is True) and the model call
    # stopped with "expected scalar type Double but found Float", a traceback
    assert nb.check_pad_batch(with_numpy_zeros, eval_model, torch.device("cpu")) == (
        "NOT YET RIGHT: padding a batch of 1, the pictures' torch.float32 became torch.float64, which the "
        "model's weights refuse: make the zeros with dtype=images.dtype (np.zeros makes float64, and "
        "torch.cat then makes the whole batch float64).")


@pytest.mark.exercise("10", "pad")
def test_check_pad_batch_says_the_batch_must_stay_where_its_pictures_are(nb, eval_model):
    gpu = torch.device("meta")  # stands in for a GPU: a device that is not the pictures' CPU

    def moved_to_the_device(images, sizes=(8, 16, 32)):  # the batcher moves the batch itself
        size = min(size for size in sizes if size >= len(images))
        return torch.cat([images, torch.zeros(size - len(images), *images.shape[1:])]).to(gpu)

    assert nb.check_pad_batch(moved_to_the_device, eval_model, torch.device("cpu")) == (
        "NOT YET RIGHT: padding a batch of 1, the pictures on cpu came back on meta: make the zeros on "
        "images.device, and leave moving the batch to the batcher.")


@pytest.mark.exercise("10", "pad")
def test_check_pad_batch_says_what_an_answer_that_is_no_tensor_returned(nb, eval_model):
    def a_list(images, sizes=(8, 16, 32)):  # the pictures and the zeros, never joined into one tensor
        size = min(size for size in sizes if size >= len(images))
        return list(images) + [torch.zeros(*images.shape[1:])] * (size - len(images))

    feedback = nb.check_pad_batch(a_list, eval_model, torch.device("cpu"))
    assert feedback.startswith("NOT YET RIGHT: pad_batch returned [tensor(")
    assert feedback.endswith("(a list) for a batch of 1, not a tensor: join the pictures and the zeros "
                             "with torch.cat.")


@pytest.mark.exercise("10", "pad")
def test_check_pad_batch_says_at_which_batch_size_and_line_an_answer_raised(nb, eval_model):
    def size_not_unpacked(images, sizes=(8, 16, 32)):
        size = min(size for size in sizes if size >= len(images))
        return torch.cat([images, torch.zeros(size - len(images), images.shape[1:])])

    feedback = nb.check_pad_batch(size_not_unpacked, eval_model, torch.device("cpu"))
    assert feedback.startswith("NOT YET RIGHT: for a batch of 1, your size_not_unpacked raised "
                               "TypeError: zeros()")
    assert feedback.endswith(" of its cell: `return torch.cat([images, torch.zeros(size - len(images), "
                             "images.shape[1:])])`."), "the line that raised, as the learner wrote it"
    one_argument = nb.check_pad_batch(lambda images: images, eval_model, torch.device("cpu"))
    assert one_argument.startswith("NOT YET RIGHT: for a batch of 1, checking your answer stopped with "
                                   "TypeError")


def test_check_pad_batch_answers_a_model_call_that_fails_without_a_traceback(nb, eval_model):
    # whatever passes the checks before it, the model call runs inside the shared setup's safety net
    def refuses_a_padded_batch(batch):
        if len(batch) == 8:
            raise RuntimeError("expected scalar type Double but found Float")
        return eval_model(batch)

    feedback = nb.check_pad_batch(nb.pad_batch_answer, refuses_a_padded_batch, torch.device("cpu"))
    assert feedback.startswith("NOT YET RIGHT: ")
    assert "RuntimeError: expected scalar type Double but found Float" in feedback


# --- The GPU branches of the cells, run with stand-ins shaped like PyTorch's API ----------------------------

class StandInBatch:
    """A CPU tensor's stand-in that records .to(device, non_blocking=...) and .pin_memory()."""

    def __init__(self, log, pinned=False):
        self.log, self.pinned, self.nbytes = log, pinned, 25_165_824

    def to(self, device, non_blocking=False):
        self.log.append(("to", self.pinned, device, non_blocking))
        return self

    def pin_memory(self):
        self.log.append(("pin_memory",))
        return StandInBatch(self.log, pinned=True)


@pytest.mark.gpu_branch("10", "cell pinned: device.type == 'cuda'")
@pytest.mark.parametrize("device_type", ["cuda", "cpu"])
def test_the_pinned_copy_pins_the_batch_and_copies_both_without_blocking(nb, device_type):
    log = []
    stand_in_torch = types.SimpleNamespace(randn=lambda *shape: StandInBatch(log))
    namespace = {**vars(nb), "torch": stand_in_torch, "device": torch.device(device_type),
                 "time_it": lambda fn, device, repeats: (fn(), 0.01)[1]}
    printed = run_cell("10", "pinned", namespace)
    if device_type == "cpu":
        assert log == [] and printed.startswith("No CUDA GPU (cpu)")
        return
    cuda = torch.device("cuda")
    assert log == [("to", False, cuda, True), ("pin_memory",), ("to", True, cuda, True)]
    assert printed == "CPU to GPU: pageable 2.5 GB/s, pinned 2.5 GB/s\n"


def stand_in_compile(calls):
    def compile(model, **kwargs):
        calls.append(kwargs)
        return model
    return compile


@pytest.mark.gpu_branch("10", "cell compile: device.type == 'cuda' and backend == 'inductor'")
@pytest.mark.parametrize("device_type, fast, chosen, expected", [
    ("cuda", False, "inductor", {"mode": "reduce-overhead"}),  # CUDA graphs on a GPU
    ("cuda", True, "inductor", {"backend": "aot_eager"}),  # the tests' fast mode
    ("cpu", False, "inductor", {"backend": "inductor"}),
    ("cuda", False, "aot_eager", {"backend": "aot_eager"}),
])
def test_torch_compile_gets_reduce_overhead_on_a_cuda_gpu_with_inductor(nb, device_type, fast, chosen,
                                                                         expected):
    calls = []
    stand_in_torch = types.SimpleNamespace(compile=stand_in_compile(calls),
                                           inference_mode=torch.inference_mode)
    namespace = {**vars(nb), "torch": stand_in_torch, "device": torch.device(device_type), "FAST": fast,
                 "BACKEND": chosen, "model": lambda batch: batch, "MAX_BATCH": 2,
                 "requests": StandInRequests(), "time_it": lambda fn, device, repeats, warmup: 1.5}
    printed = run_cell("10", "compile", namespace)
    assert calls == [expected]
    assert printed.startswith(f"torch.compile ({expected.get('backend', 'inductor')}): first call 1.5 s")


class StandInRequests:
    """Slicing gives a batch whose .to(device) moves nothing (the cell's batch for the compiled model)."""

    def __getitem__(self, index):
        return types.SimpleNamespace(to=lambda device: ("on", device))


def tiny_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)).eval()


@pytest.mark.gpu_branch("10", "cell faster: device.type == 'cuda'")
def test_a_cuda_gpu_adds_a_float16_variant_checked_at_float16s_tolerance(nb, monkeypatch):
    # torch.cuda.get_device_capability(device) -> (major, minor); torch.cuda.synchronize(device) -> None.
    # The variants run on the CPU: the cell decides with `device` and moves nothing to it.
    synchronized = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synchronized.append(device))
    model = tiny_model()
    namespace = {**vars(nb), "device": torch.device("cuda"), "model": model, "compiled": model,
                 "backend": "inductor", "batch": torch.randn(6, 3, 8, 8), "ROUNDS": 2, "FAST": True}
    printed = run_cell("10", "faster", namespace)
    variants = namespace["variants"]
    assert list(variants) == ["eager float32", "torch.compile (inductor)", "eager float16"]
    assert {p.dtype for p in variants["eager float16"].parameters()} == {torch.float16}
    assert {p.dtype for p in model.parameters()} == {torch.float32}, "the original stays float32"
    lines = printed.splitlines()
    assert lines[2].startswith("eager float16: within float16's tolerance (rtol 0.01, atol 0.01)")
    assert set(namespace["seconds"]) == set(variants) and synchronized


class StandInCuda:
    """torch.cuda's stream and graph API as notebook 10 uses it, recording each call."""

    def __init__(self):
        self.log, self.capturing = [], False
        outer = self

        class Stream:
            def __init__(self, name="side"):
                self.name = name
                outer.log.append(("Stream", name))

            def wait_stream(self, other):
                outer.log.append(("wait_stream", self.name, other.name))

        class CUDAGraph:
            def replay(self):
                outer.log.append(("replay",))

        self.Stream, self.CUDAGraph = Stream, CUDAGraph
        self.current = Stream("current")

    def current_stream(self):
        return self.current

    @staticmethod
    def _context(log, entry):
        import contextlib

        @contextlib.contextmanager
        def context():
            log.append(("enter",) + entry)
            yield
            log.append(("exit",) + entry)
        return context()

    def stream(self, stream):
        return self._context(self.log, ("stream", stream.name))

    def graph(self, graph):
        return self._context(self.log, ("graph", type(graph).__name__))


def test_record_graph_warms_up_on_a_side_stream_then_records_one_call(nb):
    cuda, calls = StandInCuda(), []
    model = lambda x: calls.append(len(cuda.log)) or x + 1  # noqa: E731
    graph, output = nb.record_graph(model, torch.zeros(2), cuda=cuda)
    names = [entry[:2] for entry in cuda.log]
    assert names == [("Stream", "current"), ("Stream", "side"), ("wait_stream", "side"),
                     ("enter", "stream"), ("exit", "stream"), ("wait_stream", "current"),
                     ("enter", "graph"), ("exit", "graph")]
    assert len(calls) == 4, "three warm-up calls, then the recorded one"
    assert isinstance(graph, cuda.CUDAGraph) and torch.equal(output, torch.ones(2))


@pytest.mark.gpu_branch("10", "cell cuda-graphs: device.type == 'cuda'")
def test_the_cuda_graphs_cell_copies_new_pictures_into_the_recorded_input_and_replays(nb, monkeypatch):
    cuda = StandInCuda()  # the cell defines record_graph again, with torch.cuda as its default
    for name in ("Stream", "current_stream", "stream", "CUDAGraph", "graph"):
        monkeypatch.setattr(torch.cuda, name, getattr(cuda, name))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    model = tiny_model()
    batch = torch.randn(2, 3, 8, 8)
    requests = torch.randn(5, 3, 8, 8)
    namespace = {**vars(nb), "device": torch.device("cuda"), "model": model, "batch": batch,
                 "requests": requests,
                 "time_it": lambda fn, device, repeats: (fn(), 0.002)[1]}
    printed = run_cell("10", "cuda-graphs", namespace)
    assert torch.equal(namespace["static_input"], requests[-2:]), "new pictures in the recorded memory"
    assert cuda.log.count(("replay",)) == 2  # once for the new pictures, once timed
    assert printed == "One batch: 2.000 ms eager, 2.000 ms replayed as a CUDA graph.\n"
    namespace["device"] = torch.device("cpu")
    assert run_cell("10", "cuda-graphs", namespace) == "CUDA graphs need a CUDA GPU; this run uses cpu.\n"


@pytest.mark.gpu_branch("10", "onnx_providers: device_type == 'cuda'")
def test_onnx_asks_for_the_gpu_provider_first_and_notices_a_quiet_fallback(nb):
    assert nb.onnx_providers("cuda") == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert nb.onnx_providers("cpu") == ["CPUExecutionProvider"]
    wanted = nb.onnx_providers("cuda")
    assert nb.provider_verdict(wanted, wanted) == "ONNX Runtime runs on CUDAExecutionProvider, as asked."
    assert nb.provider_verdict(wanted, ["CPUExecutionProvider"]).startswith(
        "ONNX Runtime fell back to CPUExecutionProvider: CUDAExecutionProvider did not load")
    assert "fell back to nothing" in nb.provider_verdict(wanted, [])

