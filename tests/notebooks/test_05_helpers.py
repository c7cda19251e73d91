"""Notebook 05's decisions called with made-up inputs, each at the exact edge of its conditions: Step 2's
data-bound verdict (in every timed training step), Going deeper A's three-way verdict (data-, launch- or
compute-bound, in every step and every round), the DataLoader
workers per start method, the fused optimizer's devices, the autocast plan's reasons and PyTorch
releases, the CPU's bfloat16 instructions, the run conditions (threads, TF32, the cuDNN auto-tuner),
every variant list on each kind of machine, the timing rounds and their verdicts, the correctness
check's tolerance, the timed parts of a training step, and the drawings. The helpers take the device,
the sizes and the data they use, so these tests call them directly."""
import ast
import itertools
import math
import time
import types

import pandas as pd
import pytest
import torch

from support.notebook_05 import (AMX, ARM, CPU, MACHINES, NO_BF16, VARIANT_KEYS, down, measured_autocast,
                                 notebook_variants, steps_of, up)
from support.notebook_05 import one_thread  # noqa: F401 (pytest fixtures, used by name)
from support.notebook_code import code_cells, load_helpers, notebook_path, read

nb = load_helpers("05")
NOTEBOOK = read(notebook_path("05"))


# --- Step 2's verdict: data-bound when every timed training step waited as long as it computed ----

def test_waiting_as_long_as_computing_in_every_step_is_data_bound_and_a_hair_less_in_one_is_not():
    assert nb.data_limit([0.02, 0.05], [0.02, 0.01]) == "data-bound"  # equal: data-bound
    assert nb.data_limit([down(0.02), 0.05], [0.02, 0.01]) == "inconclusive"  # the steps disagree
    assert nb.data_limit([down(0.02), 0.001], [0.02, 0.01]) == "computing"  # none waited that long
    assert nb.data_limit([0.5], [0.1]) == "data-bound"
    with pytest.raises(ValueError):  # a data part for every training step, and a compute part
        nb.data_limit([0.5, 0.4], [0.1])


def test_the_verdict_in_words_gives_the_range_of_data_over_compute():
    data, compute = [0.03, 0.05], [0.01, 0.02]  # 3× and 2.5× the compute
    assert nb.limit_in_words("heavy data", "data-bound", data, compute) == (
        "heavy data: data-bound (data 2.50× to 3.00× the compute over 2 training steps)")
    assert nb.limit_in_words("x", "inconclusive", data, compute).startswith(
        "x: inconclusive on this machine: run again (data 2.50×")
    assert nb.limit_in_words("x", "computing", data, compute).startswith(
        "x: not data-bound: it computes longer than it waits for its data (")


# --- Going deeper A's verdict: data-bound, launch-bound or compute-bound --------------------------

CPU_AT_04 = {"launch_s": 25e-6, "flop_per_s": 100e9}  # about what notebook 04 measured on 2 cores
T4_LIKE = {"launch_s": 10e-6, "flop_per_s": 8e12}


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


# --- DataLoader workers and the start method ------------------------------------------------------

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


# --- The fused optimizer's devices --------------------------------------------------------

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


# --- Mixed precision: the plan's reasons and releases, the CPU's bfloat16 instructions ------------

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


# --- The run conditions: threads, TF32 and the cuDNN auto-tuner, for one run ----------------------

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


# --- Every variant of the notebook, on each kind of machine ---------------------------------------

@pytest.mark.parametrize("machine", MACHINES)
def test_every_variant_list_starts_with_its_baseline_and_every_fix_has_a_gpu_note(machine):
    for setting, lists in notebook_variants(nb, machine).items():
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
    variants = notebook_variants(nb, "2-core CPU")
    for setting, (first, _) in variants.items():
        assert len(first) == 2 and not first[1].get("needs"), setting
    not_run = [v["name"] for _, deeper in variants.values() for v in deeper if v.get("needs")]
    assert sorted(not_run) == ["TF32 matrix products", "cudnn.benchmark",
                               "torch.compile, mode=reduce-overhead (CUDA graphs)"]


def test_on_gpus_the_gpu_switches_run_where_they_exist():
    t4 = {v["name"]: v for lists in notebook_variants(nb, "Colab T4").values() for vs in lists for v in vs}
    a100 = {v["name"]: v for lists in notebook_variants(nb, "A100").values() for vs in lists for v in vs}
    assert not t4["cudnn.benchmark"].get("needs") and not t4["torch.compile, mode=reduce-overhead (CUDA graphs)"].get("needs")
    assert t4["TF32 matrix products"]["needs"] and not a100["TF32 matrix products"]["needs"]  # (7, 5) | (8, 0)
    assert "autocast float16 + GradScaler" in t4 and "autocast bfloat16" in a100


def test_on_a_mac_the_float16_variant_has_a_scaler_only_from_torch_2_8():
    old = {v["name"] for v in notebook_variants(nb, "Mac, torch 2.7")["big model"][0]}
    new = {v["name"] for v in notebook_variants(nb, "Mac, torch 2.8")["big model"][0]}
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


def test_a_variant_without_a_note_of_its_own_gets_an_empty_note():
    assert nb.gpu_note("a fix nobody wrote a note for") == ("", "")
    assert nb.gpu_note("cudnn.benchmark") == nb.GPU_NOTES["cudnn.benchmark"]


# --- Timing in interleaved rounds (the rounds themselves: tests/shared_cells/test_rounds.py) ------

def test_round_plan_uses_every_step_of_a_run():
    for steps, rounds, warmup in [(60, 3, 2), (61, 3, 2), (100, 5, 6), (600, 5, 2)]:
        timed, left = nb.round_plan(steps, rounds, warmup)
        assert timed >= 1 and 0 <= left < rounds
        assert 1 + rounds * (warmup + timed) + left == steps


def assigned_name(target):
    """The name an assignment's target binds or changes: SETTINGS for `SETTINGS` and `SETTINGS[...]`."""
    return getattr(target.value if isinstance(target, ast.Subscript) else target, "id", None)


def notebook_assignments(names, **namespace):
    """Run the notebook's top-level assignments to `names` in the notebook's order, those to an item
    of them too (SETTINGS["big model"] = ...), given `namespace`."""
    for source in code_cells(NOTEBOOK):
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and any(assigned_name(t) in names for t in node.targets):
                exec(compile(ast.Module(body=[node], type_ignores=[]), "<notebook 05>", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("machine", MACHINES)
def test_every_setting_has_steps_enough_for_its_rounds_on_every_machine(fast, machine):
    m = MACHINES[machine]
    found = notebook_assignments({"BIG_BATCH", "SETTINGS", "ROUNDS"}, FAST=fast, device=torch.device(m["device"]))
    assert list(found["SETTINGS"]) == ["heavy data", "tiny batches", "big model"]  # the core's, then part A's
    for setting, lists in notebook_variants(nb, machine).items():
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


# --- The correctness check ------------------------------------------------------------------------

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


def test_compare_marks_a_recipe_change_and_a_fix_that_did_not_keep_the_results():
    rows = [measured_row("baseline: float32", 0.5, 90.0, baseline=True),
            measured_row("autocast float16 + GradScaler", 0.8, 90.0, "float16"),
            measured_row("batch 8 times larger", 2.0, 10.0, recipe_change=True)]
    for row in rows:
        row.update(batch_size=32, first_step_s=0.1, step_ms=10.0, speedup_x=1.5, slowest_x=1.2,
                   fastest_x=1.8)
    assert list(nb.compare(rows, "big model").kept) == ["", "NO", "recipe change"]


# --- The timed parts of a training step, and the drawings -----------------------------------------

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
