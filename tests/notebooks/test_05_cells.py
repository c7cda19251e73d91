"""What notebook 05's cells say, run whole (notebook_code.run_cell) on made-up measurements: Step 2's
verdict on the heavy-data setting, Step 4's reading of the rounds and of the results, Going deeper A's
three verdicts and the readings of its fused optimizer and of part C's compiled models, the manifest's
verdict patterns against what the notebook's own helpers print, the key figures the core and Going
deeper hand to report_figures, and the taught calls in the cells of the steps whose prose teaches them."""
import re
import types

import pandas as pd
import pytest
from torch.profiler import ProfilerActivity

import manifest
from support.notebook_05 import CPU, steps_of, tiny_run
from support.notebook_05 import one_thread  # noqa: F401 (pytest fixtures, used by name)
from support.notebook_code import load_helpers, notebook_path, read, run_cell

nb = load_helpers("05")
NOTEBOOK = read(notebook_path("05"))


# --- The verdicts the cells print -----------------------------------------------------------------

ROUND_KEYS = ("speedup_x", "slowest_x", "fastest_x")


def measured_rows(setting, baseline, *variants):
    """Rows of measure_setting (its keys) for `setting`: the baseline, then each (name, (median,
    slowest, fastest)) of `variants`, every one keeping the baseline's results."""
    row = dict(setting=setting, loss=0.9, accuracy_pct=80.0, baseline_loss=0.9, baseline_accuracy_pct=80.0,
               spread_pct=5.0, precision="float32", recipe_change=False, step_ms=10.0, first_step_s=0.1)
    rows = [{**row, "variant": baseline, "baseline": True, **dict(zip(ROUND_KEYS, (1.0, 1.0, 1.0)))}]
    return rows + [{**row, "variant": name, "baseline": False, **dict(zip(ROUND_KEYS, rounds))}
                   for name, rounds in variants]


# --- Step 2: the verdict on the heavy-data setting, from Step 1's timed training steps -------------

@pytest.mark.parametrize("data, said", [
    ([0.04, 0.03, 0.05], "heavy data: data-bound (data 3.00× to 5.00× the compute over 3 training steps)"),
    ([0.04, 0.005, 0.05], "heavy data: inconclusive on this machine: run again (data 0.50× to 5.00× the "
                          "compute over 3 training steps)"),  # one step computed longer than it waited
    ([0.001, 0.002, 0.003], "heavy data: not data-bound: it computes longer than it waits for its data "
                            "(data 0.10× to 0.30× the compute over 3 training steps)"),
])
def test_step_2_profiles_the_run_and_names_its_limit_from_every_timed_step(tmp_path, data, said):
    # Step 1's times: forward, backward and optimizer add up to 10 ms in every training step
    times = {"data": data, "forward": [0.004] * 3, "backward": [0.005] * 3, "optimizer": [0.001] * 3}
    run = tiny_run(nb, {})
    namespace = {**vars(nb), "run": run, "times": times, "device": CPU, "DATA_DIR": tmp_path,
                 "PROFILER_ACTIVITIES": [ProfilerActivity.CPU], "job": types.SimpleNamespace(name="heavy data")}
    printed = run_cell("05", "profile", namespace).splitlines()
    assert printed[-1] == said
    assert any(line.lstrip().startswith("Name") and "Self CPU" in line for line in printed)  # PyTorch's table
    assert len(run.losses) == 3 and (tmp_path / "05_trace.json").is_file()  # three profiled training steps


# --- Step 4: the rounds and the results of the workers, read by the measure-setting cell ----------

ONE_WORKER_GAIN = "Workers paid: data and compute now overlap."
DISAGREE = "The rounds disagree: the timings varied more than the change. Close other programs and run this step again."
NO_GAIN = "No clear gain: workers compete for 2 cores."
ALL_KEPT = "All 1 checked variants kept the results within the tolerance."


def measured_by_stand_ins(rows, workers=2, why=""):
    """Run Step 4's measure-setting cell whole, its measurement made of stand-ins: the rounds are not
    timed, and measured_row returns `rows` (by variant name). What the cell printed, and the variants it
    measured."""
    asked = []

    def measured_row(job, variant, runs, baseline, seconds, first_s):
        asked.append(variant)
        return next(row for row in rows if row["variant"] == variant["name"])

    namespace = {**vars(nb), "job": types.SimpleNamespace(name="heavy data", sizes={"steps": 41}, rounds=3),
                 "WORKERS": workers, "workers_why": why, "CORES": 2, "progress_bar": lambda items: items,
                 "make_run": lambda job, variant: variant["name"], "first_step_seconds": lambda run: 0.1,
                 "one_round": lambda run, timed, warmup: lambda: 0.01, "finish_run": lambda run, steps: None,
                 "measured_row": measured_row, "compare": lambda rows, setting: None}
    return run_cell("05", "measure-setting", namespace).splitlines(), asked


@pytest.mark.parametrize("rounds, last", [
    ((1.26, 1.03, 1.77), ONE_WORKER_GAIN),
    ((0.67, 0.58, 1.42), DISAGREE),  # the busy 2-core machine of issue 43
    ((1.0, 0.98, 1.02), NO_GAIN),
    ((0.5, 0.4, 0.6), NO_GAIN),
])
def test_what_step_4_says_of_the_workers_follows_the_rounds(rounds, last):
    results = measured_rows("heavy data", "baseline: num_workers=0", ("num_workers=2", rounds))
    printed, asked = measured_by_stand_ins(results)
    assert [variant["name"] for variant in asked] == ["baseline: num_workers=0", "num_workers=2"]
    assert printed == [f"num_workers=2: {nb.change_in_words(*rounds)}.", last, ALL_KEPT]


def test_step_4_says_why_no_worker_variant_ran_and_measures_the_baseline_alone():
    printed, asked = measured_by_stand_ins(measured_rows("heavy data", "baseline: num_workers=0"), workers=0,
                                           why="spawn: a worker must import the dataset class")
    assert [variant["name"] for variant in asked] == ["baseline: num_workers=0"]
    assert printed == ["No worker variant could run (spawn: a worker must import the dataset class).",
                       "All 0 checked variants kept the results within the tolerance."]


def test_step_4_names_a_fix_that_did_not_keep_the_results():
    results = measured_rows("heavy data", "baseline: num_workers=0", ("num_workers=2", (1.5, 1.2, 1.8)))
    results[1]["loss"] = 1.2  # against the baseline's 0.9: a third more
    printed, _ = measured_by_stand_ins(results)
    assert printed[1] == ONE_WORKER_GAIN
    assert printed[2].startswith("NOT kept: 'num_workers=2' (heavy data): loss +33.3 %, accuracy +0.0 points")


# --- Going deeper A: the fused optimizer, and part C's compiled models ------------------------------

@pytest.mark.parametrize("rounds, did_not_pay", [((1.15, 1.10, 1.33), False), ((1.1, 0.7, 1.5), False),
                                                 ((1.0, 0.98, 1.02), True), ((0.8, 0.7, 0.9), True)])
def test_going_deeper_a_says_fused_adam_did_not_pay_only_when_every_round_says_so(rounds, did_not_pay):
    results = measured_rows("tiny batches", "baseline: Adam", ("Adam(fused=True)", rounds))
    namespace = {**vars(nb), "fused_results": results, "device": CPU}
    printed = run_cell("05", "fused-say", namespace).splitlines()
    assert printed[0] == f"Adam(fused=True): {nb.change_in_words(*rounds)}."
    assert ("Fused Adam did not pay on cpu." in printed) == did_not_pay
    assert printed[-1] == ALL_KEPT


@pytest.mark.parametrize("rounds, explained", [((1.0, 0.98, 1.02), True), ((0.8, 0.7, 0.9), True),
                                               ((1.1, 0.7, 1.5), False), ((2.0, 1.5, 2.5), False)])
def test_going_deeper_c_explains_a_compiled_model_without_gain_only_when_the_rounds_agree(rounds, explained):
    variant = "torch.compile, backend=inductor"
    results = measured_rows("tiny batches", "baseline: eager", (variant, rounds))
    namespace = {**vars(nb), "more_results": results, "optimizer_share": 0.64, "FAST": False,
                 "BACKEND": "inductor"}
    printed = run_cell("05", "more-launch-say", namespace).splitlines()
    assert printed[0] == f"{variant}: {nb.change_in_words(*rounds)}."
    reason = (f"{variant}: torch.compile(model) compiles the forward and backward passes, but not the "
              "optimizer, which ran 64% of the step's operations (part A).")
    assert (reason in printed) == explained


def test_going_deeper_a_reads_the_three_verdicts_as_built_or_explained():
    settings = ["heavy data", "tiny batches", "big model"]
    operations = pd.DataFrame({"forward": [20.0] * 3, "backward": [30.0] * 3, "optimizer": [50.0] * 3},
                              index=settings)
    flops = {"heavy data": 1e7, "tiny batches": 1e6, "big model": 1e8}  # big: 1 ms at 100 GFLOP/s
    step_times = {"heavy data": steps_of({"data": 0.03, "forward": 0.004, "backward": 0.005, "optimizer": 0.001}),
                  "tiny batches": steps_of({"data": 0.0001, "forward": 0.001, "backward": 0.001, "optimizer": 0.001}),
                  "big model": steps_of({"data": 0.0001, "forward": 0.02, "backward": 0.03, "optimizer": 0.001})}
    namespace = {**vars(nb), "operations": operations, "flops": flops, "LAUNCH_ROUNDS": [5e-6, 12e-6, 8e-6],
                 "FLOP_ROUNDS": [100e9] * 3, "step_times": step_times}
    namespace["verdicts"] = nb.verdict_table(step_times, operations, flops, namespace["LAUNCH_ROUNDS"],
                                             namespace["FLOP_ROUNDS"])
    printed = run_cell("05", "verdicts-say", namespace).splitlines()
    assert printed == ["heavy data: data-bound (as built)", "tiny batches: launch-bound (as built)",
                       "big model: inconclusive on this machine: run again (launch cost 0.50× to 1.20× the "
                       "arithmetic over 3 rounds; built to be compute-bound)",
                       "tiny batches: optimizer's share of operations 50% (the fix below)"]
    namespace["verdicts"].loc["big model", "verdict"] = "launch-bound"  # a GPU's cheap arithmetic
    printed = run_cell("05", "verdicts-say", namespace).splitlines()
    assert printed[2:4] == [
        "big model: launch-bound (built to be compute-bound)",
        "Another device shifts the balance (a GPU's arithmetic is many times cheaper), and so do other "
        "programs that slow a whole run: close them, run this part again to tell which."]


def test_the_runs_verdicts_accept_inconclusive_rounds_and_catch_a_contradiction():
    # tests/verdicts.py, read against what the notebook's own helpers print (cpu: the test machine's case)
    from support.verdicts import missing_verdicts

    def missing(cell_id, *lines):
        outputs = [{"output_type": "stream", "text": "\n".join(lines) + "\n"}]
        return missing_verdicts("05", cell_id, outputs, situations={"cpu": lambda: True, "always": lambda: True})

    said = {(name, verdict): nb.verdict_in_words(name, verdict, expected, [0.9, 1.1], [0.5, 1.3, 0.7])
            for name, expected in [("heavy data", "data-bound"), ("tiny batches", "launch-bound"),
                                   ("big model", "compute-bound")]
            for verdict in ["data-bound", "launch-bound", "compute-bound", "inconclusive"]}
    as_built = [said["heavy data", "data-bound"], said["tiny batches", "launch-bound"]]
    assert missing("verdicts-say", *as_built, said["big model", "compute-bound"]) == []
    assert missing("verdicts-say", *as_built, said["big model", "inconclusive"]) == []
    assert missing("verdicts-say", said["heavy data", "data-bound"], said["tiny batches", "inconclusive"],
                   said["big model", "compute-bound"]) == []
    assert len(missing("verdicts-say", *as_built, said["big model", "launch-bound"])) == 1  # issue 43
    assert len(missing("verdicts-say", said["heavy data", "data-bound"], said["tiny batches", "compute-bound"],
                       said["big model", "compute-bound"])) == 1
    for rounds in [(1.26, 1.03, 1.77), (0.67, 0.58, 1.42), (1.0, 0.98, 1.02), (0.5, 0.4, 0.6)]:
        assert missing("measure-setting", f"num_workers=2: {nb.change_in_words(*rounds)}.",
                       "All 1 checked variants kept the results within the tolerance.") == []
        assert missing("fused-say", f"Adam(fused=True): {nb.change_in_words(*rounds)}.",
                       "All 1 checked variants kept the results within the tolerance.") == []
    assert len(missing("measure-setting", "No worker variant could run (no workers asked for).",
                       "All 0 checked variants kept the results within the tolerance.")) == 2
    assert len(missing("measure-setting", f"num_workers=2: {nb.change_in_words(1.5, 1.2, 1.8)}.",
                       "NOT kept: 'num_workers=2' (heavy data): loss +33.3 %, ...")) == 1
    assert len(missing("fused-say", "Adam(fused=True): not run, needs a CPU, CUDA, MPS or XPU device.",
                       "All 0 checked variants kept the results within the tolerance.")) == 2


@pytest.mark.parametrize("limit, caught", [("data-bound", False), ("inconclusive", False), ("computing", True)])
def test_the_runs_verdict_on_step_2_accepts_inconclusive_steps_and_catches_a_step_that_computes_longer(
        limit, caught):
    from support.verdicts import missing_verdicts

    said = nb.limit_in_words("heavy data", limit, [0.03, 0.04], [0.01, 0.05])
    outputs = [{"output_type": "stream", "text": "a profile's table\n" + said + "\n"}]
    assert bool(missing_verdicts("05", "profile", outputs, situations={"cpu": lambda: True})) == caught


# --- The figures the core and Going deeper report, and the taught calls in view ----------------------

def measured(setting, variant, baseline, step_ms, speedup_x):
    return {"setting": setting, "variant": variant, "baseline": baseline, "step_ms": step_ms,
            "speedup_x": speedup_x, "loss": 0.5, "accuracy_pct": 90.0, "precision": "float32",
            "recipe_change": False, "baseline_loss": 0.5, "baseline_accuracy_pct": 90.0}


def reporting(reported):
    return lambda fallback=None, **figures: reported.append((fallback, figures))


def test_the_core_hands_its_key_figures_to_report_figures():
    # that it does so once, at the end of the core, folded: tests/collection/test_figures_rule.py
    reported = []
    results = [measured("heavy data", "baseline: num_workers=0", True, 41.25, 1.0),
               measured("heavy data", "num_workers=2", False, 20.5, 2.01234)]
    namespace = {**vars(nb), "results": results, "LIMIT": "data-bound",
                 "job": types.SimpleNamespace(name="heavy data"), "report_figures": reporting(reported)}
    assert run_cell("05", "report-figures", namespace) == ""
    assert reported == [(None, {
        "heavy_data_verdict": "data-bound", "heavy_data_baseline_ms_per_step": 41.25,
        "heavy_data_fix": "num_workers=2", "heavy_data_speedup_x": 2.012, "fixes_kept": 1, "fixes_checked": 1})]


def test_going_deeper_hands_the_other_settings_figures_to_report_figures_once_more():
    reported = []
    fused = [measured("tiny batches", "baseline: Adam", True, 3.5, 1.0),
             {"setting": "tiny batches", "variant": "Adam(fused=True)", "not_run": "needs a CPU, ..."}]
    compute = [measured("big model", "baseline: float32", True, 50.0, 1.0),
               measured("big model", "autocast bfloat16", False, 25.0, 2.0)]
    verdicts = pd.DataFrame({"verdict": {"heavy data": "data-bound", "tiny batches": "launch-bound",
                                         "big model": "compute-bound"}})
    namespace = {**vars(nb), "verdicts": verdicts, "fused_results": fused, "compute_results": compute,
                 "LAUNCH_S": 12.25e-6, "FLOP_PER_S": 8.12e12, "report_figures": reporting(reported)}
    assert run_cell("05", "deeper-report-figures", namespace) == ""
    assert reported == [(None, {
        "tiny_batches_verdict": "launch-bound", "big_model_verdict": "compute-bound",
        "tiny_batches_baseline_ms_per_step": 3.5, "big_model_baseline_ms_per_step": 50.0,
        "big_model_fix": "autocast bfloat16", "big_model_speedup_x": 2.0,
        "launch_overhead_us": 12.25, "throughput_gflop_s": 8120.0})]


def test_the_taught_calls_are_in_the_visible_cells_of_their_steps():
    # test_learner_first.py checks that each is in a visible cell of the core; here, that each is in the
    # cell of the step whose prose teaches it
    cells = {cell.get("id"): cell.source for cell in NOTEBOOK.cells}
    where = {0: "train-step", 1: "timing-loop", 2: "timing-loop", 3: "profile", 4: "profile",
             5: "workers-fix", 6: "measure-setting"}
    taught = manifest.notebook("05").taught_calls
    assert len(taught) == len(where)
    for index, cell_id in where.items():
        assert re.search(taught[index], cells[cell_id], re.S), (taught[index], cell_id)
