"""Notebook 01's helpers and cells: the diagnosis (Going deeper A) called with made-up facts and made-up
nvidia-smi output, the timing of Steps 4 and 5, every GPU, Mac, AMD and Windows branch run with stand-ins
shaped like torch's API, and each exercise's check given a likely wrong answer."""
import os
import stat
import sys
import time
import textwrap
import types

import pytest
import torch

from support.notebook_code import load_helpers, run_cell

nb = load_helpers("01")


CUDA13_ARCHES = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
# torch.cuda.get_arch_list() of a ROCm wheel (torch 2.7.1+rocm6.3): AMD architecture names, no "sm_".
ROCM_ARCHES = ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101",
               "gfx1102", "gfx1200", "gfx1201"]
LINUX_PYTHON = "/home/ada/gpu-tutorials/.venv/bin/python"

# Plain `nvidia-smi`, first lines, as printed by a current driver (R580, CUDA 13) ...
NEW_HEADER = """\
Mon Nov 17 09:12:44 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.82.07              Driver Version: 580.82.07      CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  Tesla T4                       Off |   00000000:00:04.0 Off |                    0 |
| N/A   37C    P8              9W /   70W |       0MiB /  15360MiB |      0%      Default |
|                                         |                        |                  N/A |
+-----------------------------------------+------------------------+----------------------+
"""
# ... and by an R470 driver (the layout before R530), whose nvidia-smi does not know compute_cap.
OLD_HEADER = """\
Tue Nov 22 10:03:51 2022
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 470.82.01    Driver Version: 470.82.01    CUDA Version: 11.4     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|                               |                      |               MIG M. |
|===============================+======================+======================|
|   0  Tesla T4            Off  | 00000000:00:04.0 Off |                    0 |
| N/A   36C    P8     9W /  70W |      0MiB / 15109MiB |      0%      Default |
|                               |                      |                  N/A |
+-------------------------------+----------------------+----------------------+
"""
OLD_QUERY_ERROR = 'Field "compute_cap" is not a valid field to query.\n\n'
T4_UUID = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"


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


def smi(driver="580.65.06", cuda="13.0", gpus=("Tesla T4",)):
    """A made-up nvidia-smi report, shaped like read_nvidia_smi's."""
    return {"driver_version": driver, "cuda_version": cuda, "report": "", "query_error": None,
            "gpus": [{"index": index, "uuid": f"GPU-{index}aaaaaaa-d72c-4106-c12f-20bd9faed9f6",
                      "name": name, "memory": "15360 MiB"} for index, name in enumerate(gpus)]}


def gpu(name="Tesla T4", capability="7.5", arch="sm_75", memory=14.6):
    return {"index": 0, "name": name, "capability": capability, "arch": arch, "memory_GiB": memory}


def only(findings):
    assert len(findings) == 1, findings
    return findings[0]


def fix_lines(result):
    return [line.strip() for line in result["fix"].splitlines()]


@pytest.mark.gpu_branch("01", "gpu_ready: not (facts['cuda_available'] and facts['gpu_count'] > 0)")
def test_all_good_on_a_t4():
    result = only(nb.diagnose(facts(cuda_available=True, gpu_count=1, nvidia_smi=smi(), gpus=[gpu()])))
    assert result["status"] == "ok"
    assert "Tesla T4" in result["title"]


@pytest.mark.gpu_branch("01", "cpu_only_wheel: facts['os'] == 'Windows'")
@pytest.mark.gpu_branch("01", "python_command: facts['os'] == 'Windows'")
def test_cpu_only_wheel_on_windows_gives_two_powershell_safe_lines_with_the_kernels_python():
    python = r"C:\Program Files\Python313\python.exe"
    result = only(nb.diagnose(facts(os="Windows", machine="AMD64", python=python, cuda_build=None,
                                    arch_list=[])))
    assert result["status"] == "problem"
    assert "CPU-only" in result["title"]
    assert "On Windows" in result["why"] and "PyPI" in result["why"]
    assert result["fix"].startswith("If this machine has an NVIDIA GPU")
    assert "&&" not in result["fix"]  # Windows PowerShell 5.1 rejects it
    lines = fix_lines(result)
    uninstall = f'& "{python}" -m pip uninstall -y torch torchvision'
    install = (f'& "{python}" -m pip install torch torchvision '
               "--index-url https://download.pytorch.org/whl/cu130")
    assert lines[lines.index(uninstall) + 1] == install


def test_cpu_only_wheel_on_linux_does_not_blame_windows_and_quotes_a_path_with_spaces():
    result = only(nb.diagnose(facts(cuda_build=None, arch_list=[], python="/opt/my env/bin/python")))
    assert result["status"] == "problem"
    assert "Windows" not in result["why"]
    assert ("'/opt/my env/bin/python' -m pip install torch torchvision --index-url "
            "https://download.pytorch.org/whl/cu130") in fix_lines(result)
    assert "python3 -m pip" not in result["fix"] and "&&" not in result["fix"]


@pytest.mark.gpu_branch("01", "cpu_only_wheel: facts['cuda_build'] is not None")
def test_cuda_visible_devices_hiding_the_gpu():
    result = only(nb.diagnose(facts(cuda_visible_devices="", nvidia_smi=smi())))
    assert result["status"] == "problem"
    assert "CUDA_VISIBLE_DEVICES" in result["title"]
    assert "1 GPU(s)" in result["why"]
    assert "unset CUDA_VISIBLE_DEVICES" in result["fix"]
    assert "first CUDA call" in result["fix"] and "not at `import torch`" in result["fix"]


def test_cuda_visible_devices_minus_one_without_nvidia_smi():
    result = only(nb.diagnose(facts(cuda_visible_devices="-1")))
    assert "CUDA_VISIBLE_DEVICES='-1'" in result["title"]


def test_cuda_visible_devices_naming_a_gpu_the_driver_does_not_list():
    result = only(nb.diagnose(facts(cuda_visible_devices="1", nvidia_smi=smi())))
    assert result["title"] == "CUDA_VISIBLE_DEVICES='1' hides the GPU from PyTorch"
    assert "unset CUDA_VISIBLE_DEVICES" in result["fix"]
    unknown_uuid = only(nb.diagnose(facts(cuda_visible_devices="GPU-ffffffff", nvidia_smi=smi())))
    assert "CUDA_VISIBLE_DEVICES='GPU-ffffffff'" in unknown_uuid["title"]


@pytest.mark.parametrize("value, expected", [
    ("0", 1), ("0,1", 2), ("1", 1), ("2", 0), ("", 0), ("-1", 0), ("0,-1,1", 1), ("0,0", 0), ("2,0", 0),
    ("GPU-0aaa", 1), ("GPU-ffff", 0), ("MIG-1b2c3d4e/1/0", None),
])
def test_visible_gpu_count_follows_cuda(value, expected):
    assert nb.visible_gpu_count(value, smi(gpus=("Tesla T4", "Tesla T4"))["gpus"]) == expected


def test_slurm_cuda_visible_devices_0_with_an_old_driver_blames_the_driver():
    # SLURM and many containers set CUDA_VISIBLE_DEVICES=0: a valid index, not the cause here.
    result = only(nb.diagnose(facts(cuda_visible_devices="0", nvidia_smi=smi(driver="470.82.01",
                                                                              cuda="11.4"))))
    assert result["title"] == "The NVIDIA driver (R470) is too old for this CUDA 13.0 wheel"
    assert "Update the NVIDIA driver to R580 or newer" in result["fix"]
    assert "CUDA_VISIBLE_DEVICES" not in result["title"]


def test_cuda_visible_devices_0_with_a_good_driver_is_not_blamed():
    result = only(nb.diagnose(facts(cuda_visible_devices="0", nvidia_smi=smi())))
    assert "CUDA_VISIBLE_DEVICES" not in result["title"]
    assert "for a reason this check does not know" in result["title"]
    assert f"{LINUX_PYTHON} -c" in result["fix"]


@pytest.mark.gpu_branch(
    "01", "nvidia_gpu_not_in_wheel: not (facts['cuda_available'] and facts['cuda_build'] and nvidia_arches)")
@pytest.mark.gpu_branch(
    "01", "nvidia_gpu_not_in_wheel: tuple((int(part) for part in gpu['capability'].split('.'))) < (7, 5)")
def test_p100_with_a_cuda13_wheel_needs_the_legacy_build():
    p100 = gpu("Tesla P100-PCIE-16GB", "6.0", "sm_60", 15.9)
    result = only(nb.diagnose(facts(cuda_available=True, gpu_count=1, gpus=[p100], nvidia_smi=smi())))
    assert result["status"] == "problem"
    assert "sm_60" in result["title"]
    assert "no kernel image" in result["why"]
    assert '"torch==2.14.*"' in result["fix"] and "whl/cu126" in result["fix"]
    assert "T4" in result["fix"]


def test_new_gpu_missing_from_an_old_wheel_gets_the_current_build():
    blackwell = gpu("NVIDIA GeForce RTX 5090", "12.0", "sm_120", 31.4)
    old_wheel = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    result = only(nb.diagnose(facts(cuda_build="12.6", arch_list=old_wheel, cuda_available=True,
                                    gpu_count=1, gpus=[blackwell], nvidia_smi=smi())))
    assert result["status"] == "problem"
    assert "whl/cu130" in result["fix"]


def test_driver_too_old_for_the_wheel():
    result = only(nb.diagnose(facts(nvidia_smi=smi(driver="535.104.05", cuda="12.2"))))
    assert result["status"] == "problem"
    assert "R535" in result["title"] and "too old" in result["title"]
    assert "R580" in result["why"]
    assert "Update the NVIDIA driver to R580" in result["fix"] and "whl/cu126" in result["fix"]


@pytest.mark.gpu_branch("01", "driver_too_old: not facts['cuda_build'] or not smi.get('driver_version')")
def test_a_cuda11_driver_is_not_offered_the_cuda12_wheel():
    result = only(nb.diagnose(facts(nvidia_smi=smi(driver="470.82.01", cuda="11.4"))))
    assert "R470" in result["title"]
    assert "whl/cu126" not in result["fix"]
    assert '"torch==2.7.*"' in result["fix"] and "whl/cu118" in result["fix"]


def test_recent_driver_is_not_called_too_old():
    assert nb.driver_too_old(facts(nvidia_smi=smi(driver="580.95.05"))) is None
    assert nb.driver_too_old(facts(cuda_build="12.6", nvidia_smi=smi(driver="525.60.13"))) is None
    assert nb.driver_too_old(facts(cuda_build="12.6", nvidia_smi=smi(driver="470.82.01"))) == (470, 525)


def test_no_driver_at_all_which_is_a_machine_without_a_gpu():
    result = only(nb.diagnose(facts()))
    assert result["title"] == "No NVIDIA driver found"
    assert "R580" in result["fix"] and "Colab" in result["fix"] and "Kaggle" in result["fix"]


# AMD GPUs: ROCm wheels list gfx names; the NVIDIA architecture check must not read them.

@pytest.mark.gpu_branch("01", "gpu_ready: facts['hip_build']")
def test_rocm_wheel_with_a_visible_mi250_is_ready_and_does_not_crash():
    mi250 = gpu("AMD Instinct MI250X/MI250", "9.0", "gfx90a:sramecc+:xnack-", 64.0)
    result = only(nb.diagnose(facts(cuda_build=None, hip_build="6.3.42131-fa1d09cbd",
                                    arch_list=ROCM_ARCHES, cuda_available=True, gpu_count=1,
                                    gpus=[mi250], amd_driver_loaded=True)))
    assert result["status"] == "ok"
    assert result["title"] == "Ready: PyTorch uses 1 GPU(s): AMD Instinct MI250X/MI250"
    assert "ROCm 6.3" in result["why"]


@pytest.mark.gpu_branch(
    "01", "amd_gpu_not_in_wheel: not (facts['cuda_available'] and facts['hip_build'] and built)")
def test_rocm_wheel_without_the_gpus_architecture():
    rx6700 = gpu("AMD Radeon RX 6700 XT", "10.3", "gfx1031", 12.0)
    result = only(nb.diagnose(facts(cuda_build=None, hip_build="6.3.42131-fa1d09cbd",
                                    arch_list=ROCM_ARCHES, cuda_available=True, gpu_count=1,
                                    gpus=[rx6700], amd_driver_loaded=True)))
    assert result["title"] == "AMD Radeon RX 6700 XT (gfx1031) is not in this ROCm wheel"
    assert "invalid device function" in result["why"]
    assert "compatibility matrix" in result["fix"]


@pytest.mark.parametrize("arches", [ROCM_ARCHES, ["gfx90a:sramecc+:xnack-", "gfx942"]])
def test_arch_supported_ignores_amd_names(arches):
    assert nb.arch_supported("9.0", arches) is False
    assert nb.arch_supported("7.5", arches + ["sm_75"]) is True


@pytest.mark.gpu_branch("01", "rocm_without_gpu: not facts['hip_build']")
def test_rocm_wheel_without_a_gpu_checks_driver_groups_and_variables():
    rocm = facts(cuda_build=None, hip_build="6.3.42131-fa1d09cbd", arch_list=ROCM_ARCHES)
    no_driver = only(nb.diagnose(rocm))
    assert no_driver["title"] == "ROCm build of PyTorch, but AMD's GPU driver is not loaded"
    assert "rocm-smi" in no_driver["fix"] and "--device=/dev/kfd" in no_driver["fix"]

    groups = only(nb.diagnose({**rocm, "amd_driver_loaded": True, "user_groups": ["ada", "sudo"]}))
    assert groups["title"] == "ROCm build of PyTorch, but your user may not open the GPU"
    assert "usermod -a -G render,video" in groups["fix"] and "log out" in groups["fix"]

    hidden = only(nb.diagnose({**rocm, "amd_driver_loaded": True, "hip_visible_devices": ""}))
    assert hidden["title"] == "ROCm build of PyTorch, but HIP_VISIBLE_DEVICES='' hides the GPU"
    assert "unset HIP_VISIBLE_DEVICES" in hidden["fix"]

    other = only(nb.diagnose({**rocm, "amd_driver_loaded": True,
                              "user_groups": ["ada", "render", "video"]}))
    assert other["title"] == "ROCm build of PyTorch, but no AMD GPU is visible"
    assert "rocm-smi" in other["fix"]


# Macs

@pytest.mark.gpu_branch("01", "mps_ready: not facts['mps_available']")
def test_apple_silicon_with_mps_is_ready():
    result = only(nb.diagnose(facts(os="Darwin", machine="arm64", macos_version="15.5",
                                    cuda_build=None, arch_list=[], mps_built=True, mps_available=True)))
    assert result["status"] == "ok" and "MPS" in result["title"]


def test_apple_silicon_on_macos_13_needs_macos_14_for_mps():
    result = only(nb.diagnose(facts(os="Darwin", machine="arm64", macos_version="13.6.7",
                                    cuda_build=None, arch_list=[], mps_built=True)))
    assert result["title"] == "macOS 13.6.7 is too old for PyTorch's Apple GPU device (mps)"
    assert "macOS 14" in result["why"]
    assert "Update macOS to 14" in result["fix"]


@pytest.mark.gpu_branch("01", "mac_without_mps: facts['os'] != 'Darwin'")
def test_intel_mac_points_to_conda_forge():
    result = only(nb.diagnose(facts(os="Darwin", machine="x86_64", macos_version="13.6.7",
                                    cuda_build=None, arch_list=[], mps_built=False)))
    assert result["title"] == "CPU only: PyTorch has no GPU support on an Intel Mac"
    assert "2.2.2" in result["why"]
    assert "conda-forge" in result["fix"] and "Rosetta" in result["fix"]


# nvidia-smi: pure parsers on text shaped like real output, then the real subprocess.

def test_parse_smi_header_new_and_old_layouts():
    assert nb.parse_smi_header(NEW_HEADER) == {"driver_version": "580.82.07", "cuda_version": "13.0"}
    assert nb.parse_smi_header(OLD_HEADER) == {"driver_version": "470.82.01", "cuda_version": "11.4"}
    # A snap or container can ship an nvidia-smi older than the driver: read "Driver Version".
    mixed = "| NVIDIA-SMI 470.256.02   Driver Version: 580.95.05    CUDA Version: 13.0     |"
    assert nb.parse_smi_header(mixed)["driver_version"] == "580.95.05"
    assert nb.parse_smi_header("garbage") == {"driver_version": None, "cuda_version": None}


def test_parse_smi_query():
    text = (f"0, {T4_UUID}, Tesla T4, 15360 MiB\n"
            "1, GPU-1d2e3f40-aaaa-bbbb-cccc-000000000001, NVIDIA A100-SXM4-40GB, 40960 MiB\n")
    gpus = nb.parse_smi_query(text)
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0] == {"index": 0, "uuid": T4_UUID, "name": "Tesla T4", "memory": "15360 MiB"}
    assert gpus[1]["name"] == "NVIDIA A100-SXM4-40GB"
    assert nb.parse_smi_query(OLD_QUERY_ERROR) == []


def fake_nvidia_smi(tmp_path, monkeypatch, script):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\n" + textwrap.dedent(script))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_read_nvidia_smi_on_an_old_r470_driver_reports_an_old_driver(tmp_path, monkeypatch):
    # R470's nvidia-smi answers the plain call but rejects compute_cap with exit code 2.
    (tmp_path / "header.txt").write_text(OLD_HEADER)
    fake_nvidia_smi(tmp_path, monkeypatch, f"""\
        case "$1" in
          "") cat "{tmp_path}/header.txt" ;;
          *compute_cap*) printf 'Field "compute_cap" is not a valid field to query.\\n\\n'; exit 2 ;;
          --query-gpu=*) echo "0, {T4_UUID}, Tesla T4, 15109 MiB" ;;
          *) exit 2 ;;
        esac
        """)
    report = nb.read_nvidia_smi()
    assert report["driver_version"] == "470.82.01" and report["cuda_version"] == "11.4"
    assert report["gpus"][0]["name"] == "Tesla T4" and report["gpus"][0]["uuid"] == T4_UUID
    result = only(nb.diagnose(facts(nvidia_smi=report)))
    assert result["title"] == "The NVIDIA driver (R470) is too old for this CUDA 13.0 wheel"
    assert "does not answer" not in result["title"]


def test_read_nvidia_smi_parses_a_current_driver(tmp_path, monkeypatch):
    (tmp_path / "header.txt").write_text(NEW_HEADER)
    fake_nvidia_smi(tmp_path, monkeypatch, f"""\
        case "$1" in
          "") cat "{tmp_path}/header.txt" ;;
          --query-gpu=*) echo "0, {T4_UUID}, Tesla T4, 15360 MiB" ;;
          *) exit 2 ;;
        esac
        """)
    report = nb.read_nvidia_smi()
    assert report["driver_version"] == "580.82.07"
    assert report["cuda_version"] == "13.0"
    assert report["gpus"][0]["name"] == "Tesla T4" and report["query_error"] is None


def test_a_failing_gpu_query_is_read_as_an_old_driver(tmp_path, monkeypatch):
    header = "| NVIDIA-SMI 4xx   Driver Version: unknown |\n"  # no version a reader can use
    (tmp_path / "header.txt").write_text(header)
    fake_nvidia_smi(tmp_path, monkeypatch, f"""\
        case "$1" in
          "") cat "{tmp_path}/header.txt" ;;
          *) printf 'Field "uuid" is not a valid field to query.\\n\\n'; exit 2 ;;
        esac
        """)
    report = nb.read_nvidia_smi()
    assert "not a valid field" in report["query_error"]
    result = only(nb.diagnose(facts(nvidia_smi=report)))
    assert result["title"] == "The NVIDIA driver looks too old: nvidia-smi rejects a standard query"
    assert "Update the NVIDIA driver to R580 or newer" in result["fix"]


def test_read_nvidia_smi_reports_a_failing_driver(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, """\
        echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        exit 9
        """)
    report = nb.read_nvidia_smi()
    assert "couldn't communicate" in report["error"]
    assert "does not answer" in only(nb.diagnose(facts(nvidia_smi=report)))["title"]


@pytest.mark.parametrize("capability, arches, expected", [
    ("8.6", ["sm_80"], True),           # same generation, newer minor: the sm_80 code runs
    ("8.0", ["sm_86"], False),          # older minor cannot run newer code
    ("6.0", CUDA13_ARCHES, False),      # P100 with a CUDA 13 wheel
    ("12.0", ["sm_90", "compute_90"], True),  # PTX is compiled by the driver for newer GPUs
    ("7.5", ["sm_90a"], False),
    ("9.0", ["sm_90a"], True),          # 'a' code runs on exactly that GPU
    ("10.3", ["sm_100a"], False),
])
def test_arch_supported(capability, arches, expected):
    assert nb.arch_supported(capability, arches) is expected


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


# --- every decision pinned at its edges ------------------------------------------------------
# Each test below sits on both sides of one threshold or condition of the diagnosis, so that a
# one-token change (< for <=, 7.0 for 7.5, "render" for "video", ...) makes one of them fail.

V100 = dict(name="Tesla V100-SXM2-16GB", capability="7.0", arch="sm_70", memory=15.8)
T4 = dict(name="Tesla T4", capability="7.5", arch="sm_75", memory=14.7)


def gpu_problem(wheel_arches, card, cuda_build="13.0"):
    """The finding for one NVIDIA GPU that PyTorch sees, with a wheel built for `wheel_arches`."""
    return only(nb.diagnose(facts(cuda_build=cuda_build, arch_list=wheel_arches, cuda_available=True,
                                  gpu_count=1, gpus=[gpu(**card)], nvidia_smi=smi())))


def test_v100_capability_7_0_with_a_cuda13_wheel_is_sent_to_the_last_wheel_built_for_it():
    result = gpu_problem(CUDA13_ARCHES, V100)  # CUDA 13 wheels start at sm_75
    assert result["title"] == "Tesla V100-SXM2-16GB (sm_70) is not in this wheel"
    assert '"torch==2.14.*"' in result["fix"] and "whl/cu126" in result["fix"]
    assert "whl/cu130" not in result["fix"]  # the CUDA 13 wheel has no code for a V100


def test_t4_capability_7_5_missing_from_a_wheel_is_sent_to_the_current_wheel_not_the_legacy_one():
    result = gpu_problem(["sm_80", "sm_86", "sm_90"], T4)  # a wheel that starts at sm_80
    assert result["title"] == "Tesla T4 (sm_75) is not in this wheel"
    assert "whl/cu130" in result["fix"] and "torch==2.14" not in result["fix"]
    assert "whl/cu126" not in result["fix"]


def test_v100_with_the_legacy_cuda12_6_wheel_is_ready():
    legacy_arches = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    assert gpu_problem(legacy_arches, V100, cuda_build="12.6")["status"] == "ok"


@pytest.mark.parametrize("capability, arches, expected", [
    ("8.6", ["sm_86"], True), ("8.6", ["sm_87"], False),   # binary code: equal minor runs, newer not
    ("9.0", ["sm_80"], False), ("7.5", ["sm_80"], False),  # binary code: never across a major
    ("9.0", ["compute_90"], True), ("8.9", ["compute_90"], False),  # PTX: equal or newer GPU
    ("10.3", ["sm_100f"], True), ("10.0", ["sm_103f"], False),  # 'f': its family, minor up
    ("12.0", ["sm_100f"], False),
    ("10.0", ["sm_90a"], False), ("9.0", ["sm_90"], True),
    ("7.5", [], False),
])
def test_arch_supported_at_each_edge(capability, arches, expected):
    assert nb.arch_supported(capability, arches) is expected


@pytest.mark.parametrize("arch, parsed", [
    ("sm_75", ("sm", 7, 5, "")), ("sm_100", ("sm", 10, 0, "")), ("sm_120a", ("sm", 12, 0, "a")),
    ("compute_90", ("compute", 9, 0, "")), ("sm_100f", ("sm", 10, 0, "f")), ("gfx90a", None),
    ("sm_90x", None),
])
def test_parse_arch(arch, parsed):
    assert nb.parse_arch(arch) == parsed


@pytest.mark.parametrize("cuda_build, driver, expected", [
    ("13.0", "580.65.06", None), ("13.0", "580.00", None), ("13.0", "575.57.08", (575, 580)),
    ("12.6", "525.60.13", None), ("12.6", "520.61.05", (520, 525)),
    ("11.8", "450.80.02", None), ("11.8", "440.33.01", (440, 450)),
    ("14.0", "470.82.01", None),  # a CUDA major this table does not know: no claim
])
def test_driver_exactly_at_the_required_series_is_new_enough(cuda_build, driver, expected):
    assert nb.driver_too_old(facts(cuda_build=cuda_build, nvidia_smi=smi(driver=driver))) == expected


def test_driver_too_old_needs_a_cuda_wheel_and_a_driver_version():
    assert nb.driver_too_old(facts(cuda_build=None, nvidia_smi=smi(driver="470.82.01"))) is None
    assert nb.driver_too_old(facts(nvidia_smi=smi(driver=None))) is None
    assert nb.driver_too_old(facts(nvidia_smi=None)) is None


@pytest.mark.parametrize("driver, offered, not_offered", [
    ("575.57.08", "whl/cu126", "whl/cu118"),  # R525 and newer run the CUDA 12.6 wheels
    ("525.60.13", "whl/cu126", "whl/cu118"),
    ("520.61.05", "whl/cu118", "whl/cu126"),  # R450 to R520 run CUDA 11.8 only
    ("450.80.02", "whl/cu118", "whl/cu126"),
    ("440.33.01", "no PyTorch 2.6 or newer runs", "--index-url"),  # nothing left to install
])
def test_old_driver_offers_the_newest_wheel_that_driver_runs(driver, offered, not_offered):
    result = only(nb.diagnose(facts(nvidia_smi=smi(driver=driver, cuda="11.0"))))
    assert result["title"].startswith(f"The NVIDIA driver (R{driver.split('.')[0]}) is too old")
    assert result["fix"].startswith("Update the NVIDIA driver to R580 or newer")
    assert offered in result["fix"] and not_offered not in result["fix"]


def test_needed_branch_for_each_cuda_major_and_a_default():
    assert [nb.needed_branch(facts(cuda_build=build)) for build in ("11.8", "12.6", "13.0", "14.0")] == [
        450, 525, 580, 580]


# On Colab the driver may say "CUDA Version: 12.4" beside a CUDA 12.6 wheel, which reads like a
# contradiction; the line says why it is fine (NVIDIA's minor version compatibility, pytorch/pytorch#77528).
COMPATIBLE_MINOR = "a driver for CUDA 12.x runs builds of every CUDA 12.x version"


@pytest.mark.gpu_branch("01", "smi_summary: cuda_build is None")
@pytest.mark.parametrize("cuda_build, newest, verdict", [
    ("13.0", "13.0", "the driver is new enough."),  # the same version
    ("12.4", "12.6", "the driver is new enough."),  # an older minor version of the same major
    ("12.5", "12.6", "the driver is new enough."),
    ("12.6", "13.0", "the driver is new enough (drivers also run builds of older CUDA major versions)."),
    ("13.0", "12.9", "the driver is too old for it: a CUDA 13 build needs a driver for CUDA 13.x or newer"),
    ("13", "12.9", "the driver is too old for it"),  # a version without its minor part
])
def test_the_driver_line_compares_major_versions(cuda_build, newest, verdict):
    text = " ".join(nb.smi_summary({**smi(cuda=newest), "report": NEW_HEADER}, cuda_build).split())
    assert verdict in text and NEW_HEADER.strip().splitlines()[0] in text
    assert "minor version compatibility" not in text and "although" not in text


@pytest.mark.parametrize("cuda_build, newest", [("12.6", "12.4"), ("12.5", "12.4"), ("12.8", "12.2")])
def test_a_newer_minor_version_than_the_drivers_is_fine_and_the_line_says_why(cuda_build, newest):
    report = {**smi(driver="550.54.15", cuda=newest), "report": NEW_HEADER}
    lines = nb.smi_summary(report, cuda_build).splitlines()
    text = " ".join(" ".join(lines).split())
    assert (f"Driver 550.54.15 fully supports CUDA up to {newest}; this PyTorch wheel is a CUDA {cuda_build} "
            f"build: the driver is new enough, although {cuda_build} is newer than {newest}: "
            f"{COMPATIBLE_MINOR}, without the few features that need a newer driver (NVIDIA's minor version "
            "compatibility, "
            "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html).") in text
    assert "too old" not in text and all(len(line) <= 100 for line in lines)
    assert nb.driver_too_old(facts(cuda_build=cuda_build, nvidia_smi=smi(driver="550.54.15"))) is None


@pytest.mark.parametrize("version, parts", [("12.6", (12, 6)), ("13", (13, 0)), ("11.8.89", (11, 8)),
                                            ("12.10", (12, 10))])
def test_major_minor_reads_numbers_not_text(version, parts):
    assert nb.major_minor(version) == parts
    # read as numbers: 12.10 is newer than 12.9, which comparing text would get wrong
    assert "although 12.10 is newer than 12.9" in nb.driver_verdict("12.9", "12.10")


def test_smi_summary_without_a_cuda_wheel_without_a_cuda_field_and_with_a_rejected_query():
    assert "has no CUDA" in nb.smi_summary({**smi(), "report": NEW_HEADER}, None)
    no_field = nb.smi_summary({**smi(cuda=None), "report": R384_HEADER}, "13.0")
    assert "new enough" not in no_field and "too old" not in no_field
    rejected = nb.smi_summary({**smi(), "report": OLD_HEADER, "query_error": OLD_QUERY_ERROR}, "13.0")
    assert "rejected a GPU query" in rejected and "old driver" in rejected
    assert "not installed" in nb.smi_summary(None, "13.0")
    assert "installed but failed" in nb.smi_summary({"error": "NVIDIA-SMI has failed"}, "13.0")


# Older nvidia-smi layouts: R418 (CUDA Version field, older ruling) and R384 (before R410 the header
# had no "CUDA Version" at all).
R418_HEADER = """\
Thu Jun 13 08:21:07 2019
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 418.67       Driver Version: 418.67       CUDA Version: 10.1     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|===============================+======================+======================|
|   0  Tesla V100-SXM2...  On   | 00000000:00:1E.0 Off |                    0 |
| N/A   42C    P0    39W / 300W |      0MiB / 16130MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
"""
R384_HEADER = """\
Wed Mar 21 14:40:12 2018
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 384.130                Driver Version: 384.130                   |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|===============================+======================+======================|
|   0  Tesla K80           Off  | 00000000:00:04.0 Off |                    0 |
| N/A   33C    P8    30W / 149W |      0MiB / 11439MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
"""


def test_old_headers_give_the_driver_and_what_they_know_of_cuda():
    assert nb.parse_smi_header(R418_HEADER) == {"driver_version": "418.67", "cuda_version": "10.1"}
    assert nb.parse_smi_header(R384_HEADER) == {"driver_version": "384.130", "cuda_version": None}


def test_an_r384_driver_without_a_cuda_field_is_still_called_too_old_and_nothing_is_offered():
    report = {**nb.parse_smi_header(R384_HEADER), "report": R384_HEADER, "query_error": None,
              "gpus": nb.parse_smi_query(f"0, {T4_UUID}, Tesla K80, 11439 MiB\n")}
    result = only(nb.diagnose(facts(nvidia_smi=report)))
    assert result["title"] == "The NVIDIA driver (R384) is too old for this CUDA 13.0 wheel"
    assert "newest CUDA it fully supports: None" in result["why"]
    assert "no PyTorch 2.6 or newer runs" in result["fix"]


def test_parse_smi_query_keeps_names_with_commas_and_skips_lines_that_are_not_gpus():
    text = ("0, GPU-aaaaaaaa-0000-0000-0000-000000000000, Quadro RTX 8000, with, commas, 48601 MiB\n"
            "No devices were found\n"
            "x, GPU-bbbbbbbb, Tesla T4, 15360 MiB\n"
            "1, GPU-cccccccc, 15360 MiB\n")
    assert nb.parse_smi_query(text) == [{"index": 0, "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000",
                                         "name": "Quadro RTX 8000, with, commas", "memory": "48601 MiB"}]


@pytest.mark.parametrize("error, fix_start", [
    ("Failed to initialize NVML: Driver/library version mismatch", "Reboot: the NVIDIA driver was updated"),
    ("No devices were found", "The driver runs but finds no GPU"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "Reboot (a driver"),
])
def test_a_driver_that_does_not_answer_gets_the_fix_for_its_message(error, fix_start):
    result = only(nb.diagnose(facts(nvidia_smi={"error": error})))
    assert result["title"] == "The NVIDIA driver does not answer"
    assert result["fix"].startswith(fix_start)


# ROCm: the device files belong to both groups, `render` and `video`; one of them is not enough.

ROCM = dict(cuda_build=None, hip_build="6.3.42131-fa1d09cbd", arch_list=ROCM_ARCHES, amd_driver_loaded=True)


@pytest.mark.parametrize("groups, blamed", [
    (["ada", "video"], True), (["ada", "render"], True), (["ada"], True),
    (["render", "video"], False), (["ada", "render", "video"], False),
    (None, False),  # root, or a system without groups: the check cannot apply
])
def test_rocm_user_needs_both_render_and_video(groups, blamed):
    result = only(nb.diagnose(facts(**ROCM, user_groups=groups)))
    assert (result["title"] == "ROCm build of PyTorch, but your user may not open the GPU") is blamed
    if not blamed:
        assert result["title"] == "ROCm build of PyTorch, but no AMD GPU is visible"


@pytest.mark.parametrize("name", ["hip_visible_devices", "rocr_visible_devices", "cuda_visible_devices"])
@pytest.mark.parametrize("value, hides", [("", True), (" ", True), ("-1", True), ("0", False),
                                          ("0,1", False)])
def test_rocm_visible_devices_variables(name, value, hides):
    result = only(nb.diagnose(facts(**ROCM, user_groups=["render", "video"], **{name: value})))
    assert ("hides the GPU" in result["title"]) is hides
    if hides:
        assert f"unset {name.upper()}" in result["fix"]


def test_rocm_without_its_driver_is_told_so_before_groups_are_checked():
    result = only(nb.diagnose(facts(**{**ROCM, "amd_driver_loaded": False}, user_groups=["ada"])))
    assert result["title"] == "ROCm build of PyTorch, but AMD's GPU driver is not loaded"


def test_an_amd_gpu_without_an_architecture_name_is_not_blamed():
    card = gpu("AMD Radeon", "10.3", "", 12.0)
    result = only(nb.diagnose(facts(**ROCM, cuda_available=True, gpu_count=1, gpus=[card])))
    assert result["status"] == "ok"


# Macs: macOS 14 exactly is new enough for mps.

MAC = dict(os="Darwin", machine="arm64", cuda_build=None, arch_list=[], mps_built=True)


@pytest.mark.parametrize("version, too_old", [("13.7.4", True), ("13.0", True), ("14.0", False),
                                              ("15.5", False), ("unknown", False), (None, False)])
def test_macos_14_is_the_first_that_mps_runs_on(version, too_old):
    result = only(nb.diagnose(facts(**MAC, macos_version=version)))
    assert ("is too old for PyTorch's Apple GPU device" in result["title"]) is too_old
    if not too_old:
        assert result["title"] == "PyTorch does not find the Apple GPU"


@pytest.mark.gpu_branch("01", "mac_without_mps: not facts.get('mps_built', True)")
def test_a_mac_build_without_mps_and_a_linux_machine_are_not_mixed_up():
    no_mps = only(nb.diagnose(facts(**{**MAC, "mps_built": False}, macos_version="15.5")))
    assert no_mps["title"] == "This PyTorch build has no MPS support"
    assert nb.mac_without_mps(facts(cuda_build=None, arch_list=[])) is None  # Linux: not a Mac


# The commands quote this Jupyter kernel's Python as each shell needs.

@pytest.mark.parametrize("os_name, python, command", [
    ("Windows", r"C:\Python313\python.exe", r"C:\Python313\python.exe"),
    ("Windows", r"C:\Program Files\Python313\python.exe", r'& "C:\Program Files\Python313\python.exe"'),
    ("Linux", "/opt/my env/bin/python", "'/opt/my env/bin/python'"),
    ("Linux", LINUX_PYTHON, LINUX_PYTHON),
    ("Linux", None, "python"),
])
def test_python_command_quotes_only_what_needs_it(os_name, python, command):
    assert nb.python_command(facts(os=os_name, python=python)) == command
    note = "(in cmd, leave out the leading '&')"
    assert (note in nb.reinstall_fix(facts(os=os_name, python=python), "URL")) is command.startswith("&")


# Stand-ins shaped like torch.cuda on a T4 and on an AMD MI250 (what gather_facts reads).

def test_gpu_details_on_an_nvidia_t4(monkeypatch):
    properties = types.SimpleNamespace(name="Tesla T4", total_memory=15828320256, major=7, minor=5)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: properties)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "Tesla T4")
    monkeypatch.setattr(torch.version, "hip", None)
    assert nb.gpu_details() == [{"index": 0, "name": "Tesla T4", "capability": "7.5", "arch": "sm_75",
                                 "memory_GiB": 14.7}]


@pytest.mark.gpu_branch("01", "gpu_details: torch.version.hip")
def test_gpu_details_on_an_amd_gpu_reads_the_gfx_name(monkeypatch):
    properties = types.SimpleNamespace(name="AMD Instinct MI250X/MI250", total_memory=68702699520,
                                       gcnArchName="gfx90a:sramecc+:xnack-", major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: properties)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: "AMD Instinct MI250X/MI250")
    monkeypatch.setattr(torch.version, "hip", "6.3.42131-fa1d09cbd")
    [details] = nb.gpu_details()
    assert details["arch"] == "gfx90a:sramecc+:xnack-" and details["memory_GiB"] == 64.0


def test_user_groups_as_root_and_as_a_user(monkeypatch):
    grp = pytest.importorskip("grp")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert nb.user_groups() is None
    names = {44: "video", 109: "render", 1000: "ada"}

    def getgrgid(gid):
        if gid not in names:
            raise KeyError(gid)  # a group id with no name
        return types.SimpleNamespace(gr_name=names[gid])

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(os, "getgroups", lambda: [1000, 44, 4242])
    monkeypatch.setattr(grp, "getgrgid", getgrgid)
    assert nb.user_groups() == ["ada", "video"]


def test_gather_facts_has_exactly_the_keys_the_tests_make_up():
    assert set(nb.gather_facts()) == set(facts())


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


@pytest.mark.gpu_branch("01", "gather_facts: cuda_available")
@pytest.mark.parametrize("name", list(GPU_MACHINES))
def test_gather_facts_on_a_gpu_machine_asks_for_the_current_gpu_and_the_diagnosis_says_ready(
        monkeypatch, name):
    machine = GPU_MACHINES[name]
    stand_in_torch_cuda(monkeypatch, machine)
    for variable in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(variable, raising=False)
    found = nb.gather_facts()
    gpu_name = machine["properties"].name
    assert found["cuda_available"] is True and found["gpu_count"] == 1 and found["current_gpu"] == 0
    assert [gpu["name"] for gpu in found["gpus"]] == [gpu_name]
    assert (found["cuda_build"], found["hip_build"]) == (machine["cuda"], machine["hip"])
    assert found["cudnn_version"] == machine["cudnn"] and found["arch_list"] == machine["arches"]
    assert found["amd_driver_loaded"] is machine["kfd"]
    result = only(nb.diagnose(found))
    assert result["status"] == "ok" and result["title"] == f"Ready: PyTorch uses 1 GPU(s): {gpu_name}"


def test_gather_facts_without_a_gpu_never_asks_for_the_current_gpu(monkeypatch):
    stand_in_torch_cuda(monkeypatch, None)  # current_device() raises, as torch's does without a GPU
    found = nb.gather_facts()
    assert found["cuda_available"] is False and found["current_gpu"] is None and found["gpus"] == []


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


# --- Step 5: the Timer on a clock that waits for the device, the chart ----------------------------------

def test_synchronized_clock_waits_for_the_device_before_each_reading(monkeypatch):
    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", waited.append)  # what synchronize(device) calls
    clock = nb.synchronized_clock("cuda")
    first, second = clock(), clock()
    assert waited == [torch.device("cuda")] * 2 and second >= first


def test_matmul_speed_on_the_cpu_is_measured_for_real():
    gflops = nb.matmul_gflops("cpu", 64, 0.02)
    assert 0.01 < gflops < 1e5  # 2 × 64³ FLOPs per product; a CPU core does 1 to 1,000 GFLOP/s


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


@pytest.mark.parametrize("speed", [{"cpu": 87.654}, {"cpu": 87.654, "cuda": 7123.4}])
def test_speed_chart_has_a_bar_per_device_labelled_on_a_log_scale(speed):
    import matplotlib.pyplot as plt
    figure = nb.speed_chart(speed)
    try:
        [axes] = figure.axes
        assert len(axes.patches) == len(speed)
        assert [label.get_text() for label in axes.get_yticklabels()] == list(speed)
        assert [text.get_text() for text in axes.texts] == [f"{value:,.0f}" for value in speed.values()]
        assert axes.get_xscale() == "log" and "GFLOP/s" in axes.get_xlabel()
        assert axes.get_title() and axes.get_ylabel()
        low, high = axes.get_xlim()
        assert low < min(speed.values()) and high > max(speed.values())
    finally:
        plt.close(figure)


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


def test_diagnose_gives_the_first_rule_that_applies_and_nothing_when_none_does():
    asked = []

    def rule(answer):
        return lambda facts: asked.append(answer) or answer

    assert nb.diagnose({}, rules=[rule(None), rule("B"), rule("C")]) == ["B"] and asked == [None, "B"]
    assert nb.diagnose({}, rules=[rule(None)]) == []
    assert nb.diagnose(facts(), rules=None) == nb.diagnose(facts(), rules=nb.diagnosis_rules())


def test_show_findings_prints_commands_whole_and_wraps_the_rest(capsys):
    command = "    /home/ada/a/very/long/path/" + "x" * 90 + "/python -m pip install torch"
    nb.show_findings([{"status": "problem", "title": "T", "why": "w " * 60,
                       "fix": "run these two lines:\n" + command}])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "[PROBLEM] T"
    assert lines[1].startswith("  Why: w w") and all(len(line) <= 100 for line in lines if line != command)
    assert lines[-2] == "  Fix: run these two lines:" and lines[-1] == command  # never wrapped


def test_run_tool_reports_what_a_failing_or_missing_tool_said(tmp_path):
    assert nb.run_tool([sys.executable, "-c", "print('fine')"]) == ("fine\n", None)
    assert nb.run_tool([sys.executable, "-c", "import sys; print('no GPU'); sys.exit(9)"]) == (None, "no GPU")
    quiet, said = nb.run_tool([sys.executable, "-c", "import sys; sys.exit(3)"])
    assert quiet is None and "exit status 3" in said  # no output: the exit status
    missing, said = nb.run_tool([str(tmp_path / "no-such-tool")])
    assert missing is None and "no-such-tool" in said


def test_user_groups_is_none_where_there_is_no_grp_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "grp", None)  # Windows: `import grp` raises ImportError
    assert nb.user_groups() is None


def test_read_nvidia_smi_without_nvidia_smi_is_none_and_says_so(monkeypatch):
    monkeypatch.setattr(nb.shutil, "which", lambda name: None)
    assert nb.read_nvidia_smi() is None
    assert nb.smi_summary(None, "13.0").startswith("nvidia-smi is not installed")


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


def test_a_copy_on_the_cpu_is_measured_for_real():
    gbps = nb.copy_gbps(torch.ones(1 << 18), torch.device("cpu"), 0.02)  # 1 MiB of float32
    assert 0.01 < gbps < 1e4


def test_the_copy_table_is_rounded():
    copies = nb.copy_table({"pinned CPU memory -> GPU": 12.345678}, 256)
    assert copies.iloc[0, 0] == 12.3 and copies.index.name == "copy of 256 MB"


# --- The exercises: each check given a likely wrong answer ------------------------------------------------

def exercise_namespace(name):
    """The notebook's helpers, `device`, and what exercise `name`'s check cell defines (run as it is)."""
    namespace = {**vars(nb), "device": torch.device("cpu")}
    run_cell("01", f"exercise-{name}-check", namespace)
    return namespace


# The GPUs and wheels of exercise 1's check that its messages name
L4_ON_CUDA13 = ("for the NVIDIA L4 (8, 9) and the CUDA 13.0 wheel (sm_75 sm_80 sm_86 sm_90 sm_100 "
                "sm_120)")
RTX5090_ON_CUDA126 = ("for the NVIDIA GeForce RTX 5090 (12, 0) and the CUDA 12.6 wheel (sm_50 sm_60 "
                      "sm_70 sm_75 sm_80 sm_86 sm_90)")


@pytest.mark.exercise("01", "has-code-for")
def test_exercise_1_the_exact_name_misses_the_l4_and_the_message_teaches_the_rule():
    check = exercise_namespace("has-code-for")["check_has_code_for"]
    exact_name = check(lambda capability, arch_list: f"sm_{capability[0]}{capability[1]}" in arch_list)
    assert exact_name == (
        f"NOT YET RIGHT: has_code_for says False {L4_ON_CUDA13}, yet the GPU runs its sm_86 code: "
        "sm_89 is missing, but a GPU also runs code built for a smaller minor number of its own major "
        "number.")


def test_exercise_1_the_true_rule_runs_the_l4_on_sm_86_and_nothing_of_cuda_12_6_on_an_rtx_5090():
    namespace = exercise_namespace("has-code-for")
    code_it_runs, answer = namespace["code_it_runs"], nb.has_code_for_answer
    cuda13, cuda126 = namespace["CUDA13_ARCHES"], namespace["CUDA126_ARCHES"]
    assert code_it_runs((8, 9), cuda13) == ["sm_80", "sm_86"] and answer((8, 9), cuda13) is True
    assert code_it_runs((12, 0), cuda126) == [] and answer((12, 0), cuda126) is False
    assert code_it_runs((12, 0), cuda13) == ["sm_120"] and answer((12, 0), cuda13) is True
    assert code_it_runs((7, 0), cuda13) == [] and answer((7, 0), cuda13) is False  # sm_75 needs 7.5
    assert namespace["sm_numbers"]("sm_120") == (12, 0) and namespace["sm_numbers"]("sm_86") == (8, 6)
    assert namespace["check_has_code_for"](answer).startswith("PASSED: the reference's answer for all 7 ")


def test_exercise_1_has_one_meaning_with_the_diagnosis_arch_supported():
    """The exercise's reference and Going deeper A's arch_supported say the same for every pair."""
    namespace = exercise_namespace("has-code-for")
    for gpu, (major, minor), wheel, arch_list in namespace["GPUS_AND_WHEELS"]:
        runs = bool(namespace["code_it_runs"]((major, minor), arch_list))
        assert nb.arch_supported(f"{major}.{minor}", arch_list) is runs, (gpu, wheel)


def test_exercise_1_agrees_with_pytorchs_own_table_of_which_gpu_runs_which_code():
    """PyTorch's start-up check (torch/cuda/__init__.py) reads the same rule from its own table."""
    compatible = getattr(torch.cuda, "_code_compatible_with_device", None)
    if compatible is None or torch.version.cuda is None:  # the table is a CUDA build's
        pytest.skip("this PyTorch has no table of torch.cuda._code_compatible_with_device to compare with")
    namespace = exercise_namespace("has-code-for")
    for gpu, (major, minor), wheel, arch_list in namespace["GPUS_AND_WHEELS"]:
        pytorch = any(compatible(10 * major + minor, 10 * arch_major + arch_minor)
                      for arch_major, arch_minor in map(namespace["sm_numbers"], arch_list))
        assert pytorch is bool(namespace["code_it_runs"]((major, minor), arch_list)), (gpu, wheel)


@pytest.mark.exercise("01", "has-code-for")
def test_exercise_1_each_misread_rule_gets_the_message_that_names_it():
    check = exercise_namespace("has-code-for")["check_has_code_for"]
    with_a_dot = check(lambda capability, arch_list: f"sm_{capability[0]}.{capability[1]}" in arch_list)
    assert with_a_dot == (
        "NOT YET RIGHT: has_code_for says False for the Tesla T4 (7, 5) and the CUDA 13.0 wheel (sm_75 "
        "sm_80 sm_86 sm_90 sm_100 sm_120), which lists sm_75, the GPU's own code: sm_, the major "
        "number, then the minor number, no dot (sm_120 is 12.0).")

    def reads_two_digits(capability, arch_list):  # 'sm_120' read as 1 and 2
        return any(int(arch[3]) == capability[0] and int(arch[4]) <= capability[1] for arch in arch_list)

    assert check(reads_two_digits) == (
        "NOT YET RIGHT: has_code_for says False for the NVIDIA GeForce RTX 5090 (12, 0) and the CUDA "
        "13.0 wheel (sm_75 sm_80 sm_86 sm_90 sm_100 sm_120), which lists sm_120, the GPU's own code: "
        "sm_, the major number, then the minor number, no dot (sm_120 is 12.0).")

    def major_only(capability, arch_list):  # forgets that the minor number counts too
        return any(int(arch[3:-1]) == capability[0] for arch in arch_list)

    assert check(major_only) == (
        "NOT YET RIGHT: has_code_for says True for the Tesla V100 (7, 0) and the CUDA 13.0 wheel (sm_75 "
        "sm_80 sm_86 sm_90 sm_100 sm_120), yet the GPU runs none of it: sm_75 needs a minor number of 5 "
        "or more, and the GPU's is 0.")
    assert check(lambda capability, arch_list: True) == (
        "NOT YET RIGHT: has_code_for says True for the Tesla P100 (6, 0) and the CUDA 13.0 wheel (sm_75 "
        "sm_80 sm_86 sm_90 sm_100 sm_120), yet the GPU runs none of it: a GPU runs only code of its own "
        "major number, 6, and the list has none.")

    def any_older_number(capability, arch_list):  # as if newer GPUs ran every older sm_ code
        return any(int(arch[3:]) <= 10 * capability[0] + capability[1] for arch in arch_list)

    assert check(any_older_number) == (
        f"NOT YET RIGHT: has_code_for says True {RTX5090_ON_CUDA126}, yet the GPU runs none of it: a "
        "GPU runs only code of its own major number, 12, and the list has none.")


@pytest.mark.exercise("01", "has-code-for")
def test_exercise_1_an_answer_that_is_not_true_or_false_or_that_raises_is_told_so():
    check = exercise_namespace("has-code-for")["check_has_code_for"]
    assert check(lambda capability, arch_list: "sm_75") == (
        "NOT YET RIGHT: for the Tesla T4, has_code_for returned 'sm_75' (a str), not True or False.")
    assert check(lambda capability, arch_list: None) == (
        "NOT YET RIGHT: for the Tesla T4, has_code_for returned None (a NoneType), not True or False.")

    def splits_on_the_dot(capability, arch_list):
        return any(arch.split(".")[1] for arch in arch_list)

    said = check(splits_on_the_dot)
    assert said.startswith("NOT YET RIGHT: your splits_on_the_dot raised IndexError: list index out of "
                           "range at line "), said


def measured_ms(said):
    """The milliseconds a check's message says were measured ('... you measured 0.012 ms: ...')."""
    return said.split("you measured ")[1].split(" ms")[0]


@pytest.mark.exercise("01", "until-done")
def test_exercise_2_a_clock_read_before_the_device_is_done():
    check = exercise_namespace("until-done")["check_seconds_until_done"]

    def launch_only(work, wait):
        start = time.perf_counter()
        work()
        return time.perf_counter() - start

    def waits_first(work, wait):  # waits for earlier work, not for this one
        wait()
        start = time.perf_counter()
        work()
        return time.perf_counter() - start

    for wrong in (launch_only, waits_first):
        said = check(wrong, torch.device("cpu"))
        assert said == (f"NOT YET RIGHT: the made-up GPU has done its work 50 ms after work() returns, "
                        f"and you measured {measured_ms(said)} ms: the launch only. Call wait() after "
                        "work(), then read the clock."), said
        assert float(measured_ms(said)) < 45
    twice = check(lambda work, wait: (work(), work(), wait()) and 0.05, torch.device("cpu"))
    assert twice == "NOT YET RIGHT: seconds_until_done called work() 2 times; call it once."


@pytest.mark.exercise("01", "until-done")
def test_exercise_2_a_time_in_the_wrong_unit_sign_or_type_is_told_so():
    check = exercise_namespace("until-done")["check_seconds_until_done"]

    def in_milliseconds(work, wait):
        start = time.perf_counter()
        work()
        wait()
        return 1000 * (time.perf_counter() - start)

    said = check(in_milliseconds, torch.device("cpu"))
    shown = said.split("you measured ")[1].split(" for")[0]
    assert 45 < float(shown) < 1000
    assert said == (f"NOT YET RIGHT: you measured {shown} for 50 ms of work, more than a second: return "
                    "seconds, not milliseconds, and the reading after wait() minus the one before "
                    "work(), not a reading alone.")

    def start_minus_end(work, wait):
        start = time.perf_counter()
        work()
        wait()
        return start - time.perf_counter()

    said = check(start_minus_end, torch.device("cpu"))
    shown = said.split("a negative time, ")[1].split(" s:")[0]
    assert float(shown) < 0
    assert said == (f"NOT YET RIGHT: a negative time, {shown} s: subtract the start from the later "
                    "reading.")

    def prints_instead(work, wait):
        start = time.perf_counter()
        work()
        wait()
        print(time.perf_counter() - start)

    assert check(prints_instead, torch.device("cpu")) == (
        "NOT YET RIGHT: seconds_until_done returned None (a NoneType), not seconds (the difference of "
        "two time.perf_counter() readings).")


@pytest.mark.exercise("01", "gflops")
def test_exercise_3_a_product_counted_without_its_additions():
    check = exercise_namespace("gflops")["check_gflops"]
    without_additions = check(lambda size, seconds: size**3 / seconds / 1e9, torch.device("cpu"))
    assert without_additions == ("NOT YET RIGHT: for 1024×1024 matrices in 0.01 s, gflops says 107.374, the "
                                 "reference 214.748 (0.5 times it). Half: count the additions too, 2·n³ in "
                                 "all.")
    in_flops = check(lambda size, seconds: 2 * size**3 / seconds, torch.device("cpu"))
    assert in_flops.endswith("(1e+09 times it). That is FLOP/s: divide by 1e9 for GFLOP/s.")
    assert check(lambda size, seconds: torch.tensor(1.0), torch.device("cpu")) == (
        "NOT YET RIGHT: gflops returned tensor(1.) (a Tensor), not a number.")
    assert check(lambda size, seconds: None, torch.device("cpu")) == (
        "NOT YET RIGHT: gflops returned None (a NoneType), not a number.")
