"""Notebook 01's diagnosis of a machine's setup (Going deeper A): diagnose() and its rules called with
made-up facts of every kind of machine (NVIDIA, AMD under ROCm, Apple, Windows, no GPU) and with made-up
nvidia-smi output, each decision on both sides of its edge; the helpers that gather the facts (gather_facts,
gpu_details, user_groups, read_nvidia_smi) against stand-ins shaped like torch.cuda and a fake nvidia-smi.
Its GPU, Mac, AMD and Windows branches are claimed here, beside the other tests of the same rules."""
import os
import stat
import sys
import textwrap
import types

import pytest
import torch

from support.made_up_machines import (CUDA13_ARCHES, GPU_MACHINES, LINUX_PYTHON, ROCM_ARCHES, facts,
                                     stand_in_torch_cuda)
from support.notebook_code import load_helpers

nb = load_helpers("01")

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
