"""Notebook 06's exercises: each check given a likely wrong answer; the answers come from the notebook."""
import pytest
import torch

from support.ddp_runs import timed_results
from support.notebook_code import load_helpers

nb = load_helpers("06")


@pytest.mark.exercise("06", "share")
def test_exercise_1_shows_the_share_that_blocks_or_no_padding_get_wrong():
    def in_blocks(count, rank, world_size):  # a likely first try: each process a block of points
        size = count // world_size
        return list(range(rank * size, (rank + 1) * size))

    assert nb.check_share(in_blocks) == ("NOT YET RIGHT: with 10 points and 2 processes, rank 0 "
                                         "gets [0, 2, 4, 6, 8]; yours gives [0, 1, 2, 3, 4].")
    assert nb.check_share(lambda count, rank, world_size: list(range(rank, count, world_size))) == (
        "NOT YET RIGHT: with 5 points and 2 processes, rank 1 gets [1, 3, 0]; yours gives [1, 3].")
    assert nb.check_share(lambda count, rank, world_size: ...).startswith("NOT DONE YET")
    assert nb.check_share(lambda count, rank, world_size: 1 / 0).startswith(
        "NOT YET RIGHT: share_of(10, 0, 2) raised ZeroDivisionError")
    assert nb.check_share(nb.share_of_answer).startswith("PASSED")


@pytest.mark.exercise("06", "average")
def test_exercise_2_says_that_a_sum_of_gradients_is_n_times_the_whole_batchs():
    summed = nb.check_average(lambda gradients: torch.stack(gradients).sum(dim=0))
    assert summed == ("NOT YET RIGHT: with 2 copies, your gradients are 2.00 times those of one model on "
                      "the whole batch: a sum, not a mean? (The all-reduce adds them up; DDP then divides "
                      "by the number of processes.)")
    reference, first = nb.gradients_by_copies(lambda gradients: gradients[0], 2)
    off, largest = float((first - reference).abs().max()), float(reference.abs().max())
    assert nb.check_average(lambda gradients: gradients[0]) == (  # one process's gradients only
        f"NOT YET RIGHT: with 2 copies, your gradients differ from those of one model on the whole "
        f"batch by up to {off:.3g} (the largest gradient is {largest:.3g}).")
    assert off > 1e-3 * largest
    stacked = nb.check_average(lambda gradients: torch.stack(gradients))
    assert stacked.startswith("NOT YET RIGHT: average_gradients should return one tensor of shape (4, 2)")

    def return_forgotten(gradients):
        torch.stack(gradients).mean(dim=0)

    assert nb.check_average(return_forgotten) == (
        "NOT YET RIGHT: average_gradients should return one tensor of shape (4, 2), the shape of each "
        "gradient; yours returned None (a NoneType).")
    assert nb.check_average(lambda gradients: ...).startswith("NOT DONE YET")
    assert nb.check_average(lambda gradients: gradients.mean()).startswith(
        "NOT YET RIGHT: average_gradients raised AttributeError")  # a list, not a tensor
    assert nb.check_average(nb.average_gradients_answer).startswith("PASSED")


@pytest.mark.exercise("06", "batch")
def test_exercise_3_says_that_the_communication_does_not_grow_with_the_batch():
    def everything_grows(k, compute_ms, communication_ms, processes):
        return processes * k * compute_ms / (k * compute_ms + k * communication_ms)

    assert nb.check_speedup(everything_grows) == (
        "NOT YET RIGHT: with k = 4, compute_ms 8, communication_ms 2, 2 processes, the speed-up is "
        "1.882; yours is 1.600, the same as with k = 1. The gradients, and so the communication, do "
        "not grow with the batch.")
    assert nb.check_speedup(lambda k, compute_ms, communication_ms, processes: 1.0) == (
        "NOT YET RIGHT: with k = 1, compute_ms 8, communication_ms 2, 2 processes, the speed-up is "
        "1.600; yours is 1.000.")
    assert nb.check_speedup(lambda *numbers: ...).startswith("NOT DONE YET")
    assert nb.check_speedup(lambda k, compute_ms, communication_ms, processes: "1.6") == (
        "NOT YET RIGHT: with k = 1, compute_ms 8, communication_ms 2, 2 processes, the speed-up is "
        "1.600; yours is '1.6'.")
    assert nb.check_speedup(lambda k, compute_ms, communication_ms, processes: 1 / 0).startswith(
        "NOT YET RIGHT: with k = 1, compute_ms 8, communication_ms 2, 2 processes, speedup_at raised "
        "ZeroDivisionError")
    speed = nb.ddp_speed_table(timed_results(8.0, 10.0), 128)
    assert nb.check_speedup(nb.speedup_at_answer, speed) == (
        "PASSED: speedup_at agrees with the cost model on 5 inputs. With Step 5's numbers: 1.60 "
        "times as fast as one device now, 1.97 with batches 16 times bigger.")
    assert nb.check_speedup(nb.speedup_at_answer, nb.ddp_speed_table([], 128)) == (
        "PASSED: speedup_at agrees with the cost model on 4 inputs.")
