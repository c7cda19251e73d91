"""Notebook 01's diagnosis helpers, called with made-up facts."""
import os
import stat
import textwrap

import pytest

from notebook_code import load_helpers

nb = load_helpers("01")

CUDA13_ARCHES = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def facts(**changes):
    """Facts of a Linux machine with a CUDA 13.0 wheel and no GPU, changed by `changes`."""
    base = {
        "os": "Linux", "torch_version": "2.14.1+cu130", "cuda_build": "13.0", "hip_build": None,
        "cudnn_version": 92400, "arch_list": CUDA13_ARCHES, "cuda_visible_devices": None,
        "cuda_available": False, "gpu_count": 0, "current_gpu": None, "gpus": [], "mps_available": False,
        "nvidia_smi": None,
    }
    return {**base, **changes}


def smi(driver="580.65.06", cuda="13.0", gpus=("Tesla T4",)):
    """A made-up nvidia-smi report."""
    return {"driver_version": driver, "cuda_version": cuda, "report": "",
            "gpus": [{"name": name, "driver_version": driver, "memory": "15360 MiB", "compute_cap": "7.5"}
                     for name in gpus]}


def only(findings):
    assert len(findings) == 1, findings
    return findings[0]


def test_all_good_on_a_t4():
    result = only(nb.diagnose(facts(cuda_available=True, gpu_count=1, nvidia_smi=smi(),
                                    gpus=[{"index": 0, "name": "Tesla T4", "capability": "7.5", "memory_GiB": 14.6}])))
    assert result["status"] == "ok"
    assert "Tesla T4" in result["title"]


def test_cpu_only_wheel_on_windows_gives_the_cuda_index_command():
    result = only(nb.diagnose(facts(os="Windows", cuda_build=None, arch_list=[])))
    assert result["status"] == "problem"
    assert "CPU-only" in result["title"]
    assert "On Windows" in result["why"] and "PyPI" in result["why"]
    assert "--index-url https://download.pytorch.org/whl/cu130" in result["fix"]
    assert result["fix"].startswith("If this machine has an NVIDIA GPU: python -m pip uninstall")


def test_cpu_only_wheel_on_linux_does_not_blame_windows():
    result = only(nb.diagnose(facts(cuda_build=None, arch_list=[])))
    assert result["status"] == "problem"
    assert "Windows" not in result["why"]
    assert "python3 -m pip install torch torchvision --index-url" in result["fix"]


def test_cuda_visible_devices_hiding_the_gpu():
    result = only(nb.diagnose(facts(cuda_visible_devices="", nvidia_smi=smi())))
    assert result["status"] == "problem"
    assert "CUDA_VISIBLE_DEVICES" in result["title"]
    assert "1 GPU(s)" in result["why"]
    assert "unset CUDA_VISIBLE_DEVICES" in result["fix"]


def test_cuda_visible_devices_minus_one_without_nvidia_smi():
    result = only(nb.diagnose(facts(cuda_visible_devices="-1")))
    assert "CUDA_VISIBLE_DEVICES='-1'" in result["title"]


def test_p100_with_a_cuda13_wheel_needs_the_legacy_build():
    p100 = {"index": 0, "name": "Tesla P100-PCIE-16GB", "capability": "6.0", "memory_GiB": 15.9}
    result = only(nb.diagnose(facts(cuda_available=True, gpu_count=1, gpus=[p100], nvidia_smi=smi())))
    assert result["status"] == "problem"
    assert "sm_60" in result["title"]
    assert "no kernel image" in result["why"]
    assert '"torch==2.14.*"' in result["fix"] and "whl/cu126" in result["fix"]
    assert "T4" in result["fix"]


def test_new_gpu_missing_from_an_old_wheel_gets_the_current_build():
    blackwell = {"index": 0, "name": "NVIDIA GeForce RTX 5090", "capability": "12.0", "memory_GiB": 31.4}
    old_wheel = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    result = only(nb.diagnose(facts(cuda_build="12.6", arch_list=old_wheel, cuda_available=True, gpu_count=1,
                                    gpus=[blackwell], nvidia_smi=smi())))
    assert result["status"] == "problem"
    assert "whl/cu130" in result["fix"]


def test_driver_too_old_for_the_wheel():
    result = only(nb.diagnose(facts(nvidia_smi=smi(driver="535.104.05", cuda="12.2"))))
    assert result["status"] == "problem"
    assert "R535" in result["title"] and "too old" in result["title"]
    assert "R580" in result["why"]
    assert "Update the NVIDIA driver to R580" in result["fix"] and "whl/cu126" in result["fix"]


def test_recent_driver_is_not_called_too_old():
    assert nb.driver_too_old(facts(nvidia_smi=smi(driver="580.95.05"))) is None
    assert nb.driver_too_old(facts(cuda_build="12.6", nvidia_smi=smi(driver="525.60.13"))) is None
    assert nb.driver_too_old(facts(cuda_build="12.6", nvidia_smi=smi(driver="470.82.01"))) == (470, 525)


def test_no_driver_at_all_which_is_this_machine():
    result = only(nb.diagnose(facts()))
    assert result["title"] == "No NVIDIA driver found"
    assert "R580" in result["fix"] and "Colab" in result["fix"] and "Kaggle" in result["fix"]


def test_apple_mps_and_rocm():
    assert only(nb.diagnose(facts(os="Darwin", cuda_build=None, arch_list=[], mps_available=True)))["status"] == "ok"
    rocm = only(nb.diagnose(facts(cuda_build=None, hip_build="6.4.0", arch_list=["gfx90a"])))
    assert "ROCm" in rocm["title"] and "rocm-smi" in rocm["fix"]


@pytest.mark.parametrize("capability, arches, expected", [
    ("8.6", ["sm_80"], True),           # same generation, newer minor: the sm_80 code runs
    ("8.0", ["sm_86"], False),          # older minor cannot run newer code
    ("6.0", CUDA13_ARCHES, False),      # P100 with a CUDA 13 wheel
    ("12.0", ["sm_90", "compute_90"], True),  # PTX is compiled by the driver for newer GPUs
    ("7.5", ["sm_90a"], False),
])
def test_arch_supported(capability, arches, expected):
    assert nb.arch_supported(capability, arches) is expected


def test_published_peak_matches_whole_model_names_only():
    assert nb.published_peak("Tesla T4")[0] == 8.1
    assert nb.published_peak("NVIDIA A100-SXM4-40GB")[0] == 19.5
    assert nb.published_peak("NVIDIA L40S") is None


def test_read_nvidia_smi_parses_a_real_subprocess(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(textwrap.dedent("""\
        #!/bin/sh
        if [ "$1" = "--query-gpu=name,driver_version,memory.total,compute_cap" ]; then
          echo "Tesla T4, 580.65.06, 15360 MiB, 7.5"
        else
          echo "| NVIDIA-SMI 580.65.06      Driver Version: 580.65.06      CUDA Version: 13.0     |"
        fi
        """))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    report = nb.read_nvidia_smi()
    assert report["driver_version"] == "580.65.06"
    assert report["cuda_version"] == "13.0"
    assert report["gpus"][0]["name"] == "Tesla T4" and report["gpus"][0]["compute_cap"] == "7.5"


def test_read_nvidia_smi_reports_a_failing_driver(tmp_path, monkeypatch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\nexit 9\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    report = nb.read_nvidia_smi()
    assert "couldn't communicate" in report["error"]
    assert "does not answer" in only(nb.diagnose(facts(nvidia_smi=report)))["title"]
