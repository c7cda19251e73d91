"""Unit tests for notebook 04's helpers (When does the GPU win?), called with made-up inputs.

They run outside the notebook: `load_helpers("04")` loads only the notebook's imports, functions and
literal constants. Nothing here needs a GPU. The shared timing function `time_it` is tested once, in
test_shared_setup.py.
"""
import math
import time
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from notebook_code import REPO, core_cells, core_markdown, load_helpers, notebook_path, read, run_cell

nb = load_helpers("04")

# The calls the notebook teaches, each in a visible code cell of the core (test_learner_first.py checks it): the
# model on the device, the training step, the correct timing (time_it's synchronize), the naive one, and Timer.
TAUGHT_CALLS = [
    r"model = model\.to\(device\)",
    r"loss\.backward\(\)\s+optimizer\.step\(\)\s+optimizer\.zero_grad\(\)",
    r"time_it\(one_epoch, device, repeats=1, warmup=0\)",
    r"start = time\.perf_counter\(\)\s+fn\(\)\s+seconds\.append\(time\.perf_counter\(\) - start\)",
    r"synchronize\(d\)  # let the queued work finish",
    r"torch\.utils\.benchmark\.Timer\(\s+stmt=\"fn\(\); synchronize\(device\)\"",
    r"\.blocked_autorange\(min_run_time=1\)\.median",
    r"time_it\(lambda: train_epoch\(model, optimizer, inputs, targets, batch_size\), device,",
]

ARTICLE_PARAMS_10_LAYERS = 703_142  # the figure the article gives for its 10-layer model


def expected_parameters(depth):
    """Parameters of the article's network, computed here from its layer widths 2, 4, 8, ..., 2**depth, 2."""
    widths = [2] + [2**k for k in range(2, depth + 1)] + [2]
    return sum(w_in * w_out + w_out for w_in, w_out in zip(widths[:-1], widths[1:]))


# --- models -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", range(2, 13))
def test_parameter_count_of_every_depth(depth):
    model = nb.create_model(depth)
    linears = [layer for layer in model if isinstance(layer, nn.Linear)]
    assert len(linears) == depth
    assert sum(isinstance(layer, nn.ReLU) for layer in model) == depth - 1
    assert linears[0].in_features == 2 and linears[-1].out_features == 2
    assert nb.parameter_count(model) == expected_parameters(depth)


def test_ten_layers_reproduce_the_article():
    assert expected_parameters(10) == ARTICLE_PARAMS_10_LAYERS
    assert nb.parameter_count(nb.create_model(10)) == ARTICLE_PARAMS_10_LAYERS


def test_step_flops_is_six_per_weight_per_point():
    # depth 2: weights 2*4 + 4*2 = 16
    assert nb.step_flops(2, batch_size=100) == 6 * 100 * 16
    assert nb.step_flops(10, batch_size=10) * 10 == nb.step_flops(10, batch_size=100)


# --- data ---------------------------------------------------------------------------------------------------

def test_article_data_has_only_one_point_in_eight_inside():
    points, labels = nb.generate_disc_set_article(200_000, torch.Generator().manual_seed(1))
    assert points.min() >= 0 and points.max() <= 1
    inside = labels.float().mean().item()
    assert abs(inside - 1 / 8) < 0.005, inside
    assert torch.equal(labels.bool(), points.pow(2).sum(dim=1) < 1 / (2 * math.pi))


def test_corrected_data_is_balanced():
    points, labels = nb.generate_disc_set(200_000, torch.Generator().manual_seed(2))
    assert points.min() >= -1 and points.max() <= 1 and points.min() < -0.99
    inside = labels.float().mean().item()
    assert abs(inside - 0.5) < 0.005, inside
    assert set(labels.unique().tolist()) == {0, 1}


def test_normalize_gives_zero_mean_unit_std():
    points, _ = nb.generate_disc_set_article(5000, torch.Generator().manual_seed(3))
    normalized = nb.normalize(points)
    assert abs(normalized.mean().item()) < 1e-5
    assert abs(normalized.std().item() - 1) < 1e-5


# --- crossover ----------------------------------------------------------------------------------------------

def test_crossover_once_between_samples():
    # log10(gpu/cpu) goes from +1 to -1 between 100 and 10,000 parameters: halfway in log scale is 1,000
    assert nb.find_crossovers([1e2, 1e4], [1.0, 100.0], [10.0, 10.0]) == pytest.approx([1e3])
    # a longer curve: the ratio goes from 5 to 0.5 between 100 and 1,000 parameters
    crossings = nb.find_crossovers([10, 100, 1000, 10000], [1, 1, 10, 100], [5, 5, 5, 5])
    assert crossings == pytest.approx([10 ** (2 + math.log10(5))])


def test_crossover_never():
    assert nb.find_crossovers([10, 100, 1000], [1, 2, 3], [5, 6, 7]) == []  # the GPU is always slower
    assert nb.find_crossovers([10, 100, 1000], [5, 6, 7], [1, 2, 3]) == []  # the GPU is always faster


def test_crossover_twice():
    crossings = nb.find_crossovers([1e1, 1e2, 1e3, 1e4, 1e5], [1, 1, 1, 1, 1], [2, 0.5, 0.5, 0.5, 2])
    assert crossings == pytest.approx([10**1.5, 10**4.5])


def test_crossover_exactly_at_a_sample_is_counted_once():
    assert nb.find_crossovers([10, 100, 1000], [1, 1, 1], [2, 1, 0.5]) == pytest.approx([100])


# --- cost model ---------------------------------------------------------------------------------------------

DEPTHS = range(2, 13)


def synthetic_step_seconds(overhead_s, flop_per_s, noise=0.0, seed=0):
    launches = np.array([nb.launches_per_step(depth) for depth in DEPTHS], dtype=float)
    flops = np.array([nb.step_flops(depth) for depth in DEPTHS], dtype=float)
    seconds = launches * overhead_s + flops / flop_per_s
    seconds *= 1 + noise * np.random.default_rng(seed).uniform(-1, 1, len(seconds))
    return launches, flops, seconds


@pytest.mark.parametrize("overhead_s, flop_per_s", [(40e-6, 30e9), (8e-6, 10e12), (1e-6, 1e8)])
def test_cost_model_fit_recovers_known_parameters(overhead_s, flop_per_s):
    fitted_overhead, fitted_throughput = nb.fit_cost_model(*synthetic_step_seconds(overhead_s, flop_per_s))
    assert fitted_overhead == pytest.approx(overhead_s, rel=1e-6)
    assert fitted_throughput == pytest.approx(flop_per_s, rel=1e-6)


def test_cost_model_fit_tolerates_noise():
    fitted_overhead, fitted_throughput = nb.fit_cost_model(*synthetic_step_seconds(40e-6, 30e9, noise=0.05))
    assert fitted_overhead == pytest.approx(40e-6, rel=0.1)
    assert fitted_throughput == pytest.approx(30e9, rel=0.1)


def test_cost_model_fit_with_no_arithmetic_term_never_goes_negative():
    launches, flops, _ = synthetic_step_seconds(40e-6, 30e9)
    seconds = launches * 40e-6 * (1 + 0.02 * np.cos(np.arange(len(launches))))  # all overhead, a little noise
    fitted_overhead, fitted_throughput = nb.fit_cost_model(launches, flops, seconds)
    assert fitted_overhead == pytest.approx(40e-6, rel=0.05)
    assert fitted_throughput > 1e14  # no arithmetic cost to speak of (possibly infinite), never negative


def test_break_even_makes_both_devices_equally_fast():
    cpu, gpu = (40e-6, 30e9), (80e-6, 10e12)
    for overlap in (False, True):
        flops_per_launch = nb.break_even_flops_per_launch(*cpu, *gpu, overlap_b=overlap)
        launches = 100
        cpu_s = nb.predict_step_seconds(launches, launches * flops_per_launch, *cpu)
        gpu_s = nb.predict_step_seconds(launches, launches * flops_per_launch, *gpu, overlap)
        assert cpu_s == pytest.approx(gpu_s)
        # slower and costlier: never; cheaper and faster: from the start
        assert nb.break_even_flops_per_launch(40e-6, 30e9, 80e-6, 10e9, overlap_b=overlap) == math.inf
        assert nb.break_even_flops_per_launch(40e-6, 30e9, 20e-6, 10e12, overlap_b=overlap) == 0.0


# --- on a GPU launches and arithmetic overlap, so a step costs the larger of the two ------

GPU = (10e-6, 8e12)  # made up: 10 µs per launch, 8 TFLOP/s
CPU = (5e-6, 100e9)  # made up: 5 µs per launch, 100 GFLOP/s


def test_which_devices_overlap_launches_and_arithmetic():
    assert not nb.launch_and_arithmetic_overlap(torch.device("cpu"))
    assert nb.launch_and_arithmetic_overlap(torch.device("cuda"))
    assert nb.launch_and_arithmetic_overlap("mps")


def test_gpu_step_costs_the_larger_of_launches_and_arithmetic():
    # 50 launches: 500 µs of launch overhead. 1e9 FLOPs at 8 TFLOP/s: 125 µs. The step: 500 µs.
    assert nb.predict_step_seconds(50, 1e9, *GPU, overlap=True) == pytest.approx(500e-6)
    assert nb.predict_step_seconds(50, 1e10, *GPU, overlap=True) == pytest.approx(1.25e-3)
    assert nb.predict_step_seconds(50, 1e9, *GPU) == pytest.approx(625e-6)  # the CPU's sum
    assert nb.predict_step_seconds(50, 1e9, *CPU) == pytest.approx(250e-6 + 10e-3)


def test_break_even_with_an_overlapping_gpu():
    # The GPU is launch-bound near the break-even: it wins once the CPU's time per launch exceeds
    # 10 µs, i.e. 5 µs of CPU arithmetic = 500,000 FLOPs at 100 GFLOP/s.
    flops = nb.break_even_flops_per_launch(*CPU, *GPU)
    assert flops == pytest.approx(500_000, rel=1e-9)
    adding = nb.break_even_flops_per_launch(*CPU, *GPU, overlap_b=False)  # both add their costs
    assert adding == pytest.approx(5e-6 / (1 / 100e9 - 1 / 8e12))
    assert abs(adding - flops) > 5000
    for factor, gpu_faster in [(0.9, False), (1.1, True), (100, True), (1e4, True)]:
        cpu_s = nb.predict_step_seconds(20, 20 * factor * flops, *CPU)
        gpu_s = nb.predict_step_seconds(20, 20 * factor * flops, *GPU, overlap=True)
        assert (gpu_s < cpu_s) == gpu_faster, factor


def test_break_even_in_other_cases():
    # A device with cheaper launches (1 µs) and a higher throughput than the CPU: faster from the start.
    assert nb.break_even_flops_per_launch(5e-6, 1e11, 1e-6, 2e11) == 0.0
    # If the CPU overlapped as well, its time per launch would be max(5 µs, f / 1e11), which
    # reaches the GPU's 10 µs at f = 1,000,000 FLOPs.
    assert nb.break_even_flops_per_launch(*CPU, *GPU, overlap_a=True) == pytest.approx(1e6)


def synthetic_overlapping_seconds(overhead_s, flop_per_s, launches, flops):
    return np.maximum(np.multiply(launches, overhead_s), np.divide(flops, flop_per_s))


LAUNCHES = [18, 34, 50, 66, 82, 98]
FLOPS = [1e5, 1e7, 1e8, 1e9, 1e10, 1e11]


@pytest.mark.parametrize("overhead_s, flop_per_s", [GPU, (20e-6, 2e12), (4e-6, 3e12)])
def test_overlapping_fit_recovers_known_parameters(overhead_s, flop_per_s):
    seconds = synthetic_overlapping_seconds(overhead_s, flop_per_s, LAUNCHES, FLOPS)
    launch_bound = np.multiply(LAUNCHES, overhead_s) >= np.divide(FLOPS, flop_per_s)
    assert 1 < launch_bound.sum() < len(LAUNCHES) - 1  # both regimes in the data
    fitted_overhead, fitted_throughput = nb.fit_cost_model(LAUNCHES, FLOPS, seconds, overlap=True)
    assert fitted_overhead == pytest.approx(overhead_s, rel=1e-6)
    assert fitted_throughput == pytest.approx(flop_per_s, rel=1e-6)
    summed = nb.fit_cost_model(LAUNCHES, FLOPS, seconds)  # the CPU's model gets them wrong
    assert (summed[0] != pytest.approx(overhead_s, rel=0.05)
            or summed[1] != pytest.approx(flop_per_s, rel=0.05))


def test_overlapping_fit_tolerates_noise():
    seconds = synthetic_overlapping_seconds(*GPU, LAUNCHES, FLOPS)
    seconds = seconds * (1 + 0.05 * np.random.default_rng(0).uniform(-1, 1, len(seconds)))
    fitted_overhead, fitted_throughput = nb.fit_cost_model(LAUNCHES, FLOPS, seconds, overlap=True)
    assert fitted_overhead == pytest.approx(GPU[0], rel=0.1)
    assert fitted_throughput == pytest.approx(GPU[1], rel=0.1)


def test_overlapping_fit_when_every_model_is_launch_bound():
    # The notebook's sweep on a GPU with 10 µs launches and 8 TFLOP/s: every depth is launch-bound,
    # so the data say nothing about the throughput. The fit says so: no arithmetic term at all.
    launches = [nb.launches_per_step(depth) for depth in DEPTHS]
    flops = [nb.step_flops(depth) for depth in DEPTHS]
    seconds = synthetic_overlapping_seconds(*GPU, launches, flops)
    assert np.allclose(seconds, np.multiply(launches, GPU[0]))
    fitted_overhead, fitted_throughput = nb.fit_cost_model(launches, flops, seconds, overlap=True)
    assert fitted_overhead == pytest.approx(GPU[0], rel=1e-9)
    assert fitted_throughput == math.inf


# --- why deep models do not learn ---------------------------------------------------------------------------

def test_default_init_makes_the_signal_vanish_and_he_init_keeps_it():
    points, _ = nb.generate_disc_set(1000, torch.Generator().manual_seed(0))
    inputs = nb.normalize(points)
    torch.manual_seed(0)
    default = nb.layer_report(nb.create_model(10), inputs)
    torch.manual_seed(0)
    he = nb.layer_report(nb.he_initialize(nb.create_model(10)), inputs)
    assert default.spread.iloc[-1] < 1e-3 < he.spread.iloc[-1]
    assert default.dead_pct.iloc[3:9].mean() > 25  # deep layers: many units output 0 for every point


# --- saved results ------------------------------------------------------------------------------------------

def test_results_filename_and_loading(tmp_path):
    name = nb.results_filename("cpu", "Alice's Laptop (8 cores)", "2026-01-31")
    assert name == "04_disc_timings_cpu_alice-s-laptop-8-cores_2026-01-31.csv"
    good = pd.DataFrame({"params": [22, 70], "s_per_100_epochs": [1.0, 1.1], "name": "x86_64 CPU (AVX2)",
                         "machine": "alice", "date": "2026-01-31"})
    good.to_csv(tmp_path / name, index=False)
    pd.DataFrame({"params": [1]}).to_csv(tmp_path / "04_disc_timings_missing_columns.csv", index=False)
    (tmp_path / "04_disc_timings_empty.csv").write_text("")
    tables = nb.load_earlier_results([tmp_path, tmp_path / "absent"])
    assert [label for label, _ in tables] == ["x86_64 CPU (AVX2) · alice · 2026-01-31 (saved)"]
    assert tables[0][1].params.tolist() == [22, 70]


def test_reference_results_are_a_full_size_cpu_run():
    paths = sorted((REPO / "data" / "reference").glob("04_disc_timings_*.csv"))
    assert len(paths) == 1, paths
    assert paths[0].name.startswith("04_disc_timings_cpu_")
    table = pd.read_csv(paths[0])
    assert set(table.device) == {"cpu"}  # only what was measured: no GPU figures
    assert table.depth.tolist() == list(range(2, 13))
    assert (table.epochs == 100).all() and (table.batch_size == 100).all()
    assert table.params.tolist() == [expected_parameters(depth) for depth in range(2, 13)]
    assert (table.s_per_100_epochs > 0).all() and table.accuracy_pct.between(0, 100).all()


# --- naive versus synchronized timing of work long enough to show the difference ----------

def test_sync_demo_uses_a_large_product_on_a_gpu():
    assert nb.sync_demo_size(torch.device("cpu")) < nb.sync_demo_size(torch.device("cuda")) == 4096
    assert nb.sync_demo_size("mps") >= 4096
    assert 2 * nb.sync_demo_size("cuda") ** 3 > 1e11  # over 100 GFLOPs: milliseconds on any GPU


def test_sync_demo_reads_its_own_numbers():
    gpu = nb.describe_sync_demo("cuda", naive_s=20e-6, synchronized_s=25e-3)
    assert "1,250 times too small" in gpu and "queued" in gpu
    short = nb.describe_sync_demo("cuda", naive_s=20e-6, synchronized_s=25e-6)
    assert "too small" not in short and "25%" in short
    cpu = nb.describe_sync_demo("cpu", naive_s=30e-3, synchronized_s=31e-3)
    assert "agree within 3%" in cpu and "synchronous" in cpu
    busy = nb.describe_sync_demo("cpu", naive_s=30e-3, synchronized_s=60e-3)
    assert "agree" not in busy and "noise" in busy


# --- Timer synchronizes MPS only from PyTorch 2.9: the notebook's timed statement synchronizes itself ---

@pytest.mark.parametrize("accelerator", ["mps", "xpu"])
def test_benchmark_timer_synchronizes_an_accelerator_after_every_run(monkeypatch, accelerator):
    events = []
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda device=None: events.append("sync"))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: events.append("sync"))  # shared cell, MPS
    timer = nb.benchmark_timer(lambda: events.append("run"), torch.device(accelerator))
    timer.timeit(number=5)
    runs = [index for index, event in enumerate(events) if event == "run"]
    assert len(runs) >= 5
    # every run is followed by a synchronize before anything else (on a machine with an accelerator,
    # Timer's own clock may synchronize as well: extra "sync" events are fine)
    assert all(index + 1 < len(events) and events[index + 1] == "sync" for index in runs), events


def test_benchmark_timer_on_the_cpu_measures_the_work(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda device=None: synced.append(device))
    measurement = nb.benchmark_timer(lambda: time.sleep(0.002), torch.device("cpu")).timeit(number=3)
    assert measurement.median >= 0.002 and synced == []  # the CPU needs no synchronize


# --- the range of FLOPs per operation comes from the formulas, not from the prose ----------

def test_flops_per_launch_sentence_matches_the_formulas():
    depths = list(range(2, 13))
    per_launch = [nb.step_flops(d) / nb.launches_per_step(d) for d in depths]
    sentence = nb.describe_flops_per_launch(depths, per_launch)
    assert f"{per_launch[0]:,.0f}" in sentence and f"{per_launch[-1]:,.0f}" in sentence
    assert per_launch[0] == pytest.approx(9600 / 18)  # 533: not "about a hundred"
    assert per_launch[-1] > 1e7  # tens of millions: not "millions"
    growth = (per_launch[-1] / per_launch[0]) ** (1 / 10)
    assert f"about {growth:.1f} times" in sentence


def test_prose_does_not_state_the_wrong_flops_range():
    markdown = " ".join(cell.source for cell in read(notebook_path("04")).cells
                        if cell.cell_type == "markdown")
    assert "about a hundred for the 2-layer model" not in markdown


# --- the tables a learner reads are rounded ------------------------------------------------

def test_readable_rounds_floats_to_three_significant_digits():
    table = pd.DataFrame({"name": ["a", "b", "c"], "params": [22, 70, 11_201_190],
                          "dead_pct": [37.50000059604645, 0.0, math.nan],
                          "spread": [0.27203512, 0.000105861, 12345.678]})
    shown = nb.readable(table)
    assert shown.dead_pct.tolist()[:2] == [37.5, 0.0] and math.isnan(shown.dead_pct.iloc[2])
    assert shown.spread.tolist() == [0.272, 0.000106, 12300.0]
    assert shown.params.tolist() == [22, 70, 11_201_190] and shown.name.tolist() == ["a", "b", "c"]
    assert "37.500000" not in shown.to_string()
    columns = nb.readable(pd.DataFrame({10: [1.23456], 100: [0.5]}))  # number names, as in a pivot
    assert columns[10].tolist() == [1.23]


def test_layer_report_prints_rounded_percentages():
    points, _ = nb.generate_disc_set(1000, torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    report = nb.layer_report(nb.create_model(10), nb.normalize(points))
    dead = report.dead_pct.dropna()
    assert (dead == dead.round(1)).all(), dead.tolist()


# --- every code line fits in 100 characters ---------------------------------------------

# --- the cells print their own reading of their own numbers ---------------------------------

def test_cold_warm_sentence_reads_the_numbers():
    cold = nb.describe_cold_warm("cuda", cold_s=0.9, warm_s=0.03)
    assert "900 ms" in cold and "30.0 times" in cold and "start-up" in cold
    cpu = nb.describe_cold_warm("cpu", cold_s=0.047, warm_s=0.026)
    assert "47 ms" in cpu and "1.8 times" in cpu and "On a GPU" in cpu
    again = nb.describe_cold_warm("cpu", cold_s=0.026, warm_s=0.026)
    assert "no real start-up cost" in again


def test_timing_curve_sentence_finds_the_flat_part_and_the_growth():
    params = [22, 70, 230, 806, 2982, 11430, 44710, 176806, 703142, 2804390, 11201190]
    seconds = [0.63, 0.74, 0.8, 0.9, 1.0, 1.2, 1.9, 3.5, 10.0, 25.0, 101.0]  # like the reference run
    sentence = nb.describe_timing_curve("cpu", params, seconds)
    assert "from 22 to 11,430 parameters (520 times more)" in sentence
    assert "4.0 times the parameters, 4.0 times the time" in sentence and "nearly in proportion" in sentence
    flat = nb.describe_timing_curve("cuda", params, [1.0] * 10 + [1.5])
    assert "over the whole range" in flat
    steep = nb.describe_timing_curve("cpu", [10, 100, 1000], [1.0, 5.0, 9.0])
    assert "grows from the smallest model on" in steep and "less than in proportion" in steep


def test_accuracy_sentence_separates_learned_and_stuck_models():
    sentence = nb.describe_accuracy([2, 3, 9, 10], [97.1, 92.0, 52.1, 51.5], majority_pct=52.1)
    assert sentence.startswith("The models with 2, 3 layers learned (92.0 to 97.1 % right)")
    assert "9, 10 layers did not (at most 52.1 %" in sentence
    assert "did not" not in nb.describe_accuracy([2, 4], [80.0, 90.0], majority_pct=52.1)


def test_fix_sentence_names_the_best_and_the_stuck():
    sentence = nb.describe_fixes({"article": 52.1, "smaller step": 52.0, "He init": 97.0}, 52.1)
    assert sentence.startswith("Best: He init, 97.0 % right.")
    assert "article; smaller step" in sentence


def test_layer_report_sentence():
    report = pd.DataFrame({"spread": [0.3, 0.1, 0.03, 0.01, 0.003], "dead_pct": [0, 40, 45, 50, math.nan]})
    sentence = nb.describe_layer_report(report)
    assert "factor of 3.2 per layer" in sentence  # (0.3 / 0.003) ** (1 / 4) and "0.003" in sentence
    assert "layers 3 to 4, 45 to 50 %" in sentence


def test_fit_sentence_compares_with_step_4():
    cpu = nb.describe_fit("cpu", False, (24e-6, 68e9), (26e-6, 133e9))
    assert "24.0 µs" in cpu and "0.9 times the 26.0 µs" in cpu and "0.51 times" in cpu
    assert "100 rows" in cpu
    gpu = nb.describe_fit("cuda", True, (10e-6, math.inf), (12e-6, 8e12))
    assert "larger of the two" in gpu and "launch-bound" in gpu and "GFLOP" not in gpu


def test_break_even_sentence():
    assert "500,000 FLOPs" in nb.describe_break_even(CPU, GPU, "cuda")
    assert "every model" in nb.describe_break_even(CPU, (1e-6, 8e12), "cuda")
    assert "never catches up" in nb.describe_break_even(CPU, (10e-6, 1e10), "cuda")
    cpu_only = nb.describe_break_even(CPU)
    assert "100,000 FLOPs per operation" in cpu_only  # 1 µs × 100 GFLOP/s


def test_batch_sentence():
    slowdown = pd.Series([7.6, 5.0, 1.3], index=[2, 6, 10])
    sentence = nb.describe_batch_effect("cpu", slowdown)
    assert "7.6 times" in sentence and "2-layer" in sentence and "1.3 times for the 10-layer" in sentence
    assert "other programs" not in sentence
    assert "other programs" in nb.describe_batch_effect("cpu", pd.Series([151.0, 4.9], index=[2, 6]))


# --- the notebook's shape: a short core ending in its Summary, then Going deeper ------------

def _cells():
    return read(notebook_path("04")).cells


def test_visible_code_is_short():
    visible = [cell.source for cell in _cells()
               if cell.cell_type == "code" and not cell.source.startswith("#@title")]
    lines = [sum(1 for line in source.splitlines() if line.strip()) for source in visible]
    assert sum(lines) <= 250, sum(lines)
    assert max(lines) <= 16, max(lines)


BANNED = ["here, on a", "here it printed", "on this machine", "here they say", "here both say",
          "measured here", "in a full run on this", "here, without", "on the cpu here",
          "at full size here", "in the full-size run here"]


def test_prose_does_not_say_what_here_printed():
    for cell in _cells():
        if cell.cell_type == "markdown":
            for phrase in BANNED:
                assert phrase not in cell.source.lower(), (phrase, cell.source[:80])


# --- what the core keeps and what waits in Going deeper -------------------------------------------------

def test_the_timer_anecdote_and_version_trivia_moved_to_going_deeper():
    notebook = read(notebook_path("04"))  # the budget itself: test_learner_first.py, for every notebook
    core = core_markdown(notebook)
    for anecdote in ("0.04 and 1.9 s", "from PyTorch 2.9 on", "foreach"):  # moved to Going deeper
        assert anecdote not in core, anecdote
    deeper = " ".join(cell.source for cell in _cells() if cell.cell_type == "markdown")
    assert "0.04 and 1.9 s" in deeper and "from PyTorch 2.9 on" in deeper


# --- the GPU branches, run on the CPU with stand-ins shaped like the real torch API ---------------

@pytest.mark.gpu_branch("04", "devices_to_compare: device.type != 'cpu'")
def test_devices_to_compare_holds_the_cpu_and_the_accelerator():
    cpu = torch.device("cpu")
    assert nb.devices_to_compare(cpu) == [cpu]
    for accelerator in (torch.device("cuda"), torch.device("mps"), torch.device("cuda", 1)):
        assert nb.devices_to_compare(accelerator) == [cpu, accelerator]


@pytest.mark.gpu_branch("04", "describe_device: device.type == 'cuda'")
@pytest.mark.gpu_branch("04", "describe_device: device.type == 'cpu'")
def test_describe_device_names_a_cuda_gpu_by_its_name(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: asked.append(device) or "Tesla T4")
    assert nb.describe_device(torch.device("cuda")) == "Tesla T4" and asked == [torch.device("cuda")]
    assert nb.describe_device(torch.device("cpu")).endswith(f"CPU ({torch.backends.cpu.get_cpu_capability()})")
    assert nb.describe_device(torch.device("mps")) == "mps" and len(asked) == 1


# --- the busy-machine warning judges what the notebook itself does not cause --------------------

@pytest.mark.parametrize("second_slowest, busy", [(1.49, False), (1.5, True), (3.0, True)])
def test_machine_is_busy_when_the_same_epoch_varies_by_half_or_more(second_slowest, busy):
    # seven repeats of the same epoch; the slowest (one pause) is left out whatever it is
    assert nb.machine_is_busy([1.0, 1.1, 1.0, 1.2, 1.05, second_slowest, 9.0]) is busy
    assert nb.machine_is_busy([1.0, 1.0, second_slowest]) is False  # one slow run alone is no pattern


def run_expect_sweep(monkeypatch, epoch_seconds, load):
    """Run the cell before the sweep on a 2-core machine whose 1-minute load is `load`, with time_it standing in
    for the repeated epochs (it returns `epoch_seconds` one by one); returns what the cell printed."""
    import os
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    timings = iter(epoch_seconds)
    calls = []

    def time_it(fn, device, repeats=3, warmup=1):
        calls.append((torch.device(device).type, repeats, warmup))
        return next(timings)

    machine = pd.DataFrame({"device": ["cpu"], "training_overhead_us": [20.0],
                            "matmul_gflop_per_s": [50.0]}).set_index("device")
    points, labels = nb.generate_disc_set(100, torch.Generator().manual_seed(0))
    space = {**vars(load_helpers("04")), "DEPTHS": [2, 4], "EPOCHS": 5, "N_POINTS": 1000, "BATCH_SIZE": 100,
             "DEVICES": [torch.device("cpu")], "machine": machine, "train_input": nb.normalize(points),
             "train_target": labels, "time_it": time_it}
    out = run_cell("04", "expect-sweep", space)
    assert calls == [("cpu", 1, 1)] + [("cpu", 1, 0)] * 6  # seven epochs, each timed alone, one warm-up
    return out


def test_a_colab_load_of_two_on_two_cores_with_steady_timings_is_not_called_busy(monkeypatch):
    """On Colab's 2 vCPUs the notebook's own threads bring the 1-minute load to about 2: no warning for that."""
    out = run_expect_sweep(monkeypatch, [0.010, 0.011, 0.010, 0.012, 0.010, 0.011, 0.030], load=2.0)
    assert out.startswith("Expected: about ") and "10.0 to 30.0 ms." in out and "compete" not in out


def test_timings_that_vary_by_half_or_more_are_called_busy_whatever_the_load(monkeypatch):
    out = run_expect_sweep(monkeypatch, [0.010, 0.015, 0.010, 0.012, 0.010, 0.011, 0.030], load=0.1)
    assert out.rstrip().endswith("other programs compete for the cores, expect inflated and noisy times.")


def notebook_cell(cell_id):
    (source,) = [cell.source for cell in _cells() if cell.get("id") == cell_id]
    return source


def notebook_namespace(**values):
    """A fresh copy of the notebook's helpers, in their own namespace, plus what earlier cells set."""
    space = load_helpers("04").readable.__globals__  # the dict the helpers read their globals from
    space.update(values)
    return space


def run_cells(space, *cell_ids):
    for cell_id in cell_ids:
        exec(compile(notebook_cell(cell_id), f"<notebook 04, cell {cell_id}>", "exec"), space)


class CudaCalls:
    """torch.cuda as a CUDA machine shows it: synchronize and get_device_name, each call recorded."""

    def __init__(self):
        self.synchronized = []

    def synchronize(self, device=None):
        self.synchronized.append(device)

    def get_device_name(self, device=None):
        return "Tesla T4"


class TorchWithCuda:
    """The torch module, but with the CudaCalls above, and tensors asked for on "cuda" made on the CPU."""

    def __init__(self, cuda):
        self.cuda = cuda

    def __getattr__(self, name):
        return getattr(torch, name)

    def randn(self, *size, device=None):
        return torch.randn(*size)


def test_the_synchronize_demo_on_a_cuda_gpu_synchronizes_only_the_right_timing(capsys):
    cuda = CudaCalls()
    gpu = torch.device("cuda")
    space = notebook_namespace(DEVICES=[gpu], display=print)
    space["torch"] = TorchWithCuda(cuda)  # what the cell's helpers (synchronize, time_it) call
    space["sync_demo_size"] = lambda device: 64  # the stand-in: a CPU multiplies 4096² matrices slowly
    run_cells(space, "sync-demo")
    # the naive timing calls nothing; then one synchronize before the correct timing, and time_it's two per
    # timed run (3 runs): on a GPU the clock is read only after the queued work is done
    assert cuda.synchronized == [gpu] * 7
    assert space["sync_rows"][0]["device"] == "cuda" and space["sync_rows"][0]["synchronized_ms"] > 0
    assert capsys.readouterr().out.startswith("cuda: ")  # describe_sync_demo's GPU sentence


# A T4 run of the sweep, played back: step times made by the cost model from numbers like a Colab T4's
# (launch-bound for every depth of the sweep) beside its 2-core CPU.
T4_CPU = (20e-6, 50e9)  # seconds per operation, FLOP/s: the CPU adds its two costs
T4_GPU = (40e-6, 8e12)  # the GPU overlaps them


def played_back_results(depths=range(2, 13), batch_sizes=(100,), epochs=100):
    rows = []
    for device, (overhead, throughput), overlap in (("cpu", T4_CPU, False), ("cuda", T4_GPU, True)):
        for batch_size in batch_sizes:
            for depth in depths:
                step_s = float(nb.predict_step_seconds(nb.launches_per_step(depth),
                                                       nb.step_flops(depth, batch_size),
                                                       overhead, throughput, overlap))
                epoch_s = math.ceil(1000 / batch_size) * step_s
                rows.append({"device": device, "name": "Tesla T4" if overlap else "x86_64 CPU (AVX2)",
                             "depth": depth, "params": expected_parameters(depth),
                             "batch_size": batch_size, "epochs": epochs, "epoch_s": epoch_s,
                             "s_per_100_epochs": 100 * epoch_s, "accuracy_pct": 97.0 if depth < 7 else 50.5,
                             "gflop_per_s": 1.0})
    return pd.DataFrame(rows)


@pytest.mark.gpu_branch("04", "cell cell-34: len(DEVICES) > 1")
@pytest.mark.gpu_branch("04", "cell crossovers: len(DEVICES) > 1")
@pytest.mark.gpu_branch("04", "cell break-even: device.type != 'cpu'")
@pytest.mark.gpu_branch("04", "cell break-even: gpu_fit is not None")
@pytest.mark.gpu_branch("04", "cell cell-55: len(DEVICES) > 1")
def test_the_cpu_against_gpu_cells_of_a_t4_run(tmp_path, monkeypatch, capsys):
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    shown = []
    machine = pd.DataFrame({"device": ["cpu", "cuda"], "training_overhead_us": [20.0, 40.0],
                            "matmul_gflop_per_s": [50.0, 8000.0]}).set_index("device")
    batch_results = played_back_results(depths=[2, 6, 10, 11], batch_sizes=(10, 100, 1000), epochs=5)
    batch_results["model_epoch_s"] = batch_results.epoch_s
    space = notebook_namespace(device=gpu, DEVICES=[cpu, gpu], DEPTHS=list(range(2, 13)), FAST=False,
                               DATA_DIR=tmp_path, results=played_back_results(), machine=machine,
                               batch_results=batch_results, display=shown.append,
                               train_target=torch.tensor([0, 1] * 500))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*non-interactive", category=UserWarning)  # plt.show on Agg
        run_cells(space, "crossovers", "cell-36", "cell-34", "curve-read", "cell-38", "accuracy-read", "fit",
                  "cell-48", "break-even", "cell-55")
    out = capsys.readouterr().out

    comparison = shown[0]
    assert list(comparison.columns) == ["params", "cpu_s", "gpu_s", "speedup"]
    assert comparison.speedup.iloc[0] < 1 < comparison.speedup.iloc[-1]  # the GPU loses small, wins large
    (crossover,) = space["crossovers"]
    assert expected_parameters(7) < crossover < expected_parameters(9)
    assert f"The curves cross at: {crossover:,.0f} parameters" in out

    saved = sorted(path.name for path in tmp_path.glob("04_disc_timings_*.csv"))
    assert [name.split("_")[3] for name in saved] == ["cpu", "cuda"]
    assert set(pd.read_csv(next(tmp_path.glob("04_disc_timings_cuda_*.csv"))).device) == {"cuda"}

    assert "cuda (larger of the two): fitted overhead 40.0 µs" in out
    assert "every model of the sweep was launch-bound" in out  # a T4 on this sweep: no arithmetic term
    assert space["fits"]["cuda"][0] == pytest.approx(40e-6) and space["fits"]["cuda"][1] == math.inf
    assert space["fits"]["cpu"] == pytest.approx(T4_CPU)
    assert f"The fitted models cross at: {crossover:,.0f} parameters | measured: {crossover:,.0f}" in out
    assert "Break-even: cuda wins once an operation carries more than 1,000,000 FLOPs" in out
    assert "cuda: The models with 2, 3, 4, 5, 6 layers learned" in out
    for batch_size in (10, 100, 1000):
        assert f"Batches of {batch_size}: the CPU and GPU curves cross at" in out
    crossings = nb.batch_crossovers(batch_results, "cuda")
    assert crossings[10][0] > crossings[100][0] > crossings[1000][0]  # smaller batches: a later crossover
    assert all(len(found) == 1 for found in crossings.values())
    assert "cuda: with batches of 10 an epoch took" in out


def test_side_by_side_and_the_crossovers_of_the_fitted_models():
    results = played_back_results()
    comparison = nb.side_by_side(results, "cuda")
    assert comparison.index.tolist() == list(range(2, 13))
    assert (comparison.speedup == comparison.cpu_s / comparison.gpu_s).all()
    measured = nb.find_crossovers(comparison.params, comparison.cpu_s, comparison.gpu_s)
    fitted = nb.fitted_crossovers(list(range(2, 13)), comparison.params, T4_CPU, T4_GPU)
    assert fitted == pytest.approx(measured) and len(fitted) == 1
    assert nb.fitted_crossovers([2, 3], [22, 70], T4_CPU, (1e-6, 8e12)) == []  # faster from the start
    assert nb.describe_points([]) == "no point"
    assert nb.describe_points([703142.4, 1e6]) == "703,142 parameters, 1,000,000 parameters"


@pytest.mark.parametrize("accelerator", ["cuda"])
def test_benchmark_timer_synchronizes_a_cuda_gpu_after_every_run(monkeypatch, accelerator):
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append(("sync", device)))
    timer = nb.benchmark_timer(lambda: events.append("run"), torch.device(accelerator))
    timer.timeit(number=5)
    runs = [index for index, event in enumerate(events) if event == "run"]
    assert len(runs) >= 5
    assert all(events[index + 1] == ("sync", torch.device("cuda")) for index in runs), events


# --- every verdict on both sides of its edge ---------------------------------------------------

@pytest.mark.parametrize("cold_s, start_up", [(1.2, True), (1.19, False)])
def test_cold_warm_verdict_at_its_edge(cold_s, start_up):
    text = nb.describe_cold_warm("cuda", cold_s=cold_s, warm_s=1.0)
    assert ("one-time start-up" in text) == start_up and ("no real start-up" in text) == (not start_up)
    assert "On a GPU" not in text  # only the CPU's sentence says what a GPU would show


@pytest.mark.parametrize("synchronized_s, agree", [(1.24, True), (1.25, False), (0.76, True), (0.75, False)])
def test_cpu_sync_verdict_at_its_edge(synchronized_s, agree):
    text = nb.describe_sync_demo("cpu", naive_s=1.0, synchronized_s=synchronized_s)
    assert ("agree within" in text) == agree and ("noise" in text) == (not agree)


@pytest.mark.parametrize("synchronized_s, too_small", [(2.0, True), (1.99, False)])
def test_gpu_sync_verdict_at_its_edge(synchronized_s, too_small):
    text = nb.describe_sync_demo("cuda", naive_s=1.0, synchronized_s=synchronized_s)
    assert ("times too small" in text) == too_small and ("differ by only" in text) == (not too_small)


@pytest.mark.parametrize("throughput, below", [(8e9, False), (7.99e9, True)])
def test_fit_verdict_at_its_edge(throughput, below):
    text = nb.describe_fit("cpu", False, (20e-6, throughput), (20e-6, 10e9))
    assert ("use the device less well" in text) == below


@pytest.mark.parametrize("accuracy, learned", [(51.0, True), (50.9, False)])
def test_accuracy_verdicts_at_their_edge(accuracy, learned):
    sentence = nb.describe_accuracy([4], [accuracy], majority_pct=50.0)
    assert ("layers learned" in sentence) == learned and ("did not" in sentence) == (not learned)
    fixes = nb.describe_fixes({"He init": accuracy}, majority_pct=50.0)
    assert ("No better than" in fixes) == (not learned)


@pytest.mark.parametrize("worst, warned", [(15.0, False), (15.1, True)])
def test_batch_verdict_at_its_edge(worst, warned):
    text = nb.describe_batch_effect("cpu", pd.Series([worst, 2.0], index=[2, 6]))
    assert ("other programs" in text) == warned


def test_timing_curve_verdicts_at_their_edges():
    at_three = nb.describe_timing_curve("cpu", [10, 100, 1000], [1.0, 3.0, 9.0])
    assert "from 10 to 100 parameters" in at_three  # exactly 3 times the first: still flat
    above = nb.describe_timing_curve("cpu", [10, 100, 1000], [1.0, 3.01, 9.0])
    assert "grows from the smallest model on" in above
    steeper = nb.describe_timing_curve("cpu", [10, 100, 1000], [1.0, 1.0, 10 ** 0.71])
    flatter = nb.describe_timing_curve("cpu", [10, 100, 1000], [1.0, 1.0, 10 ** 0.69])
    assert "nearly in proportion" in steeper and "less than in proportion" in flatter


def test_crossovers_at_the_first_and_the_last_sample():
    assert nb.find_crossovers([10, 100], [1, 1], [1, 2]) == pytest.approx([10])  # equal at the first model
    assert nb.find_crossovers([10, 100], [1, 1], [2, 1]) == pytest.approx([100])  # equal at the last
    assert nb.find_crossovers([10, 100], [1, 1], [2, 1.5]) == []  # close, but never equal


def test_break_even_when_both_throughputs_are_equal():
    # equal throughputs: only the launch overheads differ, whatever the FLOPs per operation
    assert nb.break_even_flops_per_launch(5e-6, 1e11, 10e-6, 1e11, overlap_b=False) == math.inf
    assert nb.break_even_flops_per_launch(5e-6, 1e11, 1e-6, 1e11, overlap_b=False) == 0.0
    assert nb.break_even_flops_per_launch(5e-6, 1e11, 5e-6, 1e11, overlap_b=False) == math.inf  # a tie


def test_break_even_sentence_without_a_gpu_and_without_an_arithmetic_term():
    assert "no arithmetic term" in nb.describe_break_even((20e-6, math.inf))
    assert "50,000 FLOPs per operation" in nb.describe_break_even((20e-6, 50e9))


def test_the_cpu_fit_keeps_the_arithmetic_term_when_launches_explain_nothing():
    launches, flops, _ = synthetic_step_seconds(40e-6, 30e9)
    seconds = flops / 30e9 - 1e-9 * launches  # all arithmetic, and a little less for more launches
    design = np.column_stack([launches / seconds, flops / seconds])
    assert np.linalg.lstsq(design, np.ones_like(seconds), rcond=None)[0][0] < 0  # both terms: a negative one
    overhead, throughput = nb.fit_cost_model(launches, flops, seconds)
    assert overhead == 0.0 and throughput == pytest.approx(30e9, rel=0.1)


def test_earlier_results_with_the_columns_but_no_rows_are_skipped(tmp_path):
    pd.DataFrame(columns=sorted(nb.RESULT_COLUMNS)).to_csv(tmp_path / "04_disc_timings_empty_rows.csv",
                                                          index=False)
    assert nb.load_earlier_results([tmp_path]) == []


# --- the measuring helpers, run for real on the CPU at a tiny size (coverage of every helper) ---------------

def test_the_measuring_helpers_run_on_the_cpu_and_give_plausible_numbers():
    cpu = torch.device("cpu")
    points, labels = nb.generate_disc_set(200, torch.Generator().manual_seed(0))
    inputs = nb.normalize(points)
    row = nb.time_training(2, cpu, inputs, labels, epochs=2, batch_size=50)
    assert row["depth"] == 2 and row["params"] == expected_parameters(2) and row["epochs"] == 2
    assert row["epoch_s"] > 0 and row["s_per_100_epochs"] == pytest.approx(100 * row["epoch_s"])
    assert 0 <= row["accuracy_pct"] <= 100 and row["gflop_per_s"] > 0
    assert 0 < nb.launch_overhead_seconds(cpu, calls=20) < 0.01
    assert 0 < nb.training_overhead_seconds(cpu, inputs, labels, batch_size=50) < 0.01
    assert nb.matmul_flop_per_second(cpu, size=64) > 1e6


@pytest.mark.parametrize("he_init, optimizer, kind", [(False, "sgd", torch.optim.SGD), (True, "adam", torch.optim.Adam)])
def test_make_model_and_optimizer_gives_the_same_start_for_a_seed(he_init, optimizer, kind):
    model, chosen = nb.make_model_and_optimizer(4, "cpu", lr=0.01, optimizer=optimizer, he_init=he_init, seed=3)
    again, _ = nb.make_model_and_optimizer(4, "cpu", lr=0.01, optimizer=optimizer, he_init=he_init, seed=3)
    assert isinstance(chosen, kind) and chosen.param_groups[0]["lr"] == 0.01
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    biases = [layer.bias for layer in model if isinstance(layer, nn.Linear)]
    assert all(bool((bias == 0).all()) for bias in biases) == he_init  # He initialisation zeroes the biases


def test_expected_sweep_seconds_adds_the_cost_model_over_the_depths():
    one = nb.expected_sweep_seconds([4], 10, 1000, 100, *T4_CPU)
    assert one == pytest.approx(10 * 10 * nb.predict_step_seconds(nb.launches_per_step(4), nb.step_flops(4),
                                                                    *T4_CPU))
    both = nb.expected_sweep_seconds([2, 4], 10, 1000, 100, *T4_GPU, overlap=True)
    assert both == pytest.approx(nb.expected_sweep_seconds([2], 10, 1000, 100, *T4_GPU, overlap=True)
                                 + nb.expected_sweep_seconds([4], 10, 1000, 100, *T4_GPU, overlap=True))


def test_plot_timings_draws_this_run_saved_runs_and_each_crossover():
    results = played_back_results()
    current = [("cpu (this run)", results[results.device == "cpu"]),
               ("cuda (this run)", results[results.device == "cuda"])]
    figure = nb.plot_timings(current, [("saved", results[results.device == "cpu"])], [1e5, 2e6])
    axis = figure.axes[0]
    assert [line.get_linestyle() for line in axis.lines[:3]] == ["-", "-", "--"]
    assert len(axis.lines) == 5 and axis.get_xscale() == axis.get_yscale() == "log"  # + two crossover lines
    assert "parameters" in axis.get_xlabel() and "(s, log scale)" in axis.get_ylabel() and axis.get_title()
    import matplotlib.pyplot as plt
    plt.close(figure)


# --- what a CPU cannot show, recorded: every timed epoch of the sweep is synchronized ---------------

def test_time_training_synchronizes_the_device_around_every_timed_epoch(monkeypatch):
    """time_training times with time_it, which synchronizes the device before it starts the clock and after
    each epoch: on a GPU the clock then reads the GPU's time, not Python's. The device's synchronize is
    recorded (on the CPU, where the training really runs, synchronize(cpu) is where a GPU's call would be)."""
    events = []
    space = load_helpers("04").time_training.__globals__
    monkeypatch.setitem(space, "synchronize", lambda device: events.append(("synchronize", torch.device(device))))
    train_epoch = space["train_epoch"]
    monkeypatch.setitem(space, "train_epoch", lambda *args: events.append("epoch") or train_epoch(*args))
    points, labels = nb.generate_disc_set(200, torch.Generator().manual_seed(0))
    row = space["time_training"](2, torch.device("cpu"), nb.normalize(points), labels, epochs=4, batch_size=50)
    cpu = ("synchronize", torch.device("cpu"))
    assert events == ["epoch"] + [cpu, "epoch", cpu] * 3  # the warm-up untimed, then 3 timed epochs
    assert row["epochs"] == 4


# --- the plot right after the sweep; the data bug in Going deeper ---------------------------------

def test_the_sweep_plot_comes_right_after_the_sweep():
    ids = [cell.get("id") for cell in _cells()]
    assert ids[ids.index("sweep") + 1:ids.index("sweep") + 3] == ["crossovers", "cell-36"]
    assert "plot_timings(current, earlier, crossovers)" in notebook_cell("cell-36")
    assert "crossovers = " in notebook_cell("crossovers") and "display(" not in notebook_cell("crossovers")


def test_the_articles_data_bug_is_in_going_deeper_with_two_sentences_in_the_core():
    notebook = read(notebook_path("04"))
    core_ids = {cell.get("id") for cell in core_cells(notebook)}
    assert "cell-07" in core_ids and not {"count-labels", "cell-09"} & core_ids
    assert "def generate_disc_set_article" in notebook_cell("count-labels")
    assert "def generate_disc_set_article" not in "".join(cell.source for cell in core_cells(notebook))
    step1 = next(cell.source for cell in notebook.cells if cell.source.startswith("## Step 1 "))
    assert "1 point in 8" in step1 and "*Going deeper*" in step1


# --- the figures of this run, once, at the end of the core -----------------------------------------

def test_report_figures_gets_the_crossover_and_each_devices_two_numbers():
    reported = []
    machine = pd.DataFrame({"device": ["cpu", "cuda"], "training_overhead_us": [20.04, 40.2],
                            "bare_overhead_us": [5.001, 9.0], "matmul_gflop_per_s": [50.04, 8000.0]}).set_index("device")
    sync_rows = [{"device": "cpu", "naive_ms": 30.0, "synchronized_ms": 31.0},
                 {"device": "cuda", "naive_ms": 0.02, "synchronized_ms": 25.0}]
    space = notebook_namespace(DEVICES=[torch.device("cpu"), torch.device("cuda")], machine=machine,
                               sync_rows=sync_rows, crossovers=[806123.4, 2e6], sweep_s=61.23, EPOCHS=100,
                               report_figures=lambda fallback=None, **figures: reported.append((fallback, figures)))
    run_cells(space, "figures")
    assert reported == [(None, {
        "crossover_params": 806123, "crossovers": 2, "sweep_s": 61.2, "epochs": 100,
        "cpu_launch_overhead_us": 20.04, "cpu_bare_overhead_us": 5.0, "cpu_matmul_gflop_per_s": 50.0,
        "cuda_launch_overhead_us": 40.2, "cuda_bare_overhead_us": 9.0, "cuda_matmul_gflop_per_s": 8000.0,
        "cpu_synchronized_over_naive": 1.0, "cuda_synchronized_over_naive": 1250.0})]
    space.update(crossovers=[], DEVICES=[torch.device("cpu")], sync_rows=sync_rows[:1])
    run_cells(space, "figures")
    assert reported[1][1]["crossover_params"] is None and "cuda_launch_overhead_us" not in reported[1][1]


def test_report_figures_is_called_once_as_the_last_cell_of_the_core():
    notebook = read(notebook_path("04"))
    calls = [cell.get("id") for cell in notebook.cells if "report_figures(" in cell.source
             and not cell.source.startswith("#@title Shared setup")]
    assert calls == ["figures"] and core_cells(notebook)[-1].get("id") == "figures"
