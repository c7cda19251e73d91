#@title Shared torchrun helpers: the plan for this machine, the command line, the RESULT lines
# PyTorch's Windows wheels are built without libuv, and torchrun's rendezvous asks for it
# (pytorch/pytorch#139990; USE_LIBUV=0 does not reach torchrun's own store).
WINDOWS_TORCHRUN = (" On Windows, torchrun usually stops at once with 'use_libuv was requested but "
                    "PyTorch was built without libuv support' (its hint, USE_LIBUV=0, does not "
                    "reach torchrun): the runs below then report no result. WSL, Colab or "
                    "Kaggle run them.")


def torchrun_plan(gpu_count, cpu_cores, accelerator, os_name, one_gpu_why, mps_why):
    """How many processes to start and how: one per CUDA GPU, or 2 on the CPU over gloo. The
    notebook's own words say why on one CUDA GPU (`one_gpu_why`) and on a Mac (`mps_why`, the start
    of a sentence that goes on "2 processes on the CPU stand in ...")."""
    extra = WINDOWS_TORCHRUN if os_name == "nt" else ""
    threads = max(1, cpu_cores // 2)
    if gpu_count >= 2:
        return {"nproc": gpu_count, "backend": "nccl", "script_args": [],
                "threads": max(1, cpu_cores // gpu_count),
                "why": f"{gpu_count} CUDA GPUs: one process per GPU, talking over NCCL.{extra}"}
    if gpu_count == 1:
        return {"nproc": 2, "backend": "gloo", "script_args": ["--cpu"], "threads": threads,
                "why": one_gpu_why + extra}
    where = mps_why if accelerator == "mps" else "No CUDA GPU: "
    return {"nproc": 2, "backend": "gloo", "script_args": [], "threads": threads,
            "why": f"{where}2 processes on the CPU stand in for 2 GPUs, talking over gloo.{extra}"}


def torchrun_command(script, nproc, script_args=(), log_dir=None, nnodes=1, endpoint=None,
                     run_id="notebook", rdzv_conf=None, exit_barrier_timeout_s=None):
    """The command line that starts `nproc` copies of `script` with torchrun on this machine."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"]
    if nnodes == 1 and endpoint is None:
        command.append("--standalone")  # one machine: torchrun picks a free port itself
    else:
        command += [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
                    f"--rdzv-id={run_id}"]
    if rdzv_conf:
        command.append(f"--rdzv-conf={rdzv_conf}")
    if log_dir is not None:  # every process's output on screen and in a file, with error files
        command += [f"--log-dir={log_dir}", "--tee=3"]
    if exit_barrier_timeout_s is not None:
        command.append(f"--exit-barrier-timeout={exit_barrier_timeout_s}")
    return command + [str(script)] + [str(arg) for arg in script_args]


def launch_env(threads):
    """The environment for a launch: ours, plus the CPU threads per process, unbuffered output."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}


def fresh_dir(path):
    """An empty folder at `path` (a previous run's files are removed first)."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def free_port():
    """A TCP port no program uses right now, chosen by the operating system."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def parse_results(output):
    """The RESULT lines the training script prints, one dictionary per process."""
    results = []
    for tag, line in output:
        match = re.search(r"RESULT (\{.*\})\s*$", line)
        if match:
            results.append({"node": tag, **json.loads(match.group(1))})
    return sorted(results, key=lambda result: result["rank"])
