"""Notebook 05's GPU, Mac and CPU branches, each executed on the CPU (tests/collection/test_gpu_branches.py
lists them): its decisions called as those machines call them, and its cells run whole
(notebook_code.run_cell) with stand-ins shaped like PyTorch's answers where only the device can answer:
torch.cuda.get_device_capability's (major, minor), a profile of a GPU run made of the profiler's own
classes, and torch.optim.Adam, torch.autocast and torch.amp.GradScaler recording the calls a CPU cannot
show the effect of (Going deeper's fused Adam, CUDA autocast and its scaler, fastai on each device)."""
import contextlib
import logging
import os
import statistics
import types

import pandas as pd
import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from support.notebook_05 import (AMX, StandInTorch, fused_variants, measured_autocast, profiled_on_a_gpu,
                                 tiny_run, two_steps_on_a_gpu)
from support.notebook_05 import fastai_cells, one_thread  # noqa: F401 (pytest fixtures, used by name)
from support.notebook_code import load_helpers, run_cell

nb = load_helpers("05")


# --- Decisions, as each kind of machine makes them ------------------------------------------------

@pytest.mark.gpu_branch("05", "cuda_graphs_need: device_type == 'cuda' and backend == 'inductor'")
def test_cuda_graphs_need_a_cuda_gpu_with_inductor():
    assert nb.cuda_graphs_need("cuda", "inductor") is None
    assert nb.cuda_graphs_need("cuda", "aot_eager")
    assert nb.cuda_graphs_need("cpu", "inductor")
    assert nb.cuda_graphs_need("mps", "inductor")


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


# --- The notebook's cells, run whole on a GPU, a Mac and a CPU ------------------------------------
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


@pytest.mark.gpu_branch("05", "cell more-settings: device.type == 'cpu'")
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("device_type", ["cuda", "mps", "cpu"])
def test_the_big_model_gets_8_times_larger_batches_on_a_gpu(device_type, fast):
    found = {}
    heavy = {"feed": "decode on every read", "batch_size": 32}  # the core's setting, the same everywhere
    for kind in ("cpu", device_type):
        namespace = {**vars(nb), "device": torch.device(kind), "FAST": fast, "SETTINGS": {"heavy data": heavy},
                     "job": types.SimpleNamespace(name="heavy data"), "shapes": "the dataset module",
                     "ROUNDS": 3, "make_job": lambda name, sizes, module, on, rounds: (name, on)}
        run_cell("05", "more-settings", namespace)
        found[kind] = namespace["SETTINGS"]
        assert namespace["jobs"]["big model"] == ("big model", torch.device(kind))
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
                 "job": types.SimpleNamespace(name="heavy data"), "display": shown.append}
    printed = run_cell("05", "profile-gpu", namespace).splitlines()
    # GPU work 0.1 + 0.5 + 1.0 + 0.1 ms of a 9.5 ms step (see two_steps_on_a_gpu)
    assert printed[0].startswith("The GPU worked 18% of the first profiled training step of 'heavy data' and "
                                 "waited the rest")
    assert printed[1:] == ["The operations that kept the GPU busiest:"]
    [busiest] = shown
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
    run = tiny_run(nb, {})
    nb.train_step(run)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        nb.train_step(run)
    shown = []
    namespace = {**vars(nb), "device": torch.device(device_type), "ON_GPU": False, "prof": prof,
                 "job": types.SimpleNamespace(name="heavy data"), "display": shown.append}
    printed = run_cell("05", "profile-gpu", namespace)
    assert printed.startswith(first_words) and printed.count("\n") == 1
    assert shown == []  # no table of GPU operations
    assert [bar[0] for bar in namespace["timeline"]] == ["CPU"] * 4  # the CPU row only, for Going deeper D


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
                 "SETTINGS": dict.fromkeys(settings), "setting_runs": {name: name for name in settings},
                 "train_step": stepped.append,
                 "launch_overhead_seconds": lambda on, activities: next(launches),
                 "matmul_flop_per_second": lambda size, on: asked.append((size, on)) or 8e12,
                 "operations_per_step": operations_per_step}
    printed = run_cell("05", "costs", namespace)
    assert asked == [(size, device)] * 3 and stepped == settings  # one product per round
    assert printed == f"{device}: 12.0 µs per operation (launch overhead), 8000.0 GFLOP/s (medians of 3 rounds)\n"
    assert namespace["LAUNCH_ROUNDS"] == [12e-6, 30e-6, 11e-6] and namespace["FLOP_ROUNDS"] == [8e12] * 3
    assert list(namespace["operations"].index) == settings


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
    namespace = {**vars(nb), "device": torch.device(device_type), "compute_results": results}
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


@pytest.mark.gpu_branch("05", "cell cpu-bf16: device.type == 'cpu'")
@pytest.mark.parametrize("device_type", ["cpu", "cuda", "mps"])
def test_the_cpu_bfloat16_detour_shows_the_cpus_flags_only_when_the_device_is_the_cpu(device_type):
    # A T4 learner's training step runs on the GPU; the host CPU's flags say nothing about it
    asked = []
    namespace = {**vars(nb), "device": torch.device(device_type), "compute_results": measured_autocast("slower"),
                 "cpu_flags": lambda: asked.append("flags") or AMX}
    printed = run_cell("05", "cpu-bf16", namespace).splitlines()
    if device_type == "cpu":
        assert asked == ["flags"] and "bfloat16 hardware: AMX with bfloat16" in printed[0]
        assert printed[1].startswith("No gain (bfloat16 hardware: AMX with bfloat16)")
    else:
        assert asked == [] and "CPU_BF16" not in namespace
        assert printed == [f"The device is {device_type}: the CPU's bfloat16 instructions do not decide its "
                           "arithmetic."]


# --- The taught calls whose effect a CPU cannot show, made as the prose says ----------------------
# Each test runs the notebook's own cell (notebook_code.run_cell) with stand-ins that record the call and
# its arguments: a CPU cannot show what Adam's fused kernel, CUDA autocast or CUDA's GradScaler do on a
# GPU, but it can show that they are asked for as taught (the stand-ins: tests/support/notebook_05.py).

@pytest.mark.parametrize("device_type", ["cuda", "cpu", "mps"])
def test_going_deeper_a_measures_adam_with_fused_true_against_pytorchs_default_form(device_type):
    calls = []
    baseline, fix = fused_variants(nb, device_type, calls)
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
    namespace.update(torch=StandInTorch(calls), compare=lambda rows, setting: None,
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
    assert namespace["FASTAI_MIXED"] == switch  # Going deeper B's plan, in fastai's words
    labels = ["plain float32", f"learn.{switch}()"] + ["DeviceAutocast callback"] * (device_type != "cuda")
    assert list(namespace["fastai_rows"]) == labels and list(shown[0].index) == labels
    standard = fitted[0]  # fastai's own callbacks, in every Learner
    assert not standard & {"MixedPrecision", "DeviceAutocast"}
    assert set().union(*(names - standard for names in fitted.values())) == callbacks
    assert fitted[1] - standard == {"MixedPrecision"}
