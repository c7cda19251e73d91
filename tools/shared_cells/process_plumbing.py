#@title Plumbing: run programs with a time limit, print their output as it arrives, leave nothing
def write_script(path, parts):
    """Write the parts of a script to `path` as one file (UTF-8 on every system); returns `path`."""
    path.write_text("".join(parts), encoding="utf-8")
    return path


def proc_dir():
    """The folder where Linux lists every running process (other systems have none)."""
    return Path("/") / "proc"


def read_parent_map(proc=None):
    """{pid: parent pid} of every process on the machine (Linux /proc, else psutil, else empty);
    `proc`: the folder to read instead of /proc."""
    parents, proc = {}, proc_dir() if proc is None else proc
    if proc.is_dir():
        for stat in proc.glob("[0-9]*/stat"):
            try:
                text = stat.read_text()
            except OSError:
                continue  # the process ended while we looked
            parents[int(stat.parent.name)] = int(text[text.rfind(")") + 2:].split()[1])
        return parents
    try:
        import psutil  # macOS and Windows have no /proc; psutil (if installed) knows the same
    except ImportError:
        return parents
    for process in psutil.process_iter(["ppid"]):
        parents[process.pid] = process.info["ppid"]
    return parents


def descendants(pid, parents):
    """Every process below `pid` (children, grandchildren, ...), given {pid: parent pid}."""
    children = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def is_alive(pid, proc=None, os_name=os.name, kill=os.kill):
    """True while process `pid` runs (a finished process waiting to be reaped does not count);
    `proc`, `os_name`, `kill`: the /proc folder, os.name and os.kill to use instead."""
    proc = proc_dir() if proc is None else proc
    if proc.is_dir():
        try:
            state = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
            return state not in ("Z", "X")
        except OSError:
            return False
    try:
        import psutil
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except ImportError:
        pass
    except Exception:  # psutil.NoSuchProcess and its relatives: the process is gone
        return False
    if os_name != "posix":
        return False  # without psutil, Windows offers no harmless way to ask
    try:
        kill(pid, 0)  # signal 0 only asks whether the process exists
    except OSError:
        return False
    return True


def stop_processes(launchers, pids, grace_s=10, clock=time.monotonic, sleep=time.sleep,
                   alive=is_alive, kill=os.kill, kill_signal=None):
    """Ask the launchers to stop (torchrun then stops its workers), then kill what is left. The
    clock, sleep, alive and kill are the system's, unless a test gives its own."""
    if kill_signal is None:
        kill_signal = getattr(signal, "SIGKILL", signal.SIGTERM)  # Windows has no SIGKILL
    for launcher in launchers:
        if launcher.poll() is None:
            launcher.terminate()
    deadline = clock() + grace_s
    while clock() < deadline and any(l.poll() is None for l in launchers):
        sleep(0.2)
    for pid in pids:
        if alive(pid):
            try:
                kill(pid, kill_signal)
            except OSError:
                pass  # it ended in the meantime
    for launcher in launchers:
        if launcher.poll() is None:
            launcher.kill()
        launcher.wait()
    deadline = clock() + grace_s  # killed processes take a moment to die when busy
    while clock() < deadline and any(alive(pid) for pid in pids):
        sleep(0.1)


def _pump(stream, tag, lines):
    """Copy a program's output line by line into the queue `lines` (runs in a thread)."""
    for line in stream:
        lines.put((tag, line.rstrip("\n")))
    lines.put((tag, None))


def stop_reason(elapsed_s, since_first_end_s, still_running, time_limit_s, patience_s):
    """Why to stop a run now, or None: past its time limit, or a program outliving its peer."""
    if elapsed_s > time_limit_s:
        return f"the time limit of {time_limit_s:.0f} s was reached"
    if since_first_end_s is not None and since_first_end_s > patience_s and still_running:
        return f"one was still running {patience_s:.0f} s after another had ended"
    return None


def run_launchers(commands, time_limit_s, env=None, patience_s=15, echo=True, system=None):
    """Run the commands side by side, print their output as it arrives, and let none hang.

    Stops everything after `time_limit_s`, and stops a program still running `patience_s`
    after another one has ended (it is waiting for a peer that is gone). Returns the output,
    the exit codes, why it stopped anything, and every process the programs started.
    `system` may replace what it asks of the machine (popen, clock, sleep, a queue, parent_map,
    alive), by name, as a test does.
    """
    system = {"popen": subprocess.Popen, "clock": time.monotonic, "sleep": time.sleep,
              "queue": queue.Queue, "parent_map": read_parent_map, "alive": is_alive,
              **(system or {})}
    clock, parent_map, alive = system["clock"], system["parent_map"], system["alive"]

    def stop(launchers, pids):
        stop_processes(launchers, pids, grace_s=3, clock=clock, sleep=system["sleep"], alive=alive)

    start = clock()
    launchers = [system["popen"]([str(part) for part in command], env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 errors="replace", bufsize=1) for command in commands]
    lines, started, output, ended = system["queue"](), set(), [], [None] * len(launchers)
    for tag, launcher in enumerate(launchers):
        threading.Thread(target=_pump, args=(launcher.stdout, tag, lines), daemon=True).start()
    open_streams, stopped, stop_time, first_end, last_scan = len(launchers), None, 0.0, None, 0.0
    try:
        while open_streams and not (stopped and clock() - stop_time > 5):
            try:
                tag, line = lines.get(timeout=0.2)
                if line is None:
                    open_streams -= 1
                else:
                    output.append((tag, line))
                    if echo:
                        print(f"node{tag} | {line}" if len(commands) > 1 else line, flush=True)
            except queue.Empty:
                pass
            now = clock()
            if now - last_scan > 1:  # note every process the programs start, to check on later
                parents = parent_map()
                for launcher in launchers:
                    started |= descendants(launcher.pid, parents)
                last_scan = now
            for tag, launcher in enumerate(launchers):
                if ended[tag] is None and launcher.poll() is not None:
                    ended[tag] = round(now - start, 1)
            if first_end is None and any(l.poll() is not None for l in launchers):
                first_end = now
            if stopped is None:
                stopped = stop_reason(now - start, None if first_end is None else now - first_end,
                                      any(l.poll() is None for l in launchers), time_limit_s,
                                      patience_s)
            if stopped and not stop_time:
                print(f"STOPPED by the notebook: {stopped}.", flush=True)
                stop(launchers, started)
                stop_time = clock()
    finally:  # also when you interrupt the cell: leave nothing running
        for launcher in launchers:
            started |= descendants(launcher.pid, parent_map())
        stop(launchers, started)
    return {"output": output, "returncodes": [l.returncode for l in launchers],
            "stopped": stopped, "seconds": round(clock() - start, 1), "ended_s": ended,
            "started": sorted(started), "leftovers": [p for p in started if alive(p)]}
