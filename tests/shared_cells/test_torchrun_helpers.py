"""The torchrun helpers, tested once: tools/shared_cells/torchrun_helpers.py (notebooks 06 and 08 carry a
copy; tools/sync_cells.py --check keeps the copies the same as the file, so 06's copy stands for both).

torchrun_plan (how many processes, which backend, how many threads, with the notebook's own words for
one GPU and for a Mac), torchrun's command line, the environment of a launch, a free port, a fresh folder
and the RESULT lines. Each notebook's own launch plan, which gives torchrun_plan its words, is tested
with the notebook (tests/notebooks/test_06_helpers.py, test_08_helpers.py).
"""
import json
import socket
import sys

import pytest
import torch.distributed.run

from support.notebook_code import load_shared, shared_cell_carriers, shared_cell_use

SOURCE = "tools/shared_cells/torchrun_helpers.py"
torchrun = load_shared("torchrun_helpers.py")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


# ---- torchrun's command line ---------------------------------------------------------------------------

def test_a_one_machine_command_is_accepted_by_torchrun(tmp_path):
    command = torchrun.torchrun_command(tmp_path / "s.py", 2, script_args=["--epochs", 3], log_dir=tmp_path)
    assert command[:3] == TORCHRUN
    args = torch.distributed.run.parse_args(command[3:])
    assert args.standalone and args.nproc_per_node == "2"
    assert args.log_dir == str(tmp_path) and args.tee == "3"
    assert args.training_script == str(tmp_path / "s.py") and args.training_script_args == ["--epochs", "3"]


def test_a_two_node_command_uses_a_c10d_rendezvous():
    command = torchrun.torchrun_command("s.py", 1, nnodes=2, endpoint="127.0.0.1:12345", run_id="job",
                                        rdzv_conf="is_host=1")
    args = torch.distributed.run.parse_args(command[3:])
    assert not args.standalone
    assert (args.nnodes, args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id, args.rdzv_conf) == (
        "2", "c10d", "127.0.0.1:12345", "job", "is_host=1")
    assert "--tee=3" not in command  # no log folder asked for


def test_one_node_with_an_endpoint_meets_at_it_instead_of_standalone(tmp_path):
    # notebook 08 launches so, on a port it chose, to check afterwards that the port is free again
    command = torchrun.torchrun_command(tmp_path / "s.py", 2, script_args=["--steps", 3], nnodes=1,
                                        endpoint="127.0.0.1:29400", run_id="nb08", log_dir=tmp_path)
    args = torch.distributed.run.parse_args(command[3:])
    assert not args.standalone and args.nproc_per_node == "2" and args.nnodes == "1"
    assert (args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id) == ("c10d", "127.0.0.1:29400", "nb08")
    assert args.rdzv_conf == ""  # no --rdzv-conf unless asked
    assert args.training_script_args == ["--steps", "3"]


def test_the_exit_barrier_option_is_passed_only_when_asked():
    assert not any("exit-barrier" in part for part in torchrun.torchrun_command("s.py", 2))
    command = torchrun.torchrun_command("s.py", 1, nnodes=2, endpoint="h:1", exit_barrier_timeout_s=30)
    assert "--exit-barrier-timeout=30" in command
    assert command[-1] == "s.py"  # launcher options come before the script


# ---- torchrun_plan: the decision both notebooks share, with made-up words for one GPU and a Mac ---------
# Each test claims the branches of both copies, 06's and 08's: tools/sync_cells.py keeps them the same.

ONE_GPU_WHY = "One CUDA GPU: the notebook's words."
MPS_WHY = "A Mac, in the notebook's words: "


def plan(gpus, cores=8, accelerator="cpu", os_name="posix"):
    return torchrun.torchrun_plan(gpus, cores, accelerator, os_name, one_gpu_why=ONE_GPU_WHY, mps_why=MPS_WHY)


@pytest.mark.gpu_branch("06", "torchrun_plan: accelerator == 'mps'")
@pytest.mark.gpu_branch("08", "torchrun_plan: accelerator == 'mps'")
@pytest.mark.gpu_branch("06", "torchrun_plan: gpu_count == 1")
@pytest.mark.gpu_branch("08", "torchrun_plan: gpu_count == 1")
@pytest.mark.gpu_branch("06", "torchrun_plan: gpu_count >= 2")
@pytest.mark.gpu_branch("08", "torchrun_plan: gpu_count >= 2")
@pytest.mark.parametrize("gpus, cores, accelerator, nproc, backend, cpu_flag", [
    (0, 2, "cpu", 2, "gloo", False), (0, 8, "mps", 2, "gloo", False),  # the CPU stands in for 2 GPUs
    (1, 8, "cuda", 2, "gloo", True),  # one GPU: 2 processes on the CPU, told so by --cpu
    (2, 8, "cuda", 2, "nccl", False), (4, 2, "cuda", 4, "nccl", False)])  # one process per GPU
def test_the_plan_starts_one_process_per_gpu_or_two_on_the_cpu(gpus, cores, accelerator, nproc, backend,
                                                                cpu_flag):
    found = plan(gpus, cores, accelerator)
    assert (found["nproc"], found["backend"], "--cpu" in found["script_args"]) == (nproc, backend, cpu_flag), (
        f"{SOURCE}: torchrun_plan({gpus} GPUs, {accelerator})")
    assert found["threads"] >= 1 and found["threads"] * found["nproc"] <= max(cores, found["nproc"])


def test_the_plan_says_why_in_the_notebooks_words_for_one_gpu_and_a_mac():
    assert plan(0)["why"] == "No CUDA GPU: 2 processes on the CPU stand in for 2 GPUs, talking over gloo."
    assert plan(0, accelerator="mps")["why"] == (
        "A Mac, in the notebook's words: 2 processes on the CPU stand in for 2 GPUs, talking over gloo.")
    assert plan(1, accelerator="cuda")["why"] == ONE_GPU_WHY
    assert plan(1, accelerator="mps")["why"] == ONE_GPU_WHY  # a CUDA GPU comes first
    assert plan(2, accelerator="cuda")["why"] == "2 CUDA GPUs: one process per GPU, talking over NCCL."


@pytest.mark.gpu_branch("06", "torchrun_plan: os_name == 'nt'")
@pytest.mark.gpu_branch("08", "torchrun_plan: os_name == 'nt'")
@pytest.mark.parametrize("gpus", [0, 1, 2])
def test_on_windows_the_plan_warns_that_torchrun_lacks_libuv(gpus):
    windows, linux = plan(gpus, os_name="nt"), plan(gpus, os_name="posix")
    assert windows["why"] == linux["why"] + torchrun.WINDOWS_TORCHRUN
    assert "use_libuv was requested" in windows["why"] and "WSL" in windows["why"]
    assert {k: v for k, v in windows.items() if k != "why"} == {k: v for k, v in linux.items() if k != "why"}


@pytest.mark.parametrize("gpus, cores, threads", [
    (0, 1, 1), (0, 2, 1), (0, 3, 1), (0, 4, 2), (1, 4, 2),  # the CPU: half the cores each, at least 1
    (2, 1, 1), (2, 2, 1), (2, 3, 1), (2, 4, 2), (4, 8, 2)])  # GPUs: the cores shared out, at least 1
def test_the_plans_threads_at_their_edges(gpus, cores, threads):
    assert plan(gpus, cores)["threads"] == threads


# ---- the launch: its environment, a port, a folder -----------------------------------------------------

def test_launch_env_sets_threads_and_keeps_the_rest(monkeypatch):
    monkeypatch.setenv("SOMETHING_ELSE", "kept")
    env = torchrun.launch_env(3)
    assert env["OMP_NUM_THREADS"] == "3" and env["PYTHONUNBUFFERED"] == "1" and env["SOMETHING_ELSE"] == "kept"


def test_free_port_can_be_bound():
    port = torchrun.free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))


def test_fresh_dir_empties_a_folder_left_by_an_earlier_run_and_makes_a_missing_one(tmp_path):
    (tmp_path / "logs" / "node0").mkdir(parents=True)
    (tmp_path / "logs" / "node0" / "old.log").write_text("a previous run")
    assert torchrun.fresh_dir(tmp_path / "logs") == tmp_path / "logs"
    assert list((tmp_path / "logs").iterdir()) == []
    assert torchrun.fresh_dir(tmp_path / "new" / "logs").is_dir()


# ---- the RESULT lines the training scripts print -------------------------------------------------------

def result_line(rank, checksum, **extra):
    return "[default0]:RESULT " + json.dumps({"rank": rank, "world_size": 2, "device": "cpu",
                                              "accuracy": 0.9, "checksum": checksum, **extra})


def test_parse_results_reads_result_lines_in_rank_order():
    output = [(1, result_line(1, "abc")), (0, "epoch 1/2: loss 0.5"), (0, result_line(0, "abc")),
              (0, "RESULT not json at all")]
    results = torchrun.parse_results(output)
    assert [(r["rank"], r["node"], r["checksum"]) for r in results] == [(0, 0, "abc"), (1, 1, "abc")]
    assert torchrun.parse_results([]) == []


@pytest.mark.parametrize("number", shared_cell_carriers("torchrun_helpers.py"))
def test_the_shared_torchrun_helpers_hold_exactly_what_each_notebook_uses(number):
    defined, used = shared_cell_use(number, "torchrun_helpers.py")
    assert defined - used == set(), f"notebook {number} never uses these functions of {SOURCE}"
    assert "torchrun_plan" in used and "supports_option" not in defined  # 06's alone: in its own cell
