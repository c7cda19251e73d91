"""Notebook 05's exercises: each check given the wrong answers a learner is likely to write, and what it
says to each (the nbval run checks that each untouched starter says NOT DONE YET and each answer PASSED:
conftest.py)."""
import statistics
import time

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from support.notebook_05 import tiny_job
from support.notebook_05 import one_thread, shapes_module  # noqa: F401 (pytest fixtures, used by name)
from support.notebook_code import load_helpers

nb = load_helpers("05")


@pytest.mark.exercise("05", "part-times")
def test_exercise_1_says_a_timing_in_seconds_is_not_in_milliseconds(shapes_module):
    job = tiny_job(nb, shapes_module, feed="decode on every read")
    baseline_s = {"data": 0.004, "forward": 0.001, "backward": 0.001, "optimizer": 0.001}

    def in_seconds(run, steps, warmup=2):  # Step 1's loop, copied without the * 1000
        for _ in range(warmup):
            nb.train_step(run)
        times = {}
        for _ in range(steps):
            nb.train_step(run, times)
        return {label: statistics.median(seconds) for label, seconds in times.items()}

    said = nb.check_part_medians(in_seconds, job, 1, baseline_s)
    ratio = said.removeprefix("NOT YET RIGHT: your parts add up to ").split(" ")[0]
    assert said == (f"NOT YET RIGHT: your parts add up to {ratio} times the check's own timing of the same "
                    "run (seconds, not milliseconds?)")
    assert 1 / 5000 < float(ratio) < 1 / 200


@pytest.mark.exercise("05", "part-times")
def test_exercise_1_says_how_many_steps_ran_when_the_warm_up_is_missing_and_passes_its_answer(shapes_module):
    job = tiny_job(nb, shapes_module, feed="decode on every read")
    baseline_s = {"data": 0.004, "forward": 0.001, "backward": 0.001, "optimizer": 0.001}

    def without_warm_up(run, steps, warmup=2):
        times = {}
        for _ in range(steps):
            nb.train_step(run, times)
        return {label: 1000 * statistics.median(seconds) for label, seconds in times.items()}

    said = nb.check_part_medians(without_warm_up, job, 0, baseline_s)
    assert said == "NOT YET RIGHT: 4 training steps ran; with warmup=2 and steps=4 there should be 6"
    assert nb.check_part_medians(lambda run, steps, warmup=2: None, job, 0, baseline_s).startswith(
        "NOT DONE YET")
    returned = []

    def as_a_list(run, steps, warmup=2):  # Step 1's medians, but without the names of the parts
        for _ in range(warmup):
            nb.train_step(run)
        times = {}
        for _ in range(steps):
            nb.train_step(run, times)
        returned.append([1000 * statistics.median(seconds) for seconds in times.values()])
        return returned[-1]

    said = nb.check_part_medians(as_a_list, job, 0, baseline_s)
    assert said == (f"NOT YET RIGHT: part_medians_ms returned {nb.short(returned[0])}, not a dict of "
                    "milliseconds per part")

    def whole_steps(run, steps, warmup=2):  # each training step timed whole, not in its parts
        for _ in range(warmup):
            nb.train_step(run)
        seconds = []
        for _ in range(steps):
            start = time.perf_counter()
            nb.train_step(run)
            seconds.append(time.perf_counter() - start)
        return {"step": 1000 * statistics.median(seconds)}

    said = nb.check_part_medians(whole_steps, job, 0, baseline_s)
    assert said == "NOT YET RIGHT: the parts are ['step'], not ['data', 'forward', 'backward', 'optimizer']"

    def from_run_times(run, steps, warmup=2):  # times the run never kept
        return {label: 1000 * statistics.median(seconds) for label, seconds in run.times.items()}

    said = nb.check_part_medians(from_run_times, job, 0, baseline_s)
    assert said.startswith("NOT YET RIGHT: your from_run_times raised AttributeError: 'Run' object has no attribute "
                           "'times' at line ")
    answer = nb.part_medians_ms_answer  # the notebook's answer, loaded with its helpers
    said = nb.check_part_medians(answer, job, 1, baseline_s)
    assert said.startswith("PASSED: with 1 workers the data part took ") and "against 4.00 ms" in said


@pytest.mark.exercise("05", "forward-flops")
def test_exercise_2_says_the_backward_pass_was_counted_too():
    model, images = nb.make_cnn(4), torch.randn(2, 3, 16, 16)
    with FlopCounterMode(display=False) as counter:  # the forward and the backward pass
        model(images).sum().backward()
    said = nb.check_forward_flops(counter.get_total_flops(), model, images)
    assert said.startswith("NOT YET RIGHT: you counted 2.") and said.endswith(
        "(did the backward pass run inside the counter too?)")
    assert nb.check_forward_flops(0, model, images).startswith("NOT DONE YET")
    with FlopCounterMode(display=False) as counter:
        model(images)
    assert nb.check_forward_flops(counter.get_total_flops(), model, images).startswith("PASSED: ")
    said = nb.check_forward_flops(counter, model, images)  # the counter itself, not its count
    assert said == (f"NOT YET RIGHT: the check got {nb.short(counter)}, not a number of FLOPs; give it "
                    "counter.get_total_flops()")
    assert nb.check_forward_flops(None, model, images) == (
        "NOT YET RIGHT: the check got None (a NoneType), not a number of FLOPs; give it "
        "counter.get_total_flops()")


@pytest.mark.exercise("05", "t4-costs")
def test_exercise_3_says_an_arithmetic_time_multiplied_instead_of_divided_is_off():
    operations, flops = 150.0, 1.62e9
    said = nb.check_t4_costs(150.0 * 10e-6, flops * 8.1e12, operations, flops, 10e-6, 8.1e12)
    assert said == ("NOT YET RIGHT: your arithmetic time is 1.31e+22 s, 6.56e+25 times the 0.0002 s of the "
                    "cost model")
    said = nb.check_t4_costs("1.5 ms", flops / 8.1e12, operations, flops, 10e-6, 8.1e12)  # a time as text
    assert said == "NOT YET RIGHT: your launch cost is '1.5 ms' (a str), not a number of seconds"
    said = nb.check_t4_costs(150.0 * 10e-6, None, operations, flops, 10e-6, 8.1e12)
    assert said == "NOT YET RIGHT: your arithmetic time is None (a NoneType), not a number of seconds"
    assert nb.check_t4_costs(..., ..., operations, flops, 10e-6, 8.1e12).startswith("NOT DONE YET")
    said = nb.check_t4_costs(150.0 * 10e-6, flops / 8.1e12, operations, flops, 10e-6, 8.1e12)
    assert said == ("PASSED: 1.500 ms of launches against 0.200 ms of arithmetic: on such a GPU the big "
                    "model's training step would be launch-bound, if its data keeps up")
