"""Notebook 10's helpers called with made-up inputs, each at the edges of its conditions: the eval-mode
verdict, percentiles and the tail they rest on, the two-number fit of the batch sweep and its knee, the
traffic's arrivals and Step 4's rows and verdicts, the tolerance per number format and the check against
it, the timing table, and Going deeper C's build failure, loaders, fresh process and checks. Nothing
here is timed beyond generous bounds."""
import sys
import types

import pytest
import torch
from torch import nn

from support.notebook_code import load_helpers


@pytest.fixture(scope="module")
def nb():
    return load_helpers("10")


# --- Steps 1 and 2: the verdicts and the percentiles ----------------------------------------------

def test_mode_verdict_holds_at_its_tolerance_on_both_measures(nb):
    assert nb.mode_verdict(0.0, 1e-5).startswith("eval mode: the same answer every time")
    assert nb.mode_verdict(1e-5, 0.0).startswith("eval mode: the same answer every time")
    assert "still differ by up to 2e-05" in nb.mode_verdict(2e-5, 0.0)
    assert "still differ" in nb.mode_verdict(0.0, 1.1e-5)
    # where convolutions run in TF32 (compute capability 8.0 and newer), TF32's atol of 1e-3
    assert nb.mode_verdict(1e-3, 5e-4, "tf32").startswith("eval mode: the same answer every time")
    assert "still differ by up to 0.0011" in nb.mode_verdict(1.1e-3, 0.0, "tf32")
    assert "still differ" in nb.mode_verdict(0.0, 1.1e-3, "tf32")


def test_percentile_is_the_nearest_rank(nb):
    values = list(range(100, 0, -1))  # 1..100, unsorted
    assert [nb.percentile(values, p) for p in (50, 95, 99, 100)] == [50, 95, 99, 100]
    ten = [float(v) for v in range(1, 11)]
    assert nb.percentile(ten, 99) == 10 and nb.percentile(ten, 50) == 5 and nb.percentile(ten, 51) == 6
    assert nb.percentile([7.0], 99) == 7.0 and nb.percentile(ten, 0) == 1


def test_latency_table_reports_milliseconds_the_first_request_and_how_many_were_slower(nb):
    table = nb.latency_table([0.001] * 98 + [0.002, 0.010], first_s=0.05)
    ms = table["ms"]
    assert (ms.p50, ms.p95, ms.p99, ms.slowest) == (1.0, 1.0, 2.0, 10.0)
    assert ms["first (Step 1)"] == 50.0 and ms["mean"] == pytest.approx(1.1)
    slower = table["requests_slower"]
    assert (slower.p50, slower.p95, slower.p99, slower.slowest) == (50, 5, 1, 0)
    assert slower.isna().tolist() == [False] * 4 + [True, True], "no count for the mean and the first"


@pytest.mark.parametrize("count, point, slower", [
    (400, 99, 4), (300, 99, 3), (2000, 99, 20), (1999, 99, 19), (100, 99, 1), (100, 50, 50),
    (101, 50, 50), (1, 99, 0), (20, 95, 1)])
def test_tail_size_counts_the_values_ranked_above_a_percentile(nb, count, point, slower):
    assert nb.tail_size(count, point) == slower
    values = list(range(count))
    assert sum(value > nb.percentile(values, point) for value in values) == slower


def test_time_mode_times_calls_of_the_model_it_is_given_under_the_mode_it_is_given(nb):
    seen = []
    model = lambda batch: seen.append((len(batch), torch.is_inference_mode_enabled()))  # noqa: E731
    seconds = nb.time_mode(torch.inference_mode, model, torch.zeros(1, 3), torch.device("cpu"), calls=4)()
    assert seen == [(1, True)] * 8, "time_it's warm-up round, then the timed one, of 4 calls each"
    assert 0 <= seconds < 1
    seen.clear()
    nb.time_mode(torch.no_grad, model, torch.zeros(2, 3), torch.device("cpu"), calls=1)()
    assert seen == [(2, False)] * 2


# --- The figures: each line told apart by its style, not its colour alone -------------------------

def test_the_latency_histogram_marks_the_percentiles_and_the_first_request_each_in_its_own_style(nb):
    import matplotlib.pyplot as plt

    latencies = [0.001] * 90 + [0.002] * 9 + [0.010]
    figure = nb.draw_latencies(latencies, 0.5, torch.device("cpu"))
    (axis,) = figure.axes
    lines = {line.get_label(): line.get_linestyle() for line in axis.get_lines()}
    assert list(lines) == ["p50 = 1.00 ms", "p95 = 2.00 ms", "p99 = 2.00 ms", "first request = 500.0 ms"]
    assert len(set(lines.values())) == 4, "four line styles: colour never carries the difference alone"
    assert axis.get_xscale() == "log" and axis.get_xlabel() and axis.get_ylabel()
    plt.close(figure)


@pytest.mark.parametrize("knee, marked", [(4.0, True), (1000.0, False)])
def test_the_sweep_draws_the_measured_times_the_fit_and_the_knee_inside_the_sweep(nb, knee, marked):
    import matplotlib.pyplot as plt
    import pandas as pd

    sweep = pd.DataFrame({"ms_per_batch": [1.0, 1.0, 1.1, 2.0, 4.0],
                          "images_per_s": [1e3, 2e3, 3.6e3, 4e3, 4e3]},
                         index=pd.Index([1, 2, 4, 8, 16], name="batch_size"))
    figure = nb.draw_sweep(sweep, 1e-3, 2.5e-4, knee, overlap=True)
    left, right = figure.axes
    labels = [line.get_label() for line in left.get_lines()]
    assert labels[:2] == ["measured", "two-number fit"]
    assert (f"knee ≈ batch {knee:.0f}" in labels) == marked
    measured, fit = left.get_lines()[:2]
    assert (measured.get_marker(), measured.get_linestyle()) != (fit.get_marker(), fit.get_linestyle())
    assert left.get_yscale() == "log" and right.get_ylabel() == "pictures per second"
    plt.close(figure)


# --- Step 3: the two-number fit and the knee ------------------------------------------------------

SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def test_the_sum_form_recovers_both_numbers_and_keeps_no_negative_term(nb):
    fixed, per_image = nb.fit_batch_cost(SIZES, [2e-4 + b * 5e-5 for b in SIZES])
    assert fixed == pytest.approx(2e-4) and per_image == pytest.approx(5e-5)
    # a curve through the origin with a little noise would fit a negative fixed cost: kept at 0
    fixed, per_image = nb.fit_batch_cost(SIZES, [b * 5e-5 * (0.98 if b < 3 else 1) for b in SIZES])
    assert fixed == 0.0 and per_image == pytest.approx(5e-5, rel=0.05)
    fixed, per_image = nb.fit_batch_cost(SIZES, [1e-3 * (1.01 if b == 256 else 1) for b in SIZES])
    assert per_image >= 0 and fixed == pytest.approx(1e-3, rel=0.02)


def test_the_overlap_form_finds_the_split_and_the_knee_is_where_the_terms_meet(nb):
    seconds = [max(1e-3, b * 2e-5) for b in SIZES]  # a GPU: flat up to 50 pictures
    fixed, per_image = nb.fit_batch_cost(SIZES, seconds, overlap=True)
    assert fixed == pytest.approx(1e-3) and per_image == pytest.approx(2e-5)
    assert nb.knee_batch_size(fixed, per_image) == pytest.approx(50)
    all_flat = nb.fit_batch_cost(SIZES, [1e-3] * len(SIZES), overlap=True)
    assert all_flat == (pytest.approx(1e-3), 0.0)
    assert nb.knee_batch_size(1e-3, 0.0) == float("inf") and nb.knee_batch_size(0.0, 1e-5) == 0.0
    # one picture alone costs less than a picture in a large batch (as on a CPU whose caches overflow):
    # no batch is fixed-cost bound, so the best fit has no fixed cost and the knee is at 0
    cheaper_alone = [0.5e-4 if b == 1 else b * 1e-4 for b in SIZES]
    fixed, per_image = nb.fit_batch_cost(SIZES, cheaper_alone, overlap=True)
    assert fixed == 0.0 and per_image == pytest.approx(1e5 / 1.2e9)
    assert nb.knee_batch_size(fixed, per_image) == 0.0


@pytest.mark.parametrize("knee, expected", [
    (1.9, "Fixed cost 0.020 ms per batch, 2.0 effective GFLOP/s: knee at batch 1.9, so batching buys "
          "little."),
    (2.0, "Fixed cost 0.020 ms per batch, 2.0 effective GFLOP/s: knee at batch 2.0; up to it, a larger "
          "batch costs little extra time."),
    (256.0, "Fixed cost 0.020 ms per batch, 2.0 effective GFLOP/s: knee at batch 256.0; up to it, a "
            "larger batch costs little extra time."),
    (256.5, "Fixed cost 0.020 ms per batch; no knee up to batch 256: each batch cost about the fixed cost."),
    (float("inf"), "Fixed cost 0.020 ms per batch; no knee up to batch 256: each batch cost about the fixed "
                   "cost."),
])
def test_knee_line_says_what_the_knee_means_on_each_side_of_2_and_of_the_largest_batch(nb, knee, expected):
    # 2e6 FLOP per picture in 1 ms per picture: 2 GFLOP/s
    assert nb.knee_line(2e-5, 1e-3, knee, 2e6, 256) == expected


def test_knee_line_reads_a_fit_without_a_fixed_cost_and_one_without_arithmetic(nb):
    assert nb.knee_line(0.0, 1e-3, 0.0, 2e6, 64).endswith("knee at batch 0.0, so batching buys little.")
    assert "no knee up to batch 64" in nb.knee_line(1e-3, 0.0, float("inf"), 2e6, 64)


def test_flops_per_image_counts_two_per_multiply_add_of_convolutions_and_linear_layers(nb):
    model = nn.Sequential(nn.Conv2d(3, 32, 3, 1, padding=1, bias=False), nn.ReLU(),
                          nn.Conv2d(32, 8, 3, 2, padding=1, groups=2), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 10))
    expected = 2 * (32 * 32 * 32 * 3 * 9) + 2 * (8 * 16 * 16 * 16 * 9) + 2 * 8 * 10
    assert nb.flops_per_image(model) == expected
    assert not any(layer._forward_hooks for layer in model.modules()), "the counting hooks are removed"


# --- Step 4: the arrivals, the rows of the table and their verdicts -------------------------------

def test_arrival_rates_and_poisson_arrivals(nb):
    assert nb.arrival_rates(500.0) == pytest.approx([150, 450, 750])  # times the measured capacity
    arrivals = nb.poisson_arrivals(1000.0, 20_000, seed=3)
    gaps = arrivals[1:] - arrivals[:-1]
    assert arrivals[0] == 0 and (gaps > 0).all()
    assert gaps.mean() == pytest.approx(1e-3, rel=0.03)
    assert gaps.std() == pytest.approx(1e-3, rel=0.05), "exponential gaps: the spread equals the mean"
    assert (nb.poisson_arrivals(5.0, 10, seed=1) == nb.poisson_arrivals(5.0, 10, seed=1)).all()


@pytest.mark.parametrize("count", [2, 100, 300, 2000])
def test_the_arrivals_offer_exactly_the_rate_they_are_made_for(nb, count):
    # 100 exponential gaps drawn with seed 0 average nearly a fifth more than asked (their sum is 117
    # mean gaps, not 99): a server keeping up would seem to serve only 85 % of the rate
    arrivals = nb.poisson_arrivals(300.0, count)
    assert arrivals[0] == 0 and (count - 1) / arrivals[-1] == pytest.approx(300.0)
    assert len(arrivals) == count and (arrivals[1:] > arrivals[:-1]).all()
    assert list(nb.poisson_arrivals(300.0, 1)) == [0.0]


def test_load_row_reports_the_percentiles_the_tail_the_rate_the_lag_and_the_mean_batch(nb):
    row = nb.load_row(299.6, "dynamic batcher", [0.001] * 99 + [0.009], busy_s=0.5, lag_s=0.0002,
                      batch_sizes=[1, 2, 3])
    assert row == {"rate_per_s": 300, "server": "dynamic batcher", "p50_ms": 1.0, "p99_ms": 1.0,
                   "slower_than_p99": 1, "served_per_s": 200.0, "lag_ms": pytest.approx(0.2),
                   "mean_batch": 2, "verdict": "over capacity: served 67%"}


@pytest.mark.parametrize("busy_s, verdict", [
    (0.4, "kept up"),  # 100 requests at 250 per second arrive within 0.396 s: 250 per second served
    (0.44, "kept up"),  # 227 per second: 91 % of the rate
    (0.45, "over capacity: served 89%"),  # 222 per second
    (0.82, "over capacity: served 49%"),  # a queue that grew (one run: 125 served of 244 offered)
])
def test_a_row_that_served_clearly_less_than_it_was_offered_says_over_capacity(nb, busy_s, verdict):
    for server in ("one at a time", "dynamic batcher"):  # the same words for both: not "batching failed"
        row = nb.load_row(250.0, server, [0.001] * 100, busy_s=busy_s, lag_s=0.0, batch_sizes=[1])
        assert row["verdict"] == verdict


def test_load_verdict_counts_90_percent_of_the_rate_as_kept_up(nb):
    assert nb.load_verdict(244.0, 244.0) == "kept up"
    assert nb.load_verdict(244.0, 250.0) == "kept up"
    assert nb.load_verdict(100.0, 90.0) == "kept up", "the boundary: the last latency is all it may lose"
    assert nb.load_verdict(100.0, 89.0) == "over capacity: served 89%"
    assert nb.load_verdict(244.0, 125.0) == "over capacity: served 51%"


def test_answers_verdict_finds_missing_doubled_and_wrong_answers(nb):
    alone = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    answers = list(alone.clone())
    assert nb.answers_verdict([2, 0, 1], answers, alone) is None
    assert nb.answers_verdict([0, 1], answers, alone) == "requests answered never: [2], more than once: []"
    assert "more than once: [1]" in nb.answers_verdict([0, 1, 1, 2], answers, alone)
    # float32's tolerance for 4.0: atol 1e-5 + rtol 1e-4 × 4 = 4.1e-4
    within, outside = list(alone.clone()), list(alone.clone())
    within[1] = within[1] + torch.tensor([0.0, 3e-4])
    outside[1] = outside[1] + torch.tensor([0.0, 6e-4])
    assert nb.answers_verdict([0, 1, 2], within, alone) is None
    assert nb.answers_verdict([0, 1, 2], outside, alone).startswith("an answer differs from its answer alone")
    # TF32's for 4.0: atol 1e-3 + rtol 1e-2 × 4 = 4.1e-2
    assert nb.answers_verdict([0, 1, 2], outside, alone, "tf32") is None
    beyond_tf32 = list(alone.clone())
    beyond_tf32[1] = beyond_tf32[1] + torch.tensor([0.0, 6e-2])
    assert nb.answers_verdict([0, 1, 2], beyond_tf32, alone, "tf32").startswith("an answer differs")


# --- Going deeper A and B: the batcher's code shown, tolerances, the check and the timing table ---

def test_show_source_shows_a_methods_code_dedented_as_python(nb):
    shown = nb.show_source(nb.DynamicBatcher.answer)
    assert shown.data.startswith("def answer(self, batch):") and shown.language == "python"
    assert "future.set_result(output)" in shown.data


def test_the_tolerance_follows_the_number_format(nb):
    assert nb.tolerance(torch.float32) == ("float32", 1e-4, 1e-5)
    assert nb.tolerance(torch.float32, "tf32") == ("tf32", 1e-2, 1e-3)
    assert nb.tolerance(torch.float16, "tf32") == ("float16", 1e-2, 1e-2)
    assert nb.tolerance(torch.bfloat16) == ("bfloat16", 5e-2, 5e-2)


def test_agreement_checks_the_stated_tolerance_on_both_sides_and_counts_the_top_1(nb):
    reference = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    inside = reference + torch.tensor([[1e-5, 0.0], [0.0, 0.0]])  # within atol 1e-5 + rtol 1e-4
    outside = reference + torch.tensor([[2e-4, 0.0], [0.0, 0.0]])
    assert nb.agreement("x", reference, inside, torch.float32) == (
        "x: within float32's tolerance (rtol 0.0001, atol 1e-05); top-1 agrees on 2 of 2 pictures.")
    assert nb.agreement("x", reference, outside, torch.float32).startswith(
        "x: OUTSIDE float32's tolerance (largest difference 0.0002)")
    assert "within float16's" in nb.agreement("x", reference, outside.half(), torch.float16)
    flipped = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    assert nb.agreement("x", reference, flipped, torch.float32).endswith("top-1 agrees on 1 of 2 pictures.")


def test_speedup_table_pairs_the_rounds_with_the_baseline(nb):
    seconds = {"base": [2.0, 4.0, 3.0], "fast": [1.0, 1.0, 1.5]}
    table = nb.speedup_table(seconds, "base", batch_size=10)
    assert table.loc["fast", "speedup_x"] == 2.0
    assert (table.loc["fast", "slowest_round_x"], table.loc["fast", "fastest_round_x"]) == (2.0, 4.0)
    assert table.loc["base", "ms_per_batch"] == 3000.0 and table.loc["base", "images_per_s"] == 3.33


def test_time_variant_times_the_net_in_its_own_number_format_on_the_device_it_is_given(nb):
    seen = []

    class Half(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(1, dtype=torch.float16))

        def forward(self, inputs):
            seen.append((inputs.dtype, torch.is_inference_mode_enabled()))
            return inputs

    seconds = nb.time_variant(Half(), torch.ones(2, 3), torch.device("cpu"), calls=3)()
    assert seen == [(torch.float16, True)] * 5, "two warm-up calls, then three timed ones"
    assert 0 <= seconds < 1


# --- Going deeper C: the build failure, the fresh process and the shipped file's check ------------

def test_build_failure_is_one_line_with_the_errors_type_and_last_line(nb):
    class InductorError(RuntimeError):  # torch._inductor.exc.InductorError wraps what failed
        pass

    error = InductorError("OSError: CUDA_HOME environment variable is not set. Please set it to your "
                          "CUDA install root.\n")
    assert nb.build_failure(error) == ("the build failed (InductorError: OSError: CUDA_HOME environment "
                                       "variable is not set. Please set it to your CUDA install root.)")
    assert nb.build_failure(RuntimeError("a\n\n  b  \n")) == "the build failed (RuntimeError: b)"
    assert nb.build_failure(OSError()) == "the build failed (OSError: no message)"


@pytest.mark.parametrize("path, loader", [("model.aoti.pt2", "aoti"), ("model.pt2", "export")])
def test_first_answer_loads_each_kind_of_file_with_its_own_loader(nb, monkeypatch, tmp_path, path, loader):
    used = []
    model = lambda images: images * 2  # noqa: E731
    monkeypatch.setattr(torch._inductor, "aoti_load_package", lambda p: used.append(("aoti", p)) or model,
                        raising=False)
    monkeypatch.setattr(torch.export, "load", lambda p: used.append(("export", p))
                        or types.SimpleNamespace(module=lambda: model))
    images = tmp_path / "images.pt"
    torch.save(torch.ones(3, 2), images)
    result = nb.first_answer(str(tmp_path / path), str(images))
    assert used == [(loader, str(tmp_path / path))]
    assert torch.equal(result["answers"], torch.full((3, 2), 2.0))
    assert result["load_s"] >= 0 and result["first_call_s"] >= 0


def fake_subprocess_run(behaviour):
    """A stand-in for subprocess.run(command, check=True, capture_output=True, text=True, timeout=...):
    'ok' writes the result file the script would write, 'fail' raises CalledProcessError with stderr,
    'slow' raises TimeoutExpired, as the real one does."""
    import subprocess

    calls = []

    def run(command, check, capture_output, text, timeout):
        calls.append({"command": command, "check": check, "timeout": timeout,
                      "script": open(command[1]).read()})
        if behaviour == "fail":
            raise subprocess.CalledProcessError(1, command, "", "Traceback ...\nRuntimeError: bad file\n")
        if behaviour == "slow":
            raise subprocess.TimeoutExpired(command, timeout)
        torch.save({"answers": torch.load(command[3]) + 1, "load_s": 0.5, "first_call_s": 0.1}, command[4])
        return subprocess.CompletedProcess(command, 0, "", "")
    return run, calls


@pytest.mark.parametrize("behaviour, expected", [
    ("ok", None), ("fail", "RuntimeError: bad file"),
    ("slow", "no answer within 7 s; the process was stopped")])
def test_run_in_fresh_process_runs_the_functions_source_with_a_time_limit_and_leaves_nothing(
        nb, monkeypatch, behaviour, expected):
    run, calls = fake_subprocess_run(behaviour)
    monkeypatch.setattr(nb.subprocess, "run", run)
    result = nb.run_in_fresh_process(nb.first_answer, "shipped.pt2", torch.zeros(2, 3), time_limit_s=7)
    [call] = calls
    assert call["command"][0] == sys.executable and call["command"][2] == "shipped.pt2"
    assert call["check"] is True and call["timeout"] == 7
    assert call["script"].startswith("def first_answer(path, images_path):")
    assert "result = first_answer(sys.argv[1], sys.argv[2])" in call["script"]
    assert result["folder_gone"] is True and result["process_s"] >= 0
    if expected is None:
        assert torch.equal(result["answers"], torch.ones(2, 3))
    else:
        assert result["error"] == expected


def test_round_trip_verdict_reports_the_error_or_the_check(nb):
    reference = torch.eye(3)
    assert nb.round_trip_verdict("file", {"error": "bad"}, reference) == "file, fresh process: FAILED (bad)"
    assert nb.round_trip_verdict("file", {"answers": reference.clone()}, reference).startswith(
        "file, fresh process: within float32's tolerance")
    assert "OUTSIDE" in nb.round_trip_verdict("file", {"answers": reference * 1.01}, reference)


def test_cold_starts_lists_the_compile_and_each_fresh_process(nb):
    results = {"file": {"load_s": 1.0, "first_call_s": 0.2, "process_s": 4.0},
               "broken": {"error": "bad", "process_s": 2.0}}
    cold = nb.cold_starts(results, "torch.compile (inductor), this process", 30.0)
    assert cold == {"torch.compile (inductor), this process": {"first_call_s": 30.0},
                    "file, fresh process": {"load_s": 1.0, "first_call_s": 0.2, "process_s": 4.0},
                    "broken, fresh process": {"load_s": None, "first_call_s": None, "process_s": 2.0}}
