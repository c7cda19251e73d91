"""Notebook 06's GPU branches, run with stand-ins shaped like the real API (torch.cuda, torch.distributed,
DistributedDataParallel): the script's Part 2 on two GPUs over NCCL and on the CPU over gloo, the device
each process chooses, leaving the process group on gloo and on NCCL, the speed's reading on GPUs, and the
figures reported with their fallback unless two GPUs ran them."""
import datetime
import inspect
import json
import types

import pandas as pd
import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

from support.ddp_runs import timed_results
from support.notebook_code import load_helpers, run_cell

nb = load_helpers("06")


# Step 2's Part 2 cell, run with stand-ins shaped like the real API (there is no GPU here):
# torch.cuda.device_count() returns an int, torch.cuda.set_device(device) and
# dist.init_process_group(backend, ...) return None, DistributedDataParallel(module, device_ids=...)
# is a module; every recorded call is also bound to the real function's signature. The cell only
# defines functions; the tests then call them as torchrun's process `local_rank` would.


class CudaStandIn:
    """torch.cuda as the script uses it, on a machine with `count` GPUs."""

    def __init__(self, count):
        self.count, self.set_device_calls = count, []

    def device_count(self):
        return self.count

    def set_device(self, device):
        inspect.signature(torch.cuda.set_device).bind(device)
        self.set_device_calls.append(device)


class DistStandIn:
    """torch.distributed as the script's Part 2 uses it: records every call, in order."""

    def __init__(self, backend="gloo"):
        self.calls, self.init_calls, self.backend = [], [], backend

    def init_process_group(self, *args, **kwargs):
        arguments = inspect.signature(torch.distributed.init_process_group).bind(*args, **kwargs).arguments
        self.init_calls.append(arguments)
        self.calls.append("init_process_group")

    def get_backend(self):
        self.calls.append("get_backend")
        return self.backend

    def barrier(self):
        self.calls.append("barrier")

    def destroy_process_group(self):
        self.calls.append("destroy_process_group")


def part_2_with_stand_ins(gpu_count=0, local_rank=0, backend="gloo"):
    """Run the visible cell of Part 2 with stand-ins for torch.cuda, torch.distributed, DDP, os and
    sys; returns its namespace (the script's functions, bound to the stand-ins) and the records."""
    made, done = [], []

    def ddp_stand_in(module, *args, **kwargs):
        inspect.signature(DistributedDataParallel).bind(module, *args, **kwargs)
        made.append(kwargs)
        return module

    stream = types.SimpleNamespace(flush=lambda: done.append("flush"))
    namespace = {"torch": types.SimpleNamespace(device=torch.device, cuda=CudaStandIn(gpu_count)),
                 "choose_device": nb.choose_device,
                 "dist": DistStandIn(backend), "DistributedDataParallel": ddp_stand_in,
                 "os": types.SimpleNamespace(environ={"LOCAL_RANK": str(local_rank)},
                                             _exit=lambda code: done.append(f"_exit({code})")),
                 "sys": types.SimpleNamespace(stdout=stream, stderr=stream), "datetime": datetime}
    assert run_cell("06", "script-ddp", namespace) == ""  # it only defines the functions
    return namespace, made, done


@pytest.mark.gpu_branch("06", "leave_process_group: gloo")
@pytest.mark.parametrize("backend, skip_barrier, calls", [
    ("gloo", False, ["get_backend", "barrier", "destroy_process_group", "flush", "flush", "_exit(0)"]),
    ("gloo", True, ["get_backend", "destroy_process_group", "flush", "flush", "_exit(0)"]),
    ("nccl", False, ["get_backend", "barrier", "destroy_process_group"]),  # GPUs: Python's shutdown
])
def test_leave_process_group_exits_at_once_on_gloo_only(backend, skip_barrier, calls):
    namespace, _, done = part_2_with_stand_ins(backend=backend)
    namespace["leave_process_group"](skip_barrier)
    assert namespace["dist"].calls + done == calls


@pytest.mark.gpu_branch("06", "start_process_group: device.type == 'cuda'")
@pytest.mark.gpu_branch("06", "start_process_group: device.type == 'cuda' (2)")
@pytest.mark.gpu_branch("06", "wrap_in_ddp: device.type == 'cuda'")
@pytest.mark.parametrize("local_rank", [0, 1])
def test_on_two_gpus_each_process_joins_over_nccl_on_the_gpu_of_its_local_rank(local_rank):
    # What Step 3's prose says: GPU number LOCAL_RANK, NCCL, torch.cuda.set_device, DDP's device_ids.
    namespace, made, _ = part_2_with_stand_ins(gpu_count=2, local_rank=local_rank)
    device = namespace["start_process_group"](False, 120)
    model = torch.nn.Linear(2, 2)
    assert namespace["wrap_in_ddp"](model, device) is model
    gpu = torch.device("cuda", local_rank)
    assert device == gpu and namespace["torch"].cuda.set_device_calls == [gpu]
    [call] = namespace["dist"].init_calls
    assert call["backend"] == "nccl" and call["device_id"] == gpu
    assert call["timeout"] == datetime.timedelta(seconds=120)
    assert made == [{"device_ids": [local_rank]}]  # DDP's docs: the one GPU of this process


@pytest.mark.parametrize("gpu_count, cpu_only", [(0, False), (2, True)])
def test_without_a_gpu_or_with_cpu_the_process_uses_the_cpu_over_gloo(gpu_count, cpu_only):
    namespace, made, _ = part_2_with_stand_ins(gpu_count=gpu_count, local_rank=1)
    device = namespace["start_process_group"](cpu_only, 120)
    namespace["wrap_in_ddp"](torch.nn.Linear(2, 2), device)
    assert device == torch.device("cpu") and namespace["torch"].cuda.set_device_calls == []
    [call] = namespace["dist"].init_calls
    assert call["backend"] == "gloo" and call["device_id"] is None
    assert made == [{"device_ids": None}]  # DDP's docs: None for a module on the CPU


@pytest.mark.gpu_branch("06", "choose_device: cpu_only or gpu_count == 0")
@pytest.mark.gpu_branch("06", "choose_device: local_rank >= gpu_count")
def test_choose_device_at_its_edges():
    choose = nb.choose_device
    assert choose(False, 1, 0) == (torch.device("cuda", 0), "nccl")  # one GPU, one process
    assert choose(False, 0, 0) == (torch.device("cpu"), "gloo")
    assert choose(True, 1, 0) == (torch.device("cpu"), "gloo")
    assert choose(False, 2, 1) == (torch.device("cuda", 1), "nccl")  # the last GPU
    with pytest.raises(RuntimeError, match="no GPU of its own"):
        choose(False, 2, 2)  # one process more than GPUs: NCCL would refuse a shared GPU


@pytest.mark.gpu_branch("06", "explain_speed: backend == 'nccl'")
@pytest.mark.parametrize("compute_ms, backend, expected", [
    (11.0, "nccl", "The ideal with 2 GPUs is 2 times."),  # 2.20 times: 1.1 times the ideal, allowed
    (11.1, "nccl", "on a quiet machine"),  # 2.22 times: more than the work can give
    (11.0, "gloo", "not how fast the CPU trains"), (11.1, "gloo", "on a quiet machine"),
    (2.0, "gloo", "not how fast the CPU trains"), (2.0, "nccl", "The ideal with 2 GPUs")])
def test_explain_speed_reads_the_gain_and_the_share_on_each_side_of_its_edge(compute_ms, backend,
                                                                             expected):
    speed = nb.ddp_speed_table(timed_results(compute_ms, 10.0), batch_size=100)
    text = nb.explain_speed(speed, backend)
    gain = 2 * compute_ms / 10.0
    assert text.startswith(f"2 processes with DDP trained {gain:.2f} times as many samples per "
                           "second as 1 process computing alone; the averaging took")
    assert expected in text


# --- The figures handed to tools/gpu_run.py --------------------------------------------------------

def reported_figures(plan, speed, results):
    """Run the cell that reports the notebook's figures with a stand-in report_figures; returns
    what the cell printed and [(fallback, figures)] of its calls."""
    calls = []
    namespace = {**vars(nb), "pd": pd, "plan": plan, "speed": speed, "ddp_results": results,
                 "report_figures": lambda fallback=None, **figures: calls.append((fallback, figures))}
    return run_cell("06", "report-figures", namespace), calls


@pytest.mark.gpu_branch("06", "cell report-figures: plan['backend'] == 'nccl'")
@pytest.mark.parametrize("gpus, fallback", [(2, None), (1, "CPU processes over gloo"),
                                            (0, "CPU processes over gloo")])
def test_the_figures_are_reported_with_a_fallback_unless_two_gpus_ran_them(gpus, fallback):
    plan, results = nb.ddp_launch_plan(gpus, 8), timed_results(8.0, 10.0)
    printed, calls = reported_figures(plan, nb.ddp_speed_table(results, 128), results)
    assert printed == "" and calls == [(fallback, {
        "backend": plan["backend"], "world_size": plan["nproc"], "step_ms": 10.0, "compute_ms": 8.0,
        "communication_ms": 2.0, "samples_per_s_ddp": 25600.0, "samples_per_s_alone": 16000.0,
        "speedup": 1.6, "ddp_weights_identical": True, "no_sync_weights_identical": False})]


def test_the_figures_of_a_run_that_reported_no_speed_are_none_not_nan():
    _, [(fallback, figures)] = reported_figures(nb.ddp_launch_plan(0, 2), nb.ddp_speed_table([], 128), [])
    assert fallback == "CPU processes over gloo" and figures["ddp_weights_identical"] is False
    for key in ("step_ms", "compute_ms", "communication_ms", "samples_per_s_ddp", "speedup"):
        assert figures[key] is None, key
    json.dumps(figures, allow_nan=False)  # what report_figures hands on is plain JSON
