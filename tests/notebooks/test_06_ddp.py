"""Notebook 06: the DDP training script it writes, torchrun's command line, reading the results, the
speed table and the cost model, its exercises' checks, and the promise that no run of torchrun leaves
a process behind.

The notebook's own run (nbval, tests/verdicts.py) starts torchrun four times for real: Step 4's DDP
run, Going deeper's two nodes, and the two failing runs; it checks there that the two nodes trained one
model, that every launcher ended and that nothing listens at the rendezvous endpoint afterwards. The
tests below start torchrun once more, to stop it at a time limit.
"""
import ast
import datetime
import inspect
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

import pandas as pd
import psutil
import pytest
import torch
import torch.distributed.run
from torch.nn.parallel import DistributedDataParallel

from support.notebook_code import cell_source, code_cells, core_cells, load_helpers, notebook_path, read, run_cell

nb = load_helpers("06")


def write_the_script(folder):
    """Run Step 3's cell that writes the script, into `folder`; returns the cell's namespace."""
    namespace = {**vars(nb), "SCRIPT_PATH": Path(folder) / "06_train_ddp.py"}
    run_cell("06", "write-script", namespace)
    return namespace


with tempfile.TemporaryDirectory() as _folder:
    SCRIPT_TEXT = write_the_script(_folder)["script_text"]  # the script as the notebook writes it


def function_source(name):
    """The source of one function of the training script."""
    tree = ast.parse(SCRIPT_TEXT)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.get_source_segment(SCRIPT_TEXT, node)


# The training script


def test_the_script_is_valid_python_that_runs_main_under_record_and_leaves_last():
    compile(SCRIPT_TEXT, "06_train_ddp.py", "exec")
    assert "@record" in SCRIPT_TEXT.split("def main")[0].splitlines()[-1]  # torchrun's report
    last_statement = ast.parse(function_source("main")).body[0].body[-1]
    assert ast.unparse(last_statement) == "leave_process_group(args.skip_final_barrier)"
    assert SCRIPT_TEXT.endswith('\n\n\nif __name__ == "__main__":\n    main()\n')


# The cells that define the script's functions, and the function names each defines.
SCRIPT_CELLS = {"script-options": ["parse_args"],
                "script-ddp": ["start_process_group", "wrap_in_ddp", "leave_process_group"],
                "script-plain": ["choose_device", "make_disc_data", "make_disc_model", "train_on_batch",
                                 "accuracy_of", "checksum", "time_steps"],
                "script-main": ["main"], "script-speed": ["measure_speed"]}


def test_the_script_holds_each_function_as_its_cell_defines_it_in_the_cells_order():
    names = [node.name for node in ast.parse(SCRIPT_TEXT).body if isinstance(node, ast.FunctionDef)]
    assert names == [name for defined in SCRIPT_CELLS.values() for name in defined]
    for cell_id, defined in SCRIPT_CELLS.items():
        for name in defined:
            assert function_source(name) in cell_source("06", cell_id), f"{name} differs from its cell"
    assert SCRIPT_TEXT.startswith(nb.SCRIPT_HEADER)  # the docstring and the imports come first


def test_script_parts_joins_a_header_and_functions_with_two_blank_lines(tmp_path):
    module = tmp_path / "defs.py"
    module.write_text("def first():\n    return 1\n\n\ndef main():  # the entry point\n    pass\n")
    namespace = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    parts = nb.script_parts('"""Doc."""\nimport os\n\n', [namespace["first"], namespace["main"]])
    assert "".join(parts) == ('"""Doc."""\nimport os\n\n\ndef first():\n    return 1\n\n\n'
                              'def main():  # the entry point\n    pass\n\n\n'
                              'if __name__ == "__main__":\n    main()\n')


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


def test_the_written_script_parses_its_options(tmp_path):
    script = nb.write_script(tmp_path / "06_train_ddp.py", [SCRIPT_TEXT])
    help_text = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                               timeout=300, check=True).stdout
    for option in ("--epochs", "--depth", "--points", "--batch-size", "--checkpoint", "--cpu",
                   "--timing-steps", "--skip-final-barrier", "--timeout-s"):
        assert option in help_text


def test_step_3_writes_shows_and_reads_back_the_script_in_utf_8(tmp_path):
    namespace = write_the_script(tmp_path)
    on_disk = (tmp_path / "06_train_ddp.py").read_bytes().decode("utf-8")
    assert namespace["script_text"] == on_disk and "x² + y² = 2/π" in on_disk


def test_supports_option_reads_a_help_text():
    help_text = "options:\n  --log-dir LOG_DIR, --log_dir LOG_DIR\n  --tee TEE\n  --standalone\n"
    assert nb.supports_option(help_text, "--log-dir") and nb.supports_option(help_text, "--standalone")
    assert not nb.supports_option(help_text, "--log")  # a prefix of another option is not the option
    assert not nb.supports_option(help_text, "--exit-barrier-timeout")
    real_help = torch.distributed.run.get_args_parser().format_help()
    assert nb.supports_option(real_help, "--standalone") and nb.supports_option(real_help, "--tee")


def test_ddp_launch_plan_says_what_runs_on_0_1_and_2_gpus_and_why():
    none, one, two = (nb.ddp_launch_plan(gpus, 8)["why"] for gpus in (0, 1, 2))
    assert none.startswith("No CUDA GPU") and "gloo" in none
    # One GPU (Colab's T4): what runs (the CPU over gloo), and how to get two GPUs on Kaggle.
    assert "on the CPU over gloo" in one and "Settings > Accelerator > GPU T4 x2" in one
    assert two.startswith("2 CUDA GPUs: one process per GPU") and "NCCL" in two
    assert "MPS" in nb.ddp_launch_plan(0, 8, "mps")["why"] and "MPS" not in none
    assert "MPS" not in nb.ddp_launch_plan(1, 8, "mps")["why"]  # a CUDA GPU comes first


def test_ddp_launch_plan_is_the_shared_plan_in_its_own_words():
    # one decision (tools/shared_cells/torchrun_helpers.py's torchrun_plan, tested there); 06's words
    for gpus, accelerator in [(0, "cpu"), (0, "mps"), (1, "cuda"), (2, "cuda")]:
        plan = nb.ddp_launch_plan(gpus, 8, accelerator, os_name="posix")
        shared = nb.torchrun_plan(gpus, 8, accelerator, "posix", one_gpu_why="", mps_why="")
        assert {k: v for k, v in plan.items() if k != "why"} == {k: v for k, v in shared.items() if k != "why"}
    assert "DDP needs a GPU per process" in nb.ddp_launch_plan(1, 8)["why"]
    assert nb.ddp_launch_plan(0, 8, "mps")["why"].startswith("Apple's MPS has no DDP backend")


# Reading what the processes print and write


def result_line(rank, checksum, **extra):
    return "[default0]:RESULT " + json.dumps({"rank": rank, "world_size": 2, "device": "cpu",
                                              "accuracy": 0.9, "checksum": checksum, **extra})


def test_processes_that_report_one_checksum_hold_identical_weights():
    # the RESULT lines themselves are read by parse_results (tests/shared_cells/test_torchrun_helpers.py)
    results = nb.parse_results([(1, result_line(1, "abc")), (0, result_line(0, "abc"))])
    assert nb.checksums_agree(results)
    assert "identical" in nb.describe_checksums(results, "With DDP")


def test_different_or_missing_checksums_do_not_agree():
    results = nb.parse_results([(0, result_line(0, "abc")), (0, result_line(1, "abd"))])
    assert not nb.checksums_agree(results) and "2 different" in nb.describe_checksums(results, "x")
    assert not nb.checksums_agree([]) and "no process" in nb.describe_checksums([], "x")


def test_the_checksums_after_no_sync_are_read_and_a_run_without_them_reported_none():
    timed = nb.parse_results([(0, result_line(0, "abc", checksum_after_no_sync="d0")),
                              (0, result_line(1, "abc", checksum_after_no_sync="d1"))])
    assert nb.checksums_agree(timed) and not nb.checksums_agree(timed, "checksum_after_no_sync")
    assert nb.describe_checksums(timed, "After no_sync", "checksum_after_no_sync") == (
        "After no_sync: the 2 processes hold 2 different sets of weights.")
    untimed = nb.parse_results([(0, result_line(0, "abc")), (0, result_line(1, "abc"))])
    # no key in either result: not "identical", which a set of two missing values would make it
    assert not nb.checksums_agree(untimed, "checksum_after_no_sync")
    assert "no process reported" in nb.describe_checksums(untimed, "x", "checksum_after_no_sync")
    half = [timed[0], untimed[1]]
    assert not nb.checksums_agree(half, "checksum_after_no_sync")


def test_a_loaded_checkpoint_is_compared_with_rank_0s_checksum(tmp_path):
    namespace = {}
    exec("import hashlib\nfrom torch import nn\n" + function_source("make_disc_model") + "\n"
         + function_source("checksum"), namespace)
    torch.manual_seed(0)
    model = namespace["make_disc_model"](4)
    reported = [{"rank": 0, "checksum": namespace["checksum"](model)}, {"rank": 1, "checksum": "x"}]
    torch.save(model.state_dict(), tmp_path / "weights.pt")  # what the script's rank 0 does
    state = torch.load(tmp_path / "weights.pt", map_location="cpu", weights_only=True)
    assert nb.weights_checksum(state.values()) == reported[0]["checksum"]  # the script's fingerprint
    assert "bit for bit the trained weights" in nb.describe_checkpoint(state, reported)
    with torch.no_grad():
        next(iter(state.values()))[0, 0] += 1.0  # one weight changed
    assert "differs from rank 0's" in nb.describe_checkpoint(state, reported)
    assert "no process reported" in nb.describe_checkpoint(state, [])


def test_the_notebook_loads_the_checkpoint_onto_the_cpu_with_map_location():
    # a checkpoint saved on cuda:0 fails to load without that GPU unless map_location says where
    loads = [source for source in code_cells(read(notebook_path("06"))) if "torch.load(" in source]
    assert loads and all('map_location="cpu"' in source and "weights_only=True" in source
                         for source in loads)


def write_error_file(folder, local_rank, message, timestamp):
    path = folder / "run_x" / "attempt_0" / str(local_rank) / "error.json"
    path.parent.mkdir(parents=True)
    callstack = ('Traceback (most recent call last):\n  File "/d/06_train_ddp.py", line 176, in main\n'
                 "    torch.save(weights.state_dict(), args.checkpoint)\n" + message)
    path.write_text(json.dumps({"message": {"message": message, "extraInfo": {
        "py_callstack": callstack, "timestamp": str(timestamp)}}}))
    return path


def test_first_failure_is_the_earliest_error_file(tmp_path):
    write_error_file(tmp_path, 0, "RuntimeError: Connection closed by peer", 1000)
    write_error_file(tmp_path, 1, "RuntimeError: Parent directory x does not exist.", 999)
    failure = nb.first_failure(tmp_path)
    assert failure["local_rank"] == "1" and "Parent directory" in failure["error"]
    assert failure["where"] == "line 176, in main: torch.save(weights.state_dict(), args.checkpoint)"


def test_first_failure_breaks_ties_by_file_time_and_finds_nothing_in_an_empty_folder(tmp_path):
    first = write_error_file(tmp_path, 0, "ValueError: first", 5)
    second = write_error_file(tmp_path, 1, "ValueError: second", 5)
    os.utime(first, (100, 100))
    os.utime(second, (50, 50))
    assert nb.first_failure(tmp_path)["error"] == "ValueError: second"
    assert nb.first_failure(tmp_path / "nothing") is None


def test_first_failure_skips_an_error_file_cut_off_by_a_stopped_process(tmp_path):
    write_error_file(tmp_path, 0, "RuntimeError: Parent directory x does not exist.", 1000)
    cut = write_error_file(tmp_path, 1, "RuntimeError: Connection closed by peer", 999)
    cut.write_text('{"message": {"mess')  # the process was stopped while it wrote the file
    (tmp_path / "run_x" / "attempt_0" / "2").mkdir()
    (tmp_path / "run_x" / "attempt_0" / "2" / "error.json").write_text("")
    assert "Parent directory" in nb.first_failure(tmp_path)["error"]


def test_first_failure_reads_a_message_written_as_plain_text(tmp_path):
    path = tmp_path / "attempt_0" / "3" / "error.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"message": "Signal 15 (SIGTERM) received by PID 42"}))
    failure = nb.first_failure(tmp_path)
    assert failure["local_rank"] == "3" and failure["error"].startswith("Signal 15")
    assert failure["where"] is None  # no traceback through the script


def test_script_frame_takes_the_last_frame_in_the_script():
    traceback_text = ('  File "/d/06_train_ddp.py", line 200, in <module>\n    main()\n'
                      '  File "/x/other.py", line 3, in run\n    go()\n'
                      '  File "/d/06_train_ddp.py", line 176, in main')  # the last line of the text
    assert nb.script_frame(traceback_text, "06_train_ddp.py") == "line 176, in main: "
    assert nb.script_frame(traceback_text, "other_script.py") is None


def test_key_error_lines_finds_each_exception_once():
    lines = ["Traceback (most recent call last):", '  File "<string>", line 1, in <module>',
             "AttributeError: Can't get attribute 'train' on <module '__main__' (built-in)>",
             "AttributeError: Can't get attribute 'train' on <module '__main__' (built-in)>",
             "W1122 torch/multiprocessing/spawn.py:165] Terminating process 20201 via signal SIGTERM",
             "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 1"]
    assert nb.key_error_lines(lines) == [
        "AttributeError: Can't get attribute 'train' on <module '__main__' (built-in)>",
        "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 1"]


# The cost model


def test_ring_allreduce_sends_twice_n_minus_one_over_n_of_the_data():
    assert nb.ring_allreduce_bytes(100, 1) == 0
    assert nb.ring_allreduce_bytes(100, 2) == 100
    assert nb.ring_allreduce_bytes(100, 4) == 150


def test_predicted_samples_per_s_with_and_without_overlap():
    assert nb.predicted_samples_per_s(2, 128, 0.010, 0.002, overlap=False) == pytest.approx(256 / 0.012)
    assert nb.predicted_samples_per_s(2, 128, 0.010, 0.002, overlap=True) == pytest.approx(256 / 0.010)
    assert nb.predicted_samples_per_s(2, 128, 0.001, 0.004, overlap=True) == pytest.approx(256 / 0.004)


def t4_prediction(name, weights, forward_flop, batch):
    link, float32 = nb.PCIE3_X16_BYTES_PER_S / 2, nb.T4_FLOAT32_FLOP_PER_S / 2
    return nb.two_gpu_prediction(name, weights, forward_flop, batch, float32, link)


def disc_prediction(depth, batch):
    """The notebook's prediction for its disc network: 2 forward FLOPs per weight and sample."""
    return t4_prediction(f"disc {depth}", nb.disc_weights(depth), 2 * nb.disc_weights(depth), batch)


def test_disc_weights_counts_the_weights_of_the_script_network():
    namespace = {}
    exec("import math\nfrom torch import nn\nfrom torch.utils.data import TensorDataset\n"
         + function_source("make_disc_model"), namespace)
    for depth in (2, 8, 10):
        model = namespace["make_disc_model"](depth)
        assert nb.disc_weights(depth) == sum(p.numel() for p in model.parameters())
    assert (nb.disc_weights(8), nb.disc_weights(10)) == (44_710, 703_142)  # the comment on DEPTH


def test_a_deeper_disc_network_gets_the_same_prediction():
    # Computation (6 FLOPs per weight and sample) and gradients (4 bytes per weight) both
    # grow with the weights, so depth 12 cannot get "closer to 2" than depth 10.
    depth10, depth12 = disc_prediction(10, 128), disc_prediction(12, 128)
    assert nb.disc_weights(12) > 15 * nb.disc_weights(10)  # 16 times the weights ...
    assert depth12["allreduce_ms"] > 15 * depth10["allreduce_ms"]
    for key in ("flop_per_gradient_byte", "speedup_no_overlap", "speedup_full_overlap"):
        assert depth12[key] == pytest.approx(depth10[key], rel=1e-9)  # ... and the same speed-up
    assert depth10["speedup_full_overlap"] < 1  # slower on two GPUs than on one, at any depth
    assert depth10["flop_per_gradient_byte"] == pytest.approx(1.5 * 128)  # 6 FLOPs / 4 bytes


def test_a_bigger_batch_moves_the_prediction():
    small, large = disc_prediction(10, 128), disc_prediction(10, 2048)
    assert large["flop_per_gradient_byte"] == pytest.approx(16 * small["flop_per_gradient_byte"])
    assert large["allreduce_ms"] == pytest.approx(small["allreduce_ms"])  # the same gradients
    assert large["speedup_no_overlap"] > 1.5 > 1 > small["speedup_full_overlap"]


def test_resnet18_computes_about_150_times_more_per_weight_and_sample_and_gains():
    per_weight = nb.RESNET18_FORWARD_FLOP / nb.RESNET18_WEIGHTS
    assert 140 < per_weight / 2 < 170  # the disc network: 2 forward FLOPs per weight and sample
    resnet = t4_prediction("resnet", nb.RESNET18_WEIGHTS, nb.RESNET18_FORWARD_FLOP, 64)
    assert 1.8 < resnet["speedup_no_overlap"] <= resnet["speedup_full_overlap"] <= 2.0
    assert resnet["allreduce_ms"] == pytest.approx(4 * nb.RESNET18_WEIGHTS / (nb.PCIE3_X16_BYTES_PER_S / 2) * 1000)


# Step 3's timing and Step 5's reading of it


class NoSyncModel:
    """Shaped like DDP's model.no_sync(): a context manager that switches the averaging off."""

    def __init__(self):
        self.averaging = True

    def no_sync(self):
        model = self

        class NoSync:
            def __enter__(self):
                model.averaging = False

            def __exit__(self, *error):
                model.averaging = True
        return NoSync()


def test_measure_speed_times_with_ddp_then_inside_no_sync_and_keeps_the_medians():
    model, averaging = NoSyncModel(), []
    times = iter([100.0, 90.0, 10.0, 8.0, 12.0, 7.0, 11.0, 9.0])  # a warm-up round, then 3 rounds

    def time_steps(timed_model, optimizer, points, labels, steps):
        averaging.append(timed_model.averaging)
        return next(times)

    namespace = {"time_steps": time_steps, "statistics": __import__("statistics")}
    assert run_cell("06", "script-speed", namespace) == ""  # it only defines measure_speed
    result = namespace["measure_speed"](model, "optimizer", "points", "labels", 5, rounds=3)
    assert averaging == [True, False] * 4  # step_ms with DDP, compute_ms under no_sync, each round
    assert result == {"step_ms": 11.0, "compute_ms": 8.0}  # the medians, the warm-up left out


def test_the_scripts_timing_and_accuracy_run_on_a_real_ddp_model_in_a_group_of_one():
    script = {"__name__": "the_training_script"}  # not "__main__": main() does not run
    exec(compile(SCRIPT_TEXT, "06_train_ddp.py", "exec"), script)
    torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0,
                                         world_size=1)
    try:
        model = DistributedDataParallel(script["make_disc_model"](3))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        points, labels = script["make_disc_data"](16, seed=0).tensors
        result = script["measure_speed"](model, optimizer, points, labels, steps=2, rounds=1)
        assert set(result) == {"step_ms", "compute_ms"} and min(result.values()) > 0
        assert 0 <= script["accuracy_of"](model, torch.device("cpu"), count=64) <= 1
    finally:
        torch.distributed.destroy_process_group()


def timed_results(compute_ms=8.0, step_ms=10.0, world_size=2, after=("b", "c")):
    """RESULT lines of a timed run, as parse_results returns them."""
    return [{"node": 0, "rank": rank, "world_size": world_size, "device": "cpu", "accuracy": 0.9,
             "checksum": "a", "step_ms": step_ms, "compute_ms": compute_ms,
             "checksum_after_no_sync": after[rank]} for rank in range(2)]


def test_ddp_speed_table_puts_one_process_computing_alone_beside_all_with_ddp():
    table = nb.ddp_speed_table(timed_results(8.0, 10.0), batch_size=128)
    assert table.to_dict("index") == {
        "1 process computing alone": {"processes": 1, "compute_ms": 8.0, "communication_ms": 0.0,
                                      "step_ms": 8.0, "samples_per_s": 16000.0},
        "2 processes with DDP": {"processes": 2, "compute_ms": 8.0, "communication_ms": 2.0,
                                 "step_ms": 10.0, "samples_per_s": 25600.0}}
    # measured apart, the computation can come out longer than the whole training step: no negative
    assert nb.ddp_speed_table(timed_results(10.5, 10.0), 128).communication_ms.tolist() == [0.0, 0.0]


def test_a_run_without_timing_gives_a_table_of_nan_and_says_so():
    for results in ([], [{"rank": 0, "world_size": 2, "checksum": "a"}]):
        table = nb.ddp_speed_table(results, 128)
        assert table.samples_per_s.isna().all()
        assert nb.explain_speed(table, "gloo") == ("The timed run did not report its speed; see its "
                                                   "output above.")


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


def test_explain_speed_gives_the_averagings_share_of_a_training_step():
    text = nb.explain_speed(nb.ddp_speed_table(timed_results(6.0, 10.0), 128), "gloo")
    assert "trained 1.20 times" in text and "the averaging took 40 % of each" in text


# Going deeper's runs: the failing two nodes, how launchers ended, the rendezvous endpoint


@pytest.mark.parametrize("exit_barrier_timeout_s", [30, None])  # a torchrun with the option, and without
def test_the_failing_two_node_runs_host_the_store_on_node_1_and_fail_rank_0s_save(
        tmp_path, exit_barrier_timeout_s):
    (tmp_path / "logs" / "node1").mkdir(parents=True)
    (tmp_path / "logs" / "node1" / "old.log").write_text("a previous run")
    commands = nb.failing_two_node_commands(tmp_path / "06_train_ddp.py", tmp_path / "logs",
                                            tmp_path / "no_such_folder" / "weights.pt",
                                            "127.0.0.1:29517", exit_barrier_timeout_s,
                                            extra_args=["--skip-final-barrier"])
    # This PyTorch's torchrun may lack --exit-barrier-timeout (EXIT_BARRIER_TIMEOUT_S is then None).
    parsed = [torch.distributed.run.parse_args([part for part in command[3:]
                                                if not part.startswith("--exit-barrier-timeout=")])
              for command in commands]
    assert [args.rdzv_conf for args in parsed] == ["is_host=0", "is_host=1"]
    for node, args in enumerate(parsed):
        assert (args.nnodes, args.nproc_per_node, args.rdzv_endpoint, args.rdzv_id) == (
            "2", "1", "127.0.0.1:29517", "nb06-failing")  # both meet at one endpoint, in one run
        assert args.log_dir == str(tmp_path / "logs" / f"node{node}")
        assert not any(Path(args.log_dir).iterdir()), "each node starts with an empty log folder"
        assert args.training_script == str(tmp_path / "06_train_ddp.py")
        assert args.training_script_args[-3:] == [
            "--checkpoint", str(tmp_path / "no_such_folder" / "weights.pt"), "--skip-final-barrier"]
        assert "--cpu" in args.training_script_args
    passes_barrier = [f"--exit-barrier-timeout={exit_barrier_timeout_s}" in c for c in commands]
    assert passes_barrier == [exit_barrier_timeout_s is not None] * 2


def test_nothing_listens_at_an_endpoint_once_its_server_is_gone():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    endpoint = f"127.0.0.1:{server.getsockname()[1]}"
    assert not nb.nothing_listens(endpoint)
    server.close()
    assert nb.nothing_listens(endpoint)


def test_describe_ending_says_who_was_stopped():
    stopped = {"returncodes": [1, -15], "ended_s": [20.0, 31.0], "seconds": 31.0,
               "stopped": "one was still running 10 s after another had ended"}
    text = nb.describe_ending(stopped)
    assert "node0's launcher failed with exit code 1 after 20.0 s" in text
    assert "node1's launcher stopped by the notebook" in text and "exit barrier" in text
    ended = {"returncodes": [1, 1], "ended_s": [20.0, 21.0], "seconds": 21.0, "stopped": None}
    assert "none waited" in nb.describe_ending(ended)
    ok = {"returncodes": [0, -1], "ended_s": [3.0, None], "seconds": 9.0, "stopped": None}
    lines = nb.describe_ending(ok).splitlines()
    assert lines[0] == "node0's launcher succeeded after 3.0 s."
    assert lines[1] == "node1's launcher stopped by the notebook."  # exit code -1, no end time


# The pictures


@pytest.mark.parametrize("processes", [1, 2, 3, 4, 8])
def test_ring_allreduce_steps_end_with_every_chunk_summed_everywhere(processes):
    moments = nb.ring_allreduce_steps(processes)
    assert len(moments) == 1 + 2 * (processes - 1)
    assert moments[0] == [[1] * processes] * processes
    assert moments[-1] == [[processes] * processes] * processes
    if processes > 1:  # after reduce-scatter, each process holds one finished chunk, each a different one
        middle = moments[processes - 1]
        finished = [[chunk for chunk, count in enumerate(row) if count == processes] for row in middle]
        assert sorted(chunks[0] for chunks in finished) == list(range(processes))
        assert all(len(chunks) == 1 for chunks in finished)
    # every step, every process sends one chunk of 1/N of its gradients: 2 (N - 1) / N in all
    sent = (len(moments) - 1) * 1 / processes
    assert sent == pytest.approx(nb.ring_allreduce_bytes(1, processes))


def test_the_pictures_draw_with_titles_and_labels():
    import matplotlib

    matplotlib.use("Agg")
    plt = nb.plt
    nb.draw_dataparallel_and_ddp()
    figure = plt.gcf()
    titles = [axis.get_title() for axis in figure.axes]
    assert any("DataParallel" in title for title in titles) and any("1 process per GPU" in t for t in titles)
    texts = " ".join(text.get_text() for axis in figure.axes for text in axis.texts)
    assert "all-reduce" in texts and "gradients" in texts
    plt.close(figure)
    nb.draw_ring_allreduce(4)
    figure = plt.gcf()
    axis = figure.axes[0]
    assert "Ring all-reduce of 4 processes" in axis.get_title() and "1.5 times" in axis.get_title()
    assert axis.get_xlabel() and axis.get_ylabel()
    plt.close(figure)


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


def test_the_figures_are_reported_once_in_the_core_and_show_nothing():
    notebook = read(notebook_path("06"))
    calls = [cell for cell in core_cells(notebook) if cell.cell_type == "code"
             and re.search(r"^reported = report_figures\(", cell.source, re.M)]
    assert [cell.get("id") for cell in calls] == ["report-figures"]
    last = ast.parse(calls[0].source).body[-1]  # an expression there would show the record as text
    assert isinstance(last, ast.Assign) and ast.unparse(last.value).startswith("report_figures(")
    assert sum("report_figures(" in source for source in code_cells(notebook)
               if not source.startswith("#@title Shared setup")) == 1


# --- A run that fails on the learner's machine: verdicts, and Run All goes on ---------------------------

def test_runs_that_reported_nothing_print_their_verdicts_and_run_all_goes_on(tmp_path):
    ended = {"output": [], "returncodes": [1, 1], "ended_s": [3.0, 3.5], "seconds": 3.5,
             "stopped": None}
    namespace = {**vars(nb), "pd": pd, "ddp_run": {"output": []}, "two_node_run": ended,
                 "CHECKPOINT": tmp_path / "06_disc_ddp.pt", "BATCH_SIZE": 128,
                 "plan": nb.ddp_launch_plan(0, 2)}
    printed = run_cell("06", "ddp-results", namespace)
    assert printed.splitlines() == ["After training with DDP: no process reported a result.",
                                    "After the training steps under no_sync: no process reported a "
                                    "result."]
    assert namespace["ddp_results"] == []
    assert run_cell("06", "speed", namespace).startswith("The timed run did not report its speed")
    printed = run_cell("06", "checkpoint", namespace)
    assert printed.startswith(f"No checkpoint at {tmp_path / '06_disc_ddp.pt'}: Step 4's run")
    printed = run_cell("06", "two-nodes-results", namespace)
    assert printed.startswith("Two nodes: no process reported a result.\nnode0's launcher failed")


def test_a_checkpoint_left_by_an_earlier_run_is_loaded_and_judged_against_no_results(tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "06_disc_ddp.pt")
    namespace = {**vars(nb), "ddp_results": [], "CHECKPOINT": tmp_path / "06_disc_ddp.pt"}
    assert "no process reported" in run_cell("06", "checkpoint", namespace)


@pytest.mark.parametrize("alive, listening", [(set(), False), ({42}, True)])
def test_the_last_check_prints_its_verdicts_either_way(alive, listening):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    if listening:
        server.listen()
    endpoint = f"127.0.0.1:{server.getsockname()[1]}"
    run = {"seconds": 1.0, "returncodes": [0], "started": [41, 42]}
    namespace = {**vars(nb), "pd": pd, "EXIT_BARRIER_TIMEOUT_S": None, "ddp_run": run,
                 "two_node_run": {**run, "returncodes": [0, 0], "started": [43]},
                 "two_node_endpoint": endpoint,
                 "is_alive": lambda pid: pid in alive}
    with server:
        printed = run_cell("06", "leftovers", namespace).splitlines()
    assert printed[1] == ("No process the notebook started is still running." if not alive else
                          "1 process(es) the notebook started still run: restart the Jupyter "
                          "kernel, and if they outlive it, end them in your system's task manager "
                          "(the table has their run).")
    assert printed[2] == f"C's rendezvous endpoint {endpoint}: " + (
        "a program still listens there." if listening else "nothing listens there any more.")
    assert list(namespace["runs_table"].index) == ["Step 4, DDP", "C · two nodes"]
    del namespace["two_node_endpoint"]  # Going deeper C did not run: nothing to say about its port
    assert len(run_cell("06", "leftovers", namespace).splitlines()) == 2


def test_when_torchrun_itself_fails_the_failure_cell_says_so_instead_of_raising(tmp_path):
    run = {"returncodes": [1, 1], "ended_s": [2.0, None], "seconds": 2.5, "stopped": None}
    namespace = {**vars(nb), "LOG_DIR": tmp_path, "failure_run": run}
    printed = run_cell("06", "failure", namespace)
    assert printed.startswith("No process wrote an error file: torchrun stopped before starting")
    assert "node1's launcher failed with exit code 1.\nBoth launchers ended by themselves" in printed
    write_error_file(tmp_path / "failure", 0, "RuntimeError: Parent directory x does not exist.", 999)
    printed = run_cell("06", "failure", namespace)
    assert printed.startswith("The first process to fail: local rank 0, line 176, in main: torch.save(")
    assert "No process wrote" not in printed and "Parent directory x does not exist" in printed


# --- The exercises: each check against a likely wrong answer; the answers come from the notebook ------

@pytest.mark.exercise("06", "share")
def test_exercise_1_shows_the_share_that_blocks_or_no_padding_get_wrong():
    def in_blocks(count, rank, world_size):  # a likely first try: each process a block of points
        size = count // world_size
        return list(range(rank * size, (rank + 1) * size))

    assert nb.check_share(in_blocks) == ("NOT YET RIGHT: with 10 points and 2 processes, rank 0 "
                                         "gets [0, 2, 4, 6, 8]; yours gives [0, 1, 2, 3, 4].")
    assert nb.check_share(lambda count, rank, world_size: list(range(rank, count, world_size))) == (
        "NOT YET RIGHT: with 5 points and 2 processes, rank 1 gets [1, 3, 0]; yours gives [1, 3].")
    assert nb.check_share(lambda count, rank, world_size: ...).startswith("NOT DONE YET")
    assert nb.check_share(lambda count, rank, world_size: 1 / 0).startswith(
        "NOT YET RIGHT: share_of(10, 0, 2) raised ZeroDivisionError")
    assert nb.check_share(nb.share_of_answer).startswith("PASSED")


@pytest.mark.exercise("06", "average")
def test_exercise_2_says_that_a_sum_of_gradients_is_n_times_the_whole_batchs():
    summed = nb.check_average(lambda gradients: torch.stack(gradients).sum(dim=0))
    assert summed == ("NOT YET RIGHT: with 2 copies, your gradients are 2.00 times those of one model on "
                      "the whole batch: a sum, not a mean? (The all-reduce adds them up; DDP then divides "
                      "by the number of processes.)")
    reference, first = nb.gradients_by_copies(lambda gradients: gradients[0], 2)
    off, largest = float((first - reference).abs().max()), float(reference.abs().max())
    assert nb.check_average(lambda gradients: gradients[0]) == (  # one process's gradients only
        f"NOT YET RIGHT: with 2 copies, your gradients differ from those of one model on the whole "
        f"batch by up to {off:.3g} (the largest gradient is {largest:.3g}).")
    assert off > 1e-3 * largest
    stacked = nb.check_average(lambda gradients: torch.stack(gradients))
    assert stacked.startswith("NOT YET RIGHT: average_gradients should return one tensor of shape (4, 2)")

    def return_forgotten(gradients):
        torch.stack(gradients).mean(dim=0)

    assert nb.check_average(return_forgotten) == (
        "NOT YET RIGHT: average_gradients should return one tensor of shape (4, 2), the shape of each "
        "gradient; yours returned None (a NoneType).")
    assert nb.check_average(lambda gradients: ...).startswith("NOT DONE YET")
    assert nb.check_average(lambda gradients: gradients.mean()).startswith(
        "NOT YET RIGHT: average_gradients raised AttributeError")  # a list, not a tensor
    assert nb.check_average(nb.average_gradients_answer).startswith("PASSED")


@pytest.mark.exercise("06", "batch")
def test_exercise_3_says_that_the_communication_does_not_grow_with_the_batch():
    def everything_grows(k, compute_ms, communication_ms, processes):
        return processes * k * compute_ms / (k * compute_ms + k * communication_ms)

    assert nb.check_speedup(everything_grows) == (
        "NOT YET RIGHT: with k = 4, compute_ms 8, communication_ms 2, 2 processes, the speed-up is "
        "1.882; yours is 1.600, the same as with k = 1. The gradients, and so the communication, do "
        "not grow with the batch.")
    assert nb.check_speedup(lambda k, compute_ms, communication_ms, processes: 1.0) == (
        "NOT YET RIGHT: with k = 1, compute_ms 8, communication_ms 2, 2 processes, the speed-up is "
        "1.600; yours is 1.000.")
    assert nb.check_speedup(lambda *numbers: ...).startswith("NOT DONE YET")
    assert nb.check_speedup(lambda k, compute_ms, communication_ms, processes: "1.6") == (
        "NOT YET RIGHT: with k = 1, compute_ms 8, communication_ms 2, 2 processes, the speed-up is "
        "1.600; yours is '1.6'.")
    assert nb.check_speedup(lambda k, compute_ms, communication_ms, processes: 1 / 0).startswith(
        "NOT YET RIGHT: with k = 1, compute_ms 8, communication_ms 2, 2 processes, speedup_at raised "
        "ZeroDivisionError")
    speed = nb.ddp_speed_table(timed_results(8.0, 10.0), 128)
    assert nb.check_speedup(nb.speedup_at_answer, speed) == (
        "PASSED: speedup_at agrees with the cost model on 5 inputs. With Step 5's numbers: 1.60 "
        "times as fast as one device now, 1.97 with batches 16 times bigger.")
    assert nb.check_speedup(nb.speedup_at_answer, nb.ddp_speed_table([], 128)) == (
        "PASSED: speedup_at agrees with the cost model on 4 inputs.")
