"""Made-up machines for notebook 01's tests (tests/notebooks/test_01_*.py): the facts its diagnosis reads
(facts(), shaped like gather_facts()'s), and torch.cuda as on a Colab T4, on an AMD MI250 or on a machine
without a GPU (stand_in_torch_cuda). The diagnosis' tests and the tests of the cells that run on each kind
of machine both use them."""
import os
import types

import torch

CUDA13_ARCHES = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
# torch.cuda.get_arch_list() of a ROCm wheel (torch 2.7.1+rocm6.3): AMD architecture names, no "sm_".
ROCM_ARCHES = ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101",
               "gfx1102", "gfx1200", "gfx1201"]
LINUX_PYTHON = "/home/ada/gpu-tutorials/.venv/bin/python"


def facts(**changes):
    """Facts of a Linux machine with a CUDA 13.0 wheel and no GPU, changed by `changes`."""
    base = {
        "os": "Linux", "machine": "x86_64", "macos_version": None, "python": LINUX_PYTHON,
        "torch_version": "2.14.1+cu130", "cuda_build": "13.0", "hip_build": None,
        "cudnn_version": 92400, "arch_list": CUDA13_ARCHES, "cuda_visible_devices": None,
        "hip_visible_devices": None, "rocr_visible_devices": None, "amd_driver_loaded": False,
        "user_groups": None, "cuda_available": False, "gpu_count": 0, "current_gpu": None, "gpus": [],
        "mps_built": False, "mps_available": False, "nvidia_smi": None,
    }
    return {**base, **changes}


# What torch answers on each machine, as torch/cuda/__init__.py, torch/backends/cudnn/__init__.py and
# torch/csrc/cuda/shared/cudnn.cpp give it: get_device_properties() has name, major, minor, total_memory
# and, on ROCm, gcnArchName (left out of the T4's: the notebook must not read it there);
# current_device() is an int and raises without a GPU; cudnn.version() is cuDNN's cudnnGetVersion()
# (9.10.2 -> 91002), or on ROCm MIOpen's MAJOR * 1000000 + MINOR * 1000 + PATCH (3.3.0 -> 3003000).
GPU_MACHINES = {
    "Colab T4": dict(cuda="13.0", hip=None, cudnn=91002, arches=CUDA13_ARCHES, kfd=False,
                     properties=types.SimpleNamespace(name="Tesla T4", major=7, minor=5,
                                                      total_memory=15828320256)),
    "AMD MI250": dict(cuda=None, hip="6.3.42131-fa1d09cbd", cudnn=3003000, arches=ROCM_ARCHES, kfd=True,
                      properties=types.SimpleNamespace(name="AMD Instinct MI250X/MI250", major=9, minor=0,
                                                       total_memory=68702699520,
                                                       gcnArchName="gfx90a:sramecc+:xnack-")),
}


def stand_in_torch_cuda(monkeypatch, machine):
    """torch.cuda, torch.version and cuDNN as on `machine` (a GPU_MACHINES entry, or None: no GPU)."""
    if machine is None:
        def no_gpu():
            raise RuntimeError("No CUDA GPUs are available")  # what _lazy_init raises without one
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
        monkeypatch.setattr(torch.cuda, "current_device", no_gpu)
        return
    properties = machine["properties"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: properties)
    monkeypatch.setattr(torch.cuda, "get_device_capability",
                        lambda device=None: (properties.major, properties.minor))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: properties.name)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(machine["arches"]))
    monkeypatch.setattr(torch.version, "cuda", machine["cuda"])
    monkeypatch.setattr(torch.version, "hip", machine["hip"])
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: machine["cudnn"])
    real_exists = os.path.exists
    kfd = os.path.join(os.sep, "dev", "kfd")  # AMD's compute driver, loaded on the ROCm machine
    monkeypatch.setattr(os.path, "exists", lambda path: machine["kfd"] if path == kfd else real_exists(path))
