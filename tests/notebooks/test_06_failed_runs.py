"""Notebook 06's cells after a run that fails on the learner's machine: each prints its verdict and Run All
goes on (no results, a checkpoint from an earlier run, torchrun that fails before starting), and the last
check of what is left running and listening."""
import socket

import pandas as pd
import pytest
import torch

from support.ddp_runs import write_error_file
from support.notebook_code import load_helpers, run_cell

nb = load_helpers("06")


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
