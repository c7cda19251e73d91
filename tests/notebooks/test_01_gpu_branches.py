"""Notebook 01's cells on each kind of machine: Steps 1 to 6, the record of its figures, the datasheet
comparison and Going deeper's GPU table and copies, run with stand-ins shaped like torch's API for an
NVIDIA or AMD GPU, an Apple GPU and an Intel GPU, and for real on the CPU (the other side of each branch).
Which peak the datasheet gives which GPU is tested in tests/shared_cells/test_datasheet.py."""
import sys
import types

import pytest
import torch

from support.made_up_machines import CUDA13_ARCHES, GPU_MACHINES, facts, stand_in_torch_cuda
from support.notebook_code import load_helpers, run_cell

nb = load_helpers("01")


# --- Step 1: the one line, on every kind of machine ---------------------------------------------------

def stand_in_gpus(monkeypatch, names):
    """torch.cuda as on a machine with these GPUs (NVIDIA, or AMD under ROCm: the same calls)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: bool(names))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(names))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: names[index or 0])


@pytest.mark.gpu_branch("01", "cell gpu-answer: torch.cuda.is_available()")
@pytest.mark.parametrize("names, line", [
    (["Tesla T4"], "PyTorch uses 1 GPU: Tesla T4"),
    (["Tesla T4", "Tesla T4"], "PyTorch uses 2 GPUs: Tesla T4, Tesla T4"),  # Kaggle's T4 x2
    (["AMD Instinct MI250X/MI250"], "PyTorch uses 1 GPU: AMD Instinct MI250X/MI250"),
])
def test_step_1_names_every_gpu(monkeypatch, names, line):
    stand_in_gpus(monkeypatch, names)
    printed = run_cell("01", "gpu-answer", {**vars(nb), "device": torch.device("cuda")})
    assert printed.strip() == line


@pytest.mark.gpu_branch("01", "cell gpu-answer: device.type != 'cpu'")
@pytest.mark.gpu_branch("01", "cell gpu-answer: device.type == 'mps'")
@pytest.mark.parametrize("device_type, line", [
    ("mps", "PyTorch uses the 'mps' accelerator, the Apple GPU"),
    ("xpu", "PyTorch uses the 'xpu' accelerator"),
    ("cpu", "No GPU: PyTorch runs on the CPU. If you expected one, see 'If it says no GPU' below."),
])
def test_step_1_on_a_mac_an_intel_gpu_and_a_cpu(monkeypatch, device_type, line):
    stand_in_gpus(monkeypatch, [])
    printed = run_cell("01", "gpu-answer", {**vars(nb), "device": torch.device(device_type)})
    assert printed.strip() == line


# --- Step 2: what the wheel carries, and the GPU's generation and memory -----------------------------

@pytest.mark.gpu_branch("01", "cell wheel-facts: torch.cuda.is_available()")
def test_step_2_adds_the_gpus_capability_and_memory_on_a_t4(monkeypatch):
    machine = GPU_MACHINES["Colab T4"]
    stand_in_torch_cuda(monkeypatch, machine)
    namespace = {**vars(nb)}
    run_cell("01", "wheel-facts", namespace)
    answers = namespace["answers"]
    assert answers["torch.version.cuda"] == "13.0" and answers["torch.version.hip"] is None
    assert answers["torch.cuda.get_arch_list()"] == " ".join(CUDA13_ARCHES)
    assert answers["torch.cuda.get_device_capability()"] == (7, 5)
    assert answers["GPU memory (GiB)"] == 14.7  # 15,828,320,256 bytes: ECC and the driver keep the rest


def test_step_2_without_a_gpu_names_the_wheel_only(monkeypatch):
    stand_in_torch_cuda(monkeypatch, None)
    namespace = {**vars(nb)}
    run_cell("01", "wheel-facts", namespace)
    assert list(namespace["answers"]) == ["torch.__version__", "torch.version.cuda", "torch.version.hip",
                                          "torch.cuda.get_arch_list()"]


# --- Step 3: the modern and the classic choice agree ---------------------------------------------------

@pytest.mark.gpu_branch("01", "cell device-choice: torch.accelerator.is_available()")
@pytest.mark.gpu_branch("01", "cell device-choice: torch.cuda.is_available()")
@pytest.mark.gpu_branch("01", "cell device-choice: torch.backends.mps.is_available()")
@pytest.mark.parametrize("accelerator, cuda, mps, verdict", [
    ("cuda", True, False, "torch.accelerator: cuda | classic: cuda | pick_device(): cuda | they agree"),
    ("mps", False, True, "torch.accelerator: mps | classic: mps | pick_device(): mps | they agree"),
    ("xpu", False, False, "torch.accelerator: xpu | classic: cpu | pick_device(): xpu | they DISAGREE"),
    (None, False, False, "torch.accelerator: cpu | classic: cpu | pick_device(): cpu | they agree"),
])
def test_step_3_modern_and_classic_choice_on_each_machine(monkeypatch, accelerator, cuda, mps, verdict):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: accelerator is not None)
    monkeypatch.setattr(torch.accelerator, "current_accelerator",
                        lambda *args: torch.device(accelerator) if accelerator else None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    chosen = torch.device(accelerator or "cpu")
    printed = run_cell("01", "device-choice", {**vars(nb), "device": chosen})
    assert printed.strip() == verdict


# --- Step 4: one product timed by hand, before and after waiting for the device -------------------------

@pytest.mark.gpu_branch("01", "timing_sentence: device_type == 'cpu'")
@pytest.mark.parametrize("returned_ms, finished_ms, device_type, ending", [
    (0.02, 0.1, "cuda", "a clock read without waiting would have made the GPU 5 times faster than it is."),
    (0.02, 0.0998, "cuda", "this time the call itself waited for the GPU"),  # 4.99 times: not called so
    (0.02, 120.0, "mps", "would have made the GPU 6000 times faster than it is."),
    (16.0, 16.2, "cpu", "on the CPU the call does the work before it returns."),
    (0.02, 0.1, "cpu", "on the CPU the call does the work before it returns."),  # the CPU is never blamed
])
def test_the_timing_sentence_on_both_sides_of_five_times(returned_ms, finished_ms, device_type, ending):
    sentence = nb.timing_sentence(returned_ms / 1000, finished_ms / 1000, device_type)
    assert sentence.startswith(f"a @ b returned after {returned_ms:.3f} ms and was done after "
                               f"{finished_ms:.3f} ms: ")
    assert ending in sentence


class FakeClock:
    """Stands in for the `time` module: perf_counter() reads a clock that moves only when told."""

    def __init__(self):
        self.now = 100.0

    def perf_counter(self):
        return self.now


class TorchOnAMadeUpGPU:
    """`torch` for Step 4's cell: randn notes its device and makes a `meta` tensor (no memory, no work);
    torch.cuda.synchronize() notes that it waited and moves the clock on by the GPU's 80 ms of work."""

    def __init__(self, clock):
        self.clock, self.devices, self.waited = clock, [], []
        self.cuda = types.SimpleNamespace(synchronize=self.cuda_synchronize)

    def __getattr__(self, name):
        return getattr(torch, name)

    def randn(self, *size, device=None):
        self.devices.append(torch.device(device))
        self.clock.now += 0.00002  # every call returns after 20 microseconds
        return torch.empty(*size, device="meta")

    def cuda_synchronize(self, device=None):
        self.waited.append("torch.cuda.synchronize()")
        self.clock.now += 0.08


@pytest.mark.gpu_branch("01", "cell sync-demo: device.type == 'cpu'")
@pytest.mark.gpu_branch("01", "cell sync-demo: device.type == 'cuda'")
def test_step_4_on_a_cuda_gpu_reads_the_clock_after_torch_cuda_synchronize():
    clock = FakeClock()
    fake_torch = TorchOnAMadeUpGPU(clock)
    shared_waits = []
    namespace = {**vars(nb), "device": torch.device("cuda"), "FAST": True, "torch": fake_torch,
                 "time": clock, "synchronize": lambda device: shared_waits.append(torch.device(device))}
    printed = run_cell("01", "sync-demo", namespace)
    assert namespace["size"] == 4 * 512  # a GPU gets matrices four times larger than the CPU's
    assert fake_torch.devices == [torch.device("cuda")] * 2  # both made on the device measured
    assert shared_waits == [torch.device("cuda")]  # before the clock starts: nothing left to do
    assert fake_torch.waited == ["torch.cuda.synchronize()"]  # the lesson's call, after the product
    assert namespace["returned_s"] == 0 and namespace["finished_s"] == pytest.approx(0.08)
    assert printed.startswith("a @ b returned after 0.000 ms and was done after 80.000 ms: a clock read "
                              "without waiting would have made the GPU")


def test_step_4_on_a_mac_waits_with_the_setup_cells_synchronize():
    clock = FakeClock()
    waits = []

    def synchronize(device):  # stands in for torch.mps.synchronize(): 30 ms of work left
        waits.append(torch.device(device))
        clock.now += 0.03

    namespace = {**vars(nb), "device": torch.device("mps"), "FAST": True,
                 "torch": TorchOnAMadeUpGPU(clock), "time": clock, "synchronize": synchronize}
    printed = run_cell("01", "sync-demo", namespace)
    assert waits == [torch.device("mps")] * 2 and namespace["finished_s"] == pytest.approx(0.03)
    assert "would have made the GPU" in printed


def test_step_4_on_the_cpu_runs_for_real_and_says_the_times_agree():
    namespace = {**vars(nb), "device": torch.device("cpu"), "FAST": True}
    printed = run_cell("01", "sync-demo", namespace)
    assert namespace["size"] == 512 and namespace["product"].shape == (512, 512)
    assert 0 < namespace["returned_s"] <= namespace["finished_s"]
    assert "on the CPU the call does the work before it returns" in printed


class RecordingTimer:
    """Stands in for torch.utils.benchmark.Timer: notes how it is built and reads its clock twice."""
    made = []

    def __init__(self, stmt, globals, timer, num_threads):
        RecordingTimer.made.append({"stmt": stmt, "globals": globals, "num_threads": num_threads})
        self.timer = timer

    def blocked_autorange(self, min_run_time):
        RecordingTimer.made[-1]["min_run_time"] = min_run_time
        self.timer(), self.timer()  # the start and the end of a measurement
        return types.SimpleNamespace(median=0.5)


@pytest.mark.parametrize("device, synchronize", [(torch.device("cuda"), "torch.cuda.synchronize"),
                                                 (torch.device("mps"), "torch.mps.synchronize")])
def test_step_5_times_a_gpu_on_a_clock_that_synchronizes_that_gpu(monkeypatch, device, synchronize):
    """What a CPU cannot show: both matrices are made on the device measured, and the Timer gets a
    clock that waits for that device at every reading (stand-ins for torch's own functions)."""
    RecordingTimer.made.clear()
    made_on, waited = [], []

    def randn(*size, device=None):
        made_on.append(torch.device(device))
        return torch.empty(*size, device="meta")

    monkeypatch.setattr(torch, "randn", randn)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)  # a laptop's; the tests run on one
    monkeypatch.setattr(torch.cuda, "synchronize",
                        lambda device=None: waited.append("torch.cuda.synchronize"))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: waited.append("torch.mps.synchronize"))
    monkeypatch.setattr(nb.benchmark, "Timer", RecordingTimer)
    gflops = nb.matmul_gflops(device, 1024, 1.0)
    assert made_on == [device, device]
    assert waited == [synchronize, synchronize]  # each reading of the clock waits for that device
    [timer] = RecordingTimer.made
    assert timer["stmt"] == "a @ b" and set(timer["globals"]) == {"a", "b"}
    assert timer["num_threads"] == 4 and timer["min_run_time"] == 1.0
    assert gflops == pytest.approx(2 * 1024**3 / 0.5 / 1e9)


def fake_matmul_gflops(measured):
    """Stands in for matmul_gflops: {device type: GFLOP/s}; notes each (device, size) asked for."""
    asked = []

    def matmul_gflops(on_device, size, min_run_time):
        asked.append((str(on_device), size))
        return measured[torch.device(on_device).type]
    return matmul_gflops, asked


@pytest.mark.gpu_branch("01", "cell matmul-run: device.type == 'cpu'")
@pytest.mark.parametrize("device_type", ["cuda", "mps"])
def test_step_5_on_a_gpu_measures_it_on_a_larger_matrix_and_says_how_many_times(device_type):
    matmul_gflops, asked = fake_matmul_gflops({"cpu": 90.0, device_type: 7200.0})
    namespace = {**vars(nb), "device": torch.device(device_type), "matmul_gflops": matmul_gflops,
                 "MATMUL_SIZE": 512, "MIN_RUN_SECONDS": 0.2}
    printed = run_cell("01", "matmul-run", namespace)
    assert asked == [("cpu", 512), (device_type, 2048)]
    assert namespace["speed"] == {"cpu": 90.0, device_type: 7200.0}
    assert printed.startswith(f"{device_type}: 80 times the CPU's GFLOP/s")


def test_step_5_without_a_gpu_measures_the_cpu_only():
    matmul_gflops, asked = fake_matmul_gflops({"cpu": 90.0})
    namespace = {**vars(nb), "device": torch.device("cpu"), "matmul_gflops": matmul_gflops,
                 "MATMUL_SIZE": 512, "MIN_RUN_SECONDS": 0.2}
    printed = run_cell("01", "matmul-run", namespace)
    assert asked == [("cpu", 512)] and namespace["speed"] == {"cpu": 90.0}
    assert printed.startswith("No GPU, so one bar")


# --- Step 6 and the record --------------------------------------------------------------------------------

def test_step_6_is_skipped_with_a_message_without_fastai(monkeypatch):
    monkeypatch.setitem(sys.modules, "fastai", None)  # `import fastai...` now raises ImportError
    monkeypatch.setitem(sys.modules, "fastai.torch_core", None)
    printed = run_cell("01", "fastai-device", {"UNAVAILABLE": {"fastai"}, "device": torch.device("cpu"),
                                               "torch": torch})
    assert printed.startswith("Step 6 skipped: fastai")


@pytest.mark.parametrize("fastai_device, device, verdict", [
    # fastai's default_device() on a CUDA GPU: torch.device(torch.cuda.current_device()), i.e. cuda:0
    (torch.device(0), torch.device("cuda"), "the same kind"),
    (torch.device("cpu"), torch.device("mps"), "a DIFFERENT kind"),  # e.g. defaults.use_cuda = False
])
def test_step_6_compares_fastais_default_device_with_the_notebooks(monkeypatch, fastai_device, device,
                                                                  verdict):
    torch_core = types.ModuleType("fastai.torch_core")
    torch_core.default_device = lambda: fastai_device
    monkeypatch.setitem(sys.modules, "fastai", types.ModuleType("fastai"))
    monkeypatch.setitem(sys.modules, "fastai.torch_core", torch_core)
    printed = run_cell("01", "fastai-device", {"UNAVAILABLE": set(), "device": device, "torch": torch})
    assert printed == (f"fastai's default device: {fastai_device} | this notebook's device: {device} | "
                       f"{verdict}\n")


@pytest.mark.parametrize("machine, expected", [
    ("T4", {"gpus": ["Tesla T4"], "cuda_build": "13.0", "matmul_size": 2048,
            "matmul_gflops": {"cpu": 88, "cuda": 4568}, "product_ms": {"returned": 0.021, "done": 120.0}}),
    ("CPU", {"gpus": [], "cuda_build": "13.0", "matmul_size": 512, "matmul_gflops": {"cpu": 88},
             "product_ms": {"returned": 16.012, "done": 16.2}}),
])
def test_the_core_reports_the_figures_it_measured(monkeypatch, machine, expected):
    """Issue 32: one report_figures call with what the core measured (tools/gpu_run.py records it)."""
    on_t4 = machine == "T4"
    stand_in_torch_cuda(monkeypatch, GPU_MACHINES["Colab T4"] if on_t4 else None)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    reported = []
    namespace = {**vars(nb), "report_figures": lambda fallback=None, **figures: reported.append(
                     (fallback, figures)),
                 "speed": {"cpu": 87.6, "cuda": 4567.8} if on_t4 else {"cpu": 87.6},
                 "MATMUL_SIZE": 2048 if on_t4 else 512,
                 "returned_s": 0.0000214 if on_t4 else 0.0160123, "finished_s": 0.12 if on_t4 else 0.0162}
    run_cell("01", "record-figures", namespace)
    assert reported == [(None, expected)]


# --- Going deeper A: the GPU table ---------------------------------------------------------------------

@pytest.mark.gpu_branch("01", "cell gpu-table: facts['gpus']")
@pytest.mark.gpu_branch("01", "cell gpu-table: device.type == 'mps'")
def test_going_deeper_a_shows_a_table_of_gpus_on_a_t4_and_says_why_not_without_one():
    shown = []
    t4 = {"index": 0, "name": "Tesla T4", "capability": "7.5", "arch": "sm_75", "memory_GiB": 14.7}
    namespace = {**vars(nb), "device": torch.device("cuda"), "display": shown.append,
                 "gather_facts": lambda: facts(gpus=[t4])}
    run_cell("01", "gpu-table", namespace)
    [table] = shown
    assert table.loc[0].to_dict() == {key: value for key, value in t4.items() if key != "index"}
    for device_type, start in (("mps", "The Apple GPU is not a CUDA device"), ("cpu", "PyTorch sees no GPU")):
        namespace = {**vars(nb), "device": torch.device(device_type), "gather_facts": lambda: facts()}
        assert run_cell("01", "gpu-table", namespace).startswith(start)


# --- Going deeper D: measured speed against the datasheet ------------------------------------------

@pytest.mark.gpu_branch("01", "cell datasheet-comparison: device.type == 'cuda'")
def test_datasheet_cell_compares_step_5s_speed_with_the_peak_of_the_gpu_the_device_names(monkeypatch):
    # torch.cuda.get_device_name(device) on a V100 module; 12.56 TFLOP/s measured in Step 5. Which peak
    # the datasheet table gives which name is tested in tests/shared_cells/test_datasheet.py.
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100-SXM2-16GB")
    peak, page = nb.published_peak("Tesla V100-SXM2-16GB")
    namespace = {**vars(nb), "device": torch.device("cuda"), "speed": {"cuda": 12560.0}}
    printed = run_cell("01", "datasheet-comparison", namespace)
    row = namespace["comparison"].iloc[0]
    assert row["published_TFLOP_per_s"] == peak and row["share_of_peak_pct"] == round(100 * 12.56 / peak)
    assert printed == f"Published peak from {page}\n"


def test_datasheet_cell_names_a_gpu_it_does_not_know_and_says_why_without_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Made-up GPU 9000")
    namespace = {**vars(nb), "device": torch.device("cuda"), "speed": {"cuda": 12560.0}}
    printed = run_cell("01", "datasheet-comparison", namespace)
    assert namespace["comparison"] is None
    assert "Made-up GPU 9000: not in this notebook's small datasheet table" in printed
    namespace = {**vars(nb), "device": torch.device("cpu"), "speed": {"cpu": 80.0}}
    printed = run_cell("01", "datasheet-comparison", namespace)
    assert namespace["comparison"] is None and printed.startswith("No NVIDIA or AMD GPU")


# --- Going deeper E: copies from CPU memory to the device ------------------------------------------------

@pytest.mark.gpu_branch("01", "cell copy-speed: device.type == 'cuda'")
def test_going_deeper_e_on_a_cuda_gpu_copies_pageable_and_pinned_memory(monkeypatch):
    copied = []

    def pin_memory(tensor):  # stands in for Tensor.pin_memory(): a page-locked copy
        pinned = tensor.clone()
        pinned.is_pinned = lambda: True
        return pinned

    def copy_gbps(source, target_device, min_run_time):  # stands in for the Timer: pinned twice as fast
        copied.append((source.is_pinned(), str(target_device), min_run_time))
        return 24.0 if source.is_pinned() else 12.0

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    namespace = {**vars(nb), "device": torch.device("cuda"), "copy_gbps": copy_gbps, "COPY_MEGABYTES": 1,
                 "MIN_RUN_SECONDS": 0.2}
    printed = run_cell("01", "copy-speed", namespace)
    assert copied == [(False, "cuda", 0.2), (True, "cuda", 0.2)]
    assert namespace["copies"] == {"pageable CPU memory -> GPU": 12.0, "pinned CPU memory -> GPU": 24.0}
    assert printed.strip() == "Pinned memory copies 2.0 times as fast as pageable memory."


@pytest.mark.gpu_branch("01", "cell copy-speed: device.type != 'cpu'")
@pytest.mark.parametrize("device_type, row", [("mps", "CPU memory -> mps"),
                                              ("cpu", "CPU RAM -> CPU RAM (stand-in, not a GPU copy)")])
def test_going_deeper_e_on_a_mac_and_on_a_cpu(device_type, row):
    copied = []
    namespace = {**vars(nb), "device": torch.device(device_type), "COPY_MEGABYTES": 1,
                 "MIN_RUN_SECONDS": 0.2,
                 "copy_gbps": lambda source, target, seconds: copied.append(str(target)) or 5.0}
    run_cell("01", "copy-speed", namespace)
    assert list(namespace["copies"]) == [row] and copied == [device_type]
