"""The helpers of the shared setup cell, tested once.

The cell is byte-identical in every notebook (test_hygiene.py checks the copies), so testing the copy
in notebook 01 tests them all. Nothing here needs a GPU: CUDA synchronization is checked with a
monkeypatched torch.cuda.synchronize, the device choice with torch.accelerator monkeypatched, and the
timing function with a fake clock.
"""
import pytest
import torch

from notebook_code import load_helpers
from shared_checks import code_lines_too_long

nb = load_helpers("01")


def test_fast_mode_follows_the_environment(monkeypatch):
    monkeypatch.setenv("TUTORIAL_FAST", "1")
    assert nb.fast_mode() is True
    monkeypatch.setenv("TUTORIAL_FAST", "0")
    assert nb.fast_mode() is False
    monkeypatch.delenv("TUTORIAL_FAST")
    assert nb.fast_mode() is False


def test_pick_device_falls_back_to_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    assert nb.pick_device() == torch.device("cpu")


@pytest.mark.gpu_branch("shared", "pick_device: torch.accelerator.is_available()")
@pytest.mark.parametrize("accelerator", [torch.device("cuda"), torch.device("mps"), torch.device("xpu")])
def test_pick_device_returns_the_accelerator_pytorch_finds(monkeypatch, accelerator):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: accelerator)
    assert nb.pick_device() == accelerator


def test_find_data_dir_inside_and_outside_a_repository(tmp_path):
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    (repo / "requirements.txt").write_text("torch\n")
    assert nb.find_data_dir(repo / "notebooks") == repo / "data"
    alone = tmp_path / "uploaded"
    alone.mkdir()
    assert nb.find_data_dir(alone) == alone / "data"


@pytest.mark.gpu_branch("shared", "synchronize: device.type == 'cuda'")
def test_time_it_synchronizes_around_every_timed_run_on_cuda(monkeypatch):
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append(("sync", device)))
    nb.time_it(lambda: events.append("fn"), torch.device("cuda"), repeats=2, warmup=1)
    cuda = torch.device("cuda")
    assert events == ["fn", ("sync", cuda), "fn", ("sync", cuda), ("sync", cuda), "fn", ("sync", cuda)]


def test_time_it_does_not_call_cuda_on_the_cpu(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    nb.time_it(lambda: None, torch.device("cpu"), repeats=3, warmup=1)
    assert calls == []


class FakeClock:
    """A clock that only moves when fn says so: fn() advances it by the next scripted duration."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = list(durations)

    def perf_counter(self):
        return self.now

    def fn(self):
        self.now += self.durations.pop(0)


@pytest.mark.parametrize("warmup, durations, median", [
    (1, [100.0, 5.0, 1.0, 3.0], 3.0),        # the slow warm-up run is not timed
    (0, [5.0, 1.0, 2.0], 2.0),               # the median, not the mean (2.67) nor the first run (5)
    (2, [50.0, 40.0, 1.0, 2.0, 3.0, 10.0], 2.5),  # even count: mean of the two middle runs
])
def test_time_it_returns_the_median_of_the_timed_runs(monkeypatch, warmup, durations, median):
    clock = FakeClock(durations)
    monkeypatch.setitem(nb.time_it.__globals__, "time", clock)
    result = nb.time_it(clock.fn, torch.device("cpu"), repeats=len(durations) - warmup, warmup=warmup)
    assert result == pytest.approx(median)
    assert clock.durations == []  # fn ran exactly warmup + repeats times


# The install cell ("Setup, part 1"): the same body in every notebook, only its PACKAGES differ.

def test_version_tuple_reads_release_local_and_pre_release_versions():
    assert nb.version_tuple("2.14.1+cu130") == (2, 14, 1, 0)
    assert nb.version_tuple("2.8.8") < nb.version_tuple("2.8.9")
    assert nb.version_tuple("2.6") == nb.version_tuple("2.6.0")  # padded, so equal releases compare equal
    assert nb.version_tuple("9.0.0rc1") == (9, 0, 0, 0)
    assert nb.version_tuple("2.10.0") > nb.version_tuple("2.9.1")  # numbers, not strings
    assert nb.version_tuple("2.6.dev20250101") == (2, 6, 0, 0)  # a part without a number ends it


def helpers(fastai, fastcore="2.2.39", fasttransform="0.0.5", plum="2.9.0"):
    """A version_of stand-in for fastai_breakage: one fastai and its three helper packages."""
    versions = {"fastai": fastai, "fastcore": fastcore, "fasttransform": fasttransform,
                "plum-dispatch": plum}
    return versions.get


@pytest.mark.parametrize("version_of, broken", [
    (helpers(None), None),  # no fastai: nothing to say here (package_problems reports it missing)
    (helpers("2.8.12"), None),  # exactly FASTAI_FIX: works with today's helpers
    (helpers("2.8.11"), "lacks an import"),  # the first release below the fix
    (helpers("2.8.10", fasttransform="0.0.3"), "fasttransform 0.0.3"),  # exactly the breaking helper
    (helpers("2.8.10", fasttransform="0.0.2", plum="2.9.9"), None),  # just below both
    (helpers("2.8.8", fasttransform="0.0.3"), "fasttransform 0.0.3"),  # 2.8.8 is on the newer side
    (helpers("2.8.7", fastcore="1.14.5", fasttransform="0.0.3"), None),  # below 2.8.8: not that rule
    (helpers("2.8.7", fastcore="2"), "fastcore 2"),  # exactly fastcore 2
    (helpers("2.8.7", fastcore="1.99.9", fasttransform="0.0.2"), None),
    (helpers("2.8.8", fasttransform="0.0.2", plum="2.10"), "plum-dispatch 2.10"),  # exactly 2.10
    (helpers("2.8.8", fasttransform=None, plum=None), None),  # helpers not installed: not newer
], ids=["none", "fix", "2.8.11", "ft-0.0.3", "below-both", "2.8.8-ft", "2.8.7-ft", "fastcore-2", "fastcore-1",
        "plum-2.10", "no-helpers"])
def test_fastai_breakage_at_the_edge_of_every_rule(version_of, broken):
    result = nb.fastai_breakage(version_of)
    assert result is None if broken is None else broken in result


def fake_versions(installed):
    """An importlib.metadata.version stand-in that knows only the packages in `installed`."""
    def version(name):
        if name not in installed:
            raise nb.importlib.metadata.PackageNotFoundError(name)
        return installed[name]
    return version


PACKAGES = {"torch": ("2.6", None), "fastai": ("2.8.5", "Step 6 is skipped")}


def test_package_problems_finds_the_missing_and_the_too_old():
    problems = nb.package_problems(PACKAGES, fake_versions({"torch": "2.5.1+cu121"}))
    assert set(problems) == {"torch", "fastai"}
    assert problems["fastai"] == "not installed"
    assert "2.5.1+cu121" in problems["torch"] and "2.6" in problems["torch"]
    assert nb.package_problems(PACKAGES, fake_versions({"torch": "2.14.1", "fastai": "2.8.9"})) == {}


def test_failed_install_on_kaggle_says_switch_internet_on_and_what_still_works():
    problems = {"fastai": "not installed"}
    report = nb.setup_report(problems, PACKAGES, hosted=True, install_error="No matching distribution")
    flat = " ".join(report.split())
    assert "Settings > Internet" in flat and "No matching distribution" in flat
    assert "Step 6 is skipped" in flat and "stops" not in flat
    assert code_lines_too_long(report) == [], "the paragraph fits the notebook's 100 characters"


def test_a_package_the_notebook_cannot_run_without_stops_it_with_the_fix():
    report = nb.setup_report({"torch": "not installed"}, PACKAGES, hosted=False)
    flat = " ".join(report.split())
    assert "cannot run without torch" in flat
    assert f'{nb.sys.executable} -m pip install "torch>=2.6"' in flat  # the kernel's own Python, no &&
    assert "Internet" not in flat


def test_pytorch_is_never_installed_on_a_hosted_service():
    report = nb.setup_report({"torch": "version 2.4.0 is installed"}, PACKAGES, hosted=True)
    assert "newer runtime" in report and "Internet" not in report
    assert {"torch", "torchvision"} <= nb.NEVER_INSTALL


def test_setup_stopped_renders_as_its_message_alone():
    assert nb.SetupStopped("plain words")._render_traceback_() == ["plain words"]


def test_all_ready_is_one_line():
    assert nb.setup_report({}, PACKAGES, hosted=True) == "Packages ready: torch, fastai"


# fastai and its helper packages: the version sets below were each run through notebook 03 (fast mode).
COLAB = {"fastai": "2.8.8", "fastcore": "2.2.12", "fasttransform": "0.0.2", "plum-dispatch": "2.9.0"}
KAGGLE = {"fastai": "2.8.7", "fastcore": "1.14.5", "fasttransform": "0.0.2", "plum-dispatch": "2.9.0"}
TODAY = {"fastai": "2.8.12", "fastcore": "2.2.39", "fasttransform": "0.0.5", "plum-dispatch": "2.9.0"}


@pytest.mark.parametrize("versions", [COLAB, KAGGLE, TODAY, {**KAGGLE, "fastai": "2.8.5"}],
                         ids=["colab", "kaggle", "pip-today", "fastai-2.8.5-fastcore-1"])
def test_the_fastai_sets_that_ran_notebook_03_are_accepted(versions):
    packages = {"torch": ("2.6", None), "fastai": ("2.8.5", None)}
    assert nb.package_problems(packages, fake_versions({"torch": "2.11.0+cu128", **versions})) == {}


@pytest.mark.parametrize("versions, why", [
    ({**TODAY, "fastai": "2.8.9"}, "fasttransform 0.0.5"),    # RecursionError building the DataLoaders
    ({**TODAY, "fastai": "2.8.11"}, "lacks an import"),       # NameError: tvpad, when resizing
    ({**KAGGLE, "fastcore": "2.2.39"}, "fastcore 2.2.39"),    # TypeError in parent_label
    ({**COLAB, "plum-dispatch": "2.10.1"}, "plum-dispatch"),  # cannot pickle '_thread.RLock' on export
], ids=["2.8.9-today", "2.8.11", "2.8.7-fastcore-2", "2.8.8-plum-2.10"])
def test_the_fastai_sets_that_crashed_notebook_03_are_fixed_by_installing_a_new_fastai(versions, why):
    packages = {"fastai": ("2.8.5", None)}
    problems = nb.package_problems(packages, fake_versions(versions))
    assert why in problems["fastai"]
    assert nb.install_spec("fastai", packages) == "fastai>=2.8.12"
    assert nb.install_spec("ddgs", {"ddgs": ("9.0", "no search")}) == "ddgs>=9.0"


@pytest.mark.gpu_branch("shared", "synchronize: device.type == 'mps'")
def test_synchronize_waits_for_apples_gpu_on_every_supported_pytorch(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append("mps"))
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda device=None: calls.append("accelerator"))
    nb.synchronize(torch.device("mps"))
    assert calls == ["mps"]  # torch.accelerator.synchronize does nothing for MPS before PyTorch 2.7


@pytest.mark.gpu_branch("shared", "synchronize: device.type != 'cpu'")
@pytest.mark.parametrize("device, calls", [
    (torch.device("cuda", 1), [("cuda", torch.device("cuda", 1))]),
    (torch.device("mps"), ["mps"]),
    (torch.device("xpu", 0), [("accelerator", torch.device("xpu", 0))]),  # any other accelerator
    ("cpu", []),  # a name works too; the CPU has nothing to wait for
])
def test_synchronize_waits_for_each_kind_of_device_with_its_own_call(monkeypatch, device, calls):
    done = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: done.append(("cuda", device)))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: done.append("mps"))
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda device=None: done.append(("accelerator", device)))
    nb.synchronize(device)
    assert done == calls


def test_the_benchmark_clock_synchronizes_before_every_reading(monkeypatch):
    nb01 = load_helpers("01")
    calls = []
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append("mps"))
    clock = nb01.synchronized_clock(torch.device("mps"))
    first, second = clock(), clock()
    assert calls == ["mps", "mps"] and second >= first


def test_every_benchmark_timer_in_the_notebooks_synchronizes_itself():
    import ast
    from notebook_code import NOTEBOOKS, code_cells, read
    for path in NOTEBOOKS:
        for source in code_cells(read(path)):
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("benchmark.Timer"):
                    keywords = {kw.arg: ast.unparse(kw.value) for kw in node.keywords}
                    synchronized = "timer" in keywords or "synchronize(" in keywords.get("stmt", "")
                    assert synchronized, f"{path.name}: Timer that may not wait for MPS: {ast.unparse(node)}"
