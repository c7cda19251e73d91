"""Unit tests for notebook 07's helpers (When it breaks: find the cause, then fix it).

Every decision is called at both sides of its edges with made-up inputs, and what a CPU can run is run
for real: the Step 1 script in a separate process (with the time limit and the cleanup of its runner),
the planted tensor on the CPU, forward hooks on the planted nan, each exercise's check on a likely wrong
answer, and in Going deeper anomaly mode, float16 with a GradScaler on the CPU, DataLoader workers
reading a broken file, seeded runs and deterministic algorithms.

The branches a learner's GPU, Mac or AMD machine takes, and the test that executes each:
- NVIDIA GPU, Step 1 runs the script twice, without and with CUDA_LAUNCH_BLOCKING=1:
  test_label_demo_runs_per_kind_of_device; their output read by describe_label_run:
  test_a_cuda_run_blamed_on_a_later_line_is_said_to_be, test_a_blocking_cuda_run_points_at_the_bug.
  The variable reaches the child's environment: test_on_a_cuda_gpu_step_1_runs_the_script_twice_...
- Mac (MPS), Step 1 runs on the Mac's GPU and on the CPU: test_label_demo_runs_per_kind_of_device;
  a release that computes a loss without any error: test_a_run_without_error_is_called_silently_wrong.
- AMD (ROCm), whose kernel asserts abort the process: test_a_process_killed_by_a_signal_is_reported.
- Windows, stopping a process tree with taskkill: test_stopping_on_windows_uses_taskkill_on_the_tree.
- NVIDIA GPU, Step 2's mismatch on the GPU itself (`meta` only without one):
  test_on_a_cuda_gpu_step_2_mixes_the_gpu_and_the_cpu_and_prints_pytorchs_message.
- What stood in for a CUDA GPU, for report_figures: test_the_core_reports_its_figures_with_what_stood_in.
- NVIDIA GPU, Going deeper C and E run on it (cuda_or_cpu), the CPU elsewhere: float16 autocast and the
  GradScaler made for CUDA, test_part_c_makes_its_float16_autocast_and_grad_scaler_for_run_on;
  deterministic algorithms with warn_only=True and the warning a CNN's backward gives on CUDA,
  test_part_e_on_a_cuda_gpu_turns_on_deterministic_algorithms_that_warn_and_restores_the_default;
  CUBLAS_WORKSPACE_CONFIG before any work on the GPU, test_cublas_workspace_config_is_set_before_...
- The exercises' checks run on the CPU, on `meta` and on `device`: the GPU is one more device in the
  same loop, with no branch of its own.
- Step 3 and the rest of Going deeper on `device`: run on the CPU here; nondeterminism_verdict's CUDA
  wording: test_nondeterminism_verdict_for_each_case.
Nothing here needs a GPU.
"""
import ast
import math
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import types
import warnings

import matplotlib.pyplot as plt
import psutil
import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import DataLoader

from support.notebook_code import (SHARED_CELL_FIRST_LINE, TorchWithAStandInGpu, helper_file, load_helpers,
                           notebook_path, read, run_cell)

nb = load_helpers("07")
NOTEBOOK = read(notebook_path("07"))
CPU = torch.device("cpu")

BUG_LINE = nb.line_number_of(nb.LABEL_SCRIPT_SOURCE, nb.BUG_MARKER)


def script_line(text):
    """The number of the first line of Step 1's script that contains `text`."""
    return nb.line_number_of(nb.LABEL_SCRIPT_SOURCE, text)


def gone(pid):
    """True when the process `pid` has ended (a zombie waiting for its parent counts as ended)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# --- Step 1: the runner of separate processes -----------------------------------------------------

def test_a_finished_command_gives_its_output_and_exit_code():
    result = nb.run_with_time_limit([sys.executable, "-c", "print('hello'); raise SystemExit(3)"], 60)
    assert result["returncode"] == 3 and "hello" in result["output"]
    assert result["timed_out"] is False and result["seconds"] < 60


def test_environment_changes_set_and_remove_variables(monkeypatch):
    monkeypatch.setenv("NB07_REMOVE_ME", "present")
    code = "import os; print(os.environ.get('NB07_SET'), os.environ.get('NB07_REMOVE_ME'))"
    result = nb.run_with_time_limit([sys.executable, "-c", code], 60,
                                    {"NB07_SET": "1", "NB07_REMOVE_ME": None})
    assert result["output"].split() == ["1", "None"]
    assert os.environ["NB07_REMOVE_ME"] == "present", "the notebook's own environment is unchanged"


CHILD_AND_GRANDCHILD = textwrap.dedent("""
    import subprocess, sys, time
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(grandchild.pid, flush=True)
    if sys.argv[1] == "hang":
        time.sleep(120)
""")


def test_the_time_limit_stops_the_process_and_what_it_started():
    start = time.monotonic()
    result = nb.run_with_time_limit([sys.executable, "-c", CHILD_AND_GRANDCHILD, "hang"], 3)
    assert result["timed_out"] is True
    assert time.monotonic() - start < 60, "stopped at the limit, not when the child ended"
    grandchild = int(result["output"].split()[0])
    deadline = time.monotonic() + 10
    while not gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(grandchild), "the grandchild outlived the time limit"


def test_a_normal_exit_leaves_no_child_behind():
    result = nb.run_with_time_limit([sys.executable, "-c", CHILD_AND_GRANDCHILD, "exit"], 60)
    assert result["timed_out"] is False and result["returncode"] == 0
    grandchild = int(result["output"].split()[0])
    deadline = time.monotonic() + 10
    while not gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(grandchild), "a child that the command left running was not stopped"


@pytest.mark.gpu_branch("07", "new_session_options: os_name == 'nt'")
@pytest.mark.gpu_branch("07", "stop_command: os_name == 'nt'")
def test_each_system_gets_its_own_way_to_group_and_stop_processes():
    assert nb.new_session_options("posix") == {"start_new_session": True}
    assert nb.new_session_options("nt") == {"creationflags": 0x200}  # CREATE_NEW_PROCESS_GROUP
    assert nb.stop_command(1234, "posix") is None
    assert nb.stop_command(1234, "nt") == ["taskkill", "-F", "-T", "-PID", "1234"]


class StandInProcess:
    """Shaped like subprocess.Popen for stop_process_tree: pid, poll(), kill(), wait()."""

    def __init__(self, running):
        self.pid, self.running, self.calls = 4321, running, []

    def poll(self):
        return None if self.running else 0

    def kill(self):
        self.calls.append("kill")
        self.running = False

    def wait(self):
        self.calls.append("wait")
        return 0


def test_stopping_on_windows_uses_taskkill_on_the_tree(monkeypatch):
    commands = []

    def fake_run(command, check, capture_output):
        commands.append(command)
        raise subprocess.CalledProcessError(128, command)  # what taskkill does for a process gone

    monkeypatch.setattr(nb.subprocess, "run", fake_run)
    process = StandInProcess(running=True)
    nb.stop_process_tree(process, os_name="nt")
    assert commands == [["taskkill", "-F", "-T", "-PID", "4321"]]
    assert process.calls == ["kill", "wait"], "a failed taskkill still ends the process itself"
    finished = StandInProcess(running=False)
    nb.stop_process_tree(finished, os_name="nt")
    assert finished.calls == ["wait"]


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


def test_the_script_marks_the_line_that_reads_the_label():
    assert nb.LABEL_SCRIPT_SOURCE.count(nb.BUG_MARKER) == 1
    assert "cross_entropy" in nb.LABEL_SCRIPT_SOURCE.splitlines()[BUG_LINE - 1]


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """The Step 1 script, written to a file and run for real on the CPU."""
    script = tmp_path_factory.mktemp("nb07_code") / nb.LABEL_SCRIPT_NAME
    script.write_text(nb.LABEL_SCRIPT_SOURCE)
    return nb.run_with_time_limit([sys.executable, script, "cpu"], nb.TIME_LIMIT_S)


def test_on_a_cpu_the_index_error_is_raised_at_the_bug(cpu_run):
    assert cpu_run["returncode"] == 1 and not cpu_run["timed_out"]
    assert nb.error_lines(cpu_run["output"])[0] == "IndexError: Target 3 is out of bounds."
    assert nb.where_reported(cpu_run["output"], nb.LABEL_SCRIPT_NAME) == BUG_LINE
    described = nb.describe_label_run(cpu_run)
    assert described.startswith("IndexError") and f"line {BUG_LINE}, the line that reads" in described
    assert "a new computation on cpu works" in cpu_run["output"] and "restart" not in described


def cuda_output(raised_at_line):
    """Output shaped like the script's on an NVIDIA GPU (PyTorch 2.14's wording, from c10/cuda)."""
    return textwrap.dedent(f"""\
        /pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.
        Traceback (most recent call last):
          File "/content/data/nb07_code/labels_out_of_range.py", line {raised_at_line}, in <module>
            {nb.LABEL_SCRIPT_SOURCE.splitlines()[raised_at_line - 1].strip()}
        torch.AcceleratorError: CUDA error: device-side assert triggered
        Search for `cudaErrorAssert' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.
        CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
        For debugging consider passing CUDA_LAUNCH_BLOCKING=1
        Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.

        After the error, even a new computation on cuda fails: CUDA error: device-side assert triggered
        """)


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


def test_a_timed_out_run_and_a_traceback_outside_the_script():
    assert "No result within" in nb.describe_label_run({"timed_out": True, "returncode": -9,
                                                        "output": ""})
    elsewhere = "Traceback (most recent call last):\n  File \"other.py\", line 3\nValueError: x\n"
    described = nb.describe_label_run({"timed_out": False, "returncode": 1, "output": elsewhere})
    assert described.startswith("ValueError: x") and "No line of the script" in described


def test_where_reported_takes_the_last_frame_of_the_script():
    output = ('File "/a/labels_out_of_range.py", line 17, in <module>\n'
              'File "/a/lib.py", line 99, in f\nFile "/a/labels_out_of_range.py", line 19, in g\n')
    assert nb.where_reported(output, "labels_out_of_range.py") == 19
    assert nb.where_reported("nothing", "labels_out_of_range.py") is None


# --- Step 1: label_problems, against what cross_entropy really does -------------------------------

@pytest.mark.parametrize("labels", [
    [0, 1, 2], [0, 2, 2], [0, 1, 3], [-1, 1, 2], [0, -100, 2], [-100, -100, -100], [5, -2, 1]])
def test_label_problems_agree_with_cross_entropy(labels):
    labels = torch.tensor(labels)
    try:
        F.cross_entropy(torch.randn(len(labels), 3), labels)
        raised = False
    except IndexError:
        raised = True
    assert bool(nb.label_problems(labels, num_classes=3)) == raised


def test_label_problems_at_their_edges():
    assert nb.label_problems(torch.tensor([0, 2]), 3) == []
    assert "largest 3" in nb.label_problems(torch.tensor([0, 3]), 3)[0]
    assert "smallest -1" in nb.label_problems(torch.tensor([-1, 2]), 3)[0]
    assert len(nb.label_problems(torch.tensor([-1, 3]), 3)) == 2
    assert nb.label_problems(torch.tensor([7, 1]), 3, ignore_index=7) == []
    assert nb.label_problems(torch.tensor([0, 1], dtype=torch.uint8), 3) == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int16])
def test_label_problems_name_a_number_type_cross_entropy_rejects(dtype):
    labels = torch.tensor([0, 1, 2], dtype=dtype)
    with pytest.raises(RuntimeError):
        F.cross_entropy(torch.randn(3, 3), labels)
    assert "labels.long()" in nb.label_problems(labels, 3)[0]


# --- Step 2: a tensor made in forward, on two devices ---------------------------------------------

def test_the_tensor_made_in_forward_fails_on_another_device_and_both_fixes_work():
    meta_input = torch.zeros(4, 64, device="meta")
    with pytest.raises(RuntimeError, match="device"):
        nb.WeightedInputs(64).to("meta")(meta_input)
    for fixed in (nb.WithBuffer, nb.OnTheInputsDevice):
        assert fixed(64).to("meta")(meta_input).device.type == "meta"
    assert "feature_weights" in nb.WithBuffer(64).state_dict()


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


def test_the_fixes_compute_what_the_original_computes_on_the_cpu():
    cpu_input = torch.rand(4, 64)
    original = nb.WeightedInputs(64)
    for fixed_class in (nb.WithBuffer, nb.OnTheInputsDevice):
        fixed = fixed_class(64)
        fixed.linear.load_state_dict(original.linear.state_dict())
        assert torch.equal(fixed(cpu_input), original(cpu_input))


# --- Step 3: the planted nan, found and fixed -----------------------------------------------------

@pytest.fixture(scope="module")
def pictures():
    return nb.make_pictures(256)


def broken_after_train(pictures):
    model = nb.make_classifier(nb.NaiveLogSoftmax())
    rows = nb.train_and_record(model, *pictures, lr=0.05, steps=20)
    return model, rows


def test_train_stops_at_the_first_loss_that_is_not_finite(pictures):
    model, rows = broken_after_train(pictures)
    assert math.isfinite(rows[0]["loss"]) and not math.isfinite(rows[-1]["loss"])
    assert all(math.isfinite(row["loss"]) for row in rows[:-1]) and len(rows) < 20
    assert all(torch.isfinite(p).all() for p in model.parameters()), "stopped before the update"
    going_on = nb.train_and_record(nb.make_classifier(nb.NaiveLogSoftmax()), *pictures, lr=0.05, steps=5,
                        stop_early=False)
    assert len(going_on) == 5


def test_the_gradient_norm_is_recorded_before_clipping(pictures):
    rows = nb.train_and_record(nb.make_classifier(nn.LogSoftmax(dim=1)), pictures[0] / 255, pictures[1],
                    lr=0.05, steps=1, max_norm=1e-3)
    assert rows[0]["grad_norm"] > 1e-3


def test_hooks_name_the_hand_made_log_softmax(pictures):
    model, _ = broken_after_train(pictures)
    assert nb.first_non_finite_module(model, pictures[0]) == "3 (NaiveLogSoftmax)"
    assert all(not module._forward_hooks for module in model.modules()), "hooks removed"


def test_hooks_find_nothing_in_a_finite_model_and_blame_a_bad_input(pictures):
    fixed = nb.make_classifier(nn.LogSoftmax(dim=1))
    assert nb.first_non_finite_module(fixed, pictures[0] / 255) is None
    with_nan = pictures[0].clone()
    with_nan[3, 7] = float("nan")
    assert nb.first_non_finite_module(fixed, with_nan) == "(the input itself)"


class Pair(nn.Module):
    """Returns a tuple, as nn.LSTM does; the second part multiplied by `factor`."""

    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x, x * self.factor


class MakesInfItself(nn.Module):
    """Children with finite outputs; its own forward makes inf."""

    def __init__(self, factor):
        super().__init__()
        self.pair = Pair(factor)

    def forward(self, x):
        return self.pair(x)[1] * 1e30


def test_hooks_read_tuple_outputs_and_the_model_itself():
    x = torch.ones(2, 3)
    assert nb.first_non_finite_module(nn.Sequential(Pair(float("inf"))), x) == "0 (Pair)"
    largest = torch.finfo(torch.float32).max
    assert nb.first_non_finite_module(nn.Sequential(Pair(largest)), x) is None, "finite, if huge"
    assert nb.first_non_finite_module(MakesInfItself(1e10), x) == "(the whole model) (MakesInfItself)"
    assert nb.first_non_finite_module(MakesInfItself(1.0), x) is None


class Scale(nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


def test_hooks_name_the_first_of_several_bad_modules():
    model = nn.Sequential(nn.Linear(3, 3), Scale(float("inf")), Scale(2.0))
    assert nb.first_non_finite_module(model, torch.ones(2, 3)) == "1 (Scale)"


def test_hooks_are_removed_when_forward_raises():
    model = nn.Sequential(nn.Linear(3, 2))
    with pytest.raises(RuntimeError):
        nb.first_non_finite_module(model, torch.ones(2, 5))
    assert not model[0]._forward_hooks


def test_the_fix_keeps_the_loss_finite_and_falling(pictures):
    rows = nb.train_and_record(nb.make_classifier(nn.LogSoftmax(dim=1)), pictures[0] / 255, pictures[1],
                    lr=0.05, steps=30)
    assert len(rows) == 30 and nb.loss_finite_verdict(rows).startswith("The loss stayed finite for all 30")
    assert "went down" in nb.loss_finite_verdict(rows)


def test_loss_finite_verdict_for_each_case():
    assert "went down" in nb.loss_finite_verdict([{"step": 0, "loss": 2.0}, {"step": 1, "loss": 1.9}])
    assert "did NOT go down" in nb.loss_finite_verdict([{"step": 0, "loss": 2.0}, {"step": 1, "loss": 2.0}])
    rows = [{"step": 0, "loss": 2.0}, {"step": 1, "loss": math.inf}, {"step": 2, "loss": math.nan}]
    assert nb.loss_finite_verdict(rows) == "The loss was not finite from step 1 on."


def test_the_hooks_cell_keeps_what_it_found_for_the_record(pictures):
    model, _ = broken_after_train(pictures)
    namespace = {**vars(nb), "broken": model, "byte_pictures": pictures[0]}
    printed = run_cell("07", "nan-hooks", namespace)
    assert printed == "First module with a non-finite output: 3 (NaiveLogSoftmax)\n"
    assert namespace["first_bad_module"] == "3 (NaiveLogSoftmax)"


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


# --- The exercises: each check against a likely wrong answer, the notebook's answer ---------------

@pytest.mark.exercise("07", "class-numbers")
def test_exercise_1_tells_labels_minus_one_without_long_that_cross_entropy_needs_long():
    assert nb.check_class_numbers(nb.to_class_numbers, CPU).startswith("NOT DONE YET")
    assert nb.check_class_numbers(nb.to_class_numbers_answer, CPU).startswith("PASSED")
    # the likely slip: the shift without .long(), which keeps the CSV's floats
    assert nb.check_class_numbers(lambda labels: labels - 1, CPU) == (
        "NOT YET RIGHT: on [1.0, 2.0, 3.0, 3.0, 1.0] (float32) it returned torch.float32; cross_entropy "
        "needs torch.long class numbers: add .long().")
    problem = nb.label_problems(torch.tensor([1, 2, 3, 3, 1]), num_classes=3)[0]
    assert nb.check_class_numbers(lambda labels: labels.long(), CPU) == (
        f"NOT YET RIGHT: on [1.0, 2.0, 3.0, 3.0, 1.0] (float32) it returned [1, 2, 3, 3, 1], and "
        f"label_problems says: {problem}.")
    assert problem.startswith("2 label(s) of 3 or more")
    assert nb.check_class_numbers(lambda labels: labels.long() % 3, CPU) == (
        "NOT YET RIGHT: on [1.0, 2.0, 3.0, 3.0, 1.0] (float32) it returned [1, 2, 0, 0, 1], not "
        "[0, 1, 2, 2, 0]: class 1 becomes 0, 2 becomes 1, 3 becomes 2."), "in range, but the wrong classes"
    assert nb.check_class_numbers(lambda labels: (labels.long() - 1).tolist(), CPU) == (
        "NOT YET RIGHT: on [1.0, 2.0, 3.0, 3.0, 1.0] (float32) it returned [0, 1, 2, 2, 0] (a list), not a "
        "tensor.")
    assert nb.check_class_numbers(lambda labels: None, CPU) == (
        "NOT YET RIGHT: on [1.0, 2.0, 3.0, 3.0, 1.0] (float32) it returned None (a NoneType), not a tensor.")

    def made_elsewhere(labels):  # on a GPU, torch.tensor(...) of Python numbers lands on the CPU:
        return (labels.long() - 1).to("meta")  # meta stands in for that other device here

    assert nb.check_class_numbers(made_elsewhere, CPU) == (
        "NOT YET RIGHT: on [1.0, 2.0, 3.0, 3.0, 1.0] (float32) it returned a tensor on meta, but the labels "
        "are on cpu, where cross_entropy finds the scores: compute the class numbers from labels, which "
        "keeps them there.")

    def one_hot_classes(labels):  # an error of the learner's own: said with its line, not a traceback
        return F.one_hot(labels - 1, 3)

    raised = nb.check_class_numbers(one_hot_classes, CPU)
    assert raised.startswith("NOT YET RIGHT: your one_hot_classes raised RuntimeError: one_hot is only "
                             "applicable to index tensor")
    assert raised.endswith("of its cell: `return F.one_hot(labels - 1, 3)`.")


class PositionsNamedInAdvance(nb.CountedFeatures):
    """The likely slip: `.to(device)` with the device the code was written for (here the CPU's)."""

    def forward(self, x):
        return self.linear(x + torch.arange(x.shape[1]).to(CPU))


class PositionsFromOne(nb.CountedFeatures):
    def forward(self, x):
        return self.linear(x + torch.arange(1, x.shape[1] + 1, device=x.device))


class PositionsTooFew(nb.CountedFeatures):
    def forward(self, x):
        return self.linear(x + torch.arange(3, device=x.device))


class PositionsTypo(nb.CountedFeatures):
    def forward(self, x):
        return self.linear(x + torch.arange(x.shape[1], device=x.device, dtype="float"))


class PositionsWithoutReturn(nb.CountedFeatures):
    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device)
        self.linear(x + positions)


@pytest.mark.exercise("07", "positions")
def test_exercise_2_tells_a_tensor_moved_to_a_device_named_in_advance_to_use_the_inputs_device():
    assert nb.check_positions(nb.CountedFeatures, CPU).startswith("NOT DONE YET")
    assert nb.check_positions(nb.CountedFeaturesAnswer, CPU) == (
        "PASSED: it runs on cpu and meta, and computes what the reference computes.")
    named = nb.check_positions(PositionsNamedInAdvance, CPU)
    assert named.startswith("NOT YET RIGHT: with the model and its inputs on meta, forward raised "
                            "RuntimeError: ")
    assert named.endswith("Make positions where the inputs are (x.device), not on a device named in advance.")
    torch.manual_seed(0)
    from_one, inputs = PositionsFromOne(6), torch.rand(4, 6, generator=torch.Generator().manual_seed(0))
    off = (from_one(inputs) - from_one.linear(inputs + torch.arange(6))).abs().max().item()
    assert nb.check_positions(PositionsFromOne, CPU) == (
        f"NOT YET RIGHT: on the CPU the output is off by up to {off:.3g} from the reference: positions are "
        f"0, 1, ..., 5 for 6 features.")
    assert off > 1e-5
    too_few = nb.check_positions(PositionsTooFew, CPU)
    assert "on cpu, forward raised RuntimeError: The size of tensor" in too_few and "x.device" not in too_few
    assert nb.check_positions(PositionsWithoutReturn, CPU) == (
        "NOT YET RIGHT: on cpu, forward returned None (a NoneType), not 2 scores for each of the 4 inputs: it "
        "ends with `return self.linear(x + positions)`.")
    typo = nb.check_positions(PositionsTypo, CPU)  # an error of the learner's own: its line, no traceback
    assert typo.startswith("NOT YET RIGHT: your forward raised TypeError: arange() received an invalid "
                           "combination of arguments")
    assert typo.endswith('of its cell: `return self.linear(x + torch.arange(x.shape[1], device=x.device, '
                         'dtype="float"))`.')


@pytest.mark.exercise("07", "log-softmax")
def test_exercise_3_shows_how_far_adding_a_small_number_to_the_probabilities_is_off():
    assert nb.check_log_softmax(nb.my_log_softmax, CPU).startswith("NOT DONE YET")
    assert nb.check_log_softmax(nb.log_softmax_answer, CPU).startswith("PASSED")

    def plus_a_little(scores):  # the likely slip: hide log(0) by adding a small number
        return torch.log(torch.softmax(scores, dim=1) + 1e-8)

    assert nb.check_log_softmax(plus_a_little, CPU) == (
        "NOT YET RIGHT: on scores in the hundreds [-300.0, 0.0, 300.0], class 0: yours is -18.42, "
        "torch.log_softmax's -600, off by 582.")

    def overflows(scores):  # Step 3's naive log-softmax: exp(300) is inf in float32
        return scores - torch.exp(scores).sum(dim=1, keepdim=True).log()

    large = [[0.0, 100.0, 200.0], [-300.0, 0.0, 300.0]]
    assert nb.check_log_softmax(overflows, CPU) == (
        f"NOT YET RIGHT: on scores in the hundreds {large} it gave inf or nan: "
        f"{overflows(torch.tensor(large)).tolist()}.")

    def no_keepdim(scores):
        return scores - torch.logsumexp(scores, dim=1)

    with pytest.raises(RuntimeError) as raised:
        no_keepdim(torch.tensor([[1.0, 2.0, 3.0], [0.5, -0.5, 0.0]]))
    assert str(raised.value).startswith("The size of tensor")
    assert nb.check_log_softmax(no_keepdim, CPU) == (
        f"NOT YET RIGHT: on small scores it raised RuntimeError: {str(raised.value).splitlines()[0]}. "
        f"keepdim=True keeps one sum per row.")
    assert nb.check_log_softmax(lambda s: torch.logsumexp(s, dim=1), CPU) == (
        "NOT YET RIGHT: on small scores it gave (2,), not a tensor of shape (2, 3): one log-probability "
        "per score.")

    def without_return(scores):
        scores - torch.logsumexp(scores, dim=1, keepdim=True)

    assert nb.check_log_softmax(without_return, CPU) == (
        "NOT YET RIGHT: on small scores it gave None (a NoneType), not a tensor of shape (2, 3): one "
        "log-probability per score.")

    def made_elsewhere(scores):  # meta stands in for the CPU of a machine whose scores are on a GPU
        return torch.log_softmax(scores, dim=1).to("meta")

    assert nb.check_log_softmax(made_elsewhere, CPU) == (
        "NOT YET RIGHT: on small scores it gave a tensor on meta, but the scores are on cpu: compute it "
        "from scores, which keeps it there.")

    def no_dim(scores):  # an error of the learner's own (a TypeError): said with its line
        return torch.log_softmax(scores)

    assert nb.check_log_softmax(no_dim, CPU).startswith("NOT YET RIGHT: your no_dim raised TypeError: ")
    assert nb.check_log_softmax(no_dim, CPU).endswith(" of its cell: `return torch.log_softmax(scores)`.")


# --- Going deeper B: anomaly mode and the gradient norm -------------------------------------------

def test_anomaly_mode_names_the_log_and_its_forward_line(pictures):
    model, _ = broken_after_train(pictures)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="LogBackward0"):
            with torch.autograd.detect_anomaly():
                F.nll_loss(model(pictures[0]), pictures[1]).backward()
    report = nb.anomaly_report(caught)
    assert report.startswith("Error detected in LogBackward0. The forward call that created it:")
    assert report.splitlines()[1].strip().startswith(f'File "{helper_file("07")}"')
    assert report.splitlines()[1].endswith("in forward"), "the frame of NaiveLogSoftmax.forward"
    assert nb.anomaly_report([]) == "anomaly mode printed no traceback"


def test_anomaly_report_keeps_the_code_line_when_python_has_the_source():
    message = ("Error detected in LogBackward0. Traceback of forward call that caused the error:\n"
               '  File "/tmp/ipykernel_1/2.py", line 9, in <module>\n    loss = model(x)\n'
               '  File "/tmp/ipykernel_1/1.py", line 5, in forward\n'
               "    return torch.softmax(scores, dim=1).log()\n"
               " (Triggered internally at /pytorch/torch/csrc/autograd/python_anomaly_mode.cpp:130.)")
    caught = [types.SimpleNamespace(message=UserWarning("Anomaly Detection has been enabled.")),
              types.SimpleNamespace(message=UserWarning(message))]
    assert nb.anomaly_report(caught).splitlines()[1:] == [
        '  File "/tmp/ipykernel_1/1.py", line 5, in forward',
        "    return torch.softmax(scores, dim=1).log()"]


@pytest.mark.parametrize("anomaly_mode", [False, True])
def test_time_one_step_times_a_real_step_inside_anomaly_mode_only_when_asked(pictures, anomaly_mode):
    seen = []

    def time_it(step, device, repeats):  # stands in for the shared cell's timer: one step, 1 ms
        seen.append((torch.is_anomaly_enabled(), device, repeats))
        step()
        return 0.001

    inputs, labels = pictures[0][:64] / 255, pictures[1][:64]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert nb.time_one_step(inputs, labels, CPU, anomaly_mode, timer=time_it) == 0.001
    assert seen == [(anomaly_mode, CPU, 20)] and not torch.is_anomaly_enabled()
    assert not [w for w in caught if "Anomaly Detection has been enabled" in str(w.message)]


def test_anomaly_cost_verdict_at_its_edge():
    assert "small difference" in nb.anomaly_cost_verdict(1.0, 1.49)
    assert "pay most" in nb.anomaly_cost_verdict(1.0, 1.5)
    assert "(3.0 times as long)" in nb.anomaly_cost_verdict(0.001, 0.003)


def test_grad_norm_alarm_at_its_edges():
    assert nb.grad_norm_alarm([1.0] * 20) is None
    assert nb.grad_norm_alarm([1.0] * 5 + [10.0]) is None, "exactly 10 times: no alarm"
    assert nb.grad_norm_alarm([1.0] * 5 + [10.001]) == 5
    assert nb.grad_norm_alarm([1.0, 50.0, 1.0, 1.0]) is None, "no alarm for growth in the warm-up"
    assert nb.grad_norm_alarm([1.0, math.nan]) == 1, "a nan norm is an alarm even in the warm-up"
    assert nb.grad_norm_alarm([1.0, 1.0, math.inf]) == 2
    assert nb.grad_norm_alarm([1.0] * 5 + [3.0], factor=2.0) == 5
    assert nb.grad_norm_alarm([1.0] * 3 + [20.0], warmup=3) == 3


def test_a_learning_rate_too_high_is_caught_by_the_alarm_before_the_loss_breaks():
    features, targets = nb.make_regression(512)
    too_high = nb.train_and_record(nb.new_linear(CPU), features, targets, lr=1.2, steps=80, loss_fn=F.mse_loss,
                        stop_early=False)
    alarm = nb.grad_norm_alarm([row["grad_norm"] for row in too_high])
    first_bad = next(row["step"] for row in too_high if not math.isfinite(row["loss"]))
    assert alarm is not None and alarm + 20 < first_bad < 80
    # As the prose says: both grow geometrically, the loss (a square) twice as steeply on a log scale
    growth = {key: [later[key] / earlier[key] for earlier, later in zip(too_high[20:40], too_high[21:41])]
              for key in ("loss", "grad_norm")}
    assert all(norm > 1.5 for norm in growth["grad_norm"])
    assert all(loss == pytest.approx(norm**2, rel=0.02) for loss, norm in zip(*growth.values()))
    for settings in (dict(lr=0.1), dict(lr=1.2, max_norm=1.0)):
        rows = nb.train_and_record(nb.new_linear(CPU), features, targets, steps=80, loss_fn=F.mse_loss, **settings)
        assert all(math.isfinite(row["loss"]) for row in rows)
        assert nb.grad_norm_alarm([row["grad_norm"] for row in rows]) is None
    assert rows[-1]["loss"] > 0.1, "clipping keeps it finite, but the loss stalls"


# --- Going deeper C: float16 on run_on, for real on the CPU ---------------------------------------

def float16(value):
    """`value` stored in float16 and read back, as PyTorch rounds it."""
    return torch.tensor(value, dtype=torch.float64).to(torch.float16).item()


def test_float16_rounds_to_0_at_and_below_half_its_smallest_number():
    info = torch.finfo(torch.float16)
    smallest = info.tiny * info.eps  # the smallest float16 above 0 (a subnormal one)
    threshold = 2.0 ** -25
    assert smallest == 2.0 ** -24 and threshold == smallest / 2, "half the smallest number above 0"
    # float32 gradients, as autocast's backward hands them to float16: 2**-25 is the largest that gives 0
    gradients = torch.tensor([threshold, -threshold, smallest * 0.75], dtype=torch.float32)
    gradients = torch.cat([gradients, torch.nextafter(gradients[:1], torch.tensor([1.0]))])
    assert gradients.to(torch.float16).tolist() == [0.0, 0.0, smallest, smallest]


def test_the_table_shows_values_on_both_sides_of_the_limit_the_prose_states():
    namespace = {**vars(nb), "device": torch.device("cpu")}
    run_cell("07", "float16-table", namespace)
    values = namespace["values"]
    below = max(value for value in values if value <= 2.0 ** -25)
    above = min(value for value in values if value > 2.0 ** -25)
    assert below >= 2.5e-8 and above <= 3.5e-8, "one value each side of the limit, close to it"
    assert float16(below) == 0 and nb.float16_fate(below) == "rounds to 0"
    assert float16(above) > 0 and nb.float16_fate(above) == "rounded, to fewer digits"


@pytest.mark.parametrize("value", [
    0.0, 0.1, 2048.0, 2049.0, 65504.0, 65519.99, 65520.0, 65536.0, 1e5, -65520.0, -65504.0,
    2.0**-24, 2.0**-25, 2.0**-25 * 1.0001, 2.0**-25 * 0.9999, 1e-8, -1e-8, 1e-6,
    torch.finfo(torch.float16).tiny, torch.finfo(torch.float16).tiny * 0.999])
def test_float16_fate_says_what_the_conversion_really_does(value):
    stored = torch.tensor(value, dtype=torch.float64).to(torch.float16).item()
    fate = nb.float16_fate(value)
    assert (fate == "overflows to inf") == math.isinf(stored)
    assert (fate == "rounds to 0") == (stored == 0 and value != 0)
    assert (fate == "exact") == (stored == value)
    assert (fate == "rounded, to fewer digits") == (
        stored not in (0, value) and abs(value) < torch.finfo(torch.float16).tiny)


def test_stored_as_shows_the_three_formats():
    cpu = torch.device("cpu")
    assert nb.stored_as([65520.0, 2049.0], torch.float16, cpu) == ["inf", "2048"]
    assert nb.stored_as([65520.0, 2049.0], torch.bfloat16, cpu) == ["65536", "2048"]
    assert nb.stored_as([65520.0, 2049.0], torch.float32, cpu) == ["65520", "2049"]
    assert nb.stored_as([2.9e-8, 3e-8], torch.float16, cpu) == ["0", "5.96046e-08"]


@pytest.mark.gpu_branch("07", "cuda_or_cpu: device.type == 'cuda'")
@pytest.mark.parametrize("device, where", [("cuda", "cuda"), ("cuda:1", "cuda:1"), ("cpu", "cpu"),
                                           ("mps", "cpu"), ("xpu", "cpu")])
def test_parts_c_and_e_run_on_an_nvidia_gpu_and_else_on_the_cpu(device, where):
    assert nb.cuda_or_cpu(torch.device(device)) == torch.device(where)


def test_a_grad_scaler_keeps_small_float16_gradients(pictures):
    inputs, labels = pictures[0] / 255, pictures[1]
    float32 = nb.zero_gradient_percent(inputs, labels, CPU, 1e-5, False)
    float16 = nb.zero_gradient_percent(inputs, labels, CPU, 1e-5, True)
    scaled = nb.zero_gradient_percent(inputs, labels, CPU, 1e-5, True, torch.amp.GradScaler("cpu"))
    assert float16 > float32 + 50, "without a scaler most float16 gradients underflow to 0"
    assert scaled < float32 + 1, "with one, nearly all are as in float32"


def test_the_scaler_skips_exactly_the_steps_that_overflow_and_adjusts_its_scale(pictures):
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24, growth_interval=10)
    rows = nb.train_float16(nb.make_classifier(nn.LogSoftmax(dim=1)), pictures[0] / 255,
                            pictures[1], scaler, steps=30, device=CPU)
    skipped = [row["step"] for row in rows if row["skipped"]]
    assert skipped[:1] == [0], "a scale of 2**24 overflows at once"
    assert all(row["weights_changed"] != row["skipped"] for row in rows)
    for row, following in zip(rows, rows[1:]):
        if row["skipped"]:
            assert following["scale"] == row["scale"] / 2
    good_run = next(index for index, row in enumerate(rows) if not row["skipped"])
    assert rows[good_run + 10]["scale"] == 2 * rows[good_run]["scale"] or any(
        row["skipped"] for row in rows[good_run:good_run + 10]), "doubles after 10 good steps"


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


# --- Going deeper D: DataLoader workers -----------------------------------------------------------

@pytest.fixture(scope="module")
def files_module(tmp_path_factory):
    return nb.load_module(tmp_path_factory.mktemp("nb07_code"), nb.FILES_MODULE, nb.FILES_MODULE_SOURCE)


def test_a_worker_error_carries_the_workers_traceback(files_module):
    broken = files_module.PictureFiles(32, broken_index=21)
    before = set(multiprocessing.active_children())
    message, raised_in = nb.first_error(DataLoader(broken, batch_size=8, num_workers=2))
    # the loader's workers end with first_error, not whenever the garbage collector gets to them
    assert set(multiprocessing.active_children()) == before
    assert "Caught RuntimeError in DataLoader worker process 0" in message
    assert "Original Traceback" in message and "nb07_files.py" in message
    assert "invalid for input of size 63" in message
    assert not raised_in.startswith("nb07_files.py"), "the training process raises it again itself"
    assert nb.triage(message) == 5
    message, raised_in = nb.first_error(DataLoader(broken, batch_size=8, num_workers=0))
    assert raised_in.startswith("nb07_files.py") and "worker" not in message


class HangingSamples(torch.utils.data.Dataset):
    """Every sample takes far longer than the loader's timeout (a worker stuck on a network drive)."""

    def __len__(self):
        return 4

    def __getitem__(self, index):
        time.sleep(60)
        return torch.zeros(1)


def test_a_hanging_worker_ends_at_the_loaders_timeout_and_is_triaged_as_a_worker_problem():
    start = time.monotonic()
    before = set(multiprocessing.active_children())
    message, _ = nb.first_error(DataLoader(HangingSamples(), batch_size=2, num_workers=1, timeout=1))
    assert message == "RuntimeError: DataLoader timed out after 1 seconds"
    assert set(multiprocessing.active_children()) == before, "the hanging worker was stopped"
    assert time.monotonic() - start < 30, "the timeout, not the 60 s sample, ended the wait"
    assert nb.triage(message) == 5


def test_every_loader_with_workers_in_the_notebook_has_a_time_limit():
    loaders = [call for cell in read(notebook_path("07")).cells if cell.cell_type == "code"
               for call in ast.walk(ast.parse(cell.source))
               if isinstance(call, ast.Call) and ast.unparse(call.func) == "DataLoader"]
    with_workers = [call for call in loaders
                    if any(k.arg == "num_workers" and ast.unparse(k.value) != "0" for k in call.keywords)]
    assert with_workers, [ast.unparse(call) for call in loaders]
    for call in with_workers:
        assert any(k.arg == "timeout" and ast.literal_eval(k.value) > 0 for k in call.keywords), \
            ast.unparse(call)


def test_broken_samples_finds_the_one_cut_short(files_module):
    broken = files_module.PictureFiles(32, broken_index=21)
    found = nb.broken_samples(broken)
    assert list(found) == [21] and "size 63" in found[21]
    assert nb.broken_samples(files_module.PictureFiles(32)) == {}
    assert nb.first_error(DataLoader(files_module.PictureFiles(32), batch_size=8)) is None


def test_load_module_picks_up_a_changed_source(tmp_path):
    first = nb.load_module(tmp_path, "nb07_changing", "VALUE = 1\n")
    assert first.VALUE == 1
    assert nb.load_module(tmp_path, "nb07_changing", "VALUE = 2\n").VALUE == 2


def test_load_module_leaves_an_unchanged_file_alone(tmp_path):
    nb.load_module(tmp_path, "nb07_same", "VALUE = 1\n")
    path = tmp_path / "nb07_same.py"
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))  # an old time: a rewrite would change it
    assert nb.load_module(tmp_path, "nb07_same", "VALUE = 1\n").VALUE == 1
    assert path.stat().st_mtime_ns == 1_000_000_000


# --- Going deeper E: seeds and deterministic algorithms -------------------------------------------

def test_seeded_runs_agree_to_the_bit_and_other_seeds_do_not(pictures):
    inputs, labels = pictures[0] / 255, pictures[1]
    first, again = nb.seeded_run(inputs, labels, 0, 10), nb.seeded_run(inputs, labels, 0, 10)
    other = nb.seeded_run(inputs, labels, 1, 10)
    assert nb.compare_weights(first, again) == {"identical_to_the_bit": True, "largest_difference": 0.0}
    assert nb.compare_weights(first, other)["identical_to_the_bit"] is False


def test_compare_weights_sees_a_single_last_bit():
    first = {"w": torch.ones(3), "b": torch.zeros(2)}
    nudged = {"w": first["w"].clone(), "b": first["b"].clone()}
    nudged["w"][1] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))
    result = nb.compare_weights(first, nudged)
    assert result["identical_to_the_bit"] is False and 0 < result["largest_difference"] < 1e-6


def test_seed_everything_seeds_python_numpy_and_torch():
    import random

    import numpy as np

    def draws():
        nb.seed_everything(7)
        return random.random(), np.random.rand(), torch.rand(1).item()

    assert draws() == draws()


def test_deterministic_algorithms_raise_inside_and_restore_after():
    before = torch.are_deterministic_algorithms_enabled()
    with nb.deterministic_algorithms():
        assert torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
        with pytest.raises(RuntimeError, match="does not have a deterministic implementation"):
            torch.zeros(4).put_(torch.tensor([1, 1]), torch.tensor([1.0, 2.0]))
    assert torch.are_deterministic_algorithms_enabled() == before
    torch.use_deterministic_algorithms(False)
    try:
        with pytest.raises(ValueError):
            with nb.deterministic_algorithms(warn_only=True):
                assert torch.are_deterministic_algorithms_enabled()
                assert torch.is_deterministic_algorithms_warn_only_enabled()
                raise ValueError("the block fails")
        assert not torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
        torch.use_deterministic_algorithms(True, warn_only=True)
        with nb.deterministic_algorithms():
            assert not torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled(), "the old warn_only comes back"
    finally:
        torch.use_deterministic_algorithms(before)


class OperationsSeen(TorchDispatchMode):
    """Records the ATen operation of every call PyTorch dispatches inside its `with` block, the
    backward pass's too (on the CPU autograd runs them in the calling thread)."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def test_the_cnn_of_part_e_ends_with_adaptive_avg_pool_and_repeats_with_strict_deterministic_algorithms(
        pictures):
    inputs, labels = pictures[0][:128] / 255, pictures[1][:128]
    with OperationsSeen() as operations:
        weights = nb.seeded_run(inputs, labels, 0, 4)
    assert weights["1.weight"].shape == (8, 1, 3, 3), "a convolution first"
    assert weights["6.weight"].shape == (3, 8 * 2 * 2), "AdaptiveAvgPool2d(2): 2 x 2 per channel"
    # The operation whose CUDA kernel, adaptive_avg_pool2d_backward_cuda, has no deterministic version
    # and warns on a T4. AdaptiveAvgPool2d(1), as in ResNet, is computed as a mean (aten's
    # adaptive_avg_pool2d, for an output of 1 x 1) and would warn about nothing there.
    assert "aten._adaptive_avg_pool2d_backward" in operations.seen
    with OperationsSeen() as resnet_pool:
        nn.AdaptiveAvgPool2d(1)(torch.ones(2, 8, 8, 8, requires_grad=True)).sum().backward()
    assert "aten._adaptive_avg_pool2d_backward" not in resnet_pool.seen and "aten.mean" in resnet_pool.seen
    with warnings.catch_warnings(record=True) as caught, nb.deterministic_algorithms():
        warnings.simplefilter("always")
        again = [nb.seeded_run(inputs, labels, 0, 4) for _ in range(2)]  # raises where none exists
    assert nb.warned_operations(caught) == []
    assert nb.compare_weights(*again)["identical_to_the_bit"]
    assert nb.compare_weights(weights, again[0])["identical_to_the_bit"], "the same on the CPU either way"


# PyTorch's own warnings with warn_only=True (aten/src/ATen/Context.cpp, alertNotDeterministic and, in
# PyTorch 2.9 and older, alertCuBLASConfigNotDeterministic), as a T4 gives them in part E.
ADAPTIVE_POOL_WARNING = (
    "adaptive_avg_pool2d_backward_cuda does not have a deterministic implementation, but you set "
    "'torch.use_deterministic_algorithms(True, warn_only=True)'. You can file an issue at "
    "https://github.com/pytorch/pytorch/issues to help us prioritize adding deterministic support for "
    "this operation.")

CUBLAS_WARNING = (
    "Deterministic behavior was enabled with either `torch.use_deterministic_algorithms(True)` or "
    "`at::Context::setDeterministicAlgorithms(true)`, but this operation is not deterministic because it "
    "uses CuBLAS and you have CUDA >= 10.2. To enable deterministic behavior in this case, you must set "
    "an environment variable before running your PyTorch application: CUBLAS_WORKSPACE_CONFIG=:4096:8 or "
    "CUBLAS_WORKSPACE_CONFIG=:16:8. For more information, go to "
    "https://docs.nvidia.com/cuda/cublas/index.html#results-reproducibility")

TOO_LATE = "cuBLAS (CUBLAS_WORKSPACE_CONFIG not set before the first CUDA matrix product)"


def caught_warning(text):
    """Shaped like what warnings.catch_warnings(record=True) collects: .message is the warning."""
    return types.SimpleNamespace(message=UserWarning(text))


def test_warned_operations_name_what_pytorch_warns_about_once_each():
    with warnings.catch_warnings(record=True) as caught, nb.deterministic_algorithms(warn_only=True):
        warnings.simplefilter("always")
        for _ in range(2):  # a real warning, on the CPU: put_ has no deterministic version anywhere
            torch.zeros(4).put_(torch.tensor([1, 1]), torch.tensor([1.0, 2.0]))
        warnings.warn("an unrelated warning", UserWarning)
    assert nb.warned_operations(caught) == ["put_"]
    shaped = [caught_warning(ADAPTIVE_POOL_WARNING), caught_warning(CUBLAS_WARNING),
              caught_warning(ADAPTIVE_POOL_WARNING), caught_warning("no deterministic words here")]
    assert nb.warned_operations(shaped) == ["adaptive_avg_pool2d_backward_cuda", TOO_LATE]
    assert nb.warned_operations([]) == []


def test_determinism_verdict_for_each_case():
    same = {"identical_to_the_bit": True, "largest_difference": 0.0}
    differ = {"identical_to_the_bit": False, "largest_difference": 0.00123}
    assert nb.determinism_verdict("cpu", same, []) == (
        "Deterministic algorithms on cpu: identical to the bit; no operation warned.")
    assert nb.determinism_verdict("cuda", same, ["adaptive_avg_pool2d_backward_cuda", "x"]) == (
        "Deterministic algorithms on cuda: identical to the bit; without a deterministic version "
        "(a warning): adaptive_avg_pool2d_backward_cuda, x.")
    warned = nb.determinism_verdict("cuda", differ, [TOO_LATE])
    assert "DIFFER by up to 0.0012" in warned and TOO_LATE in warned and warned.endswith("the difference.")
    unwarned = nb.determinism_verdict("cuda", differ, [])
    assert "DIFFER" in unwarned and unwarned.endswith("report it as a PyTorch bug.")


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


def test_runs_that_differ_counts_runs_unlike_the_first():
    outputs = iter([torch.tensor([1.0]), torch.tensor([1.0]), torch.tensor([2.0]),
                    torch.tensor([1.0]), torch.tensor([3.0])])
    assert nb.runs_that_differ(lambda: next(outputs)) == 2
    assert nb.runs_that_differ(lambda: torch.ones(3)) == 0
    places, numbers = torch.randint(0, 10, (10_000,)), torch.randn(10_000)
    assert nb.runs_that_differ(lambda: torch.zeros(10).index_add_(0, places, numbers)) == 0


def test_the_nondeterminism_cell_on_a_cpu_sums_the_same_way_every_run():
    namespace = {**vars(nb), "device": CPU}
    printed = run_cell("07", "index-add-runs", namespace)
    assert "Every run was identical on cpu" in printed
    places, numbers = namespace["places"], namespace["numbers"]
    expected = torch.zeros(10, dtype=torch.float64).index_add_(0, places, numbers.double())
    torch.testing.assert_close(nb.add_into(places, numbers).double(), expected, rtol=0, atol=1e-3)
    assert torch.equal(nb.add_into(places, numbers), namespace["add_into"](places, numbers))


@pytest.mark.gpu_branch("07", "nondeterminism_verdict: device_type == 'cuda'")
def test_nondeterminism_verdict_for_each_case():
    assert "bug" in nb.nondeterminism_verdict("cuda", 3, 1)
    assert "3 of 4 runs differed" in nb.nondeterminism_verdict("cuda", 3, 0)
    assert "No run differed this time" in nb.nondeterminism_verdict("cuda", 0, 0)
    assert "Every run was identical on cpu" in nb.nondeterminism_verdict("cpu", 0, 0)
    assert "1 of 4 runs differed" in nb.nondeterminism_verdict("cpu", 1, 0)


# --- Going deeper F: tensors that model.to() leaves behind ----------------------------------------

def test_tensors_left_behind_lists_plain_tensor_attributes_only():
    assert nb.tensors_left_behind(nb.PlainAttribute(64)) == ["model.feature_weights"]
    assert nb.tensors_left_behind(nb.WithBuffer(64)) == []
    outer = nn.Sequential(nb.PlainAttribute(8))
    outer.note, outer.scale = "text", 2.0
    outer.weight = nn.Parameter(torch.ones(1))
    assert nb.tensors_left_behind(outer) == ["0.feature_weights"]


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


def test_every_pattern_leads_to_its_own_row():
    for row, (_, patterns, _, _, _) in enumerate(nb.TRIAGE):
        for pattern in patterns:
            assert nb.triage(pattern.upper()) == row, f"{pattern!r} is claimed by an earlier row"


def real_message(action):
    try:
        action()
    except Exception as error:  # the message PyTorch gives
        return f"{type(error).__name__}: {error}"
    raise AssertionError("expected an error")


@pytest.mark.parametrize("message, row", [
    (cuda_output(BUG_LINE), 0),
    ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
     "cuda:0 and cpu!", 4),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
     "capacity of 14.74 GiB", 7),
    ("AttributeError: Can't get attribute 'MyDataset' on <module '__main__' (built-in)>", 6),
    ("AssertionError: Torch not compiled with CUDA enabled", 8),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", 8),
    ("the loss is nan after 300 steps", 2),
    ("what is this", None),
])
def test_triage_of_messages_as_pytorch_words_them(message, row):
    assert nb.triage(message) == row


def test_triage_of_messages_raised_here_for_real():
    index_error = real_message(lambda: F.cross_entropy(torch.randn(2, 3), torch.tensor([0, 3])))
    dtype_error = real_message(lambda: F.cross_entropy(torch.randn(2, 3),
                                                       torch.tensor([0, 1], dtype=torch.int32)))
    meta_error = real_message(lambda: torch.ones(3) + torch.ones(3, device="meta"))

    def nan_backward():
        x = torch.zeros(1, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # anomaly mode's warnings
            with torch.autograd.detect_anomaly():
                torch.sqrt(x * 0 - 1).sum().backward()

    assert nb.triage(index_error) == 0
    assert nb.triage(dtype_error) == 1
    assert nb.triage(meta_error) == 4
    assert nb.triage(real_message(nan_backward)) == 2
    with nb.deterministic_algorithms():
        put_error = real_message(lambda: torch.zeros(2).put_(torch.tensor([0, 0]), torch.ones(2)))
    assert nb.triage(put_error) == 9


def test_out_of_memory_points_to_notebook_08():
    row = nb.TRIAGE[nb.triage("CUDA out of memory")]
    assert row[-1].startswith("08 · Fit a bigger model")


# --- The pictures: drawn from their inputs, with titles and labelled axes -------------------------

@pytest.fixture
def drawn():
    """The figure a drawing function of the notebook made (it draws on a new one), closed after."""
    plt.close("all")
    yield lambda: plt.gcf()
    plt.close("all")


def legend_labels(axis):
    return [text.get_text() for text in axis.get_legend().get_texts()]


def test_the_async_timeline_raises_in_loss_item_as_usual_and_in_cross_entropy_when_blocking(drawn):
    nb.draw_async_timeline()
    usual, blocking = drawn().axes
    assert usual.get_title() == "as usual (asynchronous)" and "BLOCKING=1" in blocking.get_title()
    assert [t.get_text() for t in usual.texts if t.get_text().startswith("error")] == [
        "error raised in loss.item()"]
    assert [t.get_text() for t in blocking.texts if t.get_text().startswith("error")] == [
        "error raised in cross_entropy"]
    assert [t.get_text() for t in usual.get_yticklabels()] == ["GPU", "Python (CPU)"]
    assert blocking.get_xlabel().startswith("time")


@pytest.mark.parametrize("alarm, first_bad", [(2, 4), (None, None)])
def test_draw_divergence_plots_the_rows_and_marks_only_what_happened(drawn, alarm, first_bad):
    rows = [{"step": step, "loss": loss, "grad_norm": norm} for step, loss, norm in
            [(0, 1.0, 2.0), (1, 3.0, 20.0), (2, 9.0, 200.0), (3, 81.0, math.inf), (4, math.nan, math.nan)]]
    nb.draw_divergence(rows, alarm, first_bad)
    (axis,) = drawn().axes
    loss, norm = axis.get_lines()[:2]
    assert list(loss.get_xdata()) == [0, 1, 2, 3, 4]
    assert list(loss.get_ydata())[:4] == [1.0, 3.0, 9.0, 81.0] and math.isnan(loss.get_ydata()[4])
    assert list(norm.get_ydata())[:3] == [2.0, 20.0, 200.0] and math.isnan(norm.get_ydata()[3])
    marks = [label for label in legend_labels(axis) if "step" in label]
    assert marks == ([f"alarm (step {alarm})", f"loss inf or nan (step {first_bad})"] if alarm else [])
    assert axis.get_yscale() == "log" and axis.get_xlabel() == "training step" and axis.get_title()


def test_draw_number_formats_draws_each_formats_range_from_finfo(drawn):
    nb.draw_number_formats()
    (axis,) = drawn().axes
    assert [t.get_text() for t in axis.get_yticklabels()] == ["float16", "bfloat16", "float32"]
    bars = axis.patches  # per format: its subnormal numbers, then its full-precision ones
    assert len(bars) == 6
    for row, dtype in enumerate([torch.float16, torch.bfloat16, torch.float32]):
        info, subnormal, full = torch.finfo(dtype), bars[2 * row], bars[2 * row + 1]
        assert subnormal.get_x() == pytest.approx(math.log10(info.tiny * info.eps))
        assert subnormal.get_x() + subnormal.get_width() == pytest.approx(full.get_x())
        assert full.get_x() == pytest.approx(math.log10(info.tiny))
        assert full.get_x() + full.get_width() == pytest.approx(math.log10(info.max))
    assert axis.get_xlabel().startswith("size of the number, log10") and axis.get_title()


def test_draw_scale_steps_through_the_scales_and_crosses_the_skipped_steps(drawn):
    rows = [{"step": 0, "scale": 2.0**16, "skipped": True}, {"step": 1, "scale": 2.0**15, "skipped": False},
            {"step": 2, "scale": 2.0**15, "skipped": True}, {"step": 3, "scale": 2.0**14, "skipped": False}]
    nb.draw_scale(rows)
    (axis,) = drawn().axes
    (line,) = axis.get_lines()
    assert list(line.get_ydata()) == [row["scale"] for row in rows]
    (crosses,) = axis.collections
    assert crosses.get_offsets().tolist() == [[0, 2.0**16], [2, 2.0**15]]
    assert axis.get_xlabel() == "training step" and axis.get_ylabel().startswith("scale")

