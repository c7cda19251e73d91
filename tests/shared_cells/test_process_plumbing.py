"""The process plumbing, tested once: tools/shared_cells/process_plumbing.py (notebooks 06 and 08 carry a
copy; tools/sync_cells.py --check keeps the copies the same as the file, so 06's copy stands for both).

It runs programs with a time limit, prints their output as it arrives and leaves no process behind.
The stand-ins are shaped like the real things: Linux's /proc/<pid>/stat, psutil's Process and
process_iter, and the OSErrors os.kill raises; run_launchers gets stand-in processes and a clock of its
own, so that its time limit and its patience are tested at their edges without starting a program. A few
tests start real programs, torchrun among them, and check that nothing outlives the time limit.
"""
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import types

import psutil
import pytest

from support.notebook_code import load_shared, shared_cell_carriers, shared_cell_use

SOURCE = "tools/shared_cells/process_plumbing.py"
plumbing = load_shared("process_plumbing.py")
torchrun = load_shared("torchrun_helpers.py")  # torchrun's command line, for the run that starts it


class RecordingPath:
    """Shaped like pathlib.Path.write_text(data, encoding=None, errors=None, newline=None)."""

    def __init__(self):
        self.calls = []

    def write_text(self, data, encoding=None, errors=None, newline=None):
        self.calls.append({"data": data, "encoding": encoding})
        return len(data)


def test_write_script_writes_the_parts_in_order_in_utf_8(tmp_path):
    path = plumbing.write_script(tmp_path / "train.py", ["a = 1\n", 's = "x² + y² = 2/π"\n'])
    assert path.read_bytes() == 'a = 1\ns = "x² + y² = 2/π"\n'.encode("utf-8")
    # UTF-8 whatever the system's own encoding (Windows' is often cp1252, which lacks some letters)
    recorder = RecordingPath()
    assert plumbing.write_script(recorder, ["a", "b"]) is recorder
    assert recorder.calls == [{"data": "ab", "encoding": "utf-8"}]


@pytest.mark.parametrize("number", shared_cell_carriers("process_plumbing.py"))
def test_the_shared_plumbing_holds_exactly_what_each_notebook_uses(number):
    defined, used = shared_cell_use(number, "process_plumbing.py")
    assert defined - used == set(), f"notebook {number} never uses these functions of {SOURCE}"
    assert "write_script" in used and "key_error_lines" not in defined  # 06's alone: beside its caller


def test_descendants_follow_the_whole_tree_only():
    parents = {10: 1, 11: 10, 12: 11, 13: 10, 20: 1, 21: 20}
    assert plumbing.descendants(10, parents) == {11, 12, 13}
    assert plumbing.descendants(12, parents) == set()


# Running programs: time limits, and nothing left behind


def assert_all_gone(pids):
    """Every process in `pids` has exited (checked with psutil too when it is installed)."""
    assert all(not plumbing.is_alive(pid) for pid in pids), [pid for pid in pids if plumbing.is_alive(pid)]
    try:
        import psutil
    except ImportError:
        return
    for pid in pids:
        if psutil.pid_exists(pid):
            assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_stop_reason_at_the_time_limit_and_the_patience():
    assert plumbing.stop_reason(240.0, None, True, 240, 15) is None  # exactly at the limit: not yet
    assert "time limit of 240 s" in plumbing.stop_reason(240.01, None, True, 240, 15)
    assert "time limit" in plumbing.stop_reason(240.01, 16.0, True, 240, 15)  # the limit is said first
    assert plumbing.stop_reason(100.0, 15.0, True, 240, 15) is None  # exactly the patience: not yet
    assert "still running 15 s after" in plumbing.stop_reason(100.0, 15.01, True, 240, 15)
    assert plumbing.stop_reason(100.0, 60.0, False, 240, 15) is None  # all ended: nothing to stop
    assert plumbing.stop_reason(100.0, None, True, 240, 15) is None  # none ended yet


def test_run_launchers_prefixes_lines_with_the_node_only_for_several(capsys):
    plumbing.run_launchers([[sys.executable, "-c", "print('alone')"]], time_limit_s=60)
    assert capsys.readouterr().out.splitlines() == ["alone"]
    two = plumbing.run_launchers([[sys.executable, "-c", "print('a')"], [sys.executable, "-c", "print('b')"]],
                           time_limit_s=60)
    assert sorted(capsys.readouterr().out.splitlines()) == ["node0 | a", "node1 | b"]
    assert two["returncodes"] == [0, 0] and two["stopped"] is None and two["leftovers"] == []


# A parent that starts a child in a session of its own, as torchrun does with its workers.
PARENT_WITH_DETACHED_CHILD = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
print("child started", flush=True)
time.sleep(600)
"""


def test_the_time_limit_stops_a_program_and_its_detached_child():
    # 5 s: the child starts within a second, and run_launchers looks for new processes every second
    run = plumbing.run_launchers([[sys.executable, "-c", PARENT_WITH_DETACHED_CHILD]], time_limit_s=5,
                                 echo=False)
    assert run["stopped"] and "time limit" in run["stopped"]
    assert any("child started" in line for _, line in run["output"])
    assert len(run["started"]) == 1 and run["leftovers"] == []
    assert_all_gone(run["started"])
    assert run["seconds"] < 30


def test_a_program_that_outlives_its_peer_is_stopped_after_the_patience():
    commands = [[sys.executable, "-c", "print('done')"], [sys.executable, "-c", "import time; time.sleep(600)"]]
    run = plumbing.run_launchers(commands, time_limit_s=120, patience_s=2, echo=False)
    assert run["returncodes"][0] == 0 and run["returncodes"][1] < 0
    assert "still running" in run["stopped"] and run["seconds"] < 30
    assert (0, "done") in run["output"]


WORKER_THAT_HANGS = """
import os, time
print("worker", os.environ["RANK"], "ready", flush=True)
time.sleep(600)
"""


def test_torchrun_stopped_at_the_time_limit_leaves_no_worker(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(WORKER_THAT_HANGS)
    command = torchrun.torchrun_command(script, 2, log_dir=tmp_path / "logs")  # else torchrun leaves a temp folder
    # 15 s: torchrun starts in 3 to 6 s on the 2-core build machine under the test run's load, and these
    # workers import nothing heavy; the limit strikes while both wait
    run = plumbing.run_launchers([command], time_limit_s=15, env=torchrun.launch_env(1), echo=False)
    ready = [line for _, line in run["output"] if "ready" in line]
    assert len(ready) == 2, run["output"]  # both workers were running when the limit struck
    assert len(run["started"]) >= 2 and run["leftovers"] == []
    assert_all_gone(run["started"])


# --- Windows, and a system without /proc or psutil, run with stand-ins ------------------------------

def is_alive_elsewhere(monkeypatch, tmp_path, os_name):
    """is_alive as on a system without /proc and without psutil (Windows, or a bare macOS),
    whose os.name is `os_name`: (is_alive(pid), the signals it sent, as (pid, signal))."""
    sent = []

    def kill(pid, signal_number):
        sent.append((pid, signal_number))
        os.kill(pid, signal_number)

    monkeypatch.setitem(sys.modules, "psutil", None)  # `import psutil` raises ImportError
    return (lambda pid: plumbing.is_alive(pid, proc=tmp_path / "no-proc", os_name=os_name, kill=kill)), sent


# One test claims the branch of both copies, 06's and 08's: tools/sync_cells.py keeps them the same.
@pytest.mark.gpu_branch("06", "is_alive: os_name != 'posix'")
@pytest.mark.gpu_branch("08", "is_alive: os_name != 'posix'")
def test_is_alive_on_windows_without_psutil_sends_no_signal(monkeypatch, tmp_path):
    # On Windows os.kill(pid, 0) does not ask: every signal but CTRL_C_EVENT and CTRL_BREAK_EVENT
    # ends the process with TerminateProcess (Python's documentation of os.kill).
    is_alive, sent = is_alive_elsewhere(monkeypatch, tmp_path, "nt")
    assert is_alive(os.getpid()) is False and sent == []


def test_is_alive_on_a_posix_system_without_proc_or_psutil_asks_with_signal_0(monkeypatch, tmp_path):
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                              capture_output=True, text=True)
    is_alive, sent = is_alive_elsewhere(monkeypatch, tmp_path, "posix")
    assert is_alive(os.getpid()) is True
    assert is_alive(int(finished.stdout)) is False  # ended and reaped: no such process
    assert sent == [(os.getpid(), 0), (int(finished.stdout), 0)]


# --- Reading /proc or psutil, stopping processes, run_launchers on stand-ins and a clock of its own -----

def stat_line(pid, name, state, parent):
    """A line of /proc/<pid>/stat as Linux writes it: pid, (name), state, parent pid, then more."""
    return f"{pid} ({name}) {state} {parent} {pid} {pid} 0 -1 4194560 1200 0 0 0 5 3 0 0 20 0 1 0\n"


@pytest.fixture
def fake_proc(tmp_path):
    """A folder shaped like Linux's /proc: a few processes, one ended while it was read."""
    proc = tmp_path / "proc"
    processes = {1: ("systemd", "S", 0), 4242: ("w) S 99", "R", 1),  # a name holding ") S 99"
                 4243: ("python3", "Z", 4242), 4244: ("gone", "X", 1)}
    for pid, (name, state, parent) in processes.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(stat_line(pid, name, state, parent))
    (proc / "77" / "stat").mkdir(parents=True)  # reading it raises an OSError, as an ended one does
    (proc / "self").mkdir()  # /proc has folders that are not processes
    (proc / "self" / "stat").write_text(stat_line(4242, "w", "R", 1))
    return proc


def test_read_parent_map_reads_proc_and_skips_what_ended_meanwhile(fake_proc):
    assert plumbing.read_parent_map(fake_proc) == {1: 0, 4242: 1, 4243: 4242, 4244: 1}


def test_is_alive_reads_the_state_in_proc(fake_proc):
    assert plumbing.is_alive(1, fake_proc) and plumbing.is_alive(4242, fake_proc)  # sleeping, running
    assert not plumbing.is_alive(4243, fake_proc) and not plumbing.is_alive(4244, fake_proc)  # zombie, dead
    assert not plumbing.is_alive(999, fake_proc) and not plumbing.is_alive(77, fake_proc)  # gone, unreadable


class StandInPsutilProcess:
    """Shaped like psutil.Process: raises NoSuchProcess (ZombieProcess on macOS) for a process it
    cannot find, has .pid, .info (what process_iter fills in) and status()."""
    STATES = {10: psutil.STATUS_RUNNING, 11: psutil.STATUS_SLEEPING, 12: psutil.STATUS_ZOMBIE}
    PARENTS = {0: 0, 4: 0, 10: 4, 11: 10, 12: 10}  # Windows' idle process 0 is its own parent

    def __init__(self, pid):
        if pid == 13:
            raise psutil.ZombieProcess(pid)
        if pid not in self.STATES:
            raise psutil.NoSuchProcess(pid)
        self.pid, self.info = pid, {"ppid": self.PARENTS[pid]}

    def status(self):
        return self.STATES[self.pid]


def without_proc(monkeypatch, tmp_path, psutil_module):
    """A /proc folder that is not there (macOS, Windows), with `import psutil` giving `psutil_module`."""
    monkeypatch.setitem(sys.modules, "psutil", psutil_module)
    return tmp_path / "no-proc"


def process_iter(attrs):
    """What psutil.process_iter(["ppid"]) yields: processes with .pid and .info filled in."""
    assert attrs == ["ppid"]
    for pid, parent in StandInPsutilProcess.PARENTS.items():
        process = object.__new__(StandInPsutilProcess)
        process.pid, process.info = pid, {"ppid": parent}
        yield process


STAND_IN_PSUTIL = types.SimpleNamespace(Process=StandInPsutilProcess, STATUS_ZOMBIE=psutil.STATUS_ZOMBIE,
                                        process_iter=process_iter)


def test_without_proc_psutil_gives_the_parents_and_without_it_nothing(monkeypatch, tmp_path):
    no_proc = without_proc(monkeypatch, tmp_path, STAND_IN_PSUTIL)
    assert plumbing.read_parent_map(no_proc) == StandInPsutilProcess.PARENTS
    monkeypatch.setitem(sys.modules, "psutil", None)  # `import psutil` raises ImportError
    assert plumbing.read_parent_map(no_proc) == {}


def test_without_proc_psutil_says_which_process_runs(monkeypatch, tmp_path):
    no_proc = without_proc(monkeypatch, tmp_path, STAND_IN_PSUTIL)
    assert plumbing.is_alive(10, no_proc) and plumbing.is_alive(11, no_proc)
    assert not plumbing.is_alive(12, no_proc)  # a zombie: ended, waiting for its parent
    assert not plumbing.is_alive(13, no_proc) and not plumbing.is_alive(99, no_proc)  # Zombie-, NoSuchProcess


def test_descendants_end_on_a_loop_in_the_parent_map():
    # psutil lists Windows' idle process 0 as its own parent, and a map read while process ids are
    # reused can hold a loop: the search must still end, each process found once.
    found = []
    search = threading.Thread(target=lambda: found.append((
        plumbing.descendants(4, StandInPsutilProcess.PARENTS),
        plumbing.descendants(0, {0: 0, 4: 0, 10: 4}),
        plumbing.descendants(10, {10: 11, 11: 10, 12: 11}))), daemon=True)
    search.start()
    search.join(10)
    assert found == [({10, 11, 12}, {0, 4, 10}, {10, 11, 12})]


class StandInLauncher:
    """Shaped like the subprocess.Popen that run_launchers starts (text mode, output on a pipe): pid,
    stdout, poll(), terminate(), kill(), wait() and returncode. It prints `lines`, then ends by itself
    when `clock` reaches `ends_at` (never if None); `obeys_terminate=False` makes it outlive
    terminate() until kill()."""

    def __init__(self, pid, clock=None, ends_at=None, lines=(), obeys_terminate=True):
        self.pid, self.clock, self.ends_at, self.obeys_terminate = pid, clock, ends_at, obeys_terminate
        self.returncode, self.calls, self.output_ended = None, [], False
        self.stdout = self._output(lines)

    def _output(self, lines):
        yield from (line + "\n" for line in lines)
        while self.poll() is None:  # a pipe stays open while its program runs
            time.sleep(0.001)
        self.output_ended = True

    def poll(self):
        if self.returncode is None and self.ends_at is not None and self.clock.now >= self.ends_at:
            self.returncode = 0
        return self.returncode

    def terminate(self):
        self.calls.append("terminate")
        if self.obeys_terminate and self.returncode is None:
            self.returncode = -signal.SIGTERM

    def kill(self):
        self.calls.append("kill")
        if self.returncode is None:
            self.returncode = -9  # SIGKILL (Windows has no SIGKILL)

    def wait(self):
        self.calls.append("wait")
        return self.returncode


class FakeClock:
    """time.monotonic and time.sleep for stop_processes and run_launchers: sleeping and waiting for output move it on."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_stop_processes_kills_what_outlives_terminate_and_bears_kill_errors(monkeypatch):
    alive = {101, 102, 103}  # 101 ends before the kill, 102 is another user's (a reused pid)
    sent, clock = [], FakeClock()

    def kill(pid, signal_number):
        sent.append((pid, signal_number))
        if pid == 101:
            raise ProcessLookupError(3, "No such process")
        if pid == 102:
            raise PermissionError(1, "Operation not permitted")
        alive.discard(pid)

    obedient, stubborn, ended = (StandInLauncher(1), StandInLauncher(2, obeys_terminate=False),
                                 StandInLauncher(3))
    ended.returncode = 1
    plumbing.stop_processes([obedient, stubborn, ended], [101, 102, 103, 104], grace_s=1,
                            clock=clock.monotonic, sleep=clock.sleep, alive=lambda pid: pid in alive,
                            kill=kill, kill_signal=signal.SIGTERM)  # as on Windows: no SIGKILL
    assert sent == [(101, signal.SIGTERM), (102, signal.SIGTERM), (103, signal.SIGTERM)]  # not 104
    assert obedient.calls == ["terminate", "wait"] and obedient.returncode == -signal.SIGTERM
    assert stubborn.calls == ["terminate", "kill", "wait"] and stubborn.returncode == -9
    assert ended.calls == ["wait"] and ended.returncode == 1
    # It gave the stubborn launcher the grace, then process 102 (never gone) the grace again: no more.
    assert clock.now - 1000 == pytest.approx(2.0, abs=0.21)


def test_stop_processes_sends_sigkill_where_there_is_one_and_waits_only_until_it_works(monkeypatch):
    sent, clock = [], FakeClock()
    # Process 101 takes 0.3 s to die after the SIGKILL (a busy process).
    launcher = StandInLauncher(1)
    plumbing.stop_processes([launcher], [101], grace_s=10, clock=clock.monotonic, sleep=clock.sleep,
                            alive=lambda pid: not sent or clock.now < 1000.3,
                            kill=lambda *call: sent.append(call))
    assert sent == [(101, signal.SIGKILL)] and launcher.calls == ["terminate", "wait"]
    assert 1000.3 <= clock.now < 1000.5, "it waits for the killed process, and no longer"


def fake_launches(launchers, parents=None):
    """What run_launchers asks of the machine, made up: it starts `launchers` (in order) on their FakeClock. Each wait for output (0.2 s
    in the notebook) moves the clock on by 0.25 s, a number floats hold exactly, and returns only once
    the output threads have passed on all that the launchers printed by then: the same clock always
    gives the same run, however slow the machine."""
    clock = launchers[0].clock

    class WaitingQueue(queue.Queue):
        ends_put = 0

        def put(self, item, block=True, timeout=None):
            super().put(item)
            self.ends_put += item[1] is None

        def get(self, block=True, timeout=None):
            clock.now += 0.25
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (
                    all(l.poll() is None or l.output_ended for l in launchers)
                    and self.ends_put >= sum(l.output_ended for l in launchers)):
                time.sleep(0.001)
            return super().get(timeout=0.001)

    started = iter(launchers)
    return {"popen": lambda command, **options: next(started), "clock": clock.monotonic,
            "sleep": clock.sleep, "queue": WaitingQueue, "parent_map": lambda: dict(parents or {}),
            "alive": lambda pid: False}


@pytest.mark.parametrize("ends_at, stopped", [(None, True), (1002.6, False)])
def test_run_launchers_stops_a_program_only_once_it_outlives_its_peer_by_the_patience(
        monkeypatch, capsys, ends_at, stopped):
    clock = FakeClock()
    done, waiting = StandInLauncher(500, clock, 1000.5), StandInLauncher(600, clock, ends_at)
    system = fake_launches([done, waiting], parents={501: 500, 502: 501, 7: 1})
    run = plumbing.run_launchers([["a"], ["b"]], time_limit_s=60, patience_s=2, echo=False, system=system)
    # The first ended at 1000.5; at 1002.5 the other had waited exactly the patience: not yet.
    assert run["ended_s"][0] == 0.5 and run["started"] == [501, 502] and run["leftovers"] == []
    assert "terminate" not in done.calls
    if stopped:
        assert run["stopped"] == "one was still running 2 s after another had ended"
        assert run["returncodes"] == [0, -signal.SIGTERM] and run["ended_s"][1] == 3.0
        assert "STOPPED by the notebook: one was still running" in capsys.readouterr().out
    else:  # it ended at 1002.6, before anyone looked again
        assert run["stopped"] is None and run["returncodes"] == [0, 0] and "terminate" not in waiting.calls


@pytest.mark.parametrize("ends_at, stopped", [(None, True), (1001.0, False)])
def test_run_launchers_stops_a_program_only_past_the_time_limit(monkeypatch, ends_at, stopped):
    clock = FakeClock()
    launcher = StandInLauncher(500, clock, ends_at)
    system = fake_launches([launcher])
    run = plumbing.run_launchers([["a"]], time_limit_s=1, echo=False, system=system)  # 1 s: in time
    assert run["stopped"] == ("the time limit of 1 s was reached" if stopped else None)
    assert run["returncodes"] == [-signal.SIGTERM if stopped else 0]


@pytest.mark.parametrize("lines, echo, printed", [
    ([["alone"]], True, ["alone"]),
    ([["a"], ["b"]], True, ["node0 | a", "node1 | b"]),
    ([["a"], ["b"]], False, []),
])
def test_run_launchers_echoes_lines_with_the_node_only_for_several(monkeypatch, capsys, lines,
                                                                   echo, printed):
    clock = FakeClock()
    launchers = [StandInLauncher(500 + tag, clock, 1000.5, output) for tag, output in enumerate(lines)]
    system = fake_launches(launchers)
    run = plumbing.run_launchers([["x"]] * len(lines), time_limit_s=60, echo=echo, system=system)
    assert sorted(capsys.readouterr().out.splitlines()) == printed
    assert sorted(run["output"]) == [(tag, line) for tag, output in enumerate(lines) for line in output]
