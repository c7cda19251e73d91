"""Notebook 05's exercises: each check given the wrong answers a learner is likely to write, and what it
says to each (the nbval run checks that each untouched starter says NOT DONE YET and each answer PASSED:
conftest.py)."""
import statistics
import time

import pytest
from torch.profiler import ProfilerActivity, profile

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


def profiled(run, steps):
    """A profile of `steps` training steps of `run`, as Step 2 makes it."""
    with profile(activities=[ProfilerActivity.CPU]) as made:
        for _ in range(steps):
            nb.train_step(run)
    return made


@pytest.fixture
def profile_job(shapes_module):
    """A small job decoded on every read, and Step 2's profile of three steps without workers."""
    job = tiny_job(nb, shapes_module, feed="decode on every read")
    without = nb.make_run(job)
    return job, profiled(without, 3)


@pytest.mark.exercise("05", "profile-workers")
def test_exercise_2_says_how_many_training_steps_the_profile_holds(profile_job):
    job, step_2 = profile_job
    run = nb.make_run(job, {"name": "with workers", "workers": 1})
    said = nb.check_profile_with_workers(profiled(run, 1), run, 1, step_2)
    assert said == "NOT YET RIGHT: the profile holds 1 training step, not 3"
    with pytest.raises(StopIteration):  # the check stopped the run's workers
        next(run.batches)
    empty = nb.make_run(job, {"name": "with workers", "workers": 1})
    assert nb.check_profile_with_workers(profiled(empty, 0), empty, 1, step_2).startswith("NOT DONE YET")


@pytest.mark.exercise("05", "profile-workers")
def test_exercise_2_says_the_profiled_steps_had_no_workers_and_passes_its_answer(profile_job):
    job, step_2 = profile_job
    without = nb.make_run(job)  # Step 1's run, profiled by mistake
    said = nb.check_profile_with_workers(profiled(without, 3), without, 1, step_2)
    assert said == ("NOT YET RIGHT: the profiled training steps decoded their batches in the training process "
                    "(_SingleProcessDataLoaderIter): profile with_workers, not Step 1's run")
    table = step_2.key_averages().table()  # the table, not the profile
    run = nb.make_run(job, {"name": "with workers", "workers": 1})
    assert nb.check_profile_with_workers(table, run, 1, step_2) == (
        f"NOT YET RIGHT: the check got {nb.short(table)}, not a profile: give it the name after `as` in "
        "`with profile(...) as profiled`")
    run = nb.make_run(job, {"name": "with workers", "workers": 1})
    for _ in range(2):
        nb.train_step(run)
    said = nb.check_profile_with_workers(profiled(run, 3), run, 1, step_2)
    assert said.startswith("PASSED: with 1 workers the training process spent ") and "in Step 2" in said
    alone = nb.make_run(job)  # where no worker can run, Step 1's kind of run is the answer
    said = nb.check_profile_with_workers(profiled(alone, 3), alone, 0, step_2)
    assert said.startswith("PASSED: no worker process could run here")


@pytest.mark.exercise("05", "worker-variants")
def test_exercise_3_says_what_is_wrong_with_the_variants_before_it_measures_them(shapes_module):
    job = tiny_job(nb, shapes_module, feed="decode on every read")
    check = nb.check_worker_variants
    assert check(..., job, 2).startswith("NOT DONE YET")
    one = {"name": "one worker", "workers": 1}
    assert check(one, job, 2) == ("NOT YET RIGHT: the check got {'name': 'one worker', 'workers': 1} (a dict), "
                                  "not a list of variants, each a dict with a name")
    assert check([one, {"name": "baseline"}], job, 2) == (
        "NOT YET RIGHT: the first variant asks for 1 workers; it is the baseline, which the others are "
        "compared with: give it none")
    assert check([{"name": "baseline"}, one, {"name": "one worker", "workers": 2}], job, 2) == (
        "NOT YET RIGHT: two variants are named 'one worker': measure_setting keeps one run per name")
    assert check([{"name": "baseline"}, {"name": "two", "workers": 2}], job, 2) == (
        "NOT YET RIGHT: the variants ask for [0, 2] workers, not [0, 1, 2]")


@pytest.mark.exercise("05", "worker-variants")
def test_exercise_3_measures_the_right_variants_on_fewer_training_steps(shapes_module, monkeypatch):
    job = tiny_job(nb, shapes_module, feed="decode on every read")
    measured = []
    real = nb.measure_setting

    def measure_setting(job, variants):
        measured.append(job.sizes["steps"])
        return real(job, variants)

    monkeypatch.setattr(nb, "measure_setting", measure_setting)
    monkeypatch.setitem(nb.check_worker_variants.__globals__, "measure_setting", measure_setting)
    said = nb.check_worker_variants([{"name": "baseline"}, {"name": "one", "workers": 1}], job, 1)
    assert said.startswith("PASSED: one: ") and "×" in said
    assert measured == [1 + job.rounds * (nb.ROUND_WARMUP + 2 * 1 + 3)]  # three timed steps a round
    said = nb.check_worker_variants([{"name": "baseline"}], job, 0)
    assert said == "PASSED: no worker process can run here, so only the baseline was measured"
