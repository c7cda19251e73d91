"""Tests of notebook 05's helpers and cells (Find the bottleneck, then make training faster).

They call the notebook's decisions with made-up inputs, each at the exact edge of its conditions: the
bottleneck verdict, the DataLoader workers per start method (and what fastai really starts), the
compilers and the torch.compile backend they lead to, the autocast type per device and PyTorch
release, the fused optimizer's devices, the timing rounds and their verdicts, the tolerance of the
correctness check, and the profiler's table and timeline (with stand-in GPU events shaped like the
profiler's own).

They also run for real, on the CPU, every variant of the notebook that PyTorch lets a CPU run: the
float16 step with a GradScaler (torch.amp.GradScaler("cpu") and torch.autocast("cpu", float16)),
bfloat16 autocast, channels_last, the fused optimizer, torch.compile with aot_eager, DataLoader workers
started with `spawn`; and they check, as the notebook only prints, that each keeps the results. Each
test says what only a GPU can show. The helpers take the device, the sizes and the data they use (a
Job, a Run), so these tests call them directly on the CPU.

Last, they run whole the notebook's cells that a GPU, a Mac and a CPU take different ways through
(notebook_code.run_cell), with stand-ins where only the device can answer, shaped like PyTorch's own
answers: torch.cuda.get_device_capability's (major, minor), and a profile of a GPU run made of the
profiler's own FunctionEvent and EventList classes; and each exercise's check with the wrong answer a
learner is likely to write.
"""
import ast
import contextlib
import itertools
import logging
import math
import os
import re
import statistics
import sys
import time
import types
import warnings

import pandas as pd
import pytest
import torch
from torch import nn
from torch.autograd import DeviceType

import manifest
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader
from torch.utils.flop_counter import FlopCounterMode

from support.notebook_code import code_cells, core_cells, load_helpers, notebook_path, read, run_cell

nb = load_helpers("05")
NOTEBOOK = read(notebook_path("05"))
CPU = torch.device("cpu")


CPU_AT_04 = {"launch_s": 25e-6, "flop_per_s": 100e9}  # about what notebook 04 measured on 2 cores
T4_LIKE = {"launch_s": 10e-6, "flop_per_s": 8e12}
up, down = (lambda x: math.nextafter(x, math.inf)), (lambda x: math.nextafter(x, -math.inf))


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One PyTorch thread: these tests check results, not speed, and on a shared machine PyTorch's
    threads wait for each other at every small operation (notebook 04 showed by how much)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def shapes_module(tmp_path_factory):
    """The notebook's dataset module, written to a temporary folder and imported from there."""
    return nb.load_dataset_module(tmp_path_factory.mktemp("nb05_code"))


TINY = dict(feed="decoded, on the device", batch_size=8, width=4, image_size=16, source_size=32,
            count=64, steps=41)  # 41 steps: 3 rounds of 2 warm-up steps leave one to finish a run


def tiny_job(shapes_module, **changes):
    """The notebook's Job for a small setting of its own, on the CPU, made by the notebook's make_job."""
    return nb.make_job("tiny", {**TINY, **changes}, shapes_module, CPU, rounds=3, test_count=32)


# --- the verdict: data-bound, launch-bound or compute-bound -----------------------------------------

def test_waiting_for_data_as_long_as_computing_is_data_bound_whatever_the_rest():
    assert nb.classify_step(0.020, 0.020, 150, 1e12, **CPU_AT_04) == "data-bound"  # equal: data
    assert nb.classify_step(0.050, 0.004, 150, 1e6, **CPU_AT_04) == "data-bound"
    assert nb.classify_step(down(0.020), 0.020, 150, 1e12, **CPU_AT_04) != "data-bound"


def test_launch_cost_equal_to_the_arithmetic_is_launch_bound_and_a_hair_more_arithmetic_is_not():
    # 4 operations x 0.25 s = 1 s of fixed cost, against 2 FLOP / 2 FLOP/s = 1 s of arithmetic
    assert nb.classify_step(0.0, 1.0, 4, 2.0, launch_s=0.25, flop_per_s=2.0) == "launch-bound"
    assert nb.classify_step(0.0, 1.0, 4, up(2.0), launch_s=0.25, flop_per_s=2.0) == "compute-bound"


def test_many_operations_with_little_arithmetic_are_launch_bound():
    assert nb.classify_step(0.0001, 0.004, 150, 18e6, **CPU_AT_04) == "launch-bound"


def test_the_same_step_can_be_compute_bound_on_a_cpu_and_launch_bound_on_a_gpu():
    step = dict(data_s=0.0001, compute_s=0.050, operations=150, flops=1.1e9)
    assert nb.classify_step(**step, **CPU_AT_04) == "compute-bound"
    assert nb.classify_step(**step, **T4_LIKE) == "launch-bound"


def steps_of(parts, factors=(0.5, 1.0, 1.5)):
    """A `times` dict of the timing loop (part: [seconds of each step]) whose medians are `parts`."""
    return {part: [factor * seconds for factor in factors] for part, seconds in parts.items()}


def test_the_verdict_table_holds_each_settings_times_costs_and_verdict():
    step_parts = {"heavy data": steps_of({"data": 0.030, "forward": 0.004, "backward": 0.005, "optimizer": 0.001}),
                  "big model": steps_of({"data": 0.0001, "forward": 0.020, "backward": 0.030, "optimizer": 0.001})}
    operations = pd.DataFrame({"forward": [20.0, 20.0], "backward": [30.0, 30.0], "optimizer": [100.0, 100.0]},
                              index=["heavy data", "big model"])
    flops = {"heavy data": 1e7, "big model": 5e9}
    rounds = {"launch_rounds": [20e-6, 25e-6, 40e-6], "flop_rounds": [120e9, 100e9, 80e9]}
    table = nb.verdict_table(step_parts, operations, flops, **rounds)
    assert list(table.verdict) == ["data-bound", "compute-bound"]
    big = table.loc["big model"]
    assert (big.data_ms, big.compute_ms, big.operations) == (0.1, 51.0, 150.0)  # rounded to 0.001 ms
    # the two costs with the medians of the rounds: 25 µs and 100 GFLOP/s
    assert (big.launch_cost_ms, big.gflop, big.arithmetic_ms) == (3.75, 5.0, 50.0)
    flops["big model"] = 4.5e8  # launch cost 0.8, 0.83 and 1.07 times the arithmetic, round by round
    assert nb.verdict_table(step_parts, operations, flops, **rounds).verdict["big model"] == "inconclusive"


# The rounds of a busy 2-core machine (issue 43): launch overhead and throughput measured side by side,
# the launch cost of the big model 0.5 to 1.3 times its arithmetic from round to round.
BUSY_LAUNCH_S, BUSY_FLOP_PER_S = [10e-6, 26e-6, 14e-6], [100e9, 100e9, 100e9]
BIG_STEP = dict(data_steps=[0.0002, 0.0003], compute_steps=[0.060, 0.070], operations=150,
                flops=3e8)  # 3 ms of arithmetic


def test_the_data_and_compute_of_each_step_come_from_its_parts():
    times = {"data": [0.03, 0.04], "forward": [0.004, 0.005], "backward": [0.005, 0.006], "optimizer": [0.001, 0.002]}
    data, compute = nb.data_and_compute(times)
    assert data == [0.03, 0.04] and compute == pytest.approx([0.010, 0.013])


def test_a_verdict_stands_only_when_every_step_gives_it_data_against_compute():
    rounds = dict(operations=150, flops=3e8, launch_rounds=[10e-6] * 3, flop_rounds=[100e9] * 3)
    assert nb.classify_rounds([0.05, 0.06, 0.05], [0.01, 0.02, 0.05], **rounds) == "data-bound"  # one equal
    assert nb.classify_rounds([0.05, 0.06, down(0.05)], [0.01, 0.02, 0.05], **rounds) == "inconclusive"
    assert nb.classify_rounds([0.001, 0.002, 0.003], [0.01, 0.02, 0.05], **rounds) == "compute-bound"


def test_a_verdict_stands_only_when_every_round_of_the_costs_gives_it():
    assert nb.launch_over_arithmetic(150, 3e8, BUSY_LAUNCH_S, BUSY_FLOP_PER_S) == pytest.approx([0.5, 1.3, 0.7])
    assert nb.classify_rounds(**BIG_STEP, launch_rounds=BUSY_LAUNCH_S, flop_rounds=BUSY_FLOP_PER_S) == (
        "inconclusive")
    # both sides of the boundary: every round on one side of 1x, and one round exactly at it
    assert nb.classify_rounds(**BIG_STEP, launch_rounds=[10e-6, 14e-6, down(20e-6)],
                              flop_rounds=BUSY_FLOP_PER_S) == "compute-bound"
    assert nb.classify_rounds(**BIG_STEP, launch_rounds=[10e-6, 14e-6, 20e-6],
                              flop_rounds=BUSY_FLOP_PER_S) == "inconclusive"  # 20 µs: launch-bound
    assert nb.classify_rounds(**BIG_STEP, launch_rounds=[20e-6, 26e-6, 30e-6],
                              flop_rounds=BUSY_FLOP_PER_S) == "launch-bound"
    # a step that waits for its data at least as long as it computes is data-bound in every round
    waiting = {**BIG_STEP, "data_steps": [0.060, 0.070]}
    assert nb.classify_rounds(**waiting, launch_rounds=BUSY_LAUNCH_S, flop_rounds=BUSY_FLOP_PER_S) == (
        "data-bound")
    one = nb.classify_rounds([0.0002], [0.060], 150, 3e8, launch_rounds=[20e-6], flop_rounds=[100e9])
    assert one == nb.classify_step(0.0002, 0.060, 150, 3e8, 20e-6, 100e9)  # one step, one round


def test_the_costs_are_measured_side_by_side_in_every_round():
    calls = []
    launch, throughput = iter([1.0, 2.0, 3.0]), iter([10.0, 20.0, 30.0])
    rounds = nb.cost_rounds(lambda: calls.append("launch") or next(launch),
                            lambda: calls.append("flops") or next(throughput), 3)
    assert rounds == ([1.0, 2.0, 3.0], [10.0, 20.0, 30.0])
    assert calls == ["launch", "flops"] * 3


@pytest.mark.parametrize("verdict, data_ratios, said", [
    ("compute-bound", [0.01, 0.02], "big model: compute-bound (as built)"),
    ("launch-bound", [0.01, 0.02], "big model: launch-bound (built to be compute-bound)"),
    ("inconclusive", [0.01, 0.02], "big model: inconclusive on this machine: run again (launch cost 0.50× "
                                   "to 1.30× the arithmetic over 3 rounds; built to be compute-bound)"),
    ("inconclusive", [0.9, 1.0], "big model: inconclusive on this machine: run again (data 0.90× to 1.00× "
                                 "the compute over 2 training steps; built to be compute-bound)"),
])
def test_each_verdict_is_said_beside_what_its_setting_was_built_to_be(verdict, data_ratios, said):
    assert nb.verdict_in_words("big model", verdict, "compute-bound", data_ratios, [0.5, 1.3, 0.7]) == said


# --- DataLoader workers and the start method ---------------------------------------------------------

def test_fork_workers_inherit_the_class_so_any_dataset_works():
    workers, why = nb.choose_num_workers(2, "fork", dataset_importable=False)
    assert workers == 2 and "fork" in why


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_fresh_workers_need_an_importable_dataset_class(start_method):
    assert nb.choose_num_workers(4, start_method, dataset_importable=True)[0] == 4
    workers, why = nb.choose_num_workers(4, start_method, dataset_importable=False)
    assert workers == 0
    assert start_method in why and "import" in why


def test_no_workers_asked_for_means_none_and_one_asked_for_means_one():
    assert nb.choose_num_workers(0, "fork", dataset_importable=True)[0] == 0
    assert nb.choose_num_workers(1, "spawn", dataset_importable=True)[0] == 1


def test_the_dataset_module_is_written_imported_and_deterministic(shapes_module):
    assert shapes_module.__name__ == nb.DATASET_MODULE
    assert shapes_module.__file__.endswith(f"{nb.DATASET_MODULE}.py")
    data = shapes_module.MadeUpShapes(8, source_size=48, image_size=16, seed=3)
    image, label = data[5]
    assert image.shape == (3, 16, 16) and image.dtype == torch.float32
    assert label == 5 % len(shapes_module.SHAPES)
    assert torch.equal(data[5][0], image)  # the same augmentation every time, in every process


def test_the_dataset_module_is_rewritten_only_when_its_code_changed(tmp_path):
    nb.load_dataset_module(tmp_path)
    path = tmp_path / f"{nb.DATASET_MODULE}.py"  # (the module itself may come from an earlier import)
    os.utime(path, ns=(0, 0))  # mark the file: a rewrite would give it a new modification time
    nb.load_dataset_module(tmp_path)
    assert os.stat(path).st_mtime_ns == 0
    with open(path, "a") as file:
        file.write("# changed by hand\n")
    nb.load_dataset_module(tmp_path)
    assert os.stat(path).st_mtime_ns != 0 and "changed by hand" not in open(path).read()


def loader_batches(loader):
    """Every batch of one epoch, as a list of (images, labels)."""
    return [(images.clone(), labels.clone()) for images, labels in loader]


def test_spawned_workers_import_the_dataset_module_and_give_the_baselines_batches(shapes_module):
    data = shapes_module.MadeUpShapes(12, source_size=48, image_size=16, seed=4)
    baseline = DataLoader(data, batch_size=4, drop_last=True, sampler=nb.shuffled(data))  # make_run's
    loader = nb.loader_with_workers(data, 4, workers=1, device=CPU)
    loader.multiprocessing_context = "spawn"  # a fresh Python, as on Windows and macOS
    with_workers, in_process = loader_batches(loader), loader_batches(baseline)
    assert len(with_workers) == len(in_process) == 3
    for (images_a, labels_a), (images_b, labels_b) in zip(in_process, with_workers):
        assert torch.equal(images_a, images_b) and torch.equal(labels_a, labels_b)


def test_a_class_that_lives_only_in_this_process_cannot_go_to_spawned_workers():
    # the notebook's fallback when the module file cannot be written: a module no other process can import
    module = nb.module_from_source(name="nb05_shapes_in_this_process_only")
    data = module.MadeUpShapes(4, source_size=32, image_size=8)
    loader = DataLoader(data, batch_size=2, num_workers=1, multiprocessing_context="spawn")
    # PyTorch warns about the pickling error, then it is raised
    with pytest.warns(UserWarning, match="pickle"), pytest.raises(Exception, match="(?i)pickl|import"):
        next(iter(loader))


@pytest.mark.parametrize("device_type, workers", [("cuda", 2), ("cuda", 0), ("cpu", 2), ("cpu", 0),
                                                  ("mps", 2)])
def test_the_fix_starts_workers_keeps_them_and_pins_memory_for_a_cuda_gpu_only(device_type, workers):
    # Step 3's prose: num_workers worker processes, persistent_workers=True keeps them between epochs
    # (PyTorch refuses it without workers), pinned memory for copies to a CUDA GPU. A DataLoader starts
    # no worker and pins nothing before it is iterated, so the CPU can build the GPU's loader.
    loader = nb.loader_with_workers(list(range(64)), 32, workers, torch.device(device_type))
    assert (loader.num_workers, loader.persistent_workers) == (workers, workers > 0)
    assert loader.pin_memory is (device_type == "cuda")
    assert loader.batch_size == 32 and loader.drop_last is True


def test_data_variants_add_the_fix_only_when_workers_can_run():
    assert nb.data_variants(0) == [{"name": "baseline: num_workers=0"}]
    assert nb.data_variants(2)[1] == {"name": "num_workers=2", "workers": 2}


def test_on_device_batches_cover_every_picture_once_per_epoch_in_a_fixed_order():
    images, labels = torch.arange(10.0).reshape(10, 1), torch.arange(10)
    first = nb.on_device_batches(images, labels, batch_size=3, seed=1)
    again = nb.on_device_batches(images, labels, batch_size=3, seed=1)
    epoch = [next(first) for _ in range(3)]  # 3 batches of 3; the 10th picture waits for the next epoch
    assert all(len(batch_labels) == 3 for _, batch_labels in epoch)
    assert len(set(torch.cat([batch_labels for _, batch_labels in epoch]).tolist())) == 9
    assert all(torch.equal(a[1], next(again)[1]) for a in epoch)


def test_a_job_decodes_on_the_device_only_where_its_setting_says_so(shapes_module):
    on_device = tiny_job(shapes_module)
    images, labels = on_device.decoded
    assert images.shape == (64, 3, 16, 16) and labels.tolist()[:5] == [0, 1, 2, 3, 0]
    assert on_device.test[0].shape == (32, 3, 16, 16) and on_device.device == CPU
    every_read = tiny_job(shapes_module, feed="decode on every read")
    assert every_read.decoded is None and len(every_read.train) == 64


def test_a_setting_that_decodes_on_every_read_gets_endless_batches_from_a_dataloader(shapes_module):
    job = tiny_job(shapes_module, feed="decode on every read")
    for variant in ({}, {"workers": 1}):  # the baseline, and Step 3's fix
        run = nb.make_run(job, variant)
        shapes = [tuple(images.shape) for images, _ in itertools.islice(run.batches, 64 // 8 + 2)]
        assert shapes == [(8, 3, 16, 16)] * (64 // 8 + 2)  # the loader starts again after an epoch
        run.batches.close()


# --- fastai's DataLoader: what it really starts --------------------------------------------

@pytest.mark.parametrize("platform_name", ["linux", "darwin", "win32"])
@pytest.mark.parametrize("in_notebook", [False, True])
@pytest.mark.parametrize("asked", [0, 3])
def test_the_notebook_predicts_the_workers_fastai_really_starts(monkeypatch, platform_name, in_notebook,
                                                                asked):
    load = pytest.importorskip("fastai.data.load")
    monkeypatch.setattr(sys, "platform", platform_name)  # read by fastai's DataLoader.__init__
    monkeypatch.setattr(load, "IN_NOTEBOOK", in_notebook)
    loader = load.DataLoader(list(range(16)), bs=4, num_workers=asked)
    predicted, why = nb.fastai_num_workers(asked, platform_name, in_notebook)
    assert loader.fake_l.num_workers == predicted  # what fastai hands on to PyTorch's DataLoader
    assert why


def test_fastai_on_linux_keeps_workers_and_on_a_mac_drops_them_even_outside_a_notebook():
    assert nb.fastai_num_workers(4, "linux", in_notebook=True)[0] == 4
    assert nb.fastai_num_workers(4, "darwin", in_notebook=False) == (0, "fastai uses no workers on macOS")
    assert nb.fastai_num_workers(4, "win32", in_notebook=False)[0] == 4
    assert nb.fastai_num_workers(4, "win32", in_notebook=True)[0] == 0


# --- torch.compile: CUDA graphs (the compilers and the backend: tests/shared_cells/) ------------


@pytest.mark.gpu_branch("05", "cuda_graphs_need: device_type == 'cuda' and backend == 'inductor'")
def test_cuda_graphs_need_a_cuda_gpu_with_inductor():
    assert nb.cuda_graphs_need("cuda", "inductor") is None
    assert nb.cuda_graphs_need("cuda", "aot_eager")
    assert nb.cuda_graphs_need("cpu", "inductor")
    assert nb.cuda_graphs_need("mps", "inductor")


# --- the fused optimizer's devices --------------------------------------------------------

@pytest.mark.parametrize("device_type", ["cpu", "cuda", "mps", "xpu"])
def test_fused_adam_runs_on_cpus_cuda_mps_and_xpu(device_type):
    assert nb.fused_adam_need(device_type) is None  # MPS since PyTorch 2.4 (PR #127242)


@pytest.mark.parametrize("device_type", ["meta", "lazy", "ipu"])
def test_fused_adam_elsewhere_says_what_it_needs(device_type):
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    assert device_type not in _get_fused_kernels_supported_devices()  # truly elsewhere, by PyTorch
    assert "MPS" in nb.fused_adam_need(device_type)


def test_the_notebooks_fused_devices_are_among_pytorchs_own():
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    assert set(nb.FUSED_ADAM_DEVICES) <= set(_get_fused_kernels_supported_devices())


# --- mixed precision: which 16-bit type on which device, and the GradScaler on a Mac ------------------

@pytest.mark.gpu_branch("05", "autocast_plan: device_type == 'cuda'")
@pytest.mark.gpu_branch("05", "autocast_plan: device_type == 'cuda' and capability is not None and (tuple(capability) >= (8, 0))")
@pytest.mark.gpu_branch("05", "autocast_plan: device_type == 'mps'")
@pytest.mark.gpu_branch("05", "autocast_plan: device_type == 'mps' and release(torch_version) >= GRAD_SCALER_ON_MPS")
@pytest.mark.parametrize("device_type, capability, version, dtype, scaler", [
    ("cuda", (7, 5), "2.6.0", torch.float16, True),    # T4: no fast bfloat16
    ("cuda", (7, 0), "2.14.1", torch.float16, True),   # V100
    ("cuda", None, "2.14.1", torch.float16, True),     # capability unknown: the safe choice
    ("cuda", (8, 0), "2.14.1", torch.bfloat16, False),  # A100: exactly at the edge
    ("cuda", (9, 0), "2.14.1", torch.bfloat16, False),  # H100
    ("cpu", None, "2.14.1", torch.bfloat16, False),
    ("mps", None, "2.6.0", torch.float16, False),     # GradScaler("mps") fails in scaler.step there
    ("mps", None, "2.7.1", torch.float16, False),     # the last release without it
    ("mps", None, "2.8.0", torch.float16, True),      # the first with it (PR #150255)
    ("mps", None, "2.8.0a0+git1234", torch.float16, True),
    ("mps", None, "2.10.0", torch.float16, True),     # 10 > 8 as numbers, not as text
])
def test_autocast_plan_per_device_and_release(device_type, capability, version, dtype, scaler):
    chosen, needs_scaler, why = nb.autocast_plan(device_type, capability, torch_version=version)
    assert (chosen, needs_scaler) == (dtype, scaler)
    assert why


def test_on_a_mac_before_2_8_the_plan_says_why_there_is_no_scaler():
    why = nb.autocast_plan("mps", None, torch_version="2.7.1")[2]
    assert "without a GradScaler" in why and "2.8" in why and "2.7.1" in why


def test_the_scaler_gate_on_macs_is_the_release_that_brought_the_mps_kernels():
    # Checked in the macOS arm64 wheels: 2.7.1 has neither torch/amp/grad_scaler.py's MPS branch nor
    # the _amp_foreach_non_finite_check_and_unscale_ MPS kernel; 2.8.0 has both.
    assert nb.GRAD_SCALER_ON_MPS == (2, 8)
    assert nb.release("2.7.1+cpu") == (2, 7) and nb.release("2.10.0") == (2, 10)


def test_the_t4_reason_names_the_missing_bfloat16_tensor_cores():
    why = nb.autocast_plan("cuda", (7, 5))[2]
    assert "7.5" in why and "GradScaler" in why and "no bfloat16 Tensor Cores" in why
    assert "bfloat16 Tensor Cores" in nb.autocast_plan("cuda", (8, 0))[2]


def test_the_autocast_plan_never_asks_is_bf16_supported(monkeypatch):
    # By default torch.cuda.is_bf16_supported() counts emulation and says True on a T4, where bfloat16
    # has no Tensor Cores (torch/cuda/__init__.py: is_bf16_supported(including_emulation=True)); the
    # plan decides by the compute capability.
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: pytest.fail("asked"))
    assert nb.autocast_plan("cuda", (7, 5))[:2] == (torch.float16, True)
    assert nb.autocast_plan("cuda", (8, 0))[:2] == (torch.bfloat16, False)


@pytest.mark.parametrize("flags, starts_with", [
    ({"avx2", "avx512f", "amx_tile", "amx_bf16", "avx512_bf16"}, "AMX"),
    ({"avx2", "avx512f", "avx512_bf16"}, "AVX512-BF16"),
    ({"avx2", "avx512f", "avx512_vnni"}, "none"),  # an Ice Lake Xeon: AVX-512, but no BF16
    ({"fp", "asimd", "bf16"}, "ARM"),
    ({"sse4_2", "avx2", "fma"}, "none"),
    (set(), "unknown"),
])
def test_bf16_hardware_from_the_cpu_flags(flags, starts_with):
    assert nb.bf16_hardware(flags).startswith(starts_with)


def test_cpu_flags_reads_x86_and_arm_cpuinfo_and_tolerates_no_file(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu avx2\n")
    assert nb.cpu_flags(x86) == {"fpu", "avx2", "avx512_bf16"}
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n")
    assert "bf16" in nb.cpu_flags(arm)
    assert nb.cpu_flags(tmp_path / "missing") == set()


def tf32_switch():
    """The TF32 setting for matrix products: the new API from PyTorch 2.9, the old one before."""
    matmul = torch.backends.cuda.matmul
    return matmul.fp32_precision if hasattr(matmul, "fp32_precision") else matmul.allow_tf32


def test_run_conditions_switch_tf32_the_autotuner_and_threads_for_one_run_only():
    # Only an NVIDIA GPU shows what TF32 and the auto-tuner do; a CPU can check the switching.
    before = (torch.get_num_threads(), torch.backends.cudnn.benchmark, tf32_switch())
    with nb.run_conditions(threads=before[0] + 1, tf32=True, cudnn_benchmark=True):
        assert torch.get_num_threads() == before[0] + 1
        assert torch.backends.cudnn.benchmark is True
        assert tf32_switch() in ("tf32", True)
    assert (torch.get_num_threads(), torch.backends.cudnn.benchmark, tf32_switch()) == before


def test_before_pytorch_2_9_run_conditions_switch_tf32_with_allow_tf32(monkeypatch):
    # PyTorch 2.8 and older (Colab's and Kaggle's images can lag) have no matmul.fp32_precision; their
    # switch is torch.backends.cuda.matmul.allow_tf32, a bool (PyTorch's CUDA semantics notes).
    old_matmul = types.SimpleNamespace(allow_tf32=False)
    monkeypatch.setattr(torch.backends.cuda, "matmul", old_matmul)
    with nb.run_conditions(tf32=False):
        assert old_matmul.allow_tf32 is False
    with nb.run_conditions(tf32=True):
        assert old_matmul.allow_tf32 is True
    assert old_matmul.allow_tf32 is False and not hasattr(old_matmul, "fp32_precision")


# --- every variant of the notebook: names read from the notebook's own functions and cells ------------

VARIANT_KEYS = {"name", "workers", "threads", "optimizer", "compile", "mode", "changes",
                "recipe_change", "step", "dtype", "scaler", "precision", "channels_last", "tf32",
                "cudnn_benchmark", "needs"}
MACHINES = {  # what the notebook's own decisions give on each kind of machine
    "2-core CPU": dict(device="cpu", cores=2, workers=2, capability=None, backend="aot_eager",
                       torch_version="2.14.1"),
    "CPU with g++": dict(device="cpu", cores=8, workers=4, capability=None, backend="inductor",
                         torch_version="2.14.1"),
    "1-core CPU": dict(device="cpu", cores=1, workers=1, capability=None, backend="aot_eager",
                       torch_version="2.14.1"),
    "Colab T4": dict(device="cuda", cores=2, workers=2, capability=(7, 5), backend="inductor",
                     torch_version="2.8.0"),
    "A100": dict(device="cuda", cores=12, workers=4, capability=(8, 0), backend="inductor",
                 torch_version="2.14.1"),
    "Mac, torch 2.7": dict(device="mps", cores=8, workers=4, capability=None, backend="aot_eager",
                           torch_version="2.7.1"),
    "Mac, torch 2.8": dict(device="mps", cores=8, workers=4, capability=None, backend="aot_eager",
                           torch_version="2.8.0"),
}


def step_4_variants(device_type, calls=None):
    """The variants Step 4's visible cell measures on `device_type`: the cell run whole, with a
    measure_setting that records what it is given, and torch.optim.Adam recording its calls."""
    measured = []
    namespace = {**vars(nb), "device": torch.device(device_type), "results": [],
                 "jobs": {"tiny batches": "the tiny-batches job"}, "compare": lambda rows, setting: None,
                 "measure_setting": lambda job, variants: measured.append((job, variants)) or []}
    if calls is not None:
        namespace["torch"] = StandInTorch(calls)
    run_cell("05", "fused-fix", namespace)
    [(job, variants)] = measured
    assert job == "the tiny-batches job"
    return variants


def notebook_variants(machine):
    """{setting: [variants of the core or of Going deeper A, variants of Going deeper B]}."""
    m = MACHINES[machine]
    dtype, scaler, _ = nb.autocast_plan(m["device"], m["capability"], torch_version=m["torch_version"])
    fused_need = nb.fused_adam_need(m["device"])
    on_gpu = m["device"] == "cuda"
    return {
        "heavy data": [nb.data_variants(m["workers"]), nb.more_data_variants(m["workers"], m["cores"])],
        "tiny batches": [step_4_variants(m["device"]), nb.more_launch_variants(
            m["backend"], fused_need, nb.cuda_graphs_need(m["device"], m["backend"]))],
        "big model": [nb.compute_variants(dtype, scaler, m["device"]),
                      nb.more_compute_variants(on_gpu, m["capability"])],
    }


@pytest.mark.parametrize("machine", MACHINES)
def test_every_variant_list_starts_with_its_baseline_and_every_fix_has_a_gpu_note(machine):
    for setting, lists in notebook_variants(machine).items():
        for variants in lists:
            names = [variant["name"] for variant in variants]
            assert len(names) == len(set(names)), names
            assert names[0].startswith("baseline") and not variants[0].get("needs")
            assert nb.gpu_note(names[0]) == ("", "")
            for variant in variants:
                assert set(variant) <= VARIANT_KEYS, variant
                assert variant.get("precision", "float32") in nb.TOLERANCE
                if variant is not variants[0]:
                    on_gpu, when = nb.gpu_note(variant["name"])
                    assert on_gpu and when, (machine, variant["name"])


def test_on_a_cpu_one_fix_per_limit_runs_and_only_gpu_switches_wait():
    variants = notebook_variants("2-core CPU")
    for setting, (first, _) in variants.items():
        assert len(first) == 2 and not first[1].get("needs"), setting
    not_run = [v["name"] for _, deeper in variants.values() for v in deeper if v.get("needs")]
    assert sorted(not_run) == ["TF32 matrix products", "cudnn.benchmark",
                               "torch.compile, mode=reduce-overhead (CUDA graphs)"]


def test_on_gpus_the_gpu_switches_run_where_they_exist():
    t4 = {v["name"]: v for lists in notebook_variants("Colab T4").values() for vs in lists for v in vs}
    a100 = {v["name"]: v for lists in notebook_variants("A100").values() for vs in lists for v in vs}
    assert not t4["cudnn.benchmark"].get("needs") and not t4["torch.compile, mode=reduce-overhead (CUDA graphs)"].get("needs")
    assert t4["TF32 matrix products"]["needs"] and not a100["TF32 matrix products"]["needs"]  # (7, 5) | (8, 0)
    assert "autocast float16 + GradScaler" in t4 and "autocast bfloat16" in a100


def test_on_a_mac_the_float16_variant_has_a_scaler_only_from_torch_2_8():
    old = {v["name"] for v in notebook_variants("Mac, torch 2.7")["big model"][0]}
    new = {v["name"] for v in notebook_variants("Mac, torch 2.8")["big model"][0]}
    assert "autocast float16" in old and "autocast float16 + GradScaler" in new


@pytest.mark.parametrize("workers, cores, split", [(0, 8, None), (1, 1, None), (2, 2, (1, 1)), (4, 8, (4, 4)),
                                                   (3, 3, (1, 2)), (4, 64, (4, 60))])
def test_more_data_variants_split_the_cores_only_when_there_are_two_or_more(workers, cores, split):
    # never more workers than Step 3's: their prefetched batches are untimed warm-up in every round
    variants = nb.more_data_variants(workers, cores)
    assert variants[0]["name"].startswith("baseline")
    if split is None:
        assert len(variants) == 1
    else:
        assert (variants[1]["workers"], variants[1]["threads"]) == split


# --- timing in interleaved rounds, and the verdicts ---------------------------------------------------


def test_round_plan_uses_every_step_of_a_run():
    for steps, rounds, warmup in [(60, 3, 2), (61, 3, 2), (100, 5, 6), (600, 5, 2)]:
        timed, left = nb.round_plan(steps, rounds, warmup)
        assert timed >= 1 and 0 <= left < rounds
        assert 1 + rounds * (warmup + timed) + left == steps


def notebook_assignments(names, **namespace):
    """Run the notebook's top-level assignments to `names` (for example SETTINGS), given `namespace`."""
    for source in code_cells(NOTEBOOK):
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) in names for t in node.targets):
                exec(compile(ast.Module(body=[node], type_ignores=[]), "<notebook 05>", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("machine", MACHINES)
def test_every_setting_has_steps_enough_for_its_rounds_on_every_machine(fast, machine):
    m = MACHINES[machine]
    found = notebook_assignments({"BIG_BATCH", "SETTINGS", "ROUNDS"}, FAST=fast, device=torch.device(m["device"]))
    for setting, lists in notebook_variants(machine).items():
        for variants in lists:
            warmup = nb.round_warmup([variant for variant in variants if not variant.get("needs")])
            timed, _ = nb.round_plan(found["SETTINGS"][setting]["steps"], found["ROUNDS"], warmup)
            assert timed >= 3, (setting, timed)  # a median of at least three steps per round


def test_each_round_starts_with_the_batches_workers_prepared_ahead_untimed():
    assert nb.round_warmup([{"name": "baseline"}]) == nb.ROUND_WARMUP
    assert nb.round_warmup([{"name": "baseline"}, {"name": "w", "workers": 3}]) == nb.ROUND_WARMUP + 6


def test_round_plan_needs_one_timed_step_per_round():
    assert nb.round_plan(1 + 3 * 3, 3, 2) == (1, 0)  # exactly one timed step per round
    with pytest.raises(ValueError):
        nb.round_plan(1 + 3 * 3 - 1, 3, 2)


def test_speed_ups_are_paired_by_round_and_counted_per_picture():
    ratios = nb.round_speedups([2.0, 4.0], 4, [1.0, 1.0], 4)
    assert ratios == [2.0, 4.0]
    assert nb.round_speedups([1.0], 4, [2.0], 32) == [4.0]  # a step twice as long with 8 times the pictures


def test_equal_times_are_about_the_same():
    assert nb.change_kind(1.0, 1.0, 1.0) == "about the same"
    assert "about the same" in nb.change_in_words(1.0, 1.0, 1.0)


def test_faster_needs_every_round_above_one_and_the_median_at_least_the_minimum_change():
    edge = 1 + nb.MIN_CHANGE
    assert nb.change_kind(edge, up(1.0), 2.0) == "faster"
    assert nb.change_kind(down(edge), up(1.0), 2.0) == "about the same"  # every round faster, by little
    assert nb.change_kind(2.0, 1.0, 3.0) == "inconclusive"  # one round saw no gain
    assert "faster" in nb.change_in_words(2.0, 1.5, 2.5) and "1.50× to 2.50×" in nb.change_in_words(2.0, 1.5, 2.5)


def test_slower_needs_every_round_below_one_and_the_median_at_most_the_minimum_change():
    edge = 1 / (1 + nb.MIN_CHANGE)
    assert nb.change_kind(edge, 0.5, down(1.0)) == "slower"
    assert nb.change_kind(up(edge), 0.5, down(1.0)) == "about the same"
    assert nb.change_kind(0.5, 0.4, 1.0) == "inconclusive"  # one round saw no loss
    assert "2.00× slower" in nb.change_in_words(0.5, 0.4, 0.6)


def test_rounds_on_both_sides_of_one_are_inconclusive_once_one_is_beyond_the_minimum_change():
    # the workers of a fast run on a busy 2-core machine (issue 43): not "about the same"
    assert nb.change_in_words(0.67, 0.58, 1.42) == (
        "inconclusive on this machine: run again (0.67×; rounds 0.58× to 1.42×)")
    faster, slower = 1 + nb.MIN_CHANGE, 1 / (1 + nb.MIN_CHANGE)
    assert nb.change_kind(1.0, slower, faster) == "about the same"  # within the minimum change: no change
    assert nb.change_kind(1.0, slower, up(faster)) == "inconclusive"
    assert nb.change_kind(1.0, down(slower), faster) == "inconclusive"
    assert nb.change_kind(1.2, 1.0, 1.3) == "inconclusive"  # one round exactly at 1x
    assert nb.change_kind(1.2, up(1.0), 1.3) == "faster"
    assert nb.change_kind(0.8, 0.7, 1.0) == "inconclusive"
    assert nb.change_kind(0.8, 0.7, down(1.0)) == "slower"


def test_a_busy_machine_is_named_only_beyond_the_spread_limit():
    limit = nb.BUSY_SPREAD_PCT
    assert nb.busy_machine_note({"baseline": limit, "fix": 0.0}) == ""
    note = nb.busy_machine_note({"baseline": 1.0, "fix": up(limit)})
    assert note == "Busy machine ('fix': rounds 25 % apart)."


def test_report_names_the_variants_not_run_of_its_setting_only_and_a_busy_machine(capsys):
    measured = dict(setting="big model", loss=0.5, slowest_x=1.0, fastest_x=1.0, spread_pct=1.0)
    rows = [{**measured, "variant": "baseline", "speedup_x": 1.0},
            {**measured, "variant": "fused", "speedup_x": 1.0},
            {"setting": "big model", "variant": "cudnn.benchmark", "not_run": "needs an NVIDIA GPU"},
            {"setting": "tiny batches", "variant": "CUDA graphs", "not_run": "needs an NVIDIA GPU"}]
    nb.report(rows, "big model")
    printed = capsys.readouterr().out.splitlines()
    assert printed[1:] == ["cudnn.benchmark: not run, needs an NVIDIA GPU."]
    assert printed[0].startswith("fused: about the same")
    rows[1]["spread_pct"] = up(nb.BUSY_SPREAD_PCT)
    nb.report(rows, "big model")
    assert "'fused'" in capsys.readouterr().out.splitlines()[-1]


ROUND_KEYS = ("speedup_x", "slowest_x", "fastest_x")


def measured_rows(setting, baseline, *variants):
    """Rows of measure_setting (its keys) for `setting`: the baseline, then each (name, (median,
    slowest, fastest)) of `variants`, every one keeping the baseline's results."""
    row = dict(setting=setting, loss=0.9, accuracy_pct=80.0, baseline_loss=0.9, baseline_accuracy_pct=80.0,
               spread_pct=5.0, precision="float32", recipe_change=False, step_ms=10.0, first_step_s=0.1)
    rows = [{**row, "variant": baseline, "baseline": True, **dict(zip(ROUND_KEYS, (1.0, 1.0, 1.0)))}]
    return rows + [{**row, "variant": name, "baseline": False, **dict(zip(ROUND_KEYS, rounds))}
                   for name, rounds in variants]


NO_GAIN = "No clear gain: workers compete for 2 cores."


@pytest.mark.parametrize("rounds, last", [
    ((1.26, 1.03, 1.77), "Workers paid: data and compute now overlap."),
    ((0.67, 0.58, 1.42), "The rounds disagree: the timings varied more than the change. Close other "
                         "programs and run this step again."),  # the busy 2-core machine of issue 43
    ((1.0, 0.98, 1.02), NO_GAIN),
    ((0.5, 0.4, 0.6), NO_GAIN),
])
def test_what_step_3_says_of_the_workers_follows_the_rounds(rounds, last):
    results = measured_rows("heavy data", "baseline: num_workers=0", ("num_workers=2", rounds))
    namespace = {**vars(nb), "results": results, "WORKERS": 2, "CORES": 2, "workers_why": ""}
    printed = run_cell("05", "workers-say", namespace).splitlines()
    assert printed == [f"num_workers=2: {nb.change_in_words(*rounds)}.", last]


def test_step_3_says_why_no_worker_variant_ran():
    namespace = {**vars(nb), "results": measured_rows("heavy data", "baseline: num_workers=0"), "WORKERS": 0,
                 "CORES": 2, "workers_why": "spawn: a worker must import the dataset class"}
    printed = run_cell("05", "workers-say", namespace).splitlines()
    assert printed == ["No worker variant could run (spawn: a worker must import the dataset class)."]


@pytest.mark.parametrize("rounds, did_not_pay", [((1.15, 1.10, 1.33), False), ((1.1, 0.7, 1.5), False),
                                                 ((1.0, 0.98, 1.02), True), ((0.8, 0.7, 0.9), True)])
def test_step_4_says_fused_adam_did_not_pay_only_when_every_round_says_so(rounds, did_not_pay):
    results = measured_rows("tiny batches", "baseline: Adam", ("Adam(fused=True)", rounds))
    operations = pd.DataFrame({"forward": [20.0], "backward": [30.0], "optimizer": [50.0]},
                              index=["tiny batches"])
    namespace = {**vars(nb), "results": results, "operations": operations, "device": CPU}
    printed = run_cell("05", "results-check", namespace).splitlines()
    assert printed[0] == f"Adam(fused=True): {nb.change_in_words(*rounds)}."
    assert ("Fused Adam did not pay on cpu." in printed) == did_not_pay
    assert printed[-1] == "All 1 checked variants kept the results within the tolerance."


@pytest.mark.parametrize("rounds, explained", [((1.0, 0.98, 1.02), True), ((0.8, 0.7, 0.9), True),
                                               ((1.1, 0.7, 1.5), False), ((2.0, 1.5, 2.5), False)])
def test_going_deeper_b_explains_a_compiled_model_without_gain_only_when_the_rounds_agree(rounds, explained):
    variant = "torch.compile, backend=inductor"
    results = measured_rows("tiny batches", "baseline: eager", (variant, rounds))
    namespace = {**vars(nb), "more_results": results, "optimizer_share": 0.64, "FAST": False,
                 "BACKEND": "inductor"}
    printed = run_cell("05", "more-launch-say", namespace).splitlines()
    assert printed[0] == f"{variant}: {nb.change_in_words(*rounds)}."
    reason = (f"{variant}: torch.compile(model) compiles the forward and backward passes, but not the "
              "optimizer, which ran 64% of the step's operations (Step 2).")
    assert (reason in printed) == explained


# --- the correctness check ---------------------------------------------------------------------------

def test_keeps_results_at_the_exact_edges_of_the_relative_tolerance(monkeypatch):
    # powers of two, so that the edge is exact in floating point
    monkeypatch.setitem(nb.TOLERANCE, "float32", (0.0625, 0.03125, 4.0))
    assert nb.keeps_results(1.0, 90.0, 1.0625, 94.0, "float32")
    assert nb.keeps_results(1.0, 90.0, 0.9375, 86.0, "float32")
    assert not nb.keeps_results(1.0, 90.0, up(1.0625), 90.0, "float32")
    assert not nb.keeps_results(1.0, 90.0, 1.0, up(94.0), "float32")


def test_keeps_results_at_the_exact_edge_of_the_absolute_floor(monkeypatch):
    monkeypatch.setitem(nb.TOLERANCE, "float32", (0.0625, 0.03125, 4.0))
    # baseline 0.25: the relative tolerance allows 0.015625, the floor 0.03125
    assert nb.keeps_results(0.25, 90.0, 0.28125, 90.0, "float32")
    assert not nb.keeps_results(0.25, 90.0, up(0.28125), 90.0, "float32")


def test_a_nearly_settled_loss_is_judged_by_the_floor_not_by_its_percentage():
    # a float16 run on a T4 that ends at 0.06 against 0.02: +200 %, but 0.04 below the 16-bit floor
    assert nb.keeps_results(0.02, 99.0, 0.06, 98.0, "float16")
    assert not nb.keeps_results(0.02, 99.0, 0.06, 98.0, "float32")  # float32's floor is 0.02
    for precision, (relative, floor, points) in nb.TOLERANCE.items():
        assert floor < 0.1 * math.log(4), precision  # small against a blind guess among 4 shapes


def test_16_bit_variants_get_a_looser_tolerance_than_float32():
    for precision in ("bfloat16", "float16", "tf32"):
        assert all(a > b for a, b in zip(nb.TOLERANCE[precision], nb.TOLERANCE["float32"]))
    assert not nb.keeps_results(0.40, 90.0, 0.44, 90.0, "float32")
    assert nb.keeps_results(0.40, 90.0, 0.44, 90.0, "bfloat16")


def test_the_tolerance_works_both_ways():
    assert not nb.keeps_results(0.50, 90.0, 0.30, 90.0, "float32")  # a much lower loss is a change too
    assert not nb.keeps_results(0.50, 90.0, 0.50, 99.0, "float32")


def measured_row(variant, loss, accuracy, precision="float32", recipe_change=False, baseline=False):
    return {"setting": "big model", "variant": variant, "baseline": baseline, "precision": precision,
            "loss": loss, "accuracy_pct": accuracy, "recipe_change": recipe_change,
            "baseline_loss": 0.5, "baseline_accuracy_pct": 90.0}


def test_results_verdict_prints_which_variant_did_not_keep_the_results_and_why():
    rows = [measured_row("baseline: float32", 0.5, 90.0, baseline=True),
            measured_row("autocast float16 + GradScaler", 0.8, 90.0, "float16"),
            measured_row("channels_last", 0.5, 89.0),
            measured_row("batch 8 times larger", 2.0, 10.0, recipe_change=True),
            {"setting": "big model", "variant": "cudnn.benchmark", "not_run": "needs an NVIDIA GPU"}]
    checks = nb.check_results(rows)
    assert list(checks.variant) == ["autocast float16 + GradScaler", "channels_last", "batch 8 times larger"]
    assert list(checks.kept) == [False, True, None]
    verdict = nb.results_verdict(checks)
    assert "NOT kept: 'autocast float16 + GradScaler'" in verdict and "+60.0 %" in verdict
    assert "channels_last" not in verdict and "GradScaler skipping steps" in verdict


def test_results_verdict_counts_the_held_variants_when_all_kept():
    rows = [measured_row("channels_last", 0.5, 90.0), measured_row("batch 8 times larger", 2.0, 10.0,
                                                                      recipe_change=True)]
    assert nb.results_verdict(nb.check_results(rows)) == ("All 1 checked variants kept the results within "
                                                          "the tolerance.")


def test_no_variant_measured_means_nothing_checked_not_a_crash():
    checks = nb.check_results([measured_row("baseline: float32", 0.5, 90.0, baseline=True)])
    assert checks.empty and "kept" in checks.columns
    assert nb.results_verdict(checks).startswith("All 0 checked variants")


# --- the training step, run for real on the CPU for every variant a CPU can run -----------------------

def tiny_run(variant, steps=20, batch_size=8, seed=0, device=CPU):
    """A Run of the notebook's CNN (width 4) on fixed random pictures, changed by `variant`."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(32, 3, 16, 16, generator=generator)
    labels = torch.arange(32) % 4
    batches = nb.on_device_batches(images, labels, batch_size, seed=seed)
    return nb.new_run(4, batches, batch_size, steps, variant, device)


def weights(run):
    return [parameter.detach().clone() for parameter in run.model.parameters()]


def mixed(dtype, scaler):
    """Going deeper A's mixed-precision variant for `dtype`, with or without a GradScaler, as the
    notebook builds it (compute_variants) for the CPU."""
    return nb.compute_variants(dtype, scaler, "cpu")[1]


def test_float16_with_a_grad_scaler_really_steps_and_updates_the_scale():
    # The notebook's T4 path (float16 + GradScaler) with PyTorch's CPU scaler and CPU autocast.
    # Only a GPU shows the speed of float16 Tensor Cores; a CPU shows that the step is right.
    run = tiny_run(mixed(torch.float16, True))
    assert run.step is nb.mixed_precision_step and run.scaler.is_enabled()
    seen = []
    run.model[0].register_forward_hook(lambda layer, inputs, output: seen.append(output.dtype))
    before = weights(run)
    for _ in range(3):
        run.step(run)
    assert seen == [torch.float16] * 3  # the convolution really computed in float16
    assert run.scaler.get_scale() == 2.0**16 and run.scaler._get_growth_tracker() == 3  # 3 good steps
    assert all(not torch.equal(a, b) for a, b in zip(before, weights(run)))  # the optimizer stepped
    assert all(parameter.dtype == torch.float32 for parameter in run.model.parameters())


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")  # the skipped step
def test_an_overflowing_float16_step_is_skipped_and_the_scale_backs_off():
    run = tiny_run(mixed(torch.float16, True))
    run.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40)  # float16 gradients overflow
    before = weights(run)
    run.step(run)
    assert all(torch.equal(a, b) for a, b in zip(before, weights(run)))  # found_inf: step skipped
    assert run.scaler.get_scale() == 2.0**39 and run.scaler._get_growth_tracker() == 0
    run.step(run)
    assert run.scaler.get_scale() < 2.0**39 or any(not torch.equal(a, b)
                                                    for a, b in zip(before, weights(run)))


def test_bfloat16_autocast_computes_the_convolutions_in_bfloat16_and_keeps_float32_weights():
    # Only a GPU with fast bfloat16 (capability 8.0+) shows the speed-up; a CPU runs the same step.
    run = tiny_run(mixed(torch.bfloat16, False))
    assert not run.scaler.is_enabled()  # a pass-through: scale() returns the loss as it is
    seen = []
    run.model[0].register_forward_hook(lambda layer, inputs, output: seen.append(output.dtype))
    before = weights(run)
    run.step(run)
    assert seen == [torch.bfloat16]
    assert all(p.dtype == torch.float32 for p in run.model.parameters())
    assert all(not torch.equal(a, b) for a, b in zip(before, weights(run)))


def test_channels_last_reaches_the_first_convolution_and_changes_no_result():
    # On a GPU with Tensor Cores the layout saves conversions; a CPU checks the plumbing and results.
    plain, last = tiny_run({}), tiny_run({"channels_last": True})
    seen = []
    last.model[0].register_forward_hook(
        lambda layer, inputs, output: seen.append(inputs[0].is_contiguous(memory_format=torch.channels_last)))
    for _ in range(3):
        nb.train_step(plain)
        nb.train_step(last)
    assert seen == [True] * 3
    assert torch.allclose(torch.stack(plain.losses), torch.stack(last.losses), atol=1e-5)


def test_the_fused_optimizer_takes_the_same_steps():
    # On a GPU the fused kernel saves launches; on a CPU it is a real fused kernel too.
    plain, fused = tiny_run({}), tiny_run({"optimizer": nb.fused_adam})
    assert not plain.optimizer.defaults["fused"] and fused.optimizer.defaults["fused"] is True
    assert plain.optimizer.defaults["lr"] == fused.optimizer.defaults["lr"] == nb.LEARNING_RATE
    for _ in range(5):
        nb.train_step(plain)
        nb.train_step(fused)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(weights(plain), weights(fused)))


def test_the_baseline_adam_is_pytorchs_default_form_and_a_variant_brings_its_own():
    # the default: on a CUDA GPU PyTorch groups the updates ("foreach"); a baseline forced to
    # foreach=False would make fused=True look better than it is
    plain = tiny_run({})
    assert plain.optimizer.defaults["fused"] is None and plain.optimizer.defaults["foreach"] is None
    made = []
    run = tiny_run({"optimizer": lambda parameters: made.append(1) or torch.optim.SGD(parameters, lr=0.1)})
    assert made == [1] and isinstance(run.optimizer, torch.optim.SGD)


def test_torch_compile_with_aot_eager_trains_like_eager():
    # Inductor's fused kernels need a compiler (and, on a GPU, Triton); aot_eager runs the same
    # tracing and autograd steps everywhere, so the CPU checks the compiled step's plumbing.
    eager, compiled = tiny_run({}), tiny_run({"compile": "aot_eager"})
    assert compiled.forward is not compiled.model
    for _ in range(3):
        nb.train_step(eager)
        nb.train_step(compiled)
    assert torch.allclose(torch.stack(eager.losses), torch.stack(compiled.losses), atol=1e-5)


def test_cuda_graphs_mark_every_step(monkeypatch):
    # Only a CUDA GPU can record and replay a graph; the CPU checks that each training step tells
    # PyTorch so, before the compiled model runs. No compilation here: the graphs need the GPU.
    calls = []
    monkeypatch.setattr(torch, "compile", lambda model, **options: calls.append(options) or model)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: calls.append("mark"))
    run = tiny_run({"compile": "inductor", "mode": "reduce-overhead"})
    assert calls == [{"backend": "inductor", "mode": "reduce-overhead"}]
    run.model.register_forward_pre_hook(lambda module, inputs: calls.append("forward"))
    run.step(run)
    run.step(run)
    assert calls[1:] == ["mark", "forward"] * 2
    calls.clear()
    plain = tiny_run({"compile": "aot_eager"})
    plain.model.register_forward_pre_hook(lambda module, inputs: calls.append("forward"))
    plain.step(plain)
    assert calls == [{"backend": "aot_eager", "mode": None}, "forward"]


def test_every_variant_a_cpu_can_run_keeps_the_results(shapes_module):
    # The assertion that the notebook only prints (a GPU can drift past it: see the verdict)
    variants = [{"name": "baseline"}, {"name": "Adam(fused=True)", "optimizer": nb.fused_adam},
                {"name": "channels_last", "channels_last": True},
                mixed(torch.bfloat16, False), mixed(torch.float16, True),
                {"name": "torch.compile, backend=aot_eager", "compile": "aot_eager"},
                {"name": "cudnn.benchmark", "cudnn_benchmark": True, "needs": "an NVIDIA GPU"}]
    rows = nb.measure_setting(tiny_job(shapes_module), variants)
    assert [row["variant"] for row in rows] == [variant["name"] for variant in variants]
    assert rows[0]["baseline"] and not any(row.get("baseline") for row in rows[1:])
    assert rows[-1] == {"setting": "tiny", "variant": "cudnn.benchmark", "not_run": "needs an NVIDIA GPU"}
    for row in rows[:-1]:
        assert row["speedup_x"] > 0 and row["slowest_x"] <= row["speedup_x"] <= row["fastest_x"]
        assert row["loss"] < math.log(4) and row["step_ms"] > 0  # it learned something
    checks = nb.check_results(rows)
    assert checks.kept.all(), checks
    table = nb.compare(rows, "tiny")
    assert list(table.index) == [variant["name"] for variant in variants]
    assert list(table.kept) == ["", "yes", "yes", "yes", "yes", "yes", ""]  # the baseline, the not-run


def test_measure_setting_trains_every_step_of_a_variant_with_its_own_training_step(shapes_module):
    # A variant's own step (Going deeper A's mixed_precision_step) must run in the timed rounds, the
    # first step and the steps that finish the run: a train_step there would measure float32 instead.
    taken = []

    def own_step(run, times=None):
        taken.append(run.batch_size)
        nb.train_step(run, times)

    rows = nb.measure_setting(tiny_job(shapes_module), [{"name": "baseline"},
                                                       {"name": "own", "step": own_step}])
    assert len(taken) == TINY["steps"] and "loss" in rows[1]


def test_compare_marks_a_recipe_change_and_a_fix_that_did_not_keep_the_results():
    rows = [measured_row("baseline: float32", 0.5, 90.0, baseline=True),
            measured_row("autocast float16 + GradScaler", 0.8, 90.0, "float16"),
            measured_row("batch 8 times larger", 2.0, 10.0, recipe_change=True)]
    for row in rows:
        row.update(batch_size=32, first_step_s=0.1, step_ms=10.0, speedup_x=1.5, slowest_x=1.2,
                   fastest_x=1.8)
    assert list(nb.compare(rows, "big model").kept) == ["", "NO", "recipe change"]


# --- the profile: its table, the timeline, and the GPU's share -------------------------------------

def average(key, self_cpu_us, cpu_us, self_gpu_us=0.0, count=3):
    """A stand-in for one entry of the profiler's key_averages()."""
    return types.SimpleNamespace(key=key, count=count, self_cpu_time_total=self_cpu_us,
                                 cpu_time_total=cpu_us, self_device_time_total=self_gpu_us)


def test_the_data_bound_view_sorts_by_cpu_time_so_the_dataloader_leads_on_a_gpu_too():
    # On a T4 the DataLoader decodes on the CPU and launches nothing: no GPU time at all
    averages = [average("aten::cudnn_convolution", 900.0, 1500.0, self_gpu_us=4200.0),
                average("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 91234.5, 95000.0),
                average("aten::addcdiv_", 300.0, 300.0, self_gpu_us=80.0)]
    by_cpu = nb.top_operations(averages, sort_by="self_cpu_ms", with_gpu=True)
    assert by_cpu.index[0].startswith("enumerate(DataLoader)")
    assert list(by_cpu.columns) == ["calls", "self_cpu_ms", "cpu_total_ms", "self_gpu_ms"]
    assert by_cpu.loc[by_cpu.index[0], "self_cpu_ms"] == 91.23  # ms, rounded
    by_gpu = nb.top_operations(averages, sort_by="self_gpu_ms", rows=1, with_gpu=True)
    assert list(by_gpu.index) == ["aten::cudnn_convolution"]  # the view that hides the limit
    assert "self_gpu_ms" not in nb.top_operations(averages).columns


def cpu_event(name, start, end, parent=None, event_id=0, linked=0, old_api=False):
    event = types.SimpleNamespace(name=name, device_type=DeviceType.CPU, cpu_parent=parent, id=event_id,
                                  time_range=types.SimpleNamespace(start=start, end=end))
    if not old_api:
        event.linked_correlation_id = linked
    return event


def gpu_event(name, start, end, correlation, launched_by, old_api=False):
    event = types.SimpleNamespace(name=name, device_type=DeviceType.CUDA, cpu_parent=None, id=correlation,
                                  time_range=types.SimpleNamespace(start=start, end=end))
    if not old_api:
        event.linked_correlation_id = launched_by
    return event


def two_steps_on_a_gpu(old_api=False):
    """Stand-in profiler events of two steps on a CUDA GPU, shaped like profile().events(): each piece
    of GPU work shares its id with the runtime call that launched it, and (from PyTorch 2.9 on, not in
    2.6 to 2.8: `old_api`) names its CPU operation in linked_correlation_id. Times in microseconds."""
    events = []
    for step, t in enumerate((1000.0, 11000.0)):
        def cpu(name, start, end, parent=None, event_id=0, linked=0):
            return cpu_event(name, t + start, t + end, parent, event_id, linked, old_api)

        data, forward = cpu("data", 0, 6000), cpu("forward", 6000, 7000)
        backward, optimizer = cpu("backward", 7000, 9000), cpu("optimizer", 9000, 9500)
        copy = cpu("aten::copy_", 5900, 5960, data, event_id=30 + step)
        conv = cpu("aten::cudnn_convolution", 6100, 6200, forward, event_id=10 + step)
        engine = cpu("autograd::engine::evaluate_function: ConvolutionBackward0", 7100, 7900)
        conv_back = cpu("aten::convolution_backward", 7100, 7800, engine, event_id=20 + step)
        adam = cpu("aten::_fused_adam_", 9100, 9200, optimizer, event_id=40 + step)
        # the runtime calls: ids in CUPTI's own numbering (they may equal an operation's id)
        runtime = [cpu("cudaMemcpyAsync", 5910, 5950, copy, 10 + step, linked=30 + step),
                   cpu("cudaLaunchKernel", 6110, 6120, conv, 500 + step, linked=10 + step),
                   cpu("cudaLaunchKernel", 7110, 7120, conv_back, 600 + step, linked=20 + step),
                   cpu("cudaLaunchKernel", 9110, 9120, adam, 700 + step, linked=40 + step)]
        gpu = [gpu_event("Memcpy HtoD (Pinned -> Device)", t + 5950, t + 6050, 10 + step, 30 + step, old_api),
               gpu_event("forward", t + 6000, t + 7000, 900 + step, 0, old_api),  # the GPU's copy of the label
               gpu_event("sm75_xmma_fprop", t + 6200, t + 6700, 500 + step, 10 + step, old_api),
               gpu_event("sm75_xmma_dgrad", t + 7800, t + 8800, 600 + step, 20 + step, old_api),
               gpu_event("multi_tensor_apply_kernel", t + 9200, t + 9300, 700 + step, 40 + step, old_api)]
        events += [data, forward, backward, optimizer, copy, conv, engine, conv_back, adam] + runtime + gpu
    return events


def profiled_on_a_gpu(stand_ins):
    """The stand-in events as the profiler itself hands them over after a run with
    ProfilerActivity.CUDA: an EventList of FunctionEvents (torch/autograd/profiler_util.py) built as
    torch/autograd/profiler.py's _parse_kineto_results builds it: every event with use_device="cuda",
    each piece of GPU work added as a kernel of the CPU operation its linked_correlation_id names, and
    the CPU parents found by _build_tree from the times on each thread (autograd's engine runs the
    backward pass on a thread of its own). So prof.key_averages() and its .table() are PyTorch's own."""
    from torch.autograd.profiler_util import EventList, FunctionEvent

    def thread(event):
        while event.cpu_parent is not None:
            event = event.cpu_parent
        return 2 if event.name.startswith("autograd::engine") else 1

    made = [FunctionEvent(id=e.id, name=e.name, overload_name="", trace_name=e.name, start_us=e.time_range.start,
                          end_us=e.time_range.end, thread=thread(e) if e.device_type == DeviceType.CPU else 7,
                          input_shapes=[], stack=[], concrete_inputs=[], kwinputs={}, use_device="cuda",
                          device_type=e.device_type, linked_correlation_id=e.linked_correlation_id)
            for e in stand_ins]
    operations = {e.id: e for e in made if e.device_type == DeviceType.CPU and e.linked_correlation_id == 0}
    for event in made:
        if event.device_type == DeviceType.CUDA and event.linked_correlation_id in operations:
            duration = event.time_range.end - event.time_range.start
            operations[event.linked_correlation_id].append_kernel(event.name, event.device_index, duration)
    events = EventList(made, use_device="cuda")
    events._build_tree()  # what torch.autograd.profiler.profile does before handing them over
    return events


def test_the_stand_in_gpu_events_are_what_pytorchs_own_classes_make_of_them():
    stand_ins, events = two_steps_on_a_gpu(), profiled_on_a_gpu(two_steps_on_a_gpu())
    parents = [(e.name, e.cpu_parent and e.cpu_parent.name) for e in stand_ins]
    assert [(e.name, e.cpu_parent and e.cpu_parent.name) for e in events] == parents
    assert nb.step_timeline(events) == nb.step_timeline(stand_ins)
    convolution = next(a for a in events.key_averages() if a.key == "aten::cudnn_convolution")
    assert convolution.self_device_time_total == 2 * 500.0  # its kernel, in both steps (microseconds)


@pytest.mark.parametrize("old_api", [False, True])
def test_the_timeline_shows_one_step_on_the_cpu_and_the_gpu_work_of_each_part(old_api):
    bars = nb.step_timeline(two_steps_on_a_gpu(old_api))
    cpu = [(part, round(start, 6), round(length, 6)) for row, part, start, length in bars if row == "CPU"]
    gpu = [(part, round(start, 6), round(length, 6)) for row, part, start, length in bars if row == "GPU"]
    assert cpu == [("data", 0.0, 6.0), ("forward", 6.0, 1.0), ("backward", 7.0, 2.0), ("optimizer", 9.0, 0.5)]
    # the copy, the convolution, its backward (launched from autograd's thread) and Adam's kernel;
    # not the GPU's copy of the 'forward' label, and nothing of the second step
    assert gpu == [("data", 5.95, 0.1), ("forward", 6.2, 0.5), ("backward", 7.8, 1.0), ("optimizer", 9.2, 0.1)]
    second = nb.step_timeline(two_steps_on_a_gpu(old_api), step=1)
    assert [bar[1] for bar in second if bar[0] == "GPU"] == ["data", "forward", "backward", "optimizer"]
    assert min(bar[2] for bar in second) == 0.0  # measured from the second step's own start


def test_the_timeline_figure_has_a_gpu_row_only_when_the_gpu_worked():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    on_gpu = nb.draw_timeline(nb.step_timeline(two_steps_on_a_gpu()), "one step")
    axis = on_gpu.axes[0]
    assert [label.get_text() for label in axis.get_yticklabels()] == ["CPU (training process)",
                                                                     "GPU (its work, by part)"]
    assert [text.get_text() for text in axis.get_legend().get_texts()] == list(nb.PARTS)
    assert axis.get_xlabel() == "time since the step began (ms)" and axis.get_title() == "one step"
    cpu_only = nb.draw_timeline([bar for bar in nb.step_timeline(two_steps_on_a_gpu()) if bar[0] == "CPU"], "")
    assert [label.get_text() for label in cpu_only.axes[0].get_yticklabels()] == ["CPU (training process)"]
    plt.close("all")


def test_the_gpu_share_of_a_data_bound_step_says_the_gpu_waits():
    share = nb.busy_share(nb.step_timeline(two_steps_on_a_gpu()))
    assert share == pytest.approx(1.7 / 9.5)  # GPU work 0.1 + 0.5 + 1.0 + 0.1 ms of a 9.5 ms step
    assert "waited" in nb.gpu_share_in_words(share, "heavy data")


def test_busy_share_counts_overlapping_work_once():
    bars = [("CPU", "data", 0.0, 10.0), ("GPU", "forward", 1.0, 4.0), ("GPU", "backward", 2.0, 2.0),
            ("GPU", "optimizer", 4.0, 2.0)]
    assert nb.busy_share(bars) == pytest.approx(0.5)  # 1..6 of 0..10
    assert nb.busy_share([("CPU", "data", 0.0, 10.0)]) == 0.0
    assert nb.busy_share([]) == 0.0


def test_the_gpu_share_words_turn_at_one_half():
    assert "sorted by GPU time" in nb.gpu_share_in_words(0.5, "big model")
    assert "waited" in nb.gpu_share_in_words(down(0.5), "big model")


def test_a_real_profile_on_the_cpu_gives_the_four_parts_in_order():
    run = tiny_run({})
    nb.train_step(run)  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        nb.train_step(run)
        nb.train_step(run)
    bars = nb.step_timeline(prof.events())
    assert [part for row, part, _, _ in bars] == list(nb.PARTS)
    assert all(row == "CPU" for row, _, _, _ in bars)
    ends = [start + length for _, _, start, length in bars]
    assert all(end <= next_start + 1e-6 for end, (_, _, next_start, _) in zip(ends, bars[1:]))
    table = nb.top_operations(prof.key_averages(), rows=50)
    assert {"forward", "backward"} <= set(table.index) and (table.self_cpu_ms >= 0).all()


# --- counting operations and FLOPs, the timed parts ----------------------------------------------------

def event(name, parent=None):
    """A made-up profiler event with a name and a parent."""
    return types.SimpleNamespace(name=name, cpu_parent=parent)


def test_operations_are_counted_in_their_part_and_only_once():
    forward = event("forward")
    convolution = event("aten::conv2d", forward)
    assert nb.operation_part(convolution) == "forward"
    assert nb.operation_part(event("aten::mkldnn_convolution", convolution)) is None  # nested: not again
    assert nb.operation_part(event("aten::to", event("data"))) == "data"
    assert nb.operation_part(forward) is None  # a label, not an operation
    adam = event("Optimizer.step#Adam.step", event("optimizer"))
    assert nb.operation_part(event("aten::addcdiv_", adam)) == "optimizer"
    assert nb.operation_part(event("aten::detach")) == "other"


def test_backward_operations_count_as_backward_on_the_autograd_thread_too():
    engine = event("autograd::engine::evaluate_function: ConvolutionBackward0")
    assert nb.operation_part(event("aten::convolution_backward", engine)) == "backward"  # no label above
    on_cpu = event("autograd::engine::evaluate_function: ReluBackward0", event("backward"))
    assert nb.operation_part(event("aten::threshold_backward", on_cpu)) == "backward"
    assert nb.enclosing_part(event("aten::mm", event("aten::linear", event("forward")))) == "forward"
    assert nb.enclosing_part(event("aten::mm")) is None and nb.enclosing_part(None) is None


def test_operations_per_step_counts_each_part_but_not_the_data():
    run = tiny_run({})
    parts = nb.operations_per_step(lambda: nb.train_step(run), CPU, [ProfilerActivity.CPU])
    assert {"forward", "backward", "optimizer"} <= set(parts) and "data" not in parts
    assert all(count > 0 for count in parts.values())
    assert parts["backward"] > parts["forward"] / 2  # every layer's backward is an operation too


def test_launch_overhead_and_throughput_are_measured_on_the_device():
    assert 0 < nb.launch_overhead_seconds(CPU, [ProfilerActivity.CPU], repeats=3) < 0.01  # per operation
    assert nb.matmul_flop_per_second(64, CPU) > 1e6


def cnn_flops_by_hand(width, batch, size, classes=4):
    """FLOPs of the notebook's CNN, forward and backward, counted by hand: a convolution or linear
    layer does 2 FLOPs per multiply-add forward and as many again for each gradient it computes (the
    first convolution computes no gradient of the input pictures)."""
    conv = lambda c_in, c_out, side: 2 * batch * c_out * side * side * c_in * 9  # noqa: E731
    first = conv(3, width, size)
    others = conv(width, 2 * width, size // 2) + conv(2 * width, 4 * width, size // 4)
    linear = 2 * batch * 4 * width * classes
    return 2 * first + 3 * others + 3 * linear


def test_flops_per_step_matches_a_count_by_hand():
    assert nb.flops_per_step(4, 8, 16, CPU) == cnn_flops_by_hand(4, 8, 16)
    assert nb.flops_per_step(8, 2, 32, CPU) == cnn_flops_by_hand(8, 2, 32)


def test_part_times_only_when_asked():
    times = {}
    with nb.part("forward", times, CPU):
        pass
    with nb.part("forward", times, CPU):
        pass
    with nb.part("backward"):
        pass
    assert list(times) == ["forward"] and len(times["forward"]) == 2


def test_part_synchronizes_the_gpu_before_it_reads_the_clock_and_only_when_it_times(monkeypatch):
    # on a GPU a call returns before the work is done: a part's time is read after synchronize
    events, clock = [], itertools.count(10.0, 0.5)
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append(("synchronize", device)))
    monkeypatch.setattr(time, "perf_counter", lambda: events.append("clock") or next(clock))
    times = {}
    for _ in range(2):
        with nb.part("forward", times, cuda):
            events.append("work")
    with nb.part("backward"):  # not timed: the GPU goes on without a wait
        events.append("work")
    monkeypatch.undo()
    assert events == ["clock", "work", ("synchronize", cuda), "clock"] * 2 + ["clock", "work"]
    assert times == {"forward": [0.5, 0.5]}


class StandInBatch:
    """A batch tensor's stand-in: records each .to(...) call, as a copy to a GPU would be made."""

    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def to(self, *args, **kwargs):
        self.calls.append((self.name, args, kwargs))
        return self


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_the_data_part_copies_each_batch_to_the_gpu_without_waiting(memory_format):
    calls, cuda = [], torch.device("cuda")
    run = types.SimpleNamespace(batches=iter([(StandInBatch("images", calls), StandInBatch("labels", calls))]),
                                memory_format=memory_format, device=cuda)
    images, labels = nb.next_batch(run)
    assert (images.name, labels.name) == ("images", "labels")
    assert calls == [("images", (cuda,), {"non_blocking": True, "memory_format": memory_format}),
                     ("labels", (cuda,), {"non_blocking": True})]


def test_the_parts_chart_shows_each_settings_shares_and_its_time_per_step():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    step_parts = {"heavy data": {"data": 0.030, "forward": 0.004, "backward": 0.005, "optimizer": 0.001},
                  "big model": {"data": 0.001, "forward": 0.020, "backward": 0.028, "optimizer": 0.001}}
    axis = nb.draw_parts(step_parts, CPU).axes[0]
    assert [label.get_text() for label in axis.get_yticklabels()] == ["heavy data\n40.0 ms per step",
                                                                     "big model\n50.0 ms per step"]
    assert [text.get_text() for text in axis.get_legend().get_texts()] == list(nb.PARTS)
    assert axis.patches[0].get_width() == pytest.approx(75.0)  # heavy data's data part: 30 of 40 ms
    assert "on cpu" in axis.get_title() and "(%)" in axis.get_xlabel()
    plt.close("all")


def test_scaled_features_branch_on_the_values():
    images = torch.ones(2, 3, 4, 4)
    torch.testing.assert_close(nb.scaled_features(images), torch.full((2, 3), 2 / 6))
    torch.testing.assert_close(nb.scaled_features(-images), torch.zeros(2, 3))  # relu: sum is 0


def test_draw_speedups_draws_one_bar_per_measured_fix_with_its_rounds():
    import matplotlib.pyplot as plt

    row = dict(setting="big model", loss=0.5, baseline=False)
    rows = [{**row, "variant": "baseline", "baseline": True, "speedup_x": 1.0, "slowest_x": 1.0,
             "fastest_x": 1.0},
            {**row, "variant": "fused", "speedup_x": 1.2, "slowest_x": 1.1, "fastest_x": 1.4},
            {**row, "variant": "bf16", "speedup_x": 0.8, "slowest_x": 0.7, "fastest_x": 0.9},
            {"setting": "big model", "variant": "cudnn.benchmark", "not_run": "needs a GPU"}]
    figure = nb.draw_speedups(rows, "Speed-ups")
    (axis,) = figure.axes
    bars = {tick.get_text(): bar.get_width() for tick, bar in zip(axis.get_yticklabels(), axis.patches)}
    assert bars == {"big model: bf16": 0.8, "big model: fused": 1.2}
    assert axis.get_xscale() == "log" and axis.get_title() == "Speed-ups"
    low, high = axis.get_xlim()
    assert low < 0.7 and high > 1.4
    plt.close(figure)


def test_a_variant_without_a_note_of_its_own_gets_an_empty_note():
    assert nb.gpu_note("a fix nobody wrote a note for") == ("", "")
    assert nb.gpu_note("cudnn.benchmark") == nb.GPU_NOTES["cudnn.benchmark"]


# --- the notebook's cells, run whole on a GPU, a Mac and a CPU -------------------------------------
# notebook_code.run_cell runs a cell from a file of its own (so coverage counts it) in a namespace of the
# notebook's helpers and stand-ins for `device` and torch.cuda, shaped like the real API's answers.

def stand_in_capability(monkeypatch, capability=(7, 5)):
    """torch.cuda.get_device_capability(device) -> (major, minor), as torch/cuda/__init__.py returns it
    (prop.major, prop.minor); a T4 by default. Returns the list of the devices it was asked about."""
    asked = []

    def get_device_capability(device=None):
        asked.append(device)
        return capability

    monkeypatch.setattr(torch.cuda, "get_device_capability", get_device_capability)
    return asked


@pytest.mark.gpu_branch("05", "cell settings: ON_GPU")
@pytest.mark.gpu_branch("05", "cell settings: not ON_GPU")
@pytest.mark.gpu_branch("05", "cell settings: ON_GPU (2)")
@pytest.mark.parametrize("device_type", ["cuda", "mps", "cpu"])
def test_the_settings_cell_profiles_the_gpu_and_reads_its_capability_on_cuda_only(monkeypatch, request,
                                                                                 device_type):
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    asked = stand_in_capability(monkeypatch, (7, 5))  # a T4's answer, whatever the device asked
    logger = logging.getLogger("torch.utils.cpp_extension")
    request.addfinalizer(lambda level=logger.level: logger.setLevel(level))  # the cell quietens it
    device = torch.device(device_type)
    namespace = {"os": os, "torch": torch, "device": device}  # what the shared setup cell defined
    run_cell("05", "settings", namespace)
    on_gpu = device_type == "cuda"  # an AMD GPU under ROCm is "cuda" too; a Mac is not profiled on its GPU
    assert namespace["ON_GPU"] is on_gpu
    assert namespace["PROFILER_ACTIVITIES"] == [ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * on_gpu
    assert namespace["CAPABILITY"] == ((7, 5) if on_gpu else None)
    assert asked == ([device] if on_gpu else [])
    # the profiler's C++ messages stay on a GPU (they say when tracing is denied), and go without one
    assert os.environ.get("KINETO_LOG_LEVEL") == (None if on_gpu else "6")


@pytest.mark.gpu_branch("05", "cell job-settings: device.type == 'cpu'")
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("device_type", ["cuda", "mps", "cpu"])
def test_the_big_model_gets_8_times_larger_batches_on_a_gpu(device_type, fast):
    found = {}
    for kind in ("cpu", device_type):
        namespace = {**vars(nb), "device": torch.device(kind), "FAST": fast}
        run_cell("05", "job-settings", namespace)
        found[kind] = namespace["SETTINGS"]
    big, on_cpu = found[device_type]["big model"], found["cpu"]["big model"]
    assert on_cpu["batch_size"] == 32 and big["batch_size"] == (32 if device_type == "cpu" else 8 * 32)
    assert big["count"] >= 4 * big["batch_size"]  # an epoch of at least 4 batches on every device
    for name in ("heavy data", "tiny batches"):  # the other settings are the same everywhere
        assert found[device_type][name] == found["cpu"][name]


@pytest.mark.gpu_branch("05", "cell profile-gpu: ON_GPU")
def test_after_the_profile_a_gpu_learner_reads_how_busy_the_gpu_was_and_its_busiest_operations():
    events = profiled_on_a_gpu(two_steps_on_a_gpu())
    # torch.profiler.profile's: events() is the profiler's EventList, key_averages() its key_averages()
    prof = types.SimpleNamespace(events=lambda: events, key_averages=events.key_averages)
    shown = []
    namespace = {**vars(nb), "device": torch.device("cuda"), "ON_GPU": True, "prof": prof,
                 "PROFILE_SETTING": "heavy data", "display": shown.append}
    printed = run_cell("05", "profile-gpu", namespace).splitlines()
    # GPU work 0.1 + 0.5 + 1.0 + 0.1 ms of a 9.5 ms step (see two_steps_on_a_gpu)
    assert printed[0].startswith("The GPU worked 18% of the profiled step of 'heavy data' and waited the rest")
    assert printed[1:] == ["The operations that kept the GPU busiest:"]
    full_table, busiest = shown
    assert "Self CUDA" in full_table.data and "sm75_xmma_dgrad" in full_table.data  # PyTorch's own table
    assert list(busiest.columns) == ["calls", "self_cpu_ms", "cpu_total_ms", "self_gpu_ms"] and len(busiest) == 6
    assert busiest.self_gpu_ms.is_monotonic_decreasing and busiest.self_gpu_ms.iloc[0] == 2.0  # ms, 2 steps
    assert {"sm75_xmma_dgrad", "sm75_xmma_fprop"} <= set(busiest.index) and "data" not in busiest.index


@pytest.mark.gpu_branch("05", "cell profile-gpu: device.type == 'mps'")
@pytest.mark.parametrize("device_type, first_words", [("mps", "On mps the profiler records the CPU side only"),
                                                      ("cpu", "No GPU: cpu does all the work.")])
def test_after_the_profile_a_mac_or_a_cpu_learner_is_told_why_there_is_no_gpu_row(device_type, first_words):
    # PyTorch's profiler has no activity for Apple's GPU (ProfilerActivity: CPU, CUDA, XPU, ...), so a
    # Mac's profile holds CPU events only, like this real one
    assert not hasattr(ProfilerActivity, "MPS")
    run = tiny_run({})
    nb.train_step(run)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        nb.train_step(run)
    shown = []
    namespace = {**vars(nb), "device": torch.device(device_type), "ON_GPU": False, "prof": prof,
                 "PROFILE_SETTING": "heavy data", "display": shown.append}
    printed = run_cell("05", "profile-gpu", namespace)
    assert printed.startswith(first_words) and printed.count("\n") == 1
    [full_table] = shown
    assert "Self CPU" in full_table.data and "CUDA" not in full_table.data


@pytest.mark.gpu_branch("05", "cell costs: ON_GPU")
@pytest.mark.parametrize("on_gpu, fast, size", [(True, True, 2048), (True, False, 4096), (False, True, 512),
                                                (False, False, 1024)])
def test_a_gpu_measures_its_throughput_on_a_4_times_wider_matrix_product(on_gpu, fast, size):
    # The measurements themselves need the device: stand-ins return what a T4 might, and record
    # what they were asked. A GPU reaches its throughput only with enough work to fill it.
    asked, stepped = [], []
    device = torch.device("cuda" if on_gpu else "cpu")

    def operations_per_step(step, on, activities):
        assert on == device and activities == "the settings cell's activities"
        step()
        return {"forward": 20.0, "backward": 30.0, "optimizer": 10.0}

    settings = ["heavy data", "tiny batches", "big model"]
    launches = iter([12e-6, 30e-6, 11e-6])
    namespace = {"device": device, "ON_GPU": on_gpu, "FAST": fast, "pd": pd, "statistics": statistics,
                 "PROFILER_ACTIVITIES": "the settings cell's activities", "ROUNDS": 3,
                 "cost_rounds": nb.cost_rounds,
                 "SETTINGS": dict.fromkeys(settings), "runs": {name: name for name in settings},
                 "train_step": stepped.append,
                 "launch_overhead_seconds": lambda on, activities: next(launches),
                 "matmul_flop_per_second": lambda size, on: asked.append((size, on)) or 8e12,
                 "operations_per_step": operations_per_step}
    printed = run_cell("05", "costs", namespace)
    assert asked == [(size, device)] * 3 and stepped == settings  # one product per round
    assert printed == f"{device}: 12.0 µs per operation (launch overhead), 8000.0 GFLOP/s (medians of 3 rounds)\n"
    assert namespace["LAUNCH_ROUNDS"] == [12e-6, 30e-6, 11e-6] and namespace["FLOP_ROUNDS"] == [8e12] * 3
    assert list(namespace["operations"].index) == settings


def test_the_verdicts_are_read_as_built_or_explained():
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
                       "tiny batches: optimizer's share of operations 50% (Step 4)"]
    namespace["verdicts"].loc["big model", "verdict"] = "launch-bound"  # a GPU's cheap arithmetic
    printed = run_cell("05", "verdicts-say", namespace).splitlines()
    assert printed[2:4] == [
        "big model: launch-bound (built to be compute-bound)",
        "Another device shifts the balance (a GPU's arithmetic is many times cheaper), and so do other "
        "programs that slow a whole run: close them, run Steps 1 and 2 again to tell which."]


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
        assert missing("workers-say", f"num_workers=2: {nb.change_in_words(*rounds)}.") == []
        assert missing("results-check", f"Adam(fused=True): {nb.change_in_words(*rounds)}.",
                       "All 1 checked variants kept the results within the tolerance.") == []
    assert len(missing("workers-say", "No worker variant could run (no workers asked for).")) == 1
    assert len(missing("results-check", "Adam(fused=True): not run, needs a CPU, CUDA, MPS or XPU device.",
                       "All 0 checked variants kept the results within the tolerance.")) == 1


def measured_autocast(kind, variant="autocast bfloat16"):
    """Rows of Going deeper A's measurement (measure_setting's keys) whose autocast row's rounds were
    `kind`."""
    rounds = {"faster": (2.0, 1.6, 2.4), "about the same": (1.0, 0.97, 1.03), "slower": (0.5, 0.4, 0.6),
              "inconclusive": (1.2, 0.6, 1.4)}[kind]
    row = dict(setting="big model", loss=0.5, accuracy_pct=90.0, spread_pct=5.0, baseline=False,
               precision="bfloat16", recipe_change=False, baseline_loss=0.5, baseline_accuracy_pct=90.0)
    return [{**row, "variant": "baseline: float32", "baseline": True, "speedup_x": 1.0, "slowest_x": 1.0,
             "fastest_x": 1.0},
            {**row, "variant": variant, **dict(zip(("speedup_x", "slowest_x", "fastest_x"), rounds))},
            {**row, "variant": "channels_last", "speedup_x": 2.0, "slowest_x": 1.6, "fastest_x": 2.4},
            {**row, "setting": "tiny batches", "variant": "autocast bfloat16", "speedup_x": 0.5,
             "slowest_x": 0.4, "fastest_x": 0.6}]


NO_BF16 = {"sse4_2", "avx2", "fma"}
AMX = {"avx512f", "amx_tile", "amx_bf16", "avx512_bf16"}
ARM = {"fp", "asimd", "bf16"}


@pytest.mark.gpu_branch("05", "cell mixed-say: device.type == 'cpu'")
@pytest.mark.parametrize("device_type, kind, explanation", [
    ("cpu", "about the same", "On a CPU, bfloat16 needs instructions made for it: see below."),
    ("cpu", "slower", "On a CPU, bfloat16 needs instructions made for it: see below."),
    ("cpu", "faster", None),  # the verdict above says it all
    ("cpu", "inconclusive", None),  # and "run again": no reason for a result that is not one
    ("cuda", "inconclusive", None),
    ("cuda", "about the same", "No gain on cuda: at this size the GPU may not be busy enough"),
    ("cuda", "slower", "No gain on cuda: at this size the GPU may not be busy enough"),
    ("mps", "about the same", "No gain on mps: at this size the GPU may not be busy enough"),
    ("cuda", "faster", None),
    ("mps", "faster", None),
])
def test_going_deeper_a_explains_a_16_bit_result_on_a_cpu_and_on_a_gpu_in_one_line(device_type, kind,
                                                                                  explanation):
    variant = "autocast bfloat16" if device_type == "cpu" else "autocast float16 + GradScaler"
    results = measured_autocast(kind, variant)
    namespace = {**vars(nb), "device": torch.device(device_type), "results": results}
    printed = run_cell("05", "mixed-say", namespace).splitlines()
    rounds = [results[1][key] for key in ("speedup_x", "slowest_x", "fastest_x")]
    verdicts = [f"{variant}: {nb.change_in_words(*rounds)}.",
                f"channels_last: {nb.change_in_words(2.0, 1.6, 2.4)}."]
    assert printed[:2] == verdicts  # report()'s verdicts; the tiny-batches row is not this setting's
    assert printed[-1] == "All 2 checked variants kept the results within the tolerance."
    explained = printed[2:-1]
    assert len(explained) == (explanation is not None) and all(line.startswith("  ") for line in explained)
    if explanation:
        assert explained[0].strip().startswith(explanation)


@pytest.mark.parametrize("flags, kind, explanation", [
    (AMX, "faster", "bfloat16 paid off on this CPU (bfloat16 hardware: AMX with bfloat16)."),
    (NO_BF16, "faster", "bfloat16 paid off on this CPU (bfloat16 hardware: none)."),  # it may
    (NO_BF16, "about the same", "As expected without bfloat16 instructions"),
    (NO_BF16, "slower", "As expected without bfloat16 instructions"),
    (AMX, "slower", "No gain (bfloat16 hardware: AMX with bfloat16): at this size"),
    (ARM, "about the same", "No gain (bfloat16 hardware: ARM BF16 instructions): at this size"),
    (set(), "slower", "No gain (bfloat16 hardware: unknown): at this size"),  # Windows: no cpuinfo
    (NO_BF16, "inconclusive", "The rounds disagree (bfloat16 hardware: none): the timings varied more"),
    (AMX, "inconclusive", "The rounds disagree (bfloat16 hardware: AMX with bfloat16): the timings"),
])
def test_going_deeper_reads_the_bfloat16_result_with_the_cpus_instructions(flags, kind, explanation):
    said = nb.bf16_on_this_cpu(measured_autocast(kind), nb.bf16_hardware(flags))
    assert said.startswith(explanation) and "\n" not in said  # one autocast row, one explanation
    assert nb.bf16_on_this_cpu(measured_autocast(kind)[2:], nb.bf16_hardware(flags)) == ""  # none


@pytest.mark.gpu_branch("05", "cell cpu-bf16: device.type == 'cpu'")
@pytest.mark.parametrize("device_type", ["cpu", "cuda", "mps"])
def test_the_cpu_bfloat16_detour_shows_the_cpus_flags_only_when_the_device_is_the_cpu(device_type):
    # A T4 learner's training step runs on the GPU; the host CPU's flags say nothing about it
    asked = []
    namespace = {**vars(nb), "device": torch.device(device_type), "results": measured_autocast("slower"),
                 "cpu_flags": lambda: asked.append("flags") or AMX}
    printed = run_cell("05", "cpu-bf16", namespace).splitlines()
    if device_type == "cpu":
        assert asked == ["flags"] and "bfloat16 hardware: AMX with bfloat16" in printed[0]
        assert printed[1].startswith("No gain (bfloat16 hardware: AMX with bfloat16)")
    else:
        assert asked == [] and "CPU_BF16" not in namespace
        assert printed == [f"The device is {device_type}: the CPU's bfloat16 instructions do not decide its "
                           "arithmetic."]


# --- the taught calls whose effect a CPU cannot show, made as the prose says ---------------------------
# Each test runs the notebook's own cell (notebook_code.run_cell) with stand-ins that record the call and
# its arguments: a CPU cannot show what Adam's fused kernel, CUDA autocast or CUDA's GradScaler do on a
# GPU, but it can show that they are asked for as taught.

class StandInTorch:
    """The torch module in a cell's namespace, but torch.optim.Adam, torch.autocast and
    torch.amp.GradScaler record their calls in `calls`; Adam is then made for real (a CPU runs every
    form of it), autocast and the scaler are stand-ins (StandInAutocast, StandInScaler)."""

    def __init__(self, calls):
        def adam(parameters, **options):
            calls.append(("Adam", options))
            return torch.optim.Adam(parameters, **options)

        self.optim = types.SimpleNamespace(Adam=adam)
        self.autocast = lambda *args, **kwargs: StandInAutocast(calls, *args, **kwargs)
        self.amp = types.SimpleNamespace(GradScaler=lambda *args, **kwargs: StandInScaler(calls, *args, **kwargs))

    def __getattr__(self, name):
        return getattr(torch, name)


class StandInAutocast:
    """torch.autocast's stand-in: records its arguments, and when its block opens and closes."""

    def __init__(self, calls, *args, **kwargs):
        self.calls = calls
        calls.append(("autocast", args, kwargs))

    def __enter__(self):
        self.calls.append("autocast opens")

    def __exit__(self, *exception):
        self.calls.append("autocast closes")


class StandInScaler:
    """torch.amp.GradScaler's stand-in: records its arguments and each scale, step and update; like a
    real scaler, step() steps the optimizer (here scale() leaves the loss as it is)."""

    def __init__(self, calls, *args, **kwargs):
        self.calls = calls
        calls.append(("GradScaler", args, kwargs))

    def scale(self, loss):
        self.calls.append("scaler.scale")
        return loss

    def step(self, optimizer):
        self.calls.append(("scaler.step", optimizer))
        optimizer.step()

    def update(self):
        self.calls.append("scaler.update")


@pytest.mark.parametrize("device_type", ["cuda", "cpu", "mps"])
def test_step_4_measures_adam_with_fused_true_against_pytorchs_default_form(device_type):
    calls = []
    baseline, fix = step_4_variants(device_type, calls)
    assert (baseline["name"], fix["name"]) == ("baseline: Adam", "Adam(fused=True)")
    assert "optimizer" not in baseline and fix["needs"] is None  # fused Adam runs on all three
    optimizer = fix["optimizer"]([nn.Parameter(torch.zeros(3))])
    assert calls == [("Adam", {"lr": 3e-3, "fused": True})] and optimizer.defaults["fused"] is True


def stand_in_cuda_plan(monkeypatch, request, capability):
    """The namespace after the settings cell and the autocast plan on a CUDA GPU of `capability`, from
    stand-ins shaped like PyTorch's answers: get_device_capability returns (major, minor), and
    is_bf16_supported returns True as it does on a T4 too (by default it counts emulation:
    torch/cuda/__init__.py, is_bf16_supported(including_emulation=True))."""
    stand_in_capability(monkeypatch, capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    logger = logging.getLogger("torch.utils.cpp_extension")
    request.addfinalizer(lambda level=logger.level: logger.setLevel(level))  # the settings cell quietens it
    namespace = {**vars(nb), "device": torch.device("cuda")}
    run_cell("05", "settings", namespace)
    printed = run_cell("05", "autocast-plan", namespace)
    assert namespace["CAPABILITY"] == capability
    return namespace, printed


@pytest.mark.parametrize("capability, dtype, scaler", [
    ((7, 5), torch.float16, True),  # a T4: float16 Tensor Cores, bfloat16 only emulated
    ((7, 0), torch.float16, True),  # a V100
    ((8, 0), torch.bfloat16, False),  # an A100: bfloat16 Tensor Cores
    ((8, 6), torch.bfloat16, False),
    ((9, 0), torch.bfloat16, False),  # an H100
])
def test_mixed_precision_on_cuda_picks_its_type_by_capability_and_scales_float16_only(
        monkeypatch, request, capability, dtype, scaler):
    namespace, printed = stand_in_cuda_plan(monkeypatch, request, capability)
    assert (namespace["AMP_DTYPE"], namespace["AMP_SCALER"]) == (dtype, scaler)
    assert printed.startswith(f"On cuda: {dtype}, GradScaler: {scaler}")
    calls, measured = [], []
    namespace.update(torch=StandInTorch(calls), results=[], compare=lambda rows, setting: None,
                     jobs={"big model": "the big-model job"},
                     measure_setting=lambda job, variants: measured.append((job, variants)) or [])
    run_cell("05", "mixed-step", namespace)
    run_cell("05", "mixed-measure", namespace)
    [(job, (baseline, variant))] = measured
    assert job == "the big-model job" and set(baseline) == {"name"}
    assert variant["step"] is namespace["mixed_precision_step"] and variant["dtype"] is dtype
    assert variant["name"] == f"autocast {str(dtype)[6:]}" + " + GradScaler" * scaler
    scaler_made = variant["scaler"]()  # what new_run calls for each run of the variant
    assert calls == [("GradScaler", ("cuda",), {"enabled": scaler})]

    # one training step of the variant: the forward pass and the loss inside CUDA autocast of that
    # type, then the scaler's scale, step (with the run's optimizer) and update, in that order
    calls.clear()
    model = nn.Linear(4, 3)
    optimizer = types.SimpleNamespace(step=lambda: calls.append("optimizer.step"),
                                      zero_grad=lambda set_to_none: calls.append("optimizer.zero_grad"))
    run = types.SimpleNamespace(forward=lambda images: calls.append("forward") or model(images),
                                dtype=variant["dtype"], scaler=scaler_made, optimizer=optimizer,
                                device=torch.device("cuda"), losses=[],
                                schedule=types.SimpleNamespace(step=lambda: calls.append("schedule.step")))
    namespace["next_batch"] = lambda run: (torch.randn(2, 4), torch.tensor([0, 2]))
    namespace["part"] = lambda name, times=None, device=None: contextlib.nullcontext()
    loss_function = nn.functional.cross_entropy
    namespace["nn"] = types.SimpleNamespace(functional=types.SimpleNamespace(
        cross_entropy=lambda logits, labels: calls.append("loss") or loss_function(logits, labels)))
    namespace["mixed_precision_step"](run)
    assert calls == [("autocast", ("cuda",), {"dtype": dtype}), "autocast opens", "forward", "loss",
                     "autocast closes", "scaler.scale", ("scaler.step", optimizer), "optimizer.step",
                     "scaler.update", "optimizer.zero_grad", "schedule.step"]
    assert model.weight.grad is not None and len(run.losses) == 1  # the scaled loss went backward


def test_the_core_hands_its_key_figures_to_report_figures_once():
    calls = [(index, cell.get("id")) for index, cell in enumerate(NOTEBOOK.cells) if cell.cell_type == "code"
             and "report_figures(" in cell.source and not cell.source.startswith("#@title Shared setup")]
    assert [cell_id for _, cell_id in calls] == ["report-figures"] and calls[0][0] < len(core_cells(NOTEBOOK))
    reported = []

    def measured(setting, variant, baseline, step_ms, speedup_x):
        return {"setting": setting, "variant": variant, "baseline": baseline, "step_ms": step_ms,
                "speedup_x": speedup_x, "loss": 0.5}

    results = [measured("heavy data", "baseline: num_workers=0", True, 41.25, 1.0),
               measured("heavy data", "num_workers=2", False, 20.5, 2.01234),
               measured("tiny batches", "baseline: Adam", True, 3.5, 1.0),
               {"setting": "tiny batches", "variant": "Adam(fused=True)", "not_run": "needs a CPU, ..."}]
    verdicts = pd.DataFrame({"verdict": {"heavy data": "data-bound", "tiny batches": "launch-bound",
                                         "big model": "compute-bound"}})
    namespace = {**vars(nb), "verdicts": verdicts, "results": results, "LAUNCH_S": 12.25e-6,
                 "FLOP_PER_S": 8.12e12, "checks": pd.DataFrame({"kept": [True]}),
                 "report_figures": lambda fallback=None, **figures: reported.append((fallback, figures))}
    assert run_cell("05", "report-figures", namespace) == ""
    assert reported == [(None, {
        "heavy_data_verdict": "data-bound", "tiny_batches_verdict": "launch-bound",
        "big_model_verdict": "compute-bound",
        "heavy_data_baseline_ms_per_step": 41.25, "heavy_data_fix": "num_workers=2", "heavy_data_speedup_x": 2.012,
        "tiny_batches_baseline_ms_per_step": 3.5,
        "launch_overhead_us": 12.25, "throughput_gflop_s": 8120.0, "fixes_kept": 1, "fixes_checked": 1})]


# --- fastai: the same tricks through its Learner (Going deeper E) ----------------------------------

@pytest.fixture
def fastai_cells():
    """The namespace after the notebook's cells that import fastai and define the DeviceAutocast
    callback, run for real; and a tiny Learner on the CPU in place of shapes_learner (the notebook's
    needs the settings' made-up pictures)."""
    pytest.importorskip("fastai")
    namespace = {**vars(nb), "UNAVAILABLE": set(), "progress_bar": lambda items: items,
                 "jobs": {"big model": "the big-model job"}}
    with warnings.catch_warnings():
        # fastai's tabular module sets a pandas option that pandas 3 deprecates: nothing to act on here
        warnings.filterwarnings("ignore", message="The 'mode.chained_assignment' option is deprecated")
        run_cell("05", "fastai-import", namespace)
    run_cell("05", "fastai-callback", namespace)
    assert namespace["FASTAI"] and "DeviceAutocast" in namespace

    def shapes_learner(job, train_count=256):
        assert job == "the big-model job"
        generator = torch.Generator().manual_seed(0)
        items = [(torch.randn(3, 16, 16, generator=generator), index % 4) for index in range(8)]
        dls = namespace["DataLoaders"].from_dsets(items, items, bs=4, num_workers=0, device=CPU)
        return namespace["Learner"](dls, nb.make_cnn(4), loss_func=nn.CrossEntropyLoss())

    namespace["shapes_learner"] = shapes_learner
    return namespace


@pytest.mark.gpu_branch("05", "cell fastai-run: device.type != 'cuda'")
@pytest.mark.parametrize("device_type, amp_dtype, switch, callbacks", [
    ("cuda", torch.float16, "to_fp16", {"MixedPrecision"}),  # a T4: fastai's own float16 with its scaler
    ("cuda", torch.bfloat16, "to_bf16", {"MixedPrecision"}),  # an A100
    ("mps", torch.float16, "to_fp16", {"MixedPrecision", "DeviceAutocast"}),  # fastai's autocast is CUDA's
    ("cpu", torch.bfloat16, "to_bf16", {"MixedPrecision", "DeviceAutocast"}),
])
def test_fastai_gets_the_notebooks_own_autocast_callback_only_off_cuda(fastai_cells, device_type, amp_dtype,
                                                                      switch, callbacks):
    # Training needs the device: fit_and_record's stand-in records the callbacks of each Learner it gets.
    fitted, shown = {}, []

    def fit_and_record(learn, epochs=1):
        fitted[len(fitted)] = {type(callback).__name__ for callback in learn.cbs}
        return {"seconds": 1.0, "first_conv_dtype": "float32"}

    namespace = fastai_cells  # itself: DeviceAutocast reads AMP_DTYPE there
    namespace.update(device=torch.device(device_type), AMP_DTYPE=amp_dtype, fit_and_record=fit_and_record,
                     display=shown.append)
    run_cell("05", "fastai-run", namespace)
    assert namespace["FASTAI_MIXED"] == switch  # Going deeper A's plan, in fastai's words
    labels = ["plain float32", f"learn.{switch}()"] + ["DeviceAutocast callback"] * (device_type != "cuda")
    assert list(namespace["fastai_rows"]) == labels and list(shown[0].index) == labels
    standard = fitted[0]  # fastai's own callbacks, in every Learner
    assert not standard & {"MixedPrecision", "DeviceAutocast"}
    assert set().union(*(names - standard for names in fitted.values())) == callbacks
    assert fitted[1] - standard == {"MixedPrecision"}


def test_on_a_cpu_fastais_mixed_precision_leaves_float32_and_the_notebooks_callback_computes_in_bfloat16(
        fastai_cells):
    # what the notebook's fastai cells say, trained for real (one epoch of 8 pictures)
    shown = []
    namespace = fastai_cells  # itself: DeviceAutocast reads AMP_DTYPE there
    namespace.update(device=CPU, AMP_DTYPE=torch.bfloat16, display=shown.append)
    run_cell("05", "fastai-run", namespace)
    dtypes = {label: row["first_conv_dtype"] for label, row in namespace["fastai_rows"].items()}
    assert dtypes == {"plain float32": "float32", "learn.to_bf16()": "float32",
                      "DeviceAutocast callback": "bfloat16"}
    printed = " ".join(run_cell("05", "fastai-say", namespace).split())
    assert printed == ("On cpu, learn.to_bf16() left the convolutions in float32: fastai's callback opens CUDA "
                       "autocast only. The DeviceAutocast callback ran them in bfloat16.")


@pytest.mark.parametrize("device_type, mixed, dtypes, expected", [
    # a T4: fastai's to_fp16 opens CUDA autocast, so the convolutions run in float16
    ("cuda", "to_fp16", {"learn.to_fp16()": "float16"}, "fastai's mixed precision works"),
    # a CPU or a Mac: fastai's callback opens CUDA autocast only; the notebook's own callback works
    ("cpu", "to_bf16", {"learn.to_bf16()": "float32", "DeviceAutocast callback": "bfloat16"},
     "left the convolutions in float32: fastai's callback opens CUDA autocast only. The "
     "DeviceAutocast callback ran them in bfloat16."),
    ("cpu", "to_bf16", {}, ""),  # fastai not installed: the part is skipped
])
def test_what_the_fastai_runs_say_on_a_gpu_and_elsewhere(device_type, mixed, dtypes, expected):
    rows = {label: {"first_conv_dtype": dtype} for label, dtype in dtypes.items()}
    namespace = {"FASTAI": bool(dtypes), "FASTAI_MIXED": mixed, "fastai_rows": rows,
                 "device": torch.device(device_type)}
    printed = run_cell("05", "fastai-say", namespace)
    assert (expected in printed) if expected else printed == ""
    assert printed.startswith(f"On {device_type}, learn.{mixed}()") or not dtypes


# --- the exercises: each check with the wrong answer a learner is likely to write ------------------
# The nbval run checks that each untouched starter says NOT DONE YET and each answer PASSED (conftest.py);
# here each check meets a likely wrong answer and must say what is wrong.

@pytest.mark.exercise("05", "part-times")
def test_exercise_1_says_a_timing_in_seconds_is_not_in_milliseconds(shapes_module):
    job = tiny_job(shapes_module, feed="decode on every read")
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
    job = tiny_job(shapes_module, feed="decode on every read")
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


# --- the taught calls: in view where the prose teaches them -------------------------------------

def test_the_taught_calls_are_in_the_visible_cells_of_their_steps():
    # test_learner_first.py checks that each is in a visible cell of the core; here, that each is in the
    # cell of the step whose prose teaches it
    cells = {cell.get("id"): cell.source for cell in NOTEBOOK.cells}
    where = {0: "train-step", 1: "timing-loop", 2: "timing-loop", 3: "profile", 4: "flop-count",
             5: "workers-fix", 6: "fused-fix"}
    taught = manifest.notebook("05").taught_calls
    for index, cell_id in where.items():
        assert re.search(taught[index], cells[cell_id], re.S), (taught[index], cell_id)
