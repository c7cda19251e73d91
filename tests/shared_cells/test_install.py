"""The install cell ("Setup, part 1"): the same body in every notebook, only its PACKAGES differ
(tools/sync_cells.py writes them from tools/shared_cells/install.py; tests/test_sync_cells.py checks
the copies), so testing the copy in notebook 01 tests them all.

It decides, on any machine, whether each package works: installed, new enough, not one of the fastai
sets measured to fail, and importable. On Colab and Kaggle only, it installs what is missing with pip
(never PyTorch). Its pip and import calls are replaced here by stand-ins shaped like the real ones;
tests/test_missing_packages.py and the run below do it for real in throwaway environments.
"""

import pytest

from support.notebook_code import load_helpers

nb = load_helpers("01")

PACKAGES = {"torch": ("2.6", None), "fastai": ("2.8.5", "Step 6 is skipped")}


def test_version_tuple_reads_release_local_and_pre_release_versions():
    assert nb.version_tuple("2.14.1+cu130") == (2, 14, 1, 0)
    assert nb.version_tuple("2.8.8") < nb.version_tuple("2.8.9")
    assert nb.version_tuple("2.6") == nb.version_tuple("2.6.0")  # padded, so equal releases compare equal
    assert nb.version_tuple("9.0.0rc1") == (9, 0, 0, 0)
    assert nb.version_tuple("2.10.0") > nb.version_tuple("2.9.1")  # numbers, not strings
    assert nb.version_tuple("2.9.dev20250101") == (2, 9, 0, 0)  # a part without a number ends it


def fake_versions(installed):
    """An importlib.metadata.version stand-in that knows only the packages in `installed`."""
    def version(name):
        if name not in installed:
            raise nb.importlib.metadata.PackageNotFoundError(name)
        return installed[name]
    return version


def test_package_problems_finds_the_missing_and_the_too_old():
    problems, limits = nb.package_problems(PACKAGES, fake_versions({"torch": "2.5.1+cu121"}))
    assert set(problems) == {"torch", "fastai"} and limits == {}
    assert problems["fastai"] == "not installed"
    assert "2.5.1+cu121" in problems["torch"] and "2.6" in problems["torch"]


@pytest.mark.parametrize("torch_version, too_old", [("2.6.0", False), ("2.5.99", True), ("2.6", False)])
def test_the_oldest_version_is_accepted_and_one_below_it_is_not(torch_version, too_old):
    problems, _ = nb.package_problems({"torch": ("2.6", None)}, fake_versions({"torch": torch_version}))
    assert ("torch" in problems) is too_old


# fastai and its helper packages: the version sets below were each run through notebook 03 (fast mode).
COLAB = {"fastai": "2.8.8", "fastcore": "2.2.12", "fasttransform": "0.0.2", "plum-dispatch": "2.9.0"}
KAGGLE = {"fastai": "2.8.7", "fastcore": "1.14.5", "fasttransform": "0.0.2", "plum-dispatch": "2.9.0"}
TODAY = {"fastai": "2.8.12", "fastcore": "2.2.39", "fasttransform": "0.0.5", "plum-dispatch": "2.9.0"}


@pytest.mark.parametrize("versions", [COLAB, KAGGLE, TODAY, {**KAGGLE, "fastai": "2.8.5"}],
                         ids=["colab", "kaggle", "pip-today", "fastai-2.8.5-fastcore-1"])
def test_the_fastai_sets_that_ran_notebook_03_are_accepted(versions):
    packages = {"torch": ("2.6", None), "fastai": ("2.8.5", None)}
    assert nb.package_problems(packages, fake_versions({"torch": "2.11.0+cu128", **versions})) == ({}, {})


@pytest.mark.parametrize("versions, why", [
    ({**TODAY, "fastai": "2.8.9"}, "fasttransform 0.0.5"),    # RecursionError building the DataLoaders
    ({**TODAY, "fastai": "2.8.11"}, "lacks an import"),       # NameError: tvpad, when resizing
    ({**KAGGLE, "fastcore": "2.2.39"}, "fastcore 2.2.39"),    # TypeError in parent_label
    ({**COLAB, "fasttransform": "0.0.3"}, "fasttransform 0.0.3"),  # the lowest release that breaks 2.8.8
], ids=["2.8.9-today", "2.8.11", "2.8.7-fastcore-2", "2.8.8-fasttransform-0.0.3"])
def test_the_fastai_sets_that_fail_to_train_are_problems_fixed_by_a_new_fastai(versions, why):
    problems, limits = nb.package_problems({"fastai": ("2.8.5", None)}, fake_versions(versions))
    assert why in problems["fastai"] and limits == {}
    assert nb.install_specs("fastai", PACKAGES)[0] == "fastai>=2.8.12"


@pytest.mark.parametrize("plum, limited", [("2.10.1", True), ("2.10", True), ("2.9.9", False)])
def test_a_set_that_cannot_export_costs_only_the_export(plum, limited):
    # Seen on Colab's Python 3.13 with torch 2.11: pip resolves plum-dispatch 2.10.1 beside fastai 2.8.8;
    # training works, learn.export fails (cannot pickle '_thread.RLock').
    versions = {**COLAB, "plum-dispatch": plum}
    problems, limits = nb.package_problems({"fastai": ("2.8.5", None)}, fake_versions(versions))
    assert problems == {}
    assert (limits == {"fastai export": limits.get("fastai export")} and "plum-dispatch" in
            limits["fastai export"]) if limited else limits == {}


@pytest.mark.parametrize("fastai, broken", [("2.8.12", False), ("2.8.11", True), ("2.8.10", True)])
def test_fastai_2_8_12_is_where_the_measured_breakages_end(fastai, broken):
    versions = {**TODAY, "fastai": fastai}
    problems, _ = nb.package_problems({"fastai": ("2.8.5", None)}, fake_versions(versions))
    assert ("fastai" in problems) is broken


def test_fastai_is_installed_with_its_helpers_and_other_packages_at_their_minimum():
    assert nb.install_specs("fastai", PACKAGES) == ["fastai>=2.8.12", "fastcore", "fasttransform",
                                                    "plum-dispatch"]
    assert nb.install_specs("fastai export", PACKAGES) == nb.install_specs("fastai", PACKAGES)
    assert nb.install_specs("ddgs", {"ddgs": ("9.0", "no search")}) == ["ddgs>=9.0"]


# Importing decides whether a package works: a release pair nobody measured shows up here.

def raising(error):
    def import_module(name):
        raise error
    return import_module


def test_an_import_that_fails_is_reported_with_the_last_line_of_its_error():
    error = ImportError("cannot import name 'tvpad' from 'fastai.vision.core'\n  (some/path.py)\n\n")
    said = nb.import_problem("fastai", raising(error))
    assert said == "importing it fails (ImportError: (some/path.py))"
    said = nb.import_problem("fastai", raising(NameError("name 'tvpad' is not defined")))
    assert said == "importing it fails (NameError: name 'tvpad' is not defined)"
    assert nb.import_problem("fastai", raising(RecursionError())) == (
        "importing it fails (RecursionError: no message)")


def test_an_import_that_works_is_no_problem_and_checks_the_module_that_proves_it():
    imported = []
    assert nb.import_problem("fastai", imported.append) is None
    assert nb.import_problem("plum-dispatch", imported.append) is None
    assert nb.import_problem("ddgs", imported.append) is None
    assert imported == ["fastai.vision.all", "plum", "ddgs"]


def test_triton_is_left_for_the_notebook_to_import_after_it_sets_triton_interpret():
    imported = []
    assert nb.import_problem("triton", imported.append) is None
    assert imported == []  # importing it here would fix the interpreter setting too early


def test_check_packages_treats_a_package_that_cannot_be_imported_like_a_missing_one():
    installed = {"torch": "2.14.1", "fastai": "2.8.12"}
    tried = []

    def installed_version(name):
        if name not in installed:
            raise nb.importlib.metadata.PackageNotFoundError(name)
        return installed[name]

    def import_module(module):
        tried.append(module)
        if module == "fastai.vision.all":
            raise ImportError("cannot import name 'x'\nbroken")

    problems, limits = nb.check_packages(PACKAGES, installed_version, import_module)
    assert problems == {"fastai": "importing it fails (ImportError: broken)"} and limits == {}
    assert tried == ["torch", "fastai.vision.all"]
    # A package that is already known to be missing is not imported.
    del installed["fastai"]
    tried.clear()
    assert nb.check_packages(PACKAGES, installed_version, import_module) == ({"fastai": "not installed"}, {})
    assert tried == ["torch"]


# pip: why it failed, in one line, and never PyTorch.

@pytest.mark.parametrize("stdout, stderr, reason", [
    ("", "ERROR: No matching distribution found for ddgs>=9.0\n", "ERROR: No matching distribution found "
                                                                   "for ddgs>=9.0"),
    ("", "ERROR: first\nERROR: the last one\n   \n\n", "ERROR: the last one"),  # blank lines after it
    ("Looking in indexes: x\nnothing more\n", "  \n", "nothing more"),  # stderr has only spaces
    ("", "", "pip exited with code 1 and printed nothing"),
    # What pip writes inside a Jupyter kernel, which sets FORCE_COLOR: each line in colour codes, the last
    # one nothing but a code. Read as text, that last line made the report say "Installing failed ()".
    ("", "\x1b[31mERROR: Could not find a version that satisfies the requirement fastai>=2.8.12 (from "
         "versions: none)\x1b[0m\x1b[31m\n\x1b[0m\x1b[31mERROR: No matching distribution found for "
         "fastai>=2.8.12\x1b[0m\x1b[31m\n\x1b[0m", "ERROR: No matching distribution found for fastai>=2.8.12"),
    (None, None, "pip exited with code 1 and printed nothing"),
])
def test_a_failed_install_always_says_why(stdout, stderr, reason):
    assert nb.pip_failure(1, stdout, stderr) == reason


def test_pip_upgrades_what_it_is_given_within_constraints_that_hold_pytorch():
    command = nb.pip_command(["fastai>=2.8.12", "fastcore"], "held.txt")
    assert command[:4] == [nb.sys.executable, "-m", "pip", "install"]  # the kernel's own Python
    assert "--upgrade" in command and command[command.index("--constraint") + 1] == "held.txt"
    assert "--no-color" in command  # plain text to quote, even where FORCE_COLOR is set
    assert command[-2:] == ["fastai>=2.8.12", "fastcore"] and "--upgrade-strategy" not in command
    assert not any("torch" in part for part in command)


def test_the_constraints_hold_the_installed_pytorch_builds_exactly():
    colab = fake_versions({"torch": "2.9.0+cu126", "torchvision": "0.24.0+cu126", "fastai": "2.8.8"})
    assert nb.held_back(colab) == ["torch==2.9.0+cu126", "torchvision==0.24.0+cu126"]
    assert nb.held_back(fake_versions({"torch": "2.6.0"})) == ["torch==2.6.0"]  # no torchvision: no pin


# The paragraph a learner reads.

def flat(text):
    return " ".join(text.split())


def test_failed_install_on_kaggle_says_switch_internet_on_and_what_still_works():
    problems = {"fastai": "not installed"}
    report = nb.setup_report(problems, PACKAGES, hosted=True, install_error="No matching distribution")
    assert "Settings > Internet" in flat(report) and "Installing failed (No matching distribution)" in flat(
        report)
    assert "Step 6 is skipped" in flat(report) and "stops" not in flat(report)
    assert all(len(line) <= 100 for line in report.splitlines())


def test_a_package_the_notebook_cannot_run_without_stops_it_with_the_fix():
    report = flat(nb.setup_report({"torch": "not installed"}, PACKAGES, hosted=False))
    assert "cannot run without torch" in report
    assert "Internet" not in report and "&&" not in report
    # The command on a line of its own, whole, with the kernel's own Python (no `&&`: PowerShell 5.1)
    command = nb.setup_report({"torch": "not installed"}, PACKAGES, hosted=False).splitlines()[-1]
    assert command == f'    {nb.sys.executable} -m pip install --upgrade "torch>=2.6"'


def test_commands_are_never_cut_across_lines_even_when_long(monkeypatch):
    monkeypatch.setattr(nb.sys, "executable", "C:\\Users\\learner\\AppData\\Local\\Programs\\" + "x" * 80
                        + "\\python.exe")
    report = nb.setup_report({"fastai": "importing it fails (ImportError: x)"}, PACKAGES, hosted=False)
    lines = report.splitlines()
    assert lines[-2] == (f'    {nb.sys.executable} -m pip install --upgrade "fastai>=2.8.12" "fastcore" '
                         '"fasttransform" "plum-dispatch"')
    assert lines[-1] == f"    {nb.sys.executable} -m pip install --force-reinstall --no-deps fastai"
    assert all(len(line) <= 100 for line in lines[:-2])


def test_a_broken_import_elsewhere_gives_the_command_that_repairs_fastai_and_its_helpers():
    problems = {"fastai": "importing it fails (ImportError: cannot import name 'x')"}
    report = flat(nb.setup_report(problems, PACKAGES, hosted=False))
    assert "fastai: importing it fails (ImportError: cannot import name 'x')." in report
    assert ('-m pip install --upgrade "fastai>=2.8.12" "fastcore" "fasttransform" "plum-dispatch"'
            in report)
    assert "reinstall the package itself with the last command below" in report
    assert report.endswith(f"{nb.sys.executable} -m pip install --force-reinstall --no-deps fastai")
    assert "Everything else still works: without fastai, Step 6 is skipped." in report


def test_on_a_hosted_service_a_failed_pip_points_at_the_network_a_finished_one_at_a_restart():
    problems = {"fastai": "importing it fails (ImportError: x)"}
    offline = flat(nb.setup_report(problems, PACKAGES, hosted=True, install_error="ERROR: no index"))
    assert "Installing failed (ERROR: no index)" in offline and "Settings > Internet" in offline
    assert "restart the session" not in offline
    finished = flat(nb.setup_report(problems, PACKAGES, hosted=True))
    assert "restart the session" in finished and "Internet" not in finished
    assert "--force-reinstall --no-deps fastai" in finished
    # PyTorch alone: nothing pip may do, so no network advice and no reinstall command for it.
    torch_only = flat(nb.setup_report({"torch": "importing it fails (OSError: libcuda)"}, PACKAGES,
                                      hosted=True))
    assert "newer runtime" in torch_only
    assert "Internet" not in torch_only and "restart" not in torch_only and "reinstall" not in torch_only


def test_a_limit_skips_only_what_needs_it_and_says_how_to_lift_it():
    limits = {"fastai export": "fastai 2.8.8 cannot export a trained model beside plum-dispatch 2.10.1"}
    report = flat(nb.setup_report({}, PACKAGES, hosted=False, limits=limits))
    assert "plum-dispatch 2.10.1: what needs fastai export is skipped." in report
    assert '"fastai>=2.8.12"' in report and "stops" not in report and "Everything else works." in report
    hosted = flat(nb.setup_report({}, PACKAGES, hosted=True, install_error="ERROR: offline",
                                  limits=limits))
    assert "Installing failed (ERROR: offline)" in hosted and "Settings > Internet" in hosted


def test_pytorch_is_never_installed_on_a_hosted_service():
    report = nb.setup_report({"torch": "version 2.4.0 is installed"}, PACKAGES, hosted=True)
    assert "newer runtime" in report and "Internet" not in report
    assert {"torch", "torchvision"} <= nb.NEVER_INSTALL


def test_setup_stopped_renders_as_its_message_alone():
    assert nb.SetupStopped("plain words")._render_traceback_() == ["plain words"]


def test_all_ready_is_one_line():
    assert nb.setup_report({}, PACKAGES, hosted=True) == "Packages ready: torch, fastai"
