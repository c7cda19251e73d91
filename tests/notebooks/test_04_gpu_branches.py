"""Notebook 04's GPU side, run on the CPU: the synchronize demo and the Timer with stand-ins shaped like
torch.cuda, the cells that compare the CPU with a GPU fed a T4 run of the sweep played back (step times
made by the cost model from numbers like a Colab T4's), the CPU-alone side of the same cells, and the
helpers' branches for a GPU, a Mac and the CPU."""
import math
import warnings

import pandas as pd
import pytest
import torch

from support.notebook_04 import CPU, GPU, expected_parameters, helpers_and
from support.notebook_code import load_helpers, run_cell

nb = load_helpers("04")


# --- naive against synchronized timing ----------------------------------------------------------

@pytest.mark.gpu_branch("04", "sync_demo_size: torch.device(device).type == 'cpu'")
def test_sync_demo_uses_a_large_product_on_a_gpu():
    assert nb.sync_demo_size(CPU) < nb.sync_demo_size(GPU) == 4096
    assert nb.sync_demo_size("mps") >= 4096
    assert 2 * nb.sync_demo_size("cuda") ** 3 > 1e11  # over 100 GFLOPs: milliseconds on any GPU


@pytest.mark.gpu_branch("04", "describe_sync_demo: device_type == 'cpu'")
def test_sync_demo_reads_its_own_numbers():
    gpu = nb.describe_sync_demo("cuda", naive_s=20e-6, synchronized_s=25e-3)
    assert gpu.startswith("cuda: naive 0.02 ms, synchronized 25 ms.") and "1,250 times too small" in gpu
    cpu = nb.describe_sync_demo("cpu", naive_s=30e-3, synchronized_s=31e-3)
    assert "agree within 3%" in cpu and "synchronous" in cpu


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

    def zeros(self, *size, device=None):
        return torch.zeros(*size)


def test_the_synchronize_demo_on_a_cuda_gpu_synchronizes_before_the_correct_timing():
    """On a GPU the cell lets the naive timing's queued work finish, then times with time_it on the GPU
    (time_it's own synchronizing: test_shared_setup.py)."""
    events = []
    space = helpers_and(DEVICES=[GPU], torch=TorchWithCuda(CudaCalls()),
                        sync_demo_size=lambda device: 64,  # a CPU multiplies 4096² matrices slowly
                        time_it_naive=lambda fn: events.append("naive") or 1e-5,
                        synchronize=lambda device: events.append(("synchronize", device)),
                        time_it=lambda fn, device: events.append(("time_it", device)) or 25e-3)
    out = run_cell("04", "sync-demo", space)
    assert events == ["naive", ("synchronize", GPU), ("time_it", GPU)]
    assert space["sync_ratios"] == {"cuda": pytest.approx(2500)}
    assert out.startswith("cuda: naive 0.01 ms, synchronized 25 ms. The naive timing is 2,500 times "
                          "too small")


def test_side_by_side_shows_the_cpu_alone_or_both_devices_and_the_speedup():
    results = played_back_results()
    assert list(nb.side_by_side(results).columns) == ["params", "cpu_s"]
    comparison = nb.side_by_side(results, "cuda")
    assert comparison.index.tolist() == list(range(2, 13))
    assert (comparison.speedup == comparison.cpu_s / comparison.gpu_s).all()
    assert comparison.speedup.iloc[0] < 1 < comparison.speedup.iloc[-1]  # the GPU loses small, wins large


def test_plot_timings_draws_this_run_saved_runs_and_each_crossover():
    import matplotlib.pyplot as plt

    results = played_back_results()
    current = [("cpu (this run)", results[results.device == "cpu"]),
               ("cuda (this run)", results[results.device == "cuda"])]
    figure = nb.plot_timings(current, [("saved", results[results.device == "cpu"])], [1e5, 2e6])
    axis = figure.axes[0]
    assert [line.get_linestyle() for line in axis.lines[:3]] == ["-", "-", "--"]
    markers = [line.get_marker() for line in axis.lines[:3]]
    assert len(set(markers)) == 3 and "None" not in markers  # not told apart by colour alone
    assert len(axis.lines) == 5 and axis.get_xscale() == axis.get_yscale() == "log"  # + two crossovers
    assert "parameters" in axis.get_xlabel() and "(s, log scale)" in axis.get_ylabel() and axis.get_title()
    plt.close(figure)


def test_the_sweep_plots_alt_text_says_where_each_line_runs_and_where_they_cross():
    results = played_back_results()
    cpu, cuda = results[results.device == "cpu"], results[results.device == "cuda"]
    current = [("x86_64 CPU (AVX2) · lab (8 cores) · 2026-01-31 (this run)", cpu),
               ("Tesla T4 · lab (8 cores) · 2026-01-31 (this run)", cuda)]
    text = nb.describe_timing_plot(current, [("saved", cpu)], [123456.0])
    first = f"x86_64 CPU (AVX2), solid, from {cpu.s_per_100_epochs.iloc[0]:.2g} s at {cpu.params.iloc[0]:,.0f} "
    assert text.startswith(first + "parameters to ") and "; Tesla T4, solid, from " in text
    assert text.endswith("; 1 dashed line of runs saved earlier; a dotted vertical line at each crossover: "
                         "123,456 parameters")
    alone = nb.describe_timing_plot(current[:1], [("a", cpu), ("b", cpu)], [])
    assert alone.startswith(first) and alone.endswith("; 2 dashed lines of runs saved earlier")
    assert "crossover" not in alone and "Tesla" not in alone


# --- Step 4: two numbers, and the break-even they give ------------------------------------------

def test_the_fixed_cost_is_read_off_the_smallest_model_of_the_sweep():
    """A sweep made by the cost model from known numbers: Step 4's table gives those numbers back."""
    space = helpers_and(DEVICES=[CPU, GPU], DEPTHS=list(range(2, 13)), results=played_back_results(),
                        torch=TorchWithCuda(CudaCalls()), time_it=lambda fn, device, repeats: 0.125)
    run_cell("04", "device-numbers", space)
    machine = space["machine"]
    assert machine.index.tolist() == ["cpu", "cuda"] and machine.name.tolist() == ["x86_64 CPU (AVX2)",
                                                                                   "Tesla T4"]
    # depth 2: 18 operations of 20 µs (40 µs on the GPU) and 9,600 FLOPs of arithmetic per step
    assert machine.fixed_cost_us.tolist() == pytest.approx([20.0, 40.0], rel=1e-3)
    assert machine.gflop_per_s.tolist() == pytest.approx([2 * 2048**3 / 0.125 / 1e9] * 2)


# --- A T4 run of the sweep, played back: step times made by the cost model from numbers like a Colab T4's
# (launch-bound for every depth of the sweep) beside its 2-core CPU.
T4_CPU = (20e-6, 50e9)  # seconds per operation, FLOP/s: the CPU adds its two costs
T4_GPU = (40e-6, 8e12)  # the GPU overlaps them


def played_back_results(depths=range(2, 13), batch_sizes=(100,), epochs=20):
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
                             "s_per_100_epochs": 100 * epoch_s})
    return pd.DataFrame(rows)


@pytest.mark.gpu_branch("04", "cell sweep-plot: len(DEVICES) > 1")
@pytest.mark.gpu_branch("04", "cell break-even: len(DEVICES) == 1")
@pytest.mark.gpu_branch("04", "cell fitted-break-even: device.type != 'cpu'")
@pytest.mark.gpu_branch("04", "cell fitted-break-even: gpu_fit is not None")
@pytest.mark.gpu_branch("04", "cell batch-read: len(DEVICES) > 1")
def test_the_cpu_against_gpu_cells_of_a_t4_run(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    machine = pd.DataFrame({"name": ["x86_64 CPU (AVX2)", "Tesla T4"], "fixed_cost_us": [20.0, 40.0],
                            "gflop_per_s": [50.0, 8000.0]}, index=pd.Index(["cpu", "cuda"], name="device"))
    batch_results = played_back_results(depths=[2, 6, 10, 11], batch_sizes=(10, 100, 1000), epochs=5)
    batch_results["model_epoch_s"] = batch_results.epoch_s
    reported = []
    space = helpers_and(device=GPU, DEVICES=[CPU, GPU], DEPTHS=list(range(2, 13)), EPOCHS=20, FAST=False,
                        DATA_DIR=tmp_path, results=played_back_results(), machine=machine,
                        sync_ratios={"cpu": 1.0, "cuda": 1250.0}, batch_results=batch_results,
                        report_figures=lambda **figures: reported.append(figures))
    out = ""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*non-interactive", category=UserWarning)  # plt.show, Agg
        for cell_id in ("sweep-plot", "sweep-table", "break-even", "figures", "fit",
                        "cost-plot", "fitted-break-even", "batch-read"):
            out += run_cell("04", cell_id, space)

    (crossover,) = space["crossovers"]
    assert expected_parameters(7) < crossover < expected_parameters(9)
    assert list(space["comparison"].columns) == ["params", "cpu_s", "gpu_s", "speedup"]
    assert f"The curves of the CPU and cuda cross at {crossover:,.0f} parameters." in out
    assert "cuda: break-even at 1,000,000 FLOPs per operation; the 9-layer model" in out
    assert "Only the CPU was measured" not in out

    saved = sorted(path.name for path in tmp_path.glob("04_disc_timings_*.csv"))
    assert [name.split("_")[3] for name in saved] == ["cpu", "cuda"]
    assert set(pd.read_csv(next(tmp_path.glob("04_disc_timings_cuda_*.csv"))).device) == {"cuda"}

    assert reported == [{"crossover_params": round(crossover), "crossovers": 1, "epochs": 20,
                         "cpu_fixed_cost_us": 20.0, "cpu_matmul_gflop_per_s": 50.0,
                         "cpu_synchronized_over_naive": 1.0, "cuda_fixed_cost_us": 40.0,
                         "cuda_matmul_gflop_per_s": 8000.0, "cuda_synchronized_over_naive": 1250.0}]

    assert "cuda (larger of the two): fitted overhead 40.0 µs" in out
    assert "every model of the sweep was launch-bound" in out  # a T4 on this sweep: no arithmetic term
    assert space["fits"]["cuda"][0] == pytest.approx(40e-6) and space["fits"]["cuda"][1] == math.inf
    assert space["fits"]["cpu"] == pytest.approx(T4_CPU)
    assert f"The fitted models cross at: {crossover:,.0f} parameters | measured: {crossover:,.0f}" in out
    assert "Break-even: cuda wins once an operation carries more than 1,000,000 FLOPs" in out
    for batch_size in (10, 100, 1000):
        assert f"Batches of {batch_size}: the CPU and GPU curves cross at" in out
    crossings = nb.batch_crossovers(batch_results, "cuda")
    assert crossings[10][0] > crossings[100][0] > crossings[1000][0]  # smaller batches: a later crossover
    assert all(len(found) == 1 for found in crossings.values())
    assert "cuda: with batches of 10 an epoch took" in out


def test_the_cpu_alone_reports_its_own_figures_and_no_crossover(tmp_path):
    reported = []
    cpu_results = played_back_results(depths=[2, 4, 6])
    cpu_results = cpu_results[cpu_results.device == "cpu"]
    machine = pd.DataFrame({"fixed_cost_us": [20.04], "gflop_per_s": [50.04]}, index=["cpu"])
    space = helpers_and(device=CPU, DEVICES=[CPU], DEPTHS=[2, 4, 6], EPOCHS=5, FAST=True, DATA_DIR=tmp_path,
                        results=cpu_results, machine=machine, sync_ratios={"cpu": 1.04},
                        report_figures=lambda **figures: reported.append(figures))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*non-interactive", category=UserWarning)
        out = "".join(run_cell("04", cell_id, space)
                      for cell_id in ("sweep-plot", "sweep-table", "break-even", "figures"))
    assert space["crossovers"] == [] and list(space["comparison"].columns) == ["params", "cpu_s"]
    assert "Only the CPU was measured: no crossover to find." in out
    assert "Only the CPU was measured. Its operations carry 533 (2 layers)" in out
    assert list(tmp_path.glob("*.csv")) == []  # fast mode saves nothing
    assert reported == [{"crossover_params": None, "crossovers": 0, "epochs": 5, "cpu_fixed_cost_us": 20.04,
                         "cpu_matmul_gflop_per_s": 50.0, "cpu_synchronized_over_naive": 1.0}]


def test_the_fitted_crossovers_match_the_measured_ones():
    results = played_back_results()
    comparison = nb.side_by_side(results, "cuda")
    measured = nb.find_crossovers(comparison.params, comparison.cpu_s, comparison.gpu_s)
    fitted = nb.fitted_crossovers(list(range(2, 13)), comparison.params, T4_CPU, T4_GPU)
    assert fitted == pytest.approx(measured) and len(fitted) == 1
    assert nb.fitted_crossovers([2, 3], [22, 70], T4_CPU, (1e-6, 8e12)) == []  # faster from the start


@pytest.mark.gpu_branch("04", "describe_break_even: gpu_fit is None")
def test_break_even_sentence():
    cpu_fit, gpu_fit = (5e-6, 100e9), (10e-6, 8e12)
    assert "500,000 FLOPs" in nb.describe_break_even(cpu_fit, gpu_fit, "cuda")
    assert "every model" in nb.describe_break_even(cpu_fit, (1e-6, 8e12), "cuda")
    assert "never catches up" in nb.describe_break_even(cpu_fit, (10e-6, 1e10), "cuda")
    assert "100,000 FLOPs per operation" in nb.describe_break_even(cpu_fit)  # 1 µs × 100 GFLOP/s
    assert "no arithmetic term" in nb.describe_break_even((20e-6, math.inf))


# --- Going deeper D: a cold start, Timer, a busy machine -------------------------------------------

@pytest.mark.gpu_branch("04", "describe_cold_warm: device_type == 'cpu'")
def test_cold_warm_sentence_reads_the_numbers():
    cold = nb.describe_cold_warm("cuda", cold_s=0.9, warm_s=0.03)
    assert "900 ms" in cold and "30.0 times" in cold and "start-up" in cold
    cpu = nb.describe_cold_warm("cpu", cold_s=0.047, warm_s=0.026)
    assert "47 ms" in cpu and "1.8 times" in cpu and "On a GPU" in cpu


@pytest.mark.parametrize("accelerator", ["mps", "xpu"])
def test_benchmark_timer_synchronizes_an_accelerator_after_every_run(monkeypatch, accelerator):
    """Timer synchronizes MPS only from PyTorch 2.9: the notebook's timed statement synchronizes itself."""
    events = []
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda device=None: events.append("sync"))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: events.append("sync"))  # shared cell, MPS
    nb.benchmark_timer(lambda: events.append("run"), torch.device(accelerator)).timeit(number=5)
    runs = [index for index, event in enumerate(events) if event == "run"]
    # each run is followed by a synchronize (Timer's own clock may synchronize as well: extra ones are fine)
    assert len(runs) >= 5 and all(index + 1 < len(events) and events[index + 1] == "sync" for index in runs)


def test_benchmark_timer_synchronizes_a_cuda_gpu_after_every_run(monkeypatch):
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append(("sync", device)))
    nb.benchmark_timer(lambda: events.append("run"), GPU).timeit(number=5)
    runs = [index for index, event in enumerate(events) if event == "run"]
    assert len(runs) >= 5 and all(events[index + 1] == ("sync", GPU) for index in runs), events


# --- the GPU branches of the helpers, run on the CPU with stand-ins shaped like the real torch API ----

@pytest.mark.gpu_branch("04", "devices_to_compare: device.type != 'cpu'")
def test_devices_to_compare_holds_the_cpu_and_the_accelerator():
    assert nb.devices_to_compare(CPU) == [CPU]
    for accelerator in (GPU, torch.device("mps"), torch.device("cuda", 1)):
        assert nb.devices_to_compare(accelerator) == [CPU, accelerator]


@pytest.mark.gpu_branch("04", "describe_device: device.type == 'cuda'")
@pytest.mark.gpu_branch("04", "describe_device: device.type == 'cpu'")
def test_describe_device_names_a_cuda_gpu_by_its_name(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: asked.append(device) or "Tesla T4")
    assert nb.describe_device(GPU) == "Tesla T4" and asked == [GPU]
    assert nb.describe_device(CPU).endswith(f"CPU ({torch.backends.cpu.get_cpu_capability()})")
    assert nb.describe_device(torch.device("mps")) == "mps" and len(asked) == 1
