"""Notebook 07's runner of separate processes (Step 1 runs its script in one, so that a crash cannot
take the notebook down): the output and exit code of a command, its environment, the time limit that stops
the process and everything it started, no child left behind, and how each system groups and stops a tree
of processes (a session of its own on Linux and macOS, taskkill /T on Windows, with stand-ins). The same
promise for torchrun is tested in tests/shared_cells/test_process_plumbing.py."""
import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from support.notebook_code import load_helpers

nb = load_helpers("07")


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
