"""Notebook 04's helpers called with made-up inputs, and run for real on the CPU where they time: the
article's models and data, the naive timer, the training timer, the crossover and break-even, the cost
model's fits on synthetic timings, the sentences and verdicts on each side of their edges, the layer
report, the busy-machine check and rounding the tables. The shared timing function time_it is tested once,
in tests/shared_cells/test_shared_setup.py."""
import ast
import math
import time

import numpy as np
import pandas as pd
import pytest
import torch
from IPython.display import Code
from torch import nn

from support.notebook_04 import CPU, GPU, expected_parameters, helpers_and
from support.notebook_code import REPO, cell_source, load_helpers, run_cell

nb = load_helpers("04")


ARTICLE_PARAMS_10_LAYERS = 703_142  # the figure the article gives for its 10-layer model


# --- models and data ----------------------------------------------------------------------------

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
    assert nb.step_flops(2, batch_size=100) == 6 * 100 * 16  # depth 2: weights 2*4 + 4*2 = 16
    assert nb.step_flops(10, batch_size=10) * 10 == nb.step_flops(10, batch_size=100)


def test_article_data_has_only_one_point_in_eight_inside():
    points, labels = nb.generate_disc_set_article(200_000, torch.Generator().manual_seed(1))
    assert points.min() >= 0 and points.max() <= 1
    assert abs(labels.float().mean().item() - 1 / 8) < 0.005
    assert torch.equal(labels.bool(), points.pow(2).sum(dim=1) < 1 / (2 * math.pi))


def test_corrected_data_is_balanced():
    points, labels = nb.generate_disc_set(200_000, torch.Generator().manual_seed(2))
    assert points.min() >= -1 and points.max() <= 1 and points.min() < -0.99
    assert abs(labels.float().mean().item() - 0.5) < 0.005
    assert set(labels.unique().tolist()) == {0, 1}


def test_normalize_gives_zero_mean_unit_std():
    normalized = nb.normalize(nb.generate_disc_set_article(5000, torch.Generator().manual_seed(3))[0])
    assert abs(normalized.mean().item()) < 1e-5 and abs(normalized.std().item() - 1) < 1e-5


@pytest.mark.parametrize("he_init, optimizer, kind", [(False, "sgd", torch.optim.SGD),
                                                      (True, "adam", torch.optim.Adam)])
def test_the_models_start_from_the_same_weights_for_a_seed(he_init, optimizer, kind):
    model, sgd = nb.make_model_and_optimizer(4, "cpu", lr=0.01, seed=3)
    again, _ = nb.make_model_and_optimizer(4, "cpu", lr=0.01, seed=3)
    assert isinstance(sgd, torch.optim.SGD) and sgd.param_groups[0]["lr"] == 0.01
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    variant, chosen = nb.make_variant(4, "cpu", lr=0.01, optimizer=optimizer, he_init=he_init, seed=3)
    assert isinstance(chosen, kind)
    biases = [layer.bias for layer in variant if isinstance(layer, nn.Linear)]
    assert all(bool((bias == 0).all()) for bias in biases) == he_init  # He initialization zeroes them


def test_step_2_shows_the_setups_time_it_beside_the_naive_one():
    """The naive timer's cell ends by showing the correct one, the shared setup's time_it, as it is defined
    there: a synchronize before the clock starts and one before it stops, and the median."""
    *work, last = ast.parse(cell_source("04", "naive-timer")).body
    space = helpers_and()
    exec(compile(ast.Module(work, type_ignores=[]), "naive-timer", "exec"), space)
    shown = eval(compile(ast.Expression(last.value), "naive-timer", "eval"), space)
    assert isinstance(shown, Code) and "time_it_naive" in space
    assert shown.data.startswith("def time_it(fn, device, ") and shown.data.count("synchronize(device)") == 2
    assert "statistics.median(seconds)" in shown.data and "for _ in range(warmup):" in shown.data


def test_the_naive_timer_takes_the_median_without_synchronizing():
    calls = []
    assert nb.time_it_naive(lambda: calls.append(1) or time.sleep(0.001), repeats=3, warmup=2) > 0
    assert len(calls) == 5


@pytest.mark.parametrize("synchronized_s, agree", [(1.24, True), (1.25, False), (0.76, True), (0.75, False)])
def test_cpu_sync_verdict_at_its_edge(synchronized_s, agree):
    text = nb.describe_sync_demo("cpu", naive_s=1.0, synchronized_s=synchronized_s)
    assert ("agree within" in text) == agree and ("noise" in text) == (not agree)


@pytest.mark.parametrize("synchronized_s, too_small", [(2.0, True), (1.99, False)])
def test_gpu_sync_verdict_at_its_edge(synchronized_s, too_small):
    text = nb.describe_sync_demo("cuda", naive_s=1.0, synchronized_s=synchronized_s)
    assert ("times too small" in text) == too_small and ("differ by only" in text) == (not too_small)


# --- the sweep ----------------------------------------------------------------------------------

def test_time_training_times_every_epoch_but_the_first_on_its_device():
    """time_training gives time_it (which synchronizes the device) the epochs after one warm-up."""
    asked = []

    def time_it(fn, device, repeats=3, warmup=1):
        asked.append((device, repeats, warmup))
        fn()
        return 0.01

    points, labels = nb.generate_disc_set(200, torch.Generator().manual_seed(0))
    space = helpers_and(DEVICES=[CPU], DEPTHS=[2, 3], EPOCHS=4, time_it=time_it,
                        train_input=nb.normalize(points), train_target=labels,
                        progress_bar=lambda items: items)
    run_cell("04", "sweep", space)
    assert asked == [(CPU, 3, 1), (CPU, 3, 1)]
    results = space["results"]
    assert results.depth.tolist() == [2, 3] and results.params.tolist() == [22, 70]
    assert results.s_per_100_epochs.tolist() == [1.0, 1.0] and set(results.device) == {"cpu"}


def test_time_training_runs_on_the_cpu_and_gives_plausible_numbers():
    points, labels = nb.generate_disc_set(200, torch.Generator().manual_seed(0))
    row = nb.time_training(2, CPU, nb.normalize(points), labels, epochs=2, batch_size=50)
    assert row["depth"] == 2 and row["params"] == expected_parameters(2) and row["epochs"] == 2
    assert row["epoch_s"] > 0 and row["s_per_100_epochs"] == pytest.approx(100 * row["epoch_s"])
    assert 0 < nb.bare_operation_seconds(CPU, calls=20) < 0.01
    assert nb.flop_per_second(CPU, size=64) > 1e6


def test_crossover_once_between_samples():
    # log10(gpu/cpu) goes from +1 to -1 between 100 and 10,000 parameters: halfway in log scale is 1,000
    assert nb.find_crossovers([1e2, 1e4], [1.0, 100.0], [10.0, 10.0]) == pytest.approx([1e3])
    crossings = nb.find_crossovers([10, 100, 1000, 10000], [1, 1, 10, 100], [5, 5, 5, 5])
    assert crossings == pytest.approx([10 ** (2 + math.log10(5))])


def test_crossover_never_twice_and_at_a_sample():
    assert nb.find_crossovers([10, 100, 1000], [1, 2, 3], [5, 6, 7]) == []  # the GPU is always slower
    assert nb.find_crossovers([10, 100, 1000], [5, 6, 7], [1, 2, 3]) == []  # the GPU is always faster
    crossings = nb.find_crossovers([1e1, 1e2, 1e3, 1e4, 1e5], [1, 1, 1, 1, 1], [2, 0.5, 0.5, 0.5, 2])
    assert crossings == pytest.approx([10**1.5, 10**4.5])
    assert nb.find_crossovers([10, 100, 1000], [1, 1, 1], [2, 1, 0.5]) == pytest.approx([100])  # once
    assert nb.find_crossovers([10, 100], [1, 1], [1, 2]) == pytest.approx([10])  # equal at the first
    assert nb.find_crossovers([10, 100], [1, 1], [2, 1]) == pytest.approx([100])  # equal at the last
    assert nb.find_crossovers([10, 100], [1, 1], [2, 1.5]) == []  # close, but never equal


def test_timing_curve_sentence_finds_the_flat_part_and_the_growth():
    params = [22, 70, 230, 806, 2982, 11430, 44710, 176806, 703142, 2804390, 11201190]
    seconds = [0.63, 0.74, 0.8, 0.9, 1.0, 1.2, 1.9, 3.5, 10.0, 25.0, 101.0]  # like the reference run
    sentence = nb.describe_timing_curve("cpu", params, seconds)
    assert "from 22 to 11,430 parameters (520 times more)" in sentence
    assert "4.0 times the parameters, 4.0 times the time" in sentence and "nearly in proportion" in sentence
    assert "over the whole range" in nb.describe_timing_curve("cuda", params, [1.0] * 10 + [1.5])


def test_timing_curve_verdicts_at_their_edges():
    at_three = nb.describe_timing_curve("cpu", [10, 100, 1000], [1.0, 3.0, 9.0])
    assert "from 10 to 100 parameters" in at_three  # exactly 3 times the first: still flat
    above = nb.describe_timing_curve("cpu", [10, 100, 1000], [1.0, 3.01, 9.0])
    assert "grows from the smallest model on" in above
    steeper = nb.describe_timing_curve("cpu", [10, 100, 1000], [1.0, 1.0, 10 ** 0.71])
    flatter = nb.describe_timing_curve("cpu", [10, 100, 1000], [1.0, 1.0, 10 ** 0.69])
    assert "nearly in proportion" in steeper and "less than in proportion" in flatter


def test_crossover_sentence_for_the_cpu_alone_a_crossing_and_no_crossing():
    cpu_only = pd.DataFrame({"params": [22, 70], "cpu_s": [1.0, 2.0]})
    assert nb.describe_crossovers(cpu_only, [], None) == "Only the CPU was measured: no crossover to find."
    assert "cross at 1,000 parameters" in nb.describe_crossovers(None, [1000.0], "cuda")
    slower = pd.DataFrame({"speedup": [0.5, 0.9]})
    faster = pd.DataFrame({"speedup": [1.01, 3.0]})
    assert "the CPU is faster for every model" in nb.describe_crossovers(slower, [], "cuda")
    assert "cuda is faster for every model" in nb.describe_crossovers(faster, [], "cuda")
    assert nb.describe_points([703142.4, 1e6]) == "703,142 parameters, 1,000,000 parameters"
    assert nb.describe_points([]) == "no point"


def test_results_filename_and_loading(tmp_path):
    name = nb.results_filename("cpu", "Alice's Laptop (8 cores)", "2026-01-31")
    assert name == "04_disc_timings_cpu_alice-s-laptop-8-cores_2026-01-31.csv"
    good = pd.DataFrame({"params": [22, 70], "s_per_100_epochs": [1.0, 1.1], "name": "x86_64 CPU (AVX2)",
                         "machine": "alice", "date": "2026-01-31"})
    good.to_csv(tmp_path / name, index=False)
    pd.DataFrame({"params": [1]}).to_csv(tmp_path / "04_disc_timings_missing_columns.csv", index=False)
    (tmp_path / "04_disc_timings_empty.csv").write_text("")
    pd.DataFrame(columns=sorted(nb.RESULT_COLUMNS)).to_csv(tmp_path / "04_disc_timings_no_rows.csv",
                                                          index=False)
    tables = nb.load_earlier_results([tmp_path, tmp_path / "absent"])
    assert [label for label, _ in tables] == ["x86_64 CPU (AVX2) · alice · 2026-01-31 (saved)"]
    assert tables[0][1].params.tolist() == [22, 70]


def test_reference_results_are_a_full_size_cpu_run():
    paths = sorted((REPO / "data" / "reference").glob("04_disc_timings_*.csv"))
    assert len(paths) == 1 and paths[0].name.startswith("04_disc_timings_cpu_"), paths
    table = pd.read_csv(paths[0])
    assert set(table.device) == {"cpu"}  # only what was measured: no GPU figures
    assert table.depth.tolist() == list(range(2, 13)) and (table.batch_size == 100).all()
    assert table.params.tolist() == [expected_parameters(depth) for depth in range(2, 13)]
    assert nb.RESULT_COLUMNS <= set(table.columns) and (table.s_per_100_epochs > 0).all()


def test_prediction_sentences_on_each_side_of_the_break_even():
    flop_per_op = pd.Series({x: nb.step_flops(x) / nb.launches_per_step(x) for x in range(2, 13)})
    params = pd.Series({x: expected_parameters(x) for x in range(2, 13)})
    comparison = pd.DataFrame({"speedup": [0.5, 2.0]})
    winning = nb.describe_prediction("cuda", 1e6, flop_per_op, params, comparison, [450_000.0])
    assert "break-even at 1,000,000 FLOPs" in winning and "the 9-layer model (176,806 parameters)" in winning
    assert winning.endswith("Your sweep: The curves of the CPU and cuda cross at 450,000 parameters.")
    just_below = nb.describe_prediction("cuda", flop_per_op[9] - 1, flop_per_op, params, comparison, [])
    at_it = nb.describe_prediction("cuda", flop_per_op[9], flop_per_op, params, comparison, [])
    assert "the 9-layer model" in just_below and "the 10-layer model" in at_it  # more than, not as many
    never = nb.describe_prediction("cuda", flop_per_op[12], flop_per_op, params, comparison, [])
    assert "no model of the sweep carries that many" in never and "the CPU wins throughout" in never
    for cheaper in (0.0, -2e5):
        start = nb.describe_prediction("cuda", cheaper, flop_per_op, params, comparison, [])
        assert "wins from the smallest model on" in start
    assert "from the smallest" not in nb.describe_prediction("cuda", 1.0, flop_per_op, params, comparison, [])


def test_the_cpu_alone_says_how_many_flops_each_extra_microsecond_needs():
    flop_per_op = pd.Series({2: 533.3, 12: 68_528_571.4})
    sentence = nb.describe_cpu_only(20.0, 50.0, flop_per_op)
    assert sentence.startswith("Only the CPU was measured. Its operations carry 533 (2 layers) to 68,528,571")
    assert "than this CPU's 20.0 µs needs 50,000 FLOPs per operation (1 µs × 50.0 GFLOP/s)" in sentence


# --- Going deeper A: why the deep models do not learn -------------------------------------------

def test_default_init_makes_the_signal_vanish_and_he_init_keeps_it():
    inputs = nb.normalize(nb.generate_disc_set(1000, torch.Generator().manual_seed(0))[0])
    torch.manual_seed(0)
    default = nb.layer_report(nb.create_model(10), inputs)
    torch.manual_seed(0)
    he = nb.layer_report(nb.he_initialize(nb.create_model(10)), inputs)
    assert default.spread.iloc[-1] < 1e-3 < he.spread.iloc[-1]
    assert default.dead_pct.iloc[3:9].mean() > 25  # deep layers: many units output 0 for every point
    dead = default.dead_pct.dropna()
    assert (dead == dead.round(1)).all(), dead.tolist()  # the table a learner reads is rounded


def test_accuracy_counts_the_points_classified_right():
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
        model.bias.zero_()
    inputs = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0], [0.0, 3.0]])
    assert nb.training_accuracy(model, inputs, torch.tensor([0, 1, 1, 1])) == 0.75


@pytest.mark.parametrize("accuracy, learned", [(51.0, True), (50.9, False)])
def test_accuracy_verdicts_at_their_edge(accuracy, learned):
    sentence = nb.describe_accuracy([4], [accuracy], majority_pct=50.0)
    assert ("layers learned" in sentence) == learned and ("did not" in sentence) == (not learned)
    fixes = nb.describe_fixes({"He init": accuracy}, majority_pct=50.0)
    assert ("No better than" in fixes) == (not learned)


def test_accuracy_and_fix_sentences_name_the_learned_and_the_stuck():
    sentence = nb.describe_accuracy([2, 3, 9, 10], [97.1, 92.0, 52.1, 51.5], majority_pct=52.1)
    assert sentence.startswith("The models with 2, 3 layers learned (92.0 to 97.1 % right)")
    assert "9, 10 layers did not (at most 52.1 %" in sentence
    assert "did not" not in nb.describe_accuracy([2, 4], [80.0, 90.0], majority_pct=52.1)
    fixes = nb.describe_fixes({"article": 52.1, "smaller step": 52.0, "He init": 97.0}, 52.1)
    assert fixes.startswith("Best: He init, 97.0 % right.") and "article; smaller step" in fixes


def test_layer_report_sentence():
    report = pd.DataFrame({"spread": [0.3, 0.1, 0.03, 0.01, 0.003], "dead_pct": [0, 40, 45, 50, math.nan]})
    sentence = nb.describe_layer_report(report)
    assert "factor of 3.2 per layer" in sentence and "layers 3 to 4, 45 to 50 %" in sentence


# --- Going deeper B: the cost model fitted to the sweep -----------------------------------------

DEPTHS = range(2, 13)
LAUNCHES = [18, 34, 50, 66, 82, 98]
FLOPS = [1e5, 1e7, 1e8, 1e9, 1e10, 1e11]


def synthetic_step_seconds(overhead_s, flop_per_s, noise=0.0, seed=0):
    launches = np.array([nb.launches_per_step(depth) for depth in DEPTHS], dtype=float)
    flops = np.array([nb.step_flops(depth) for depth in DEPTHS], dtype=float)
    seconds = launches * overhead_s + flops / flop_per_s
    seconds *= 1 + noise * np.random.default_rng(seed).uniform(-1, 1, len(seconds))
    return launches, flops, seconds


def synthetic_overlapping_seconds(overhead_s, flop_per_s, launches, flops):
    return np.maximum(np.multiply(launches, overhead_s), np.divide(flops, flop_per_s))


def test_which_devices_overlap_launches_and_arithmetic():
    assert not nb.launch_and_arithmetic_overlap(CPU)
    assert nb.launch_and_arithmetic_overlap(GPU) and nb.launch_and_arithmetic_overlap("mps")


def test_a_step_costs_the_sum_on_the_cpu_and_the_larger_on_a_gpu():
    gpu, cpu = (10e-6, 8e12), (5e-6, 100e9)
    assert nb.predict_step_seconds(50, 1e9, *gpu, overlap=True) == pytest.approx(500e-6)  # launches
    assert nb.predict_step_seconds(50, 1e10, *gpu, overlap=True) == pytest.approx(1.25e-3)  # arithmetic
    assert nb.predict_step_seconds(50, 1e9, *gpu) == pytest.approx(625e-6)  # the CPU's sum
    assert nb.predict_step_seconds(50, 1e9, *cpu) == pytest.approx(250e-6 + 10e-3)


@pytest.mark.parametrize("overhead_s, flop_per_s", [(40e-6, 30e9), (8e-6, 10e12), (1e-6, 1e8)])
def test_cost_model_fit_recovers_known_parameters(overhead_s, flop_per_s):
    fitted = nb.fit_cost_model(*synthetic_step_seconds(overhead_s, flop_per_s))
    assert fitted == pytest.approx((overhead_s, flop_per_s), rel=1e-6)
    noisy = nb.fit_cost_model(*synthetic_step_seconds(overhead_s, flop_per_s, noise=0.05))
    assert noisy == pytest.approx((overhead_s, flop_per_s), rel=0.15)


def test_cost_model_fit_with_no_arithmetic_term_never_goes_negative():
    launches, flops, _ = synthetic_step_seconds(40e-6, 30e9)
    seconds = launches * 40e-6 * (1 + 0.02 * np.cos(np.arange(len(launches))))  # all overhead, some noise
    fitted_overhead, fitted_throughput = nb.fit_cost_model(launches, flops, seconds)
    assert fitted_overhead == pytest.approx(40e-6, rel=0.05)
    assert fitted_throughput > 1e14  # no arithmetic cost to speak of (possibly infinite), never negative


def test_the_cpu_fit_keeps_the_arithmetic_term_when_launches_explain_nothing():
    launches, flops, _ = synthetic_step_seconds(40e-6, 30e9)
    seconds = flops / 30e9 - 1e-9 * launches  # all arithmetic, and a little less for more launches
    design = np.column_stack([launches / seconds, flops / seconds])
    assert np.linalg.lstsq(design, np.ones_like(seconds), rcond=None)[0][0] < 0  # both terms: one negative
    overhead, throughput = nb.fit_cost_model(launches, flops, seconds)
    assert overhead == 0.0 and throughput == pytest.approx(30e9, rel=0.1)


@pytest.mark.parametrize("overhead_s, flop_per_s", [(10e-6, 8e12), (20e-6, 2e12), (4e-6, 3e12)])
def test_overlapping_fit_recovers_known_parameters(overhead_s, flop_per_s):
    seconds = synthetic_overlapping_seconds(overhead_s, flop_per_s, LAUNCHES, FLOPS)
    launch_bound = np.multiply(LAUNCHES, overhead_s) >= np.divide(FLOPS, flop_per_s)
    assert 1 < launch_bound.sum() < len(LAUNCHES) - 1  # both regimes in the data
    known = (overhead_s, flop_per_s)
    assert nb.fit_cost_model(LAUNCHES, FLOPS, seconds, overlap=True) == pytest.approx(known, rel=1e-6)
    summed = nb.fit_cost_model(LAUNCHES, FLOPS, seconds)  # the CPU's model gets them wrong
    assert summed != pytest.approx(known, rel=0.05)
    noisy = seconds * (1 + 0.05 * np.random.default_rng(0).uniform(-1, 1, len(seconds)))
    assert nb.fit_cost_model(LAUNCHES, FLOPS, noisy, overlap=True) == pytest.approx(known, rel=0.1)


def test_overlapping_fit_when_every_model_is_launch_bound():
    # The sweep on a GPU with 10 µs launches and 8 TFLOP/s: every depth is launch-bound, so the data say
    # nothing about the throughput. The fit says so: no arithmetic term at all.
    launches = [nb.launches_per_step(depth) for depth in DEPTHS]
    flops = [nb.step_flops(depth) for depth in DEPTHS]
    seconds = synthetic_overlapping_seconds(10e-6, 8e12, launches, flops)
    assert np.allclose(seconds, np.multiply(launches, 10e-6))
    fitted = nb.fit_cost_model(launches, flops, seconds, overlap=True)
    assert fitted == (pytest.approx(10e-6, rel=1e-9), math.inf)


def test_break_even_makes_both_devices_equally_fast():
    cpu, gpu = (40e-6, 30e9), (80e-6, 10e12)
    for overlap in (False, True):
        flops_per_launch = nb.break_even_flops_per_launch(*cpu, *gpu, overlap_b=overlap)
        cpu_s = nb.predict_step_seconds(100, 100 * flops_per_launch, *cpu)
        gpu_s = nb.predict_step_seconds(100, 100 * flops_per_launch, *gpu, overlap)
        assert cpu_s == pytest.approx(gpu_s)
        # slower and costlier: never; cheaper and faster: from the start
        assert nb.break_even_flops_per_launch(40e-6, 30e9, 80e-6, 10e9, overlap_b=overlap) == math.inf
        assert nb.break_even_flops_per_launch(40e-6, 30e9, 20e-6, 10e12, overlap_b=overlap) == 0.0


def test_break_even_with_an_overlapping_gpu_is_steps_4_formula():
    cpu, gpu = (5e-6, 100e9), (10e-6, 8e12)
    flops = nb.break_even_flops_per_launch(*cpu, *gpu)  # (10 µs - 5 µs) × 100 GFLOP/s
    assert flops == pytest.approx(500_000, rel=1e-9)
    adding = nb.break_even_flops_per_launch(*cpu, *gpu, overlap_b=False)  # both add their costs
    assert adding == pytest.approx(5e-6 / (1 / 100e9 - 1 / 8e12)) and abs(adding - flops) > 5000
    for factor, gpu_faster in [(0.9, False), (1.1, True), (100, True), (1e4, True)]:
        cpu_s = nb.predict_step_seconds(20, 20 * factor * flops, *cpu)
        gpu_s = nb.predict_step_seconds(20, 20 * factor * flops, *gpu, overlap=True)
        assert (gpu_s < cpu_s) == gpu_faster, factor
    assert nb.break_even_flops_per_launch(5e-6, 1e11, 1e-6, 2e11) == 0.0  # cheaper launches: at once
    assert nb.break_even_flops_per_launch(*cpu, *gpu, overlap_a=True) == pytest.approx(1e6)
    # equal throughputs: only the launch overheads differ, whatever the FLOPs per operation
    assert nb.break_even_flops_per_launch(5e-6, 1e11, 10e-6, 1e11, overlap_b=False) == math.inf
    assert nb.break_even_flops_per_launch(5e-6, 1e11, 1e-6, 1e11, overlap_b=False) == 0.0
    assert nb.break_even_flops_per_launch(5e-6, 1e11, 5e-6, 1e11, overlap_b=False) == math.inf  # a tie


def test_fit_sentence_compares_with_step_4():
    cpu = nb.describe_fit("cpu", False, (24e-6, 68e9), (26e-6, 133e9))
    assert "24.0 µs" in cpu and "0.9 times the 26.0 µs" in cpu and "0.51 times" in cpu and "100 rows" in cpu
    gpu = nb.describe_fit("cuda", True, (10e-6, math.inf), (12e-6, 8e12))
    assert "larger of the two" in gpu and "launch-bound" in gpu and "GFLOP" not in gpu


@pytest.mark.parametrize("throughput, below", [(8e9, False), (7.99e9, True)])
def test_fit_verdict_at_its_edge(throughput, below):
    text = nb.describe_fit("cpu", False, (20e-6, throughput), (20e-6, 10e9))
    assert ("use the device less well" in text) == below


def test_flops_per_launch_sentence_matches_the_formulas():
    depths = list(range(2, 13))
    per_launch = [nb.step_flops(d) / nb.launches_per_step(d) for d in depths]
    sentence = nb.describe_flops_per_launch(depths, per_launch)
    assert f"{per_launch[0]:,.0f}" in sentence and f"{per_launch[-1]:,.0f}" in sentence
    assert per_launch[0] == pytest.approx(9600 / 18) and per_launch[-1] > 1e7
    assert f"about {(per_launch[-1] / per_launch[0]) ** (1 / 10):.1f} times" in sentence


# --- Going deeper C: the batch size --------------------------------------------------------------

def test_batch_sentence():
    sentence = nb.describe_batch_effect("cpu", pd.Series([7.6, 5.0, 1.3], index=[2, 6, 10]))
    assert "7.6 times" in sentence and "2-layer" in sentence and "1.3 times for the 10-layer" in sentence


@pytest.mark.parametrize("worst, warned", [(15.0, False), (15.1, True)])
def test_batch_verdict_at_its_edge(worst, warned):
    text = nb.describe_batch_effect("cpu", pd.Series([worst, 2.0], index=[2, 6]))
    assert ("other programs" in text) == warned


@pytest.mark.parametrize("cold_s, start_up", [(1.2, True), (1.19, False)])
def test_cold_warm_verdict_at_its_edge(cold_s, start_up):
    text = nb.describe_cold_warm("cuda", cold_s=cold_s, warm_s=1.0)
    assert ("one-time start-up" in text) == start_up and ("no real start-up" in text) == (not start_up)
    assert "On a GPU" not in text  # only the CPU's sentence says what a GPU would show


def test_benchmark_timer_on_the_cpu_measures_the_work(monkeypatch):
    synced = []
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda device=None: synced.append(device))
    measurement = nb.benchmark_timer(lambda: time.sleep(0.002), CPU).timeit(number=3)
    assert measurement.median >= 0.002 and synced == []  # the CPU needs no synchronize


@pytest.mark.parametrize("second_slowest, busy", [(1.49, False), (1.5, True), (3.0, True)])
def test_machine_is_busy_when_the_same_epoch_varies_by_half_or_more(second_slowest, busy):
    # seven repeats of the same epoch; the slowest (one pause) is left out whatever it is
    assert nb.machine_is_busy([1.0, 1.1, 1.0, 1.2, 1.05, second_slowest, 9.0]) is busy
    assert nb.machine_is_busy([1.0, 1.0, second_slowest]) is False  # one slow run alone is no pattern


@pytest.mark.parametrize("epoch_seconds, busy", [([0.010, 0.011, 0.010, 0.012, 0.010, 0.011, 0.030], False),
                                                 ([0.010, 0.015, 0.010, 0.012, 0.010, 0.011, 0.030], True)])
def test_the_busy_check_times_seven_epochs_alone_and_reads_their_spread(epoch_seconds, busy):
    """Colab's 2 vCPUs with the notebook's own threads at a load of about 2 and steady timings: no
    warning; timings that vary by half or more: the warning, whatever the load."""
    timings, calls = iter(epoch_seconds), []

    def time_it(fn, device, repeats=3, warmup=1):
        calls.append((torch.device(device).type, repeats, warmup))
        return next(timings)

    points, labels = nb.generate_disc_set(100, torch.Generator().manual_seed(0))
    out = run_cell("04", "busy-check", helpers_and(train_input=nb.normalize(points), train_target=labels,
                                                   time_it=time_it))
    assert calls == [("cpu", 1, 1)] + [("cpu", 1, 0)] * 6  # seven epochs, each timed alone, one warm-up
    assert out.startswith("One epoch, timed 7 times: 10.0 to 30.0 ms")
    assert out.rstrip().endswith("other programs compete for the cores, expect inflated and noisy times."
                                 if busy else "no sign of other programs competing.")


# --- the tables a learner reads are rounded ---------------------------------------------------------

def test_rounded_values_rounds_floats_to_three_significant_digits():
    table = pd.DataFrame({"name": ["a", "b", "c"], "params": [22, 70, 11_201_190],
                          "dead_pct": [37.50000059604645, 0.0, math.nan],
                          "spread": [0.27203512, 0.000105861, 12345.678]})
    shown = nb.rounded_values(table)
    assert shown.dead_pct.tolist()[:2] == [37.5, 0.0] and math.isnan(shown.dead_pct.iloc[2])
    assert shown.spread.tolist() == [0.272, 0.000106, 12300.0]
    assert shown.params.tolist() == [22, 70, 11_201_190] and shown.name.tolist() == ["a", "b", "c"]
    assert nb.rounded_values(pd.DataFrame({10: [1.23456], 100: [0.5]}))[10].tolist() == [1.23]  # pivot columns
