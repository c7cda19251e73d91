"""Notebook 08's Going deeper C, FSDP2: the release gate, the checks of the shards and of the losses, the
script (the notebook's own model code, each layer sharded, its options, its process group on NCCL or
gloo), the launch plan in this notebook's words, the cell that starts both runs, the check of what is
left over, and one real run with torchrun on 2 CPU processes over gloo, which checks what the notebook's
own run does not print: the optimizer bytes of the shards, and that every process reports the same
losses. Its GPU branches are claimed here, beside the other tests of the same script and cells."""
import ast
import os
import shlex
import socket
import subprocess
import sys

import pandas as pd
import pytest
import torch

from support.notebook_08 import tiny_model
from support.notebook_code import code_cells, load_helpers, notebook_path, read, run_cell

nb = load_helpers("08")
SCRIPT_TEXT = nb.SCRIPT_TOP + nb.SCRIPT_MODEL + nb.SCRIPT_MAIN


# FSDP2: the version gate, the checks, ZeRO


@pytest.mark.gpu_branch(
    "08", "fsdp_gate: backend == 'gloo' and version_tuple(version) < version_tuple(FSDP2_GLOO_FIRST)")
@pytest.mark.parametrize("version, backend, runs", [
    ("2.6.0", "gloo", False), ("2.6.0+cpu", "gloo", False), ("2.6.9", "gloo", False),
    ("2.7.0", "gloo", True), ("2.7.0a0+git1234", "gloo", True), ("2.14.1+cu130", "gloo", True),
    ("2.6.0+cu124", "nccl", True)])
def test_fsdp_gate_at_the_first_release_that_runs_fsdp2_over_gloo(version, backend, runs):
    run, why = nb.fsdp_gate(version, backend)
    assert run == runs
    assert ("record_event" in why and "torch>=2.7" in why) == (not runs)


def test_fsdp_gate_without_torch_distributed():
    run, why = nb.fsdp_gate("2.14.1", "gloo", distributed_available=False)
    assert not run and "no torch.distributed" in why


@pytest.mark.parametrize("part, ok", [(110.0, True), (110.001, False), (90.0, True), (89.999, False)])
def test_about_one_share_at_its_slack(part, ok):
    assert nb.about_one_share(part, 200, 2, slack=0.1) == ok


def fsdp_result(rank, weights, optimizer, losses=(1.0, 0.9), step_ms=10.0):
    return {"rank": rank, "weights_bytes": weights, "gradients_bytes": weights, "optimizer_bytes": optimizer,
            "losses": list(losses), "step_ms": step_ms}


def test_shards_verdict_wants_shards_that_add_up_and_are_about_even():
    reference = [fsdp_result(0, 1000, 2008)]
    ok, text = nb.shards_verdict([fsdp_result(0, 500, 1004), fsdp_result(1, 500, 1004)], reference)
    assert ok and "True" in text
    assert not nb.shards_verdict([fsdp_result(0, 500, 1004), fsdp_result(1, 499, 1004)], reference)[0]
    assert not nb.shards_verdict([fsdp_result(0, 600, 1004), fsdp_result(1, 400, 1004)], reference)[0]
    assert not nb.shards_verdict([fsdp_result(0, 500, 1300), fsdp_result(1, 500, 700)], reference)[0]
    assert nb.shards_verdict([], reference) == (False, "A torchrun process reported no result: see its output above.")
    table = nb.shard_table([fsdp_result(0, 500, 1004), fsdp_result(1, 500, 1004)], reference)
    assert list(table["weights_share_%"]) == [50.0, 50.0] and table.loc[1, "optimizer_share_%"] == 50.0
    assert nb.shard_table([], reference).empty


@pytest.mark.parametrize("sharded, agree", [([4.0, 5.0], True), ([4.0, 5.01], False), ([4.0, 3.0], True),
                                            ([4.0, 2.99], False), ([4.0], False)])
def test_losses_verdict_at_its_tolerance(sharded, agree):
    assert nb.losses_verdict([4.0, 4.0], sharded, rtol=0.25)[0] == agree
    assert not nb.losses_verdict([], [], rtol=0.25)[0]


# The FSDP2 script


def function_source(name, text=SCRIPT_TEXT):
    tree = ast.parse(text)
    node = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name)
    return ast.get_source_segment(text, node)


def test_the_script_carries_the_notebooks_own_model_code():
    compile(SCRIPT_TEXT, "08_train_fsdp.py", "exec")
    notebook_defs = {}
    for source in code_cells(read(notebook_path("08"))):
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                notebook_defs.setdefault(node.name, ast.dump(node))
    for name in ("TransformerLayer", "MeanOverTokens", "make_transformer", "make_batch", "shard_model"):
        assert ast.dump(ast.parse(function_source(name)).body[0]) == notebook_defs[name], name


def test_the_script_shards_each_layer_then_the_model_and_builds_the_optimizer_after():
    assert "from torch.distributed.fsdp import fully_shard" in SCRIPT_TEXT
    assert "from torch.distributed.device_mesh import init_device_mesh" in SCRIPT_TEXT
    main = function_source("main")
    assert main.index("init_device_mesh(device.type, (world_size,))") < main.index("shard_model(model, mesh)") \
        < main.index("torch.optim.Adam(model.parameters()")
    assert ast.unparse(ast.parse(main).body[0].body[-1]) == "leave_process_group()"


def test_shard_model_shards_each_transformer_layer_then_the_whole_model(monkeypatch):
    # fully_shard stands in for PyTorch's own (which needs a process group), in the namespace the taught
    # script's function reads: a parameter would put plumbing into the lines 08 teaches
    calls = []
    monkeypatch.setitem(nb.shard_model.__globals__, "fully_shard",
                        lambda module, mesh: calls.append((type(module).__name__, mesh)))
    model = tiny_model(nb)
    assert nb.shard_model(model, "the mesh") is model
    assert calls == [("TransformerLayer", "the mesh"), ("TransformerLayer", "the mesh"),
                     ("Sequential", "the mesh")]


@pytest.mark.gpu_branch("08", "SCRIPT_MAIN.leave_process_group: gloo")
@pytest.mark.parametrize("backend, calls", [
    ("gloo", ["get_backend", "barrier", "destroy_process_group", "flush", "flush", "_exit(0)"]),
    ("nccl", ["get_backend", "barrier", "destroy_process_group"])])
def test_leave_process_group_exits_at_once_on_gloo_only(backend, calls):
    done = []

    class Dist:
        get_backend = staticmethod(lambda: done.append("get_backend") or backend)
        barrier = staticmethod(lambda: done.append("barrier"))
        destroy_process_group = staticmethod(lambda: done.append("destroy_process_group"))

    stream = type("Stream", (), {"flush": lambda self: done.append("flush")})()
    namespace = {"dist": Dist, "sys": type("Sys", (), {"stdout": stream, "stderr": stream}),
                 "os": type("Os", (), {"_exit": staticmethod(lambda code: done.append(f"_exit({code})"))})}
    exec(function_source("leave_process_group"), namespace)
    namespace["leave_process_group"]()
    assert done == calls


@pytest.mark.gpu_branch("08", "SCRIPT_MAIN.start_process_group: use_gpu")
@pytest.mark.gpu_branch("08", "SCRIPT_MAIN.start_process_group: use_gpu (2)")
@pytest.mark.gpu_branch("08", "SCRIPT_MAIN.start_process_group: use_gpu (3)")
@pytest.mark.parametrize("gpu, cpu_only, backend, device", [
    (True, False, "nccl", "cuda:1"), (True, True, "gloo", "cpu"), (False, False, "gloo", "cpu")])
def test_start_process_group_picks_nccl_and_the_local_gpu_only_with_cuda(gpu, cpu_only, backend, device):
    done = []

    class Cuda:
        is_available = staticmethod(lambda: gpu)
        set_device = staticmethod(lambda d: done.append(f"set_device({d})"))

    class Dist:
        @staticmethod
        def init_process_group(name, timeout):
            done.append(f"init_process_group({name}, {timeout.total_seconds():.0f})")

    stand_in_torch = type("Torch", (), {"cuda": Cuda, "device": torch.device})
    import datetime
    namespace = {"torch": stand_in_torch, "dist": Dist, "datetime": datetime,
                 "os": type("Os", (), {"environ": {**os.environ, "LOCAL_RANK": "1"}})}
    exec(function_source("start_process_group"), namespace)
    assert str(namespace["start_process_group"](cpu_only, 120)) == device
    expected = ([f"set_device({device})"] if backend == "nccl" else []) + [f"init_process_group({backend}, 120)"]
    assert done == expected


def test_local_bytes_counts_only_the_local_shard_of_a_sharded_tensor():
    namespace = {"torch": torch}
    exec(function_source("local_bytes"), namespace)

    class Sharded(torch.Tensor):  # shaped like a DTensor: the whole shape, to_local() the shard
        pass

    whole = torch.zeros(10).as_subclass(Sharded)
    whole.to_local = lambda: torch.zeros(5)
    assert namespace["local_bytes"]([whole, torch.zeros(3, dtype=torch.float16), None]) == 26


def test_the_written_script_parses_its_options(tmp_path):
    script = nb.write_script(tmp_path / "08_train_fsdp.py", [nb.SCRIPT_TOP, nb.SCRIPT_MODEL, nb.SCRIPT_MAIN])
    help_text = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                               timeout=300, check=True).stdout
    for option in ("--width", "--depth", "--batch", "--sequence", "--steps", "--no-fsdp", "--cpu",
                   "--timeout-s"):
        assert option in help_text


def test_fsdp_launch_plan_is_the_shared_plan_in_its_own_words():
    # one decision (tools/shared_cells/torchrun_helpers.py's torchrun_plan, tested there); 08's words
    for gpus, accelerator in [(0, "cpu"), (0, "mps"), (1, "cuda"), (2, "cuda")]:
        plan = nb.fsdp_launch_plan(gpus, 2, accelerator, os_name="posix")
        shared = nb.torchrun_plan(gpus, 2, accelerator, "posix", one_gpu_why="", mps_why="")
        assert {k: v for k, v in plan.items() if k != "why"} == {k: v for k, v in shared.items() if k != "why"}
    assert "sharding needs two devices" in nb.fsdp_launch_plan(1, 2)["why"]
    assert "FSDP" in nb.fsdp_launch_plan(0, 2, "mps")["why"]


def test_port_is_free_sees_a_listening_socket():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert not nb.port_is_free(port)
    assert nb.port_is_free(port)


def test_fsdp2_on_two_cpu_processes_holds_half_and_matches_one_process(tmp_path):
    script = nb.write_script(tmp_path / "08_train_fsdp.py", [nb.SCRIPT_TOP, nb.SCRIPT_MODEL, nb.SCRIPT_MAIN])
    args = ["--width", 32, "--depth", 1, "--batch", 8, "--sequence", 8, "--steps", 2, "--cpu"]
    results = []
    for nproc, extra in [(1, ["--no-fsdp"]), (2, [])]:
        port = nb.free_port()
        command = nb.torchrun_command(script, nproc, script_args=[*args, *extra], endpoint=f"127.0.0.1:{port}",
                                      run_id="test08", log_dir=tmp_path / str(nproc))
        run = nb.run_launchers([command], time_limit_s=240, env=nb.launch_env(1), echo=False)
        assert run["returncodes"] == [0] and run["stopped"] is None, run["output"][-20:]
        assert len(run["started"]) >= nproc and run["leftovers"] == []
        assert all(not nb.is_alive(pid) for pid in run["started"]) and nb.port_is_free(port)
        results.append(nb.parse_results(run["output"]))
    reference, sharded = results
    assert [r["rank"] for r in sharded] == [0, 1] and reference[0]["world_size"] == 1
    assert nb.shards_verdict(sharded, reference)[0]
    assert sum(r["optimizer_bytes"] for r in sharded) > reference[0]["optimizer_bytes"]  # step counters
    assert nb.losses_verdict(reference[0]["losses"], sharded[0]["losses"])[0]
    assert sharded[0]["losses"] == sharded[1]["losses"]  # every process reports the mean of all


def stand_in_launches(outputs):
    """run_launchers that records each launch (its commands and OMP_NUM_THREADS) and returns what
    the real one returns, with the next lines of `outputs` as the programs' output."""
    launched = []

    def run_launchers(commands, time_limit_s, env=None, patience_s=15, echo=True):
        launched.append({"commands": commands, "threads": env["OMP_NUM_THREADS"]})
        return {"output": [(0, line) for line in outputs.pop(0)], "returncodes": [0], "stopped": None,
                "seconds": 5.0, "ended_s": [5.0], "started": [], "leftovers": []}
    return run_launchers, launched


@pytest.mark.gpu_branch("08", "cell fsdp-runs: plan['backend'] == 'gloo'")
@pytest.mark.parametrize("gpu_count, one_process_threads", [(2, "1"), (1, "8"), (0, "8")])
def test_step_4_gives_the_one_process_reference_one_thread_beside_a_gpu_and_every_core_on_gloo(
        tmp_path, gpu_count, one_process_threads):
    plan = nb.fsdp_launch_plan(gpu_count, 8, "cuda" if gpu_count else "cpu")
    run_launchers, launched = stand_in_launches([[], []])
    ports = iter([29511, 29512])
    namespace = {**vars(nb), "plan": plan, "can_shard": True, "BATCH": 16, "WIDTH": 64, "DEPTH": 2,
                 "SEQUENCE": 32, "FAST": True, "CPU_CORES": 8, "TIME_LIMIT_S": 240,
                 "script_path": tmp_path / "08_train_fsdp.py", "DATA_DIR": tmp_path,
                 "run_launchers": run_launchers, "free_port": lambda: next(ports)}
    printed = run_cell("08", "fsdp-runs", namespace)
    reference, sharded = launched
    [one], [many] = reference["commands"], sharded["commands"]
    assert reference["threads"] == one_process_threads and sharded["threads"] == str(plan["threads"])
    assert "--nproc-per-node=1" in one and "--no-fsdp" in one
    assert f"--nproc-per-node={plan['nproc']}" in many and "--no-fsdp" not in many
    assert all(("--cpu" in command) is (gpu_count == 1) for command in (one, many))
    assert "--rdzv-endpoint=127.0.0.1:29511" in one and printed.count("$ ") == 2
    assert all("--steps 3" in shlex.join(command) for command in (one, many))  # FSDP_STEPS in fast mode
    assert list(namespace["runs"]) == ["one process", f"FSDP2, {plan['nproc']} processes"]
    namespace = {**namespace, "can_shard": False, "run_launchers": None}
    run_cell("08", "fsdp-runs", namespace)
    assert namespace["runs"] == {}  # the gate said no: nothing is launched


@pytest.mark.parametrize("runs, alive, free, verdict", [
    ({}, set(), {1}, "Part C started no torchrun, so nothing can be left over."),
    ({"FSDP2": {"port": 1}}, set(), {1}, "No process or port of part C's torchrun runs is left over."),
    ({"FSDP2": {"port": 1}}, {42}, {1}, "Left over from part C's torchrun runs"),
    ({"FSDP2": {"port": 1}}, set(), set(), "Left over from part C's torchrun runs"),
    ({"one": {"port": 1}, "two": {"port": 2}}, set(), {2}, "Left over from part C's torchrun runs"),  # one port taken
    ({"one": {"port": 1}, "two": {"port": 2}}, set(), {1, 2}, "No process or port")])
def test_the_leftover_check_of_08_prints_its_verdict_for_processes_and_ports(runs, alive, free, verdict):
    runs = {name: {**run, "seconds": 1.0, "returncodes": [0], "started": [42]} for name, run in runs.items()}
    namespace = {**vars(nb), "pd": pd, "runs": runs, "is_alive": lambda pid: pid in alive,
                 "port_is_free": lambda port: port in free}
    assert run_cell("08", "fsdp-leftovers", namespace).startswith(verdict)
