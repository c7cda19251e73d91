"""requirements.txt and the two conda files must name the same packages, so they cannot drift apart.

There is no conda here, so the files are checked as data: parsed, compared, and checked for the
choices that matter (conda-forge without defaults; pytorch-cpu / pytorch-gpu rather than plain
pytorch; fastai from PyPI because conda-forge's is too old for fastcore 2).
"""
import re

import pytest
import yaml

from notebook_code import REPO, load_helpers

CONDA_FILES = {"environment-cpu.yml": "pytorch-cpu", "environment-cuda.yml": "pytorch-gpu"}
CONDA_ONLY = {"python", "pip"}
CONDA_FORGE_NAMES = {"playwright-python": "playwright"}  # conda-forge name: PyPI name, where they differ


def package_name(requirement):
    """'fastai>=2.8.9  # why' -> 'fastai'."""
    return re.match(r"\s*([A-Za-z0-9_.\-]+)", requirement).group(1).lower().replace("_", "-")


def pypi_name(conda_name, torch_package):
    """The PyPI name of a conda-forge package: pytorch-cpu / pytorch-gpu are torch, and a few others differ."""
    return "torch" if conda_name == torch_package else CONDA_FORGE_NAMES.get(conda_name, conda_name)


def requirements():
    lines = (REPO / "requirements.txt").read_text().splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def conda_environment(name):
    environment = yaml.safe_load((REPO / name).read_text())
    conda = [dep for dep in environment["dependencies"] if isinstance(dep, str)]
    pip = next(dep["pip"] for dep in environment["dependencies"] if isinstance(dep, dict))
    return environment, conda, pip


def test_requirements_name_the_packages_the_collection_needs():
    names = {package_name(line) for line in requirements()}
    assert {"torch", "torchvision", "fastai", "ddgs", "jupyterlab", "nbval", "matplotlib"} <= names
    fastai = next(line for line in requirements() if package_name(line) == "fastai")
    # The oldest fastai that works beside the helpers pip installs today, the same one the notebooks'
    # setup cell installs when it finds a fastai that cannot work (measured with notebook 03).
    assert fastai.replace(" ", "") == f"fastai>={load_helpers('01').FASTAI_FIX}"


@pytest.mark.parametrize("name, torch_package", CONDA_FILES.items())
def test_conda_file_matches_requirements(name, torch_package):
    environment, conda, pip = conda_environment(name)
    assert environment["channels"] == ["conda-forge", "nodefaults"]
    conda_names = {package_name(dep) for dep in conda}
    assert torch_package in conda_names
    assert "pytorch" not in conda_names, "plain 'pytorch' lets the solver pick a CPU or GPU build silently"
    pip_names = {package_name(dep) for dep in pip}
    assert "fastai" in pip_names, "fastai must come from PyPI (conda-forge's is too old for fastcore 2)"

    as_pypi_names = {pypi_name(n, torch_package) for n in conda_names - CONDA_ONLY} | pip_names
    assert as_pypi_names == {package_name(line) for line in requirements()}


@pytest.mark.parametrize("name", CONDA_FILES)
def test_conda_bounds_match_requirements(name):
    _, conda, pip = conda_environment(name)
    bounds = {package_name(line): line.replace(" ", "")[len(package_name(line)):] for line in requirements()}
    for dep in conda + pip:
        dep_name = package_name(dep)
        if dep_name in CONDA_ONLY:
            continue
        bound = dep.replace(" ", "")[len(dep_name):]
        assert bound == bounds[pypi_name(dep_name, CONDA_FILES[name])], f"{name}: {dep} vs requirements.txt"


def test_cuda_file_explains_how_to_pin_a_cuda_version():
    text = (REPO / "environment-cuda.yml").read_text()
    assert re.search(r"#\s+- cuda-version=\d+\.\d+", text)
