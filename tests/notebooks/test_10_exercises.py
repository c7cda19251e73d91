"""Notebook 10's exercises: each check given the wrong answers a learner is likely to write, and what it
says to each (the nbval run checks that each untouched starter says NOT DONE YET and each answer PASSED:
conftest.py)."""
import pytest
import torch

from support.notebook_code import load_helpers


@pytest.fixture(scope="module")
def nb():
    return load_helpers("10")


# --- Exercise 1: the largest batch within a latency budget ----------------------------------------

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


# --- Exercise 2: which requests join a batch ------------------------------------------------------

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


# --- Exercise 3: padding a batch to a fixed size --------------------------------------------------

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
