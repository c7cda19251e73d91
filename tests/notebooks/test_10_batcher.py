"""Notebook 10's requests and its dynamic batcher, with stand-in models and a fake clock: Step 2's single
requests after their warm-up, and DynamicBatcher (every request answered once with its own answer, the
warm-up in its serving thread, failed and cancelled requests, the wait limit, close) with the traffic
that drives it (run_load, measure_capacity). The batcher runs its real thread; nothing here is timed
beyond generous bounds on its wait limit."""
import threading
import time
import types
from concurrent.futures import Future

import pytest
import torch

from support.notebook_code import load_helpers, run_cell


@pytest.fixture(scope="module")
def nb():
    return load_helpers("10")


# --- Step 2: single requests, after untimed ones --------------------------------------------------

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
                 "draw_latencies": lambda latencies, first_s, device: None,
                 "show_figure": lambda figure, alt: None}
    run_cell("10", "requests", namespace)
    assert calls == list(range(5)) + list(range(30)), "the warm-up first, then every request, timed"
    assert namespace["latencies"] == [pytest.approx(0.001)] * 30
    assert torch.equal(namespace["alone"], torch.arange(30.0).reshape(30, 1))


# --- Step 4: the batcher, its answers and its wait limit ------------------------------------------

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


# --- Step 4: the traffic --------------------------------------------------------------------------

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
