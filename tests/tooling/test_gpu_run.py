"""tools/gpu_run.py: the refusals for real, the record's capture with stand-ins shaped like PyTorch's and
nvidia-smi's answers, the schema, and README's GPU column rendered from the records."""
import copy
import json
import os
import shutil
import subprocess
import sys
import types
from datetime import datetime, timezone

import pytest

from support.notebook_code import NOTEBOOKS, REPO

sys.path.insert(0, str(REPO / "tools"))
import gpu_run  # noqa: E402

TOOL = REPO / "tools" / "gpu_run.py"
MIME = gpu_run.FIGURES_MIME


def test_the_tool_reads_the_mime_type_the_shared_setup_cell_writes():
    from support.notebook_code import load_helpers

    assert load_helpers("01").FIGURES_MIME == MIME


# ---- Refusals -------------------------------------------------------------------------------------

def test_each_refusal_holds_on_its_side_only():
    assert gpu_run.refusal(False, [], True) is None
    assert gpu_run.refusal(True, [], True).startswith("refused: TUTORIAL_FAST=1")
    assert gpu_run.refusal(False, ["notebooks/04_x.ipynb"], True).startswith("refused: 1 notebook(s)")
    assert gpu_run.refusal(False, [], False).startswith("refused: PyTorch sees no CUDA GPU")
    for why in (gpu_run.refusal(True, ["a"], False), gpu_run.refusal(False, ["a"], False)):
        assert "\n" not in why, "one line"


def run_tool(*args):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, cwd=REPO)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A clone of this repository's HEAD with the working tree's tools and notebooks: a clean checkout."""
    folder = tmp_path_factory.mktemp("clone") / "repo"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(folder)], check=True)
    for part in ("tools", "records", "notebooks"):  # what this tool reads, as the working tree has it
        shutil.copytree(REPO / part, folder / part, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-C", str(folder), "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "--quiet", "--allow-empty", "-m", "the working tree"], check=True)
    return folder


def clone_tool(clone, env):
    return subprocess.run([sys.executable, str(clone / "tools" / "gpu_run.py")], capture_output=True,
                          text=True, cwd=clone, env={**os.environ, **env})


def test_the_real_tool_refuses_here_without_a_gpu(clone):
    done = clone_tool(clone, {"TUTORIAL_FAST": "0"})
    assert done.returncode == 2
    assert done.stdout.strip().splitlines() == [gpu_run.refusal(False, [], False)]
    assert not list((clone / "records" / "gpu").glob("20*.json")), "no record is written"


def test_the_real_tool_refuses_fast_mode_and_a_changed_notebook(clone):
    assert clone_tool(clone, {"TUTORIAL_FAST": "1"}).stdout.startswith("refused: TUTORIAL_FAST=1")
    notebook = next((clone / "notebooks").glob("04_*.ipynb"))
    original = notebook.read_text()
    notebook.write_text(original.replace('"cells": [', '"cells": [ ', 1))
    try:
        done = clone_tool(clone, {"TUTORIAL_FAST": "0"})
        assert done.returncode == 2
        assert done.stdout.startswith("refused: 1 notebook(s) have uncommitted changes (notebooks/04_")
    finally:
        notebook.write_text(original)


# ---- Capture, with stand-ins shaped like the real answers ------------------------------------------

def t4_properties():
    """Shaped like torch.cuda.get_device_properties(0) on a Colab T4 (_CudaDeviceProperties)."""
    return types.SimpleNamespace(name="Tesla T4", major=7, minor=5, total_memory=15828320256,
                                 multi_processor_count=40)


def fake_torch(count=1):
    cuda = types.SimpleNamespace(device_count=lambda: count, get_device_properties=lambda i: t4_properties())
    return types.SimpleNamespace(cuda=cuda, version=types.SimpleNamespace(cuda="12.6"),
                                 backends=types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 91002)),
                                 __version__="2.9.0+cu126")


def nvidia_smi(stdout="550.54.15\n", fail=None):
    def run(command, **kwargs):
        assert command[0] == "nvidia-smi" and "--query-gpu=driver_version" in command
        if fail:
            raise fail
        return subprocess.CompletedProcess(command, 0, stdout, "")
    return run


def test_machine_facts_from_pytorch_and_nvidia_smi():
    facts = gpu_run.machine_facts(fake_torch(2), run=nvidia_smi("550.54.15\n550.54.15\n"))
    assert facts["gpus"] == [{"name": "Tesla T4", "compute_capability": "7.5", "memory_gib": 14.7,
                              "multiprocessors": 40}] * 2
    assert (facts["gpu_count"], facts["driver"], facts["cuda"], facts["cudnn"]) == (2, "550.54.15", "12.6", 91002)
    assert gpu_run.driver_version(nvidia_smi(fail=FileNotFoundError("nvidia-smi"))) is None
    assert gpu_run.driver_version(nvidia_smi(fail=subprocess.CalledProcessError(9, "nvidia-smi"))) is None


def figures_output(device_type, fallback=None, **figures):
    record = {"device": device_type, "device_type": device_type, "fast": False, "fallback": fallback,
              "figures": figures}
    return {"output_type": "display_data", "data": {MIME: record, "text/plain": ""}, "metadata": {}}


def test_a_notebook_counts_as_measured_only_on_the_gpu_branch_without_a_stand_in():
    gpu = [{"outputs": [figures_output("cuda", gflops=4100.0)]}]
    entry = gpu_run.notebook_entry("01_check_your_gpu.ipynb", gpu, 12.34, 8.0)
    assert entry == {"notebook": "01_check_your_gpu.ipynb", "status": "ok", "whole_s": 12.3, "core_s": 8.0,
                     "error": None, "branch": "gpu", "fallback": None, "measured": True,
                     "figures": {"gflops": 4100.0}}
    stand_in = [{"outputs": [figures_output("cuda", fallback="stand-in pictures", accuracy=0.5)]}]
    assert gpu_run.notebook_entry("03_is_it_a_bird.ipynb", stand_in, 40, 30)["branch"] == "stand-in"
    cpu = gpu_run.notebook_entry("04_x.ipynb", [{"outputs": [figures_output("cpu")]}], 40, 30)
    assert (cpu["branch"], cpu["measured"]) == ("cpu", False)
    silent = gpu_run.notebook_entry("04_x.ipynb", [{"outputs": []}], 40, 30)
    assert (silent["branch"], silent["measured"]) == ("unknown", False)
    error = {"output_type": "error", "ename": "OutOfMemoryError", "evalue": "CUDA out of memory", "traceback": []}
    failed = gpu_run.notebook_entry("08_x.ipynb", [{"outputs": [figures_output("cuda"), error]}], 5, None)
    assert (failed["status"], failed["measured"]) == ("error", False)
    assert failed["error"] == "OutOfMemoryError: CUDA out of memory"


def test_figures_of_several_reports_are_merged_and_a_fallback_anywhere_counts():
    cells = [{"outputs": [figures_output("cuda", a=1)]}, {"outputs": []},
             {"outputs": [figures_output("cuda", fallback="simulated", b=2)]}]
    assert gpu_run.reported_figures(cells) == ({"a": 1, "b": 2}, "cuda", "simulated")


def example_record(**changes):
    """A record made with stand-ins: NOT a measurement (the tests never write it into records/gpu)."""
    entries = [gpu_run.notebook_entry("04_when_does_the_gpu_win.ipynb",
                                      [{"outputs": [figures_output("cuda", crossover_params=700000)]}], 85.2, 60.1),
               gpu_run.notebook_entry("03_is_it_a_bird.ipynb",
                                      [{"outputs": [figures_output("cuda", fallback="stand-in pictures")]}], 50, 40)]
    record = gpu_run.make_record(gpu_run.machine_facts(fake_torch(), run=nvidia_smi()), entries, "a" * 40,
                                 NOTEBOOKS[:2], "PyTorch version: 2.9.0+cu126 (stand-in)", "Test",
                                 "made with stand-ins", now=datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc))
    record.update(changes)
    return record


def test_a_record_made_with_stand_ins_satisfies_the_schema_and_is_written_under_its_gpus_name(tmp_path):
    record = example_record()
    assert gpu_run.validation_errors(record) == []
    path = gpu_run.write_record(record, folder=tmp_path)
    assert path.name == "2026-11-25_tesla-t4.json"
    assert json.loads(path.read_text()) == record
    assert set(record["notebooks_sha256"]) == {p.name for p in NOTEBOOKS[:2]}


@pytest.mark.parametrize("break_it, where", [
    (lambda r: r.pop("commit"), "'commit' is a required property"),
    (lambda r: r.update(commit="abc"), "commit"),
    (lambda r: r["machine"].update(gpus=[]), "machine/gpus"),
    (lambda r: r["notebooks"][1].update(measured=True), "notebooks/1/branch"),
    (lambda r: r["notebooks"][0].update(status="error"), "notebooks/0/error"),
    (lambda r: r.update(extra=1), "Additional properties"),
])
def test_a_record_that_breaks_the_schema_is_refused(tmp_path, break_it, where):
    record = copy.deepcopy(example_record())
    break_it(record)
    problems = gpu_run.validation_errors(record)
    assert problems and any(where in problem for problem in problems), problems
    with pytest.raises(ValueError, match="breaks records/gpu/schema.json"):
        gpu_run.write_record(record, folder=tmp_path)
    assert list(tmp_path.iterdir()) == []


# ---- README's GPU column --------------------------------------------------------------------------

TABLE = """intro
| notebook | what | GPU, measured |
|---|---|---|
| [03_is_it_a_bird.ipynb](notebooks/03_is_it_a_bird.ipynb) | birds | not measured yet |
| [04_when_does_the_gpu_win.ipynb](notebooks/04_when_does_the_gpu_win.ipynb) | MLPs | not measured yet |

after"""


def test_the_gpu_column_shows_only_measured_notebooks_of_the_newest_record_per_gpu():
    old = example_record(made_at="2026-10-01T00:00:00+00:00")
    new = example_record()
    rendered = gpu_run.render_readme(TABLE, [old, new])
    assert ("| [04_when_does_the_gpu_win.ipynb](notebooks/04_when_does_the_gpu_win.ipynb) | MLPs | "
            "T4: 1 min 25 s (2026-11-25, aaaaaaa) |") in rendered
    assert "| birds | not measured yet |" in rendered, "a stand-in run is not a measurement"
    assert gpu_run.render_readme(TABLE, []) == TABLE
    two = example_record()
    two["machine"]["gpu_count"] = 2
    assert "T4: 1 min 25 s (2026-11-25, aaaaaaa); 2× T4: 1 min 25 s" in gpu_run.render_readme(TABLE, [new, two]) \
        or "2× T4: 1 min 25 s (2026-11-25, aaaaaaa); T4: 1 min 25 s" in gpu_run.render_readme(TABLE, [new, two])


def test_readme_gpu_column_agrees_with_the_records_in_the_repository():
    records, broken = gpu_run.valid_records()
    assert broken == [], f"records that break the schema: {broken}"
    readme = (REPO / "README.md").read_text()
    assert gpu_run.render_readme(readme, records) == readme, "run tools/gpu_run.py --render"
    assert run_tool("--check").returncode == 0


def test_check_fails_when_readme_shows_a_figure_no_record_holds(tmp_path):
    readme = (REPO / "README.md").read_text()
    row = next(line for line in readme.splitlines() if "04_when_does_the_gpu_win.ipynb](" in line)
    faked = readme.replace(row, row.replace("not measured yet", "T4: 9 s"))
    records, _ = gpu_run.valid_records()
    assert gpu_run.render_readme(faked, records) != faked


# ---- A record from a copy of the files (no .git), checked in a clone --------------------------------

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_each_commit_refusal_holds_on_its_side_only():
    assert gpu_run.commit_refusal(True, None) is None  # a clone: HEAD
    assert gpu_run.commit_refusal(False, SHA) is None  # a copy that names its commit
    assert gpu_run.commit_refusal(True, SHA).startswith("refused: --commit is for a copy")
    assert gpu_run.commit_refusal(False, None).startswith("refused: no .git here")
    assert gpu_run.commit_refusal(False, SHA[:7]).startswith("refused: --commit '0123456' is not a full")
    assert gpu_run.commit_refusal(False, "g" * 40).startswith("refused: --commit")
    for why in (gpu_run.commit_refusal(True, SHA), gpu_run.commit_refusal(False, None)):
        assert "\n" not in why, "one line"


@pytest.fixture
def copy_of_the_files(clone, tmp_path):
    """The clone's files without .git, as a GPU machine that got an archive has them; and its commit."""
    folder = tmp_path / "copy"
    shutil.copytree(clone, folder, ignore=shutil.ignore_patterns(".git"))
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    return folder, head


def copy_tool(folder, *args):
    return subprocess.run([sys.executable, str(folder / "tools" / "gpu_run.py"), *args], capture_output=True,
                          text=True, cwd=folder, env={**os.environ, "TUTORIAL_FAST": "0"})


def test_the_real_tool_in_a_copy_asks_for_the_commit_then_goes_on_to_the_gpu_check(copy_of_the_files):
    folder, head = copy_of_the_files
    done = copy_tool(folder)
    assert done.returncode == 2 and done.stdout.strip() == gpu_run.commit_refusal(False, None)
    assert "Traceback" not in done.stderr, "git status is not run where there is no .git"
    done = copy_tool(folder, "--commit", head)
    assert done.returncode == 2
    assert done.stdout.strip().splitlines() == [gpu_run.refusal(False, [], False)], "no GPU here"
    assert copy_tool(folder, "--check").returncode == 2, "--check compares with commits: a clone's job"


def test_a_copy_with_commit_writes_a_record_naming_that_commit_with_the_copys_hashes(
        copy_of_the_files, monkeypatch, capsys):
    # In process, with stand-ins for what needs a GPU: torch.cuda.is_available() says True, the machine
    # is a T4 (shaped like torch.cuda.get_device_properties), and each notebook "runs" in no time.
    import torch
    import torch.utils.collect_env

    folder, head = copy_of_the_files
    monkeypatch.setattr(gpu_run, "REPO", folder)
    monkeypatch.setattr(gpu_run, "RECORDS", folder / "records" / "gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("TUTORIAL_FAST", "0")  # a record holds full-size runs (the tests set 1)
    monkeypatch.setattr(torch.utils.collect_env, "get_pretty_env_info", lambda: "PyTorch (stand-in)")
    t4 = gpu_run.machine_facts(fake_torch(), run=nvidia_smi())
    monkeypatch.setattr(gpu_run, "machine_facts", lambda torch: t4)
    monkeypatch.setattr(gpu_run, "run_notebook", lambda path: gpu_run.notebook_entry(
        path.name, [{"outputs": [figures_output("cuda", a=1)]}], 10.0, 5.0))
    written = []
    monkeypatch.setattr(gpu_run, "write_record", lambda record: written.append(record)
                        or folder / "records" / "gpu" / "record.json")
    notebook = folder / "notebooks" / "04_when_does_the_gpu_win.ipynb"
    notebook.write_text(notebook.read_text() + " ")  # changed in the copy: nothing here can tell
    assert gpu_run.main(["--commit", head.upper(), "04", "10"]) == 0
    [record] = written
    assert record["commit"] == head and gpu_run.validation_errors(record) == []
    assert record["notebooks_sha256"] == {
        name: gpu_run.sha256(folder / "notebooks" / name)
        for name in ("04_when_does_the_gpu_win.ipynb", "10_serve_it_fast.ipynb")}
    assert f"the record names commit {head[:7]}" in capsys.readouterr().out


def record_of(clone, commit, notebooks=("04_when_does_the_gpu_win.ipynb", "10_serve_it_fast.ipynb")):
    """A record (made with stand-ins, not a measurement) of `commit` with its notebooks' hashes there."""
    record = example_record(commit=commit)
    record["notebooks_sha256"] = {name: gpu_run.sha256(clone / "notebooks" / name) for name in notebooks}
    return record


def test_check_in_the_clone_refuses_a_record_whose_notebooks_differ_from_its_commits(clone):
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    path = clone / "records" / "gpu" / "2026-11-25_tesla-t4.json"
    try:
        record = record_of(clone, head)
        path.write_text(json.dumps(record))
        assert run_in(clone, "--render").returncode == 0
        done = run_in(clone, "--check")
        assert done.returncode == 0, done.stdout
        record["notebooks_sha256"]["10_serve_it_fast.ipynb"] = "f" * 64  # a notebook changed in a copy
        path.write_text(json.dumps(record))
        done = run_in(clone, "--check")
        assert done.returncode == 1
        assert (f"refused 2026-11-25_tesla-t4.json: 10_serve_it_fast.ipynb differs from commit "
                f"{head[:7]}'s") in done.stdout
        path.write_text(json.dumps(record_of(clone, SHA)))  # a commit this clone does not have
        done = run_in(clone, "--check")
        assert done.returncode == 1 and f"commit {SHA[:7]} is not in this clone" in done.stdout
    finally:
        path.unlink(missing_ok=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", "README.md"], check=True)


def run_in(folder, *args):
    return subprocess.run([sys.executable, str(folder / "tools" / "gpu_run.py"), *args], capture_output=True,
                          text=True, cwd=folder)
