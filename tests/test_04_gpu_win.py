"""Unit tests for notebook 04's helpers (When does the GPU win?), called with made-up inputs.

They run outside the notebook: `load_helpers("04")` loads only the notebook's imports, functions and
literal constants. Nothing here needs a GPU. The shared timing function `time_it` is tested once, in
test_shared_setup.py.
"""
import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from notebook_code import REPO, load_helpers

nb = load_helpers("04")

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
    flops_per_launch = nb.break_even_flops_per_launch(*cpu, *gpu)
    launches = 100
    cpu_s = nb.predict_step_seconds(launches, launches * flops_per_launch, *cpu)
    gpu_s = nb.predict_step_seconds(launches, launches * flops_per_launch, *gpu)
    assert cpu_s == pytest.approx(gpu_s)
    assert nb.break_even_flops_per_launch(40e-6, 30e9, 80e-6, 10e9) == math.inf  # slower and costlier: never
    assert nb.break_even_flops_per_launch(40e-6, 30e9, 20e-6, 10e12) == 0.0  # cheaper and faster: always


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
