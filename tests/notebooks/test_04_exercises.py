"""Notebook 04's exercises: each check given a likely wrong answer, and the message meant for it."""
import re
import time

import numpy as np
import pytest

from support.notebook_04 import CPU, helpers_and
from support.notebook_code import load_helpers, run_cell

nb = load_helpers("04")


DEPTHS = range(2, 13)


def naive_median_timer(fn, device, repeats=3):
    """Exercise 1 as a learner may finish it: the median, but no synchronize."""
    fn()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return float(np.median(seconds))


@pytest.mark.exercise("04", "timer")
def test_a_timer_without_synchronize_is_told_that_the_work_was_still_queued():
    feedback = nb.check_timer(naive_median_timer, CPU, warm_s=0.02)
    assert feedback.startswith("NOT YET RIGHT: ") and "still queued" in feedback
    assert "synchronize(device) after fn(), before you read the clock" in feedback


TIMER = """
def my_timer(fn, device, repeats=3):
    {warm_up}
    seconds = []
    for _ in range(repeats):
        {before}
        start = time.perf_counter()
        fn()
        {after}
        seconds.append(time.perf_counter() - start)
    return {result}
"""


def timer_check_of(**mistakes):
    """What check_timer says of the timer TIMER with `mistakes` (parts replaced), defined beside the
    check, where the check's stand-in synchronize replaces the shared one."""
    parts = {"warm_up": "fn()", "before": "synchronize(device)", "after": "synchronize(device)",
             "result": "statistics.median(seconds)", **mistakes}
    space = helpers_and()
    run_cell("04", "exercise-timer-check", space)
    exec(TIMER.format(**parts), space)
    return space["check_timer"](space["my_timer"], CPU, warm_s=0.02)


def measured_ms(said):
    """The milliseconds a timer check's message says the timer measured."""
    return re.search(r"([\d.]+) ms for work of", said).group(1)


@pytest.mark.exercise("04", "timer")
def test_the_timer_check_names_each_other_mistake():
    assert timer_check_of().startswith("PASSED: ")
    assert nb.check_timer(nb.my_time_it_answer, CPU, warm_s=0.02).startswith("PASSED: ")  # the answer cell
    assert timer_check_of(warm_up="pass") == (
        "NOT YET RIGHT: asked for 3 timed runs, it ran the work 3 times instead of 4: one warm-up run "
        "first, then the 3 timed ones.")
    said = timer_check_of(before="pass")  # the clock starts while the warm-up's work is still queued
    assert said == (f"NOT YET RIGHT: with repeats=1 it measured {measured_ms(said)} ms for work of 20 ms: "
                    "the warm-up's work was still queued when the clock started. Call "
                    "synchronize(device) before you start it.")
    said = timer_check_of(after="pass")  # the clock stops before the work is done
    assert said == (f"NOT YET RIGHT: {measured_ms(said)} ms for work of 20 ms: the clock stopped while "
                    "the work was still queued. Call synchronize(device) after fn(), before you read "
                    "the clock.")
    said = timer_check_of(result="statistics.mean(seconds)")  # the pause counts a third
    assert said == (f"NOT YET RIGHT: {measured_ms(said)} ms for work of 20 ms: one slow run (a pause) "
                    "counts too much. Return the median of the timed runs.")
    assert 50 < float(measured_ms(said)) < 70  # (20 + 20 + 140) / 3 ms
    assert timer_check_of(result="'fast'") == (
        "NOT YET RIGHT: it returned 'fast' (a str), not a number of seconds.")
    assert nb.check_timer(lambda fn, device, repeats: ..., CPU).startswith("NOT DONE YET")
    said = nb.check_timer(lambda fn, device, repeats: 1 / 0, CPU)  # exercise_check says where
    assert said.startswith("NOT YET RIGHT: your <lambda> raised ZeroDivisionError: division by zero at line ")
    assert nb.check_timer.__globals__["synchronize"] is nb.synchronize  # the shared one is back


@pytest.mark.exercise("04", "batch")
def test_a_break_even_that_forgets_the_batch_size_is_told_which_batch():
    def gpu_wins(depth, batch_size, cpu, gpu):
        flop_per_op = nb.step_flops(depth) / nb.launches_per_step(depth)  # batches of 100, always
        return flop_per_op > (gpu[0] - cpu[0]) * cpu[1]

    feedback = nb.check_batch(gpu_wins)
    flop_per_op = nb.step_flops(9, 10) / nb.launches_per_step(9)  # batches of 10: below the break-even
    assert feedback == (f"NOT YET RIGHT: for the 9-layer model with batches of 10 (CPU 20 µs and 50 GFLOP/s, "
                        f"GPU 40 µs and 8,000 GFLOP/s) it says True, the cost model False: an operation "
                        f"carries {flop_per_op:,.0f} FLOPs, the break-even is 1,000,000.")

    def gpu_wins_without_return(depth, batch_size, cpu, gpu):
        flop_per_op = nb.step_flops(depth, batch_size) / nb.launches_per_step(depth)
        flop_per_op > (gpu[0] - cpu[0]) * cpu[1]  # noqa: B015  (the learner forgot `return`)

    assert nb.check_batch(gpu_wins_without_return) == (
        "NOT YET RIGHT: for the 2-layer model with batches of 100 gpu_wins returned None (a NoneType), not "
        "True or False.")


def test_the_batch_check_tells_not_done_from_wrong():
    not_done = nb.check_batch(lambda depth, batch_size, cpu, gpu: ...)
    assert not_done == "NOT DONE YET: gpu_wins still returns `...`."
    assert nb.check_batch(lambda depth, batch_size, cpu, gpu: ... > 1).startswith("NOT DONE YET: replace")
    said = nb.check_batch(lambda depth, batch_size, cpu, gpu: "a" > 1)  # exercise_check says where
    assert said.startswith("NOT YET RIGHT: your <lambda> raised TypeError: '>' not supported between ")
    without_the_cpu = nb.check_batch(
        lambda depth, b, cpu, gpu: nb.step_flops(depth, b) / nb.launches_per_step(depth) > gpu[0] * cpu[1])
    assert without_the_cpu.startswith("NOT YET RIGHT: for the 9-layer model with batches of 100 ")
    assert all(nb.gpu_faster_by_the_cost_model(depth, 100, (30e-6, 50e9), (10e-6, 8e12)) for depth in DEPTHS)


@pytest.mark.exercise("04", "width")
def test_widths_with_one_layer_too_many_are_told_how_many_widths_a_depth_needs():
    feedback = nb.check_widths(lambda depth, width=256: [2] + [width] * depth + [2])
    assert feedback == ("NOT YET RIGHT: for depth 2 it gives [2, 256, 256, 2], expected [2, 256, 2]: "
                        "2 Linear layers need 3 widths, the 2 inputs first and the 2 classes last.")
    assert nb.check_widths(lambda depth: ...) == "NOT DONE YET: constant_widths still returns `...`."

    def printed_widths(depth, width=256):  # printed, not returned
        print([2] + [width] * (depth - 1) + [2])

    assert nb.check_widths(printed_widths) == (
        "NOT YET RIGHT: for depth 2 it returned None (a NoneType), not a list of widths.")
    passed = nb.check_widths(lambda depth, width=256: [2] + [width] * (depth - 1) + [2])
    assert passed.startswith("PASSED. FLOPs per operation with batches of 100: 2 layers 34,133, 3 layers")
    assert passed.endswith(". From 3 to 12 layers they grow 2.6 times in all, toward 4,915,200 "
                           "(6 × 100 × 256² ÷ 8), which no depth reaches.")


def test_the_flops_per_operation_of_one_width_creep_up_toward_a_ceiling_no_depth_reaches():
    # what Exercise 3's good answer says the check prints: from 3 layers on, each extra layer adds the same
    # 256 x 256 weights and 8 operations, so the FLOPs per operation grow ever more slowly, below a ceiling
    def per_operation(depth, width=256):
        weights = 2 * width + (depth - 2) * width * width + width * 2
        return 6 * 100 * weights / nb.launches_per_step(depth)

    ceiling = 6 * 100 * 256 * 256 / 8
    rises = [per_operation(depth + 1) - per_operation(depth) for depth in range(3, 200)]
    assert all(rise > 0 for rise in rises) and rises == sorted(rises, reverse=True)
    assert per_operation(10_000) < ceiling and per_operation(10_000) > 0.999 * ceiling
    assert (round(per_operation(3)), round(per_operation(12))) == (1_536_000, 4_018_678)
