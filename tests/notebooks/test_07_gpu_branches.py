"""Notebook 07's branches for a GPU, a Mac and an AMD machine, run with stand-ins (and the other side on
the CPU):
- NVIDIA GPU, Step 1 runs the script twice, without and with CUDA_LAUNCH_BLOCKING=1, and the output of
  each run is read (a CUDA error blamed on a later line, the line of the bug when blocking); Mac: a
  release that computes a loss without an error is called silently wrong; AMD (ROCm), whose kernel
  asserts abort the process: a process killed by a signal.
- NVIDIA GPU, Step 2's mismatch on the GPU itself (the `meta` stand-in only without one).
- What stood in for a CUDA GPU, for report_figures, in the core and in Going deeper.
- Going deeper C and E run on an NVIDIA GPU (cuda_or_cpu), the CPU elsewhere: float16 autocast and the
  GradScaler made for CUDA; deterministic algorithms with warn_only=True, the warning a CNN's backward
  gives on CUDA, and CUBLAS_WORKSPACE_CONFIG before any work on the GPU; nondeterminism's CUDA wording.
Windows' way of stopping a process tree is tested with the runner, in test_07_processes.py."""
import re
import signal
import sys
import types
import warnings

import pytest
import torch
from torch import nn

from support.notebook_code import (SHARED_CELL_FIRST_LINE, TorchWithAStandInGpu, load_helpers, notebook_path, read,
                                   run_cell)
from support.pytorch_messages import ADAPTIVE_POOL_WARNING, cuda_assert_output

nb = load_helpers("07")
NOTEBOOK = read(notebook_path("07"))

BUG_LINE = nb.line_number_of(nb.LABEL_SCRIPT_SOURCE, nb.BUG_MARKER)


def script_line(text):
    """The number of the first line of Step 1's script that contains `text`."""
    return nb.line_number_of(nb.LABEL_SCRIPT_SOURCE, text)


# --- Step 1: which runs, and what their output says -----------------------------------------------

@pytest.mark.gpu_branch("07", "label_demo_runs: device_type == 'cuda'")
@pytest.mark.gpu_branch("07", "label_demo_runs: device_type == 'mps'")
def test_label_demo_runs_per_kind_of_device():
    cuda = nb.label_demo_runs("cuda")
    assert [device for _, device, _ in cuda] == ["cuda", "cuda"]
    assert [env for _, _, env in cuda] == [{"CUDA_LAUNCH_BLOCKING": None}, {"CUDA_LAUNCH_BLOCKING": "1"}]
    assert [device for _, device, _ in nb.label_demo_runs("mps")] == ["mps", "cpu"]
    for other in ("cpu", "xpu"):
        assert [device for _, device, _ in nb.label_demo_runs(other)] == ["cpu"]


def cuda_output(raised_at_line):
    """Output shaped like the script's on an NVIDIA GPU, raised at `raised_at_line`."""
    return cuda_assert_output(nb.LABEL_SCRIPT_SOURCE, raised_at_line)


def test_a_cuda_run_blamed_on_a_later_line_is_said_to_be():
    later = script_line("optimizer.step()")
    assert later > BUG_LINE
    described = nb.describe_label_run({"timed_out": False, "returncode": 1, "output": cuda_output(later)})
    assert described.startswith("torch.AcceleratorError: CUDA error: device-side assert triggered")
    assert f"Raised at line {later} ('optimizer.step()'), not at line {BUG_LINE}" in described
    assert "restart" in described


def test_a_blocking_cuda_run_points_at_the_bug():
    described = nb.describe_label_run({"timed_out": False, "returncode": 1,
                                       "output": cuda_output(BUG_LINE)})
    assert f"Raised at line {BUG_LINE}, the line that reads the bad label." in described


def test_on_a_cuda_gpu_step_1_runs_the_script_twice_the_second_time_with_cuda_launch_blocking(
        monkeypatch, tmp_path):
    # A learner's own CUDA_LAUNCH_BLOCKING=1 must not reach the first run, which shows the usual report.
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    calls = []

    def run_with_time_limit(command, time_limit_s, env_changes=None):
        """Records the call; what a child process started with these changes sees of the variable
        decides which line a T4's traceback blames (stand-in output shaped like cuda_output)."""
        calls.append((command, time_limit_s, env_changes))
        child = [sys.executable, "-c", "import os; print(os.environ.get('CUDA_LAUNCH_BLOCKING'))"]
        seen = nb.run_with_time_limit(child, 60, env_changes)["output"].strip()
        line = BUG_LINE if seen == "1" else script_line("optimizer.step()")
        return {"returncode": 1, "output": cuda_output(line), "timed_out": False, "seconds": 2.0}

    script = tmp_path / nb.LABEL_SCRIPT_NAME
    namespace = {**vars(nb), "device": torch.device("cuda"), "label_script": script,
                 "run_with_time_limit": run_with_time_limit}
    printed = run_cell("07", "label-runs", namespace)
    assert [command for command, _, _ in calls] == [[sys.executable, script, "cuda"]] * 2
    assert [env for _, _, env in calls] == [{"CUDA_LAUNCH_BLOCKING": None}, {"CUDA_LAUNCH_BLOCKING": "1"}]
    assert all(limit == nb.TIME_LIMIT_S for _, limit, _ in calls)
    titles = [line for line in printed.splitlines() if line.startswith("=====")]
    assert titles[0].startswith("===== on the GPU: exit code 1")
    assert titles[1].startswith("===== on the GPU with CUDA_LAUNCH_BLOCKING=1: exit code 1")
    readings = [line for line in printed.splitlines() if line.startswith("-> ")]
    assert f"not at line {BUG_LINE}" in readings[0] and "restart" in readings[0]
    assert f"Raised at line {BUG_LINE}, the line that reads the bad label." in readings[1]
    assert list(namespace["label_runs"]) == ["on the GPU", "on the GPU with CUDA_LAUNCH_BLOCKING=1"]


def test_a_run_without_error_is_called_silently_wrong():
    run = {"timed_out": False, "returncode": 0, "output": "loss after one step: 1.234\n"}
    assert "silently wrong" in nb.describe_label_run(run)


def test_a_process_killed_by_a_signal_is_reported():
    run = {"timed_out": False, "returncode": -signal.SIGABRT, "output": ""}
    assert "signal SIGABRT" in nb.describe_label_run(run)
    assert "exit code 134" in nb.describe_label_run({**run, "returncode": 134})


# PyTorch's message on a CUDA GPU (aten/src/ATen/TensorIterator.cpp, as notebook 02's tests quote it).
CUDA_MISMATCH_ERROR = ("Expected all tensors to be on the same device, but found at least two devices, "
                       "cuda:0 and cpu!")


class StandInCudaInputs:
    """torch.zeros(4, 64, device="cuda:0") as WeightedInputs.forward uses it: its shape, its device, and
    PyTorch's error when it is multiplied by a tensor on the CPU."""

    shape = (4, 64)
    device = torch.device("cuda", 0)

    def __mul__(self, other):
        if other.device.type == "cpu":
            raise RuntimeError(CUDA_MISMATCH_ERROR)
        return self


def test_on_a_cuda_gpu_step_2_mixes_the_gpu_and_the_cpu_and_prints_pytorchs_message(monkeypatch):
    moved = []

    def to(module, device, *args, **kwargs):  # a CPU-only PyTorch cannot move a module to CUDA
        moved.append(torch.device(device))
        return module

    monkeypatch.setattr(nn.Module, "to", to)
    namespace = {**vars(nb), "device": torch.device("cuda", 0),
                 "torch": TorchWithAStandInGpu("zeros", StandInCudaInputs)}
    printed = run_cell("07", "device-mismatch", namespace)
    assert namespace["elsewhere"] == torch.device("cuda", 0) and moved == [torch.device("cuda", 0)]
    assert printed == f"On cuda:0: RuntimeError: {CUDA_MISMATCH_ERROR}\n"
    assert "meta" not in printed and nb.triage(namespace["mismatch_error"]) == 4


def test_without_a_gpu_step_2_uses_the_named_meta_stand_in_for_the_error_and_the_fixes():
    namespace = {**vars(nb), "device": torch.device("cpu")}
    printed = run_cell("07", "device-mismatch", namespace)
    assert printed.startswith("On meta: RuntimeError: ") and "cpu" in printed
    assert nb.triage(namespace["mismatch_error"]) == 4
    printed = run_cell("07", "device-fixes", namespace)
    assert printed.splitlines() == ["WithBuffer: output of shape (4, 3) on meta",
                                    "OnTheInputsDevice: output of shape (4, 3) on meta"]


@pytest.fixture(scope="module")
def pictures():
    """Step 3's made-up pictures."""
    return nb.make_pictures(256)


# --- The figures the core reports, and what stood in ----------------------------------------------

@pytest.mark.gpu_branch("07", "stand_ins: device_type == 'cuda'")
@pytest.mark.gpu_branch("07", "stand_ins: device_type == 'cpu'")
@pytest.mark.parametrize("device_type, fallback", [
    ("cuda", None), ("cpu", "no CUDA GPU: the meta device in Step 2, the CPU in Going deeper C and E"),
    ("mps", "no CUDA GPU: the CPU in Going deeper C and E")])
def test_the_core_reports_its_figures_with_what_stood_in(device_type, fallback):
    reported = []

    def report_figures(fallback=None, **figures):  # the shared setup cell's signature
        reported.append((fallback, figures))
        return {"fallback": fallback, "figures": figures}

    later = script_line("optimizer.step()")
    runs = {"on the GPU": {"output": cuda_output(later)}, "with blocking": {"output": cuda_output(BUG_LINE)},
            "no traceback": {"output": "loss after one step: 1.234"}}
    namespace = {**vars(nb), "device": torch.device(device_type), "label_runs": runs,
                 "first_bad_module": "3 (NaiveLogSoftmax)", "report_figures": report_figures}
    assert run_cell("07", "core-figures", namespace) == ""
    assert reported == [(fallback, {
        "step_1_bug_line": BUG_LINE,
        "step_1_reported_lines": {"on the GPU": later, "with blocking": BUG_LINE, "no traceback": None},
        "step_3_first_non_finite_module": "3 (NaiveLogSoftmax)"})]


@pytest.mark.gpu_branch("07", "cuda_or_cpu: device.type == 'cuda'")
@pytest.mark.parametrize("device, where", [("cuda", "cuda"), ("cuda:1", "cuda:1"), ("cpu", "cpu"),
                                           ("mps", "cpu"), ("xpu", "cpu")])
def test_parts_c_and_e_run_on_an_nvidia_gpu_and_else_on_the_cpu(device, where):
    assert nb.cuda_or_cpu(torch.device(device)) == torch.device(where)


class RecordingAmp:
    """torch.amp for a cell: GradScaler(device, **settings), as torch.amp.GradScaler takes them, records
    them and returns a real GradScaler on the CPU with the same settings (a CPU-only PyTorch would
    disable a CUDA one and scale nothing)."""

    def __init__(self, calls):
        self.calls = calls

    def GradScaler(self, device="cuda", **settings):  # noqa: N802, torch.amp's own name
        self.calls.append(("GradScaler", device, settings))
        return torch.amp.GradScaler("cpu", **settings)


class RecordingTorch:
    """`torch` for Step 3's cells: autocast(device_type, dtype, enabled) and amp.GradScaler record what
    they are asked for and run on the CPU; everything else is torch itself."""

    def __init__(self):
        self.calls = []
        self.amp = RecordingAmp(self.calls)

    def __getattr__(self, name):
        return getattr(torch, name)

    def autocast(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        self.calls.append(("autocast", device_type, dtype, enabled))
        return torch.autocast("cpu", dtype=dtype, enabled=enabled)


class StaysOnTheCpu(nn.Sequential):
    """A classifier whose .to(device) records the device and keeps it on the CPU."""

    moves = []

    def to(self, device, *args, **kwargs):
        type(self).moves.append(torch.device(device))
        return self


class CopiedTo:
    """A CPU tensor whose .to(device) records the device and hands back the tensor itself."""

    def __init__(self, tensor, moves):
        self.tensor, self.moves = tensor, moves

    def to(self, device):
        self.moves.append(torch.device(device))
        return self.tensor


@pytest.mark.parametrize("device_type", ["cuda", "cpu", "mps"])
def test_part_c_makes_its_float16_autocast_and_grad_scaler_for_run_on(monkeypatch, pictures, device_type):
    # On a CUDA GPU the cells ask for autocast("cuda", float16) and GradScaler("cuda"), as the prose
    # says; the stand-ins record that and compute on the CPU, where the same calls run for real.
    monkeypatch.setattr(StaysOnTheCpu, "moves", [])

    def make_classifier(last_layer, seed=0):
        model = nb.make_classifier(last_layer, seed)
        model.__class__ = StaysOnTheCpu
        return model

    def stored_as(values, dtype, device):
        asked.append(torch.device(device))
        return nb.stored_as(values, dtype, "cpu")

    asked, copies, recording = [], [], RecordingTorch()
    namespace = {**vars(nb), "device": torch.device(device_type), "torch": recording,
                 "make_classifier": make_classifier, "stored_as": stored_as,
                 "pictures": CopiedTo(pictures[0] / 255, copies), "picture_labels": CopiedTo(pictures[1], copies),
                 "STEPS": 12}
    run_cell("07", "float16-table", namespace)
    run_on = torch.device("cuda" if device_type == "cuda" else "cpu")
    assert namespace["run_on"] == run_on and asked == [run_on] * 4
    run_cell("07", "zero-gradients", namespace)
    printed = run_cell("07", "scaler-steps", namespace)
    assert copies == [run_on, run_on] and set(StaysOnTheCpu.moves) == {run_on}
    autocasts = [call for call in recording.calls if call[0] == "autocast"]
    assert autocasts[:3] == [("autocast", run_on.type, torch.float16, False),
                             ("autocast", run_on.type, torch.float16, True),
                             ("autocast", run_on.type, torch.float16, True)]
    assert autocasts[3:] == [("autocast", run_on.type, torch.float16, True)] * 12, "every training step"
    scalers = [call for call in recording.calls if call[0] == "GradScaler"]
    assert scalers == [("GradScaler", run_on.type, {}),
                       ("GradScaler", run_on.type, {"init_scale": 2.0**24, "growth_interval": 10})]
    zero = namespace["zero_gradients"]
    assert zero["float16, no scaler"] > zero["float32 (for comparison)"] + 50
    assert zero["float16 with a GradScaler"] < zero["float32 (for comparison)"] + 1
    assert re.fullmatch(rf"On {run_on.type}, skipped steps: \[0(, \d+)*\]; the weights stayed unchanged on "
                        r"exactly those steps: True\n", printed)


@pytest.fixture
def pictures_on_the_cpu(pictures):
    return {"run_on": torch.device("cpu"), "run_inputs": pictures[0][:128] / 255,
            "run_labels": pictures[1][:128], "STEPS": 4}


def test_part_e_on_a_cuda_gpu_turns_on_deterministic_algorithms_that_warn_and_restores_the_default(
        monkeypatch, pictures_on_the_cpu):
    seen = []

    def seeded_run(inputs, labels, seed, steps):
        """Stands in for the CNN's run on a T4: records the settings it runs under, and warns as the
        backward of AdaptiveAvgPool2d does there."""
        seen.append((torch.are_deterministic_algorithms_enabled(),
                     torch.is_deterministic_algorithms_warn_only_enabled(),
                     torch.backends.cudnn.benchmark, seed, steps))
        warnings.warn(ADAPTIVE_POOL_WARNING, UserWarning)
        return {"weight": torch.ones(3)}

    before = torch.are_deterministic_algorithms_enabled()
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)  # as a learner may have it
    namespace = {**vars(nb), **pictures_on_the_cpu, "run_on": torch.device("cuda"), "seeded_run": seeded_run}
    printed = run_cell("07", "deterministic-cnn", namespace)
    assert seen == [(True, True, False, 0, 4)] * 2
    assert printed == ("Deterministic algorithms on cuda: identical to the bit; without a deterministic "
                       "version (a warning): adaptive_avg_pool2d_backward_cuda.\n")
    assert namespace["warned"] == ["adaptive_avg_pool2d_backward_cuda"]
    assert not torch.are_deterministic_algorithms_enabled() and not before


def test_part_e_turns_deterministic_algorithms_off_again_when_a_run_fails(pictures_on_the_cpu):
    def seeded_run(inputs, labels, seed, steps):
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        run_cell("07", "deterministic-cnn", {**vars(nb), **pictures_on_the_cpu, "seeded_run": seeded_run})
    assert not torch.are_deterministic_algorithms_enabled()


def test_part_e_on_the_cpu_repeats_to_the_bit_with_nothing_to_warn_about(monkeypatch, pictures_on_the_cpu):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", torch.backends.cudnn.benchmark)  # restored
    namespace = {**vars(nb), **pictures_on_the_cpu}
    printed = run_cell("07", "deterministic-cnn", namespace)
    assert printed == "Deterministic algorithms on cpu: identical to the bit; no operation warned.\n"
    assert not torch.are_deterministic_algorithms_enabled()


def test_cublas_workspace_config_is_set_before_any_gpu_work():
    recorded = types.SimpleNamespace(environ={})
    assert run_cell("07", "cublas-workspace", {"os": recorded}) == "CUBLAS_WORKSPACE_CONFIG = :4096:8\n"
    assert recorded.environ == {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    own = types.SimpleNamespace(environ={"CUBLAS_WORKSPACE_CONFIG": ":16:8"})  # the other valid value
    run_cell("07", "cublas-workspace", {"os": own})
    assert own.environ == {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}, "a learner's own setting is kept"
    # cuBLAS is set up at the process's first CUDA matrix product: the cell runs right after the shared
    # setup cell, before every cell that puts work on `device` (Step 1's runs, Step 3's training)
    ids = [cell.get("id") for cell in NOTEBOOK.cells]
    shared = next(i for i, cell in enumerate(NOTEBOOK.cells) if cell.source.startswith(SHARED_CELL_FIRST_LINE))
    on_device = [i for i, cell in enumerate(NOTEBOOK.cells) if cell.cell_type == "code"
                 and re.search(r"\.to\(device\)|device=device|\(device\.type\)|\(device\)", cell.source)
                 and i != shared]
    assert shared < ids.index("cublas-workspace") < min(on_device)


@pytest.mark.gpu_branch("07", "nondeterminism_verdict: device_type == 'cuda'")
def test_nondeterminism_verdict_for_each_case():
    assert "bug" in nb.nondeterminism_verdict("cuda", 3, 1)
    assert "3 of 4 runs differed" in nb.nondeterminism_verdict("cuda", 3, 0)
    assert "No run differed this time" in nb.nondeterminism_verdict("cuda", 0, 0)
    assert "Every run was identical on cpu" in nb.nondeterminism_verdict("cpu", 0, 0)
    assert "1 of 4 runs differed" in nb.nondeterminism_verdict("cpu", 1, 0)


# --- Going deeper G: the triage table, and the figures Going deeper reports -----------------------

def test_going_deeper_reports_its_figures_with_what_stood_in():
    reported = []

    def report_figures(fallback=None, **figures):  # the shared setup cell's signature
        reported.append((fallback, figures))
        return {"fallback": fallback, "figures": figures}

    zero = {"float32 (for comparison)": 6.25, "float16, no scaler": 100.0, "float16 with a GradScaler": 6.25}
    namespace = {**vars(nb), "device": torch.device("cuda"), "run_on": torch.device("cuda"),
                 "zero_gradients": zero, "skipped": [0, 1, 12], "warned": ["adaptive_avg_pool2d_backward_cuda"],
                 "seeded": {"seed 0 twice": {"identical_to_the_bit": False, "largest_difference": 1e-7}},
                 "deterministic": {"identical_to_the_bit": True, "largest_difference": 0.0},
                 "report_figures": report_figures}
    assert run_cell("07", "deeper-figures", namespace) == ""
    assert reported == [(None, {
        "parts_c_and_e_on": "cuda", "zero_gradients_percent": zero, "skipped_scaler_steps": [0, 1, 12],
        "seed_0_runs_identical": False, "deterministic_runs_identical": True,
        "deterministic_largest_difference": 0.0, "warned_operations": ["adaptive_avg_pool2d_backward_cuda"]})]
