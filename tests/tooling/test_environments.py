"""requirements.txt and the two conda files must name the same packages, so they cannot drift apart.

There is no conda here, so the files are checked as data: parsed, compared, and checked for the
choices that matter (conda-forge without defaults; pytorch-cpu / pytorch-gpu rather than plain
pytorch; fastai from PyPI because conda-forge's is too old for fastcore 2).
"""
import re

import pytest
import yaml

from support.notebook_code import REPO, load_helpers

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


# ---- requirements-lock.txt: the exact versions README's commands install ------------------------------
from packaging.markers import Marker, default_environment  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402
from packaging.version import Version  # noqa: E402

LOCK = REPO / "requirements-lock.txt"

# Environments the lock must serve, as packaging's marker variables: the build machine, Colab's Python,
# a Windows laptop and an Apple-silicon Mac.
ENVIRONMENTS = {
    "linux-3.11": {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
                   "python_version": "3.11", "python_full_version": "3.11.7", "os_name": "posix"},
    "linux-3.13": {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
                   "python_version": "3.13", "python_full_version": "3.13.5", "os_name": "posix"},
    "windows-3.12": {"sys_platform": "win32", "platform_system": "Windows", "platform_machine": "AMD64",
                     "python_version": "3.12", "python_full_version": "3.12.10", "os_name": "nt"},
    "macos-3.10": {"sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "arm64",
                   "python_version": "3.10", "python_full_version": "3.10.14", "os_name": "posix"},
}


def lock_pins(text=None):
    """[(name, version, marker or None)] of every `name==version ; marker` line of the lock."""
    pins = []
    for line in (LOCK.read_text() if text is None else text).splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        requirement, _, marker = line.partition(";")
        name, _, version = requirement.strip().partition("==")
        assert version, f"not an exact pin: {line!r}"
        pins.append((package_name(name), version.strip(), Marker(marker) if marker.strip() else None))
    return pins


def pins_for(environment, pins):
    """{name: version} of the pins whose markers hold in `environment`; a name pinned twice fails."""
    chosen = {}
    for name, version, marker in pins:
        if marker is None or marker.evaluate({**default_environment(), **environment, "extra": ""}):
            assert name not in chosen, f"{name} is pinned twice for {environment['sys_platform']}"
            chosen[name] = version
    return chosen


def lock_problems(requirement_lines, pins, environment):
    """What breaks the promise 'every package of requirements.txt is pinned, within its range'."""
    chosen = pins_for(environment, pins)
    problems = []
    for line in requirement_lines:
        requirement = Requirement(line)
        name = package_name(requirement.name)
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        if name not in chosen:
            problems.append(f"{name} is not pinned")
        elif Version(chosen[name]) not in requirement.specifier:
            problems.append(f"{name}=={chosen[name]} is outside {requirement.specifier}")
    return problems


@pytest.mark.parametrize("environment", ENVIRONMENTS.values(), ids=ENVIRONMENTS)
def test_every_package_of_requirements_is_pinned_within_its_range(environment):
    assert lock_problems(requirements(), lock_pins(), environment) == []


def test_every_pin_of_a_requirement_satisfies_its_range_on_every_branch():
    ranges = {package_name(Requirement(line).name): Requirement(line).specifier for line in requirements()}
    for name, version, _ in lock_pins():
        if name in ranges:
            assert Version(version) in ranges[name], f"{name}=={version} is outside {ranges[name]}"


def test_the_lock_holds_pytorch_where_the_build_machines_can_install_it_and_says_how_to_remake_it():
    header = LOCK.read_text().split("\n\n")[0] if "\n\n" in LOCK.read_text() else LOCK.read_text()[:1500]
    assert "bash tools/lock.sh" in header and "--universal" in header and "lock-constraints.txt" in header
    constraints = [Requirement(line) for line in (REPO / "tools" / "lock-constraints.txt").read_text().splitlines()
                   if line.strip() and not line.startswith("#")]
    for constraint in constraints:
        for name, version, _ in lock_pins():
            if name == constraint.name:
                assert Version(version) in constraint.specifier


def test_the_lock_check_fails_on_a_missing_pin_a_pin_out_of_range_and_a_double_pin():
    lines = ["torch>=2.6", "fastai>=2.8.12", "pywin32>=300 ; sys_platform == 'win32'"]
    good = "torch==2.14.1\nfastai==2.8.12\npywin32==311 ; sys_platform == 'win32'\n"
    linux, windows = ENVIRONMENTS["linux-3.11"], ENVIRONMENTS["windows-3.12"]
    assert lock_problems(lines, lock_pins(good), linux) == []
    assert lock_problems(lines, lock_pins(good), windows) == []
    assert lock_problems(lines, lock_pins("torch==2.14.1\n"), linux) == ["fastai is not pinned"]
    assert lock_problems(lines, lock_pins("torch==2.5.1\nfastai==2.8.12\n"), linux) == [
        "torch==2.5.1 is outside >=2.6"]
    assert lock_problems(lines, lock_pins("torch==2.14.1\nfastai==2.8.12\n"), windows) == ["pywin32 is not pinned"]
    twice = "numpy==2.2.6 ; python_full_version < '3.12'\nnumpy==2.5.5 ; python_full_version >= '3.11'\n"
    with pytest.raises(AssertionError, match="numpy is pinned twice"):
        pins_for(linux, lock_pins(twice))
