#@title Shared setup: helpers, the device and the fast switch (the same cell in every notebook)
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from IPython.display import display


def fast_mode():
    """True when the environment variable TUTORIAL_FAST is 1: the notebook runs small and fast."""
    return os.environ.get("TUTORIAL_FAST", "0") == "1"


def pick_device():
    """The accelerator PyTorch finds (NVIDIA or AMD GPU, Apple's MPS, ...), else the CPU."""
    if torch.accelerator.is_available():
        return torch.accelerator.current_accelerator()
    return torch.device("cpu")


def find_data_dir(start=None):
    """The repository's data/ folder inside the repository, else data/ in the working folder."""
    start = Path.cwd() if start is None else Path(start)
    for folder in (start, *start.parents):
        if (folder / "requirements.txt").is_file() and (folder / "notebooks").is_dir():
            return folder / "data"
    return start / "data"


def synchronize(device):
    """Wait until the work queued on `device` is done: GPU calls return before the GPU finishes."""
    device = torch.device(device)
    if device.type == "cuda":  # NVIDIA GPUs, and AMD GPUs under ROCm (PyTorch calls both "cuda")
        torch.cuda.synchronize(device)
    elif device.type == "mps":  # torch.accelerator.synchronize skips MPS before PyTorch 2.7
        torch.mps.synchronize()
    elif device.type != "cpu":
        torch.accelerator.synchronize(device)


def time_it(fn, device, repeats=3, warmup=1, clock=time.perf_counter):
    """Median seconds of fn(): `warmup` untimed runs, then `repeats` runs, each synchronized."""
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(repeats):
        synchronize(device)
        start = clock()
        fn()
        synchronize(device)
        seconds.append(clock() - start)
    return statistics.median(seconds)


def hosted_service(modules=None, environ=None):
    """'Colab' or 'Kaggle' when the notebook runs on that service, else None."""
    modules = sys.modules if modules is None else modules
    environ = os.environ if environ is None else environ
    if "google.colab" in modules:
        return "Colab"
    if "KAGGLE_KERNEL_RUN_TYPE" in environ:
        return "Kaggle"
    return None


GPU_SWITCH = {"Colab": "Runtime > Change runtime type > T4 GPU > Save",
              "Kaggle": "Settings > Accelerator > GPU T4 x2"}


def no_gpu_warning(service, device_type):
    """Lines that cannot be missed when a Colab or Kaggle notebook runs without a GPU, else None."""
    if service is None or device_type != "cpu":
        return None
    bar = "!" * 72
    return (f"{bar}\nNO GPU: this {service} session has none, so every cell below runs on the "
            f"CPU.\nTo use a GPU: {GPU_SWITCH[service]}, then run all cells again.\n{bar}")


FIGURES_MIME = "application/vnd.gpu-tutorials.figures+json"


def figures_record(device, fast, fallback, figures):
    """The record report_figures shows: the figures as JSON, the device, the size, the fallback."""
    return {"device": str(device), "device_type": device.type, "fast": fast, "fallback": fallback,
            "figures": json.loads(json.dumps(figures, default=str))}


def report_figures(fallback=None, **figures):
    """Show the figures this notebook measured as one machine-readable output (tools/gpu_run.py
    records them); `fallback` says what stood in for the real thing, if anything did."""
    record = figures_record(device, FAST, fallback, figures)
    display({FIGURES_MIME: record, "text/plain": ""}, raw=True)
    return record


class Feedback(str):
    """An exercise check's verdict, shown as plain text when a cell ends with it: 'PASSED ...',
    'NOT DONE YET ...' or 'NOT YET RIGHT: ' and what is wrong."""

    def __repr__(self):
        return str(self)


def not_done(*values):
    """True while a value the learner is asked to write is still the starter's `...`."""
    return any(value is Ellipsis for value in values)


FAST = fast_mode()
device = pick_device()
DATA_DIR = find_data_dir()
DATA_DIR.mkdir(parents=True, exist_ok=True)
print(f"PyTorch {torch.__version__} | device: {device} | fast mode: {FAST} | data: {DATA_DIR}")
if warning := no_gpu_warning(hosted_service(), device.type):
    print(warning)
