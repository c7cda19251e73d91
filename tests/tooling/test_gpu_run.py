"""tools/gpu_run.py: the refusals for real, the record's capture with stand-ins shaped like
PyTorch's and nvidia-smi's answers and nbclient's timing, the schema (version 2, both sources),
accepting a record sent in (in a throwaway clone whose main has the notebook's version), and
README's GPU column and the titles' T4 minutes rendered from the records."""
import copy
import json
import os
import shutil
import subprocess
import sys
import types
from datetime import datetime, timezone

import nbformat
import pytest

from support.clones import clone_of_the_working_tree, fresh_clone, git
from support.notebook_code import NOTEBOOKS, REPO

sys.path.insert(0, str(REPO / "tools"))
import anatomy  # noqa: E402
import gpu_run  # noqa: E402
import manifest  # noqa: E402
import sync_cells  # noqa: E402

TOOL = REPO / "tools" / "gpu_run.py"
MIME = gpu_run.FIGURES_MIME


def test_the_tool_reads_the_mime_type_the_shared_setup_cell_writes():
    from support.notebook_code import load_helpers

    assert load_helpers("01").FIGURES_MIME == MIME


# ---- Refusals ------------------------------------------------------------------------------------

def test_each_refusal_holds_on_its_side_only():
    assert gpu_run.refusal(False, [], True) is None
    assert gpu_run.refusal(True, [], True).startswith("refused: TUTORIAL_FAST=1")
    assert gpu_run.refusal(False, ["notebooks/04_x.ipynb"], True).startswith(
        "refused: 1 notebook(s)")
    assert gpu_run.refusal(False, [], False).startswith("refused: PyTorch sees no CUDA GPU")
    for why in (gpu_run.refusal(True, ["a"], False), gpu_run.refusal(False, ["a"], False)):
        assert "\n" not in why, "one line"


def run_tool(*args):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                          cwd=REPO)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A clone of this repository's HEAD with the working tree's tools and notebooks: a clean
    checkout, whose main is that commit (so main has the working tree's notebook versions)."""
    return clone_of_the_working_tree(tmp_path_factory.mktemp("clone") / "repo")


def clone_tool(clone, env):
    return subprocess.run([sys.executable, str(clone / "tools" / "gpu_run.py")],
                          capture_output=True, text=True, cwd=clone, env={**os.environ, **env})


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
        assert done.stdout.startswith(
            "refused: 1 notebook(s) have uncommitted changes (notebooks/04_")
    finally:
        notebook.write_text(original)


# ---- Capture, with stand-ins shaped like the real answers ----------------------------------------

def t4_properties():
    """Shaped like torch.cuda.get_device_properties(0) on a Colab T4 (_CudaDeviceProperties)."""
    return types.SimpleNamespace(name="Tesla T4", major=7, minor=5, total_memory=15828320256,
                                 multi_processor_count=40)


def fake_torch(count=1):
    cuda = types.SimpleNamespace(device_count=lambda: count,
                                 get_device_properties=lambda i: t4_properties())
    cudnn = types.SimpleNamespace(version=lambda: 91002)
    return types.SimpleNamespace(cuda=cuda, version=types.SimpleNamespace(cuda="12.6"),
                                 backends=types.SimpleNamespace(cudnn=cudnn),
                                 __version__="2.9.0+cu126")


def nvidia_smi(stdout="550.54.15\n", fail=None):
    def run(command, **kwargs):
        assert command[0] == "nvidia-smi" and "--query-gpu=driver_version" in command
        if fail:
            raise fail
        return subprocess.CompletedProcess(command, 0, stdout, "")
    return run


def test_machine_facts_from_pytorch_and_nvidia_smi():
    facts = gpu_run.machine_facts(fake_torch(2), run=nvidia_smi("550.54.15\n550.54.15\n"),
                                  modules={}, environ={"COLAB_RELEASE_TAG": "release-colab_x"})
    assert facts["gpus"] == [{"name": "Tesla T4", "compute_capability": "7.5", "memory_gib": 14.7,
                              "multiprocessors": 40}] * 2
    assert (facts["gpu_count"], facts["driver"], facts["cuda"], facts["cudnn"]) == (
        2, "550.54.15", "12.6", 91002)
    assert facts["service"] == "Colab"
    assert gpu_run.driver_version(nvidia_smi(fail=FileNotFoundError("nvidia-smi"))) is None
    assert gpu_run.driver_version(
        nvidia_smi(fail=subprocess.CalledProcessError(9, "nvidia-smi"))) is None


def test_the_hosted_service_is_kaggle_first_then_colab_else_other():
    # Kaggle's image is built on Colab's and sets COLAB_RELEASE_TAG too
    kaggle = {"KAGGLE_KERNEL_RUN_TYPE": "Interactive", "COLAB_RELEASE_TAG": "x"}
    assert gpu_run.hosted_service({}, kaggle) == "Kaggle"
    assert gpu_run.hosted_service({"google.colab": object()}, {}) == "Colab"
    assert gpu_run.hosted_service({}, {"COLAB_RELEASE_TAG": "x"}) == "Colab"
    assert gpu_run.hosted_service({}, {}) == "other"


def figures_output(device_type, fallback=None, **figures):
    record = {"device": device_type, "device_type": device_type, "fast": False,
              "fallback": fallback, "figures": figures}
    return {"output_type": "display_data", "data": {MIME: record, "text/plain": ""}, "metadata": {}}


UNTRACED = {"ran": 0, "of": 0, "twice": [], "skipped": [], "failed": [], "out_of_order": False}


def test_a_notebook_counts_as_measured_only_on_the_gpu_branch_without_a_stand_in():
    gpu = [{"outputs": [figures_output("cuda", gflops=4100.0)]}]
    entry = gpu_run.notebook_entry("01_check_your_gpu.ipynb", gpu, 12.34, 8.0)
    assert entry == {"notebook": "01_check_your_gpu.ipynb", "status": "ok", "whole_s": 12.3,
                     "core_s": 8.0, "steps": {}, "cells": UNTRACED, "partial": False,
                     "error": None, "branch": "gpu", "fallback": None, "measured": True,
                     "figures": {"gflops": 4100.0}}
    stand_in = [{"outputs": [figures_output("cuda", fallback="stand-in pictures", accuracy=0.5)]}]
    assert gpu_run.notebook_entry("03_is_it_a_bird.ipynb", stand_in, 40, 30)["branch"] == "stand-in"
    cpu = gpu_run.notebook_entry("04_x.ipynb", [{"outputs": [figures_output("cpu")]}], 40, 30)
    assert (cpu["branch"], cpu["measured"]) == ("cpu", False)
    silent = gpu_run.notebook_entry("04_x.ipynb", [{"outputs": []}], 40, 30)
    assert (silent["branch"], silent["measured"]) == ("unknown", False)
    error = {"output_type": "error", "ename": "OutOfMemoryError", "evalue": "CUDA out of memory",
             "traceback": []}
    failed = gpu_run.notebook_entry("08_x.ipynb", [{"outputs": [figures_output("cuda"), error]}],
                                    5, None)
    assert (failed["status"], failed["measured"], failed["partial"]) == ("error", False, True)
    assert failed["error"] == "OutOfMemoryError: CUDA out of memory"


def test_figures_of_several_reports_are_merged_and_a_fallback_anywhere_counts():
    cells = [{"outputs": [figures_output("cuda", a=1)]}, {"outputs": []},
             {"outputs": [figures_output("cuda", fallback="simulated", b=2)]}]
    assert gpu_run.reported_figures(cells) == ({"a": 1, "b": 2}, "cuda", "simulated")


# ---- Seconds per section and the cells that ran, from nbclient's timing --------------------------

def ran(seconds, start="2026-11-25T12:00:00.000000Z", outputs=()):
    """A code cell as nbclient 0.11 leaves it (record_timing): metadata.execution's four stamps."""
    begin = datetime.fromisoformat(start.replace("Z", "+00:00"))
    end = begin.timestamp() + seconds
    reply = datetime.fromtimestamp(end, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    execution = {"iopub.status.busy": start, "iopub.execute_input": start,
                 "shell.execute_reply": reply, "iopub.status.idle": reply}
    return nbformat.v4.new_code_cell("x = 1", metadata={"execution": execution},
                                     outputs=list(outputs), execution_count=1)


def run_notebook_of(*cells):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("# 04 · Title\n\ntext"), *cells]
    return notebook


def md(text):
    return nbformat.v4.new_markdown_cell(text)


def test_seconds_per_section_and_the_cells_that_ran_come_from_nbclients_timing():
    error = nbformat.v4.new_output("error", ename="RuntimeError", evalue="boom", traceback=[])
    notebook = run_notebook_of(
        md("## Setup\n\nwords"), ran(2.5), ran(0.5),
        md("## Step 1 · Time it"), ran(10.0), md("### inside the step"), ran(1.25),
        md("## Step 2 · Break it"), ran(3.0, outputs=[error]), nbformat.v4.new_code_cell("y = 2"),
        md("## Summary"), ran(100.0))
    steps, cells = gpu_run.core_progress(notebook)
    assert steps == {"Setup": 3.0, "Step 1": 11.25, "Step 2": 3.0}, "the Summary's cell is not core"
    assert cells == {"ran": 5, "of": 6, "twice": [], "skipped": [6], "failed": [5],
                     "out_of_order": False}
    entry = gpu_run.notebook_entry("04_x.ipynb", [{"outputs": [figures_output("cuda")]}], 130,
                                   17.25, progress=(steps, cells))
    assert (entry["partial"], entry["measured"], entry["steps"]) == (True, False, steps)
    whole = run_notebook_of(md("## Setup"), ran(2.0), md("## Step 1 · x"), ran(0.0000001),
                            md("## Summary"))
    steps, cells = gpu_run.core_progress(whole)
    assert steps == {"Setup": 2.0, "Step 1": 0.001}, "a section that ran never rounds to zero"
    entry = gpu_run.notebook_entry("04_x.ipynb", [{"outputs": [figures_output("cuda")]}], 9, 2.0,
                                   progress=(steps, cells))
    assert (entry["partial"], entry["measured"]) == (False, True)
    assert gpu_run.validation_errors(gpu_record(entries=[entry], names=())) != [], \
        "04_x is not a notebook's name"


def test_core_seconds_agree_with_the_sum_of_the_steps():
    import notebook_run

    notebook = run_notebook_of(md("## Setup"), ran(1.5), md("## Step 1 · x"), ran(2.25), ran(4.0),
                               md("## Summary"))
    steps, _ = gpu_run.core_progress(notebook)
    assert sum(steps.values()) == pytest.approx(notebook_run.core_seconds(notebook))


# ---- The record: gpu_run's -----------------------------------------------------------------------

NB03, NB04 = "03_is_it_a_bird.ipynb", "04_when_does_the_gpu_win.ipynb"
NB10 = "10_serve_it_fast.ipynb"


def entries_of_stand_ins():
    return [gpu_run.notebook_entry(NB04, [{"outputs": [figures_output("cuda",
                                                                      crossover_params=700000)]}],
                                   85.2, 60.1),
            gpu_run.notebook_entry(NB03, [{"outputs": [figures_output(
                "cuda", fallback="stand-in pictures")]}], 50, 40)]


def gpu_record(entries=None, names=(NB03, NB04), folder=REPO, **changes):
    """A gpu_run record made with stand-ins: NOT a measurement (the tests never write it into
    records/gpu)."""
    record = gpu_run.make_record(gpu_run.machine_facts(fake_torch(), run=nvidia_smi(), modules={},
                                                       environ={}),
                                 entries_of_stand_ins() if entries is None else entries, "a" * 40,
                                 [folder / "notebooks" / name for name in names],
                                 "PyTorch version: 2.9.0+cu126 (stand-in)", "Test",
                                 "made with stand-ins",
                                 now=datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc))
    record.update(changes)
    return record


def example_record(**changes):
    return gpu_record(**changes)


def test_a_record_made_with_stand_ins_satisfies_the_schema_and_is_written_under_its_gpus_name(
        tmp_path):
    record = example_record()
    assert gpu_run.validation_errors(record) == []
    assert (record["schema_version"], record["source"]) == (2, "gpu_run")
    path = gpu_run.write_record(record, folder=tmp_path)
    assert path.name == "2026-11-25_tesla-t4_gpu_run.json"
    assert json.loads(path.read_text()) == record
    assert set(record["notebooks_sha256"]) == set(record["notebooks_version"]) == {NB03, NB04}
    assert record["notebooks_version"][NB04] == anatomy.notebook_version(
        json.loads((REPO / "notebooks" / NB04).read_text()))
    assert record["machine"]["service"] == "other"


@pytest.mark.parametrize("break_it, where", [
    (lambda r: r.pop("commit"), "'commit' is a required property"),
    (lambda r: r.pop("collect_env"), "'collect_env' is a required property"),
    (lambda r: r["machine"].pop("cpu"), "'cpu' is a required property"),
    (lambda r: r.update(commit="abc"), "commit"),
    (lambda r: r.update(schema_version=1), "schema_version"),
    (lambda r: r["machine"].update(gpus=[]), "machine/gpus"),
    (lambda r: r["machine"].update(service="Paperspace"), "machine/service"),
    (lambda r: r["notebooks"][1].update(measured=True), "notebooks/1/branch"),
    (lambda r: r["notebooks"][0].update(partial=True), "notebooks/0/partial"),
    (lambda r: r["notebooks"][0].update(status="error"), "notebooks/0/error"),
    (lambda r: r["notebooks"][0].update(steps={"Summary": 3.0}), "notebooks/0/steps"),
    (lambda r: r["notebooks"][0]["cells"].pop("twice"), "notebooks/0/cells"),
    (lambda r: r["notebooks_version"].update({NB04: "abc"}), "notebooks_version"),
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


# ---- The record: a notebook's record cell's ------------------------------------------------------

T4 = {"name": "Tesla T4", "compute_capability": "7.5", "memory_gib": 14.7, "multiprocessors": 40}


def version_in(folder, name):
    return anatomy.notebook_version(json.loads((folder / "notebooks" / name).read_text()))


def notebook_record(name=NB04, version=None, gpu=T4, count=1, core_s=120.0,
                    made_at="2026-11-25T12:00:00+00:00", figures=None, folder=REPO, **entry):
    """A record as the record cell at the end of a notebook's core makes it (the schema's shape):
    a stand-in, NOT a measurement."""
    record = {
        "schema_version": 2, "source": "notebook", "made_at": made_at,
        "notebooks_version": {name: version or version_in(folder, name)},
        "machine": {"gpus": [dict(gpu)] * count, "gpu_count": count, "driver": "550.54.15",
                    "cuda": "12.6", "cudnn": 91002, "torch": "2.9.0+cu126", "python": "3.12.12",
                    "service": "Colab"},
        "notebooks": [{
            "notebook": name, "status": "ok", "whole_s": None, "core_s": core_s,
            "steps": {"Setup": 20.0, "Step 1": 40.5, "Step 2": 59.5},
            "cells": {"ran": 14, "of": 14, "twice": [], "skipped": [], "failed": [],
                      "out_of_order": False},
            "partial": False, "error": None, "branch": "gpu", "fallback": None, "measured": True,
            "figures": {"crossover_params": 700000, "cuda_fixed_cost_us": 9.5,
                        "cuda_matmul_gflop_per_s": 4100.0, "cpu_matmul_gflop_per_s": 95.0}
            if figures is None else figures}]}
    record["notebooks"][0].update(entry)
    return record


def test_a_record_made_as_the_record_cell_makes_it_satisfies_the_schema():
    assert gpu_run.validation_errors(notebook_record()) == []
    assert gpu_run.record_path(notebook_record()).name == "2026-11-25_tesla-t4_notebook.json"
    two = notebook_record(count=2)
    assert gpu_run.record_path(two).name == "2026-11-25_tesla-t4-x2_notebook.json"


@pytest.mark.parametrize("break_it, where", [
    (lambda r: r.update(person={"name": "A", "note": ""}), "person"),
    (lambda r: r.update(commit="a" * 40), "commit"),
    (lambda r: r.update(notebooks_sha256={NB04: "a" * 64}), "notebooks_sha256"),
    (lambda r: r.update(collect_env="PyTorch version: 2.9.0"), "collect_env"),
    (lambda r: r["machine"].update(cpu="Intel Xeon"), "machine/cpu"),
    (lambda r: r["machine"].update(os="Linux-6.1"), "machine/os"),
    (lambda r: r["machine"].pop("service"), "'service' is a required property"),
    (lambda r: r["notebooks"][0].update(whole_s=300.0), "notebooks/0/whole_s"),
    (lambda r: r["notebooks"].append(copy.deepcopy(r["notebooks"][0])), "notebooks"),
    (lambda r: r["notebooks_version"].update({NB10: "0" * 16}), "notebooks_version"),
    (lambda r: r.update(source="colab"), "source"),
])
def test_a_notebook_record_holds_nothing_it_does_not_need(break_it, where):
    record = notebook_record()
    break_it(record)
    problems = gpu_run.validation_errors(record)
    assert problems and any(problem.startswith(where) or where in problem
                            for problem in problems), problems


# ---- Accepting a record sent in, in a throwaway clone --------------------------------------------

@pytest.fixture
def throwaway(clone, tmp_path):
    """A fresh clone of `clone` (main: the working tree's notebooks), to accept and render in."""
    return fresh_clone(clone, tmp_path / "throwaway")


def accept(folder, record):
    """gpu_run.accept of `record`, in process, in the clone `folder`: (exit code, lines)."""
    path = folder.parent / "sent-in.json"
    path.write_text(json.dumps(record))
    return gpu_run.accept(path, folder=folder / "records" / "gpu", repo=folder)


def refused(folder, record):
    """The one line that refuses `record` (and nothing more is filed)."""
    before = sorted((folder / "records" / "gpu").glob("20*.json"))
    code, lines = accept(folder, record)
    assert code == 1 and len(lines) == 1 and lines[0].startswith("refused: "), lines
    assert sorted((folder / "records" / "gpu").glob("20*.json")) == before, "nothing is filed"
    return lines[0]


def accepted(folder, record):
    code, lines = accept(folder, record)
    assert code == 0, lines
    return lines


def run_in(folder, *args):
    return subprocess.run([sys.executable, str(folder / "tools" / "gpu_run.py"), *args],
                          capture_output=True, text=True, cwd=folder)


def title_row(folder, name):
    """The line of the title's plan that says the teaching minutes and the T4's running minutes."""
    title = nbformat.read(folder / "notebooks" / name, as_version=4).cells[0].source
    return next(line for line in title.splitlines() if line.startswith(sync_cells.PLAN_END))


def readme_row(folder, name):
    return next(line for line in (folder / "README.md").read_text().splitlines()
                if f"[{name}](" in line)


def test_a_notebook_record_is_accepted_filed_and_rendered_into_readme_and_the_title(throwaway):
    record = notebook_record(folder=throwaway)
    sent = throwaway.parent / "sent-in.json"
    sent.write_text(json.dumps(record))
    estimate = anatomy.workshop_t4(nbformat.read(throwaway / "notebooks" / NB04, as_version=4))
    done = run_in(throwaway, "--accept", str(sent))
    assert done.returncode == 0, done.stdout
    lines = done.stdout.strip().splitlines()
    version = record["notebooks_version"][NB04]
    head = git(throwaway, "log", "-1", "--format=%H", "main", "--", f"notebooks/{NB04}")
    assert lines[0] == "checked: JSON; records/gpu/schema.json (version 2, source notebook)"
    assert f"checked: {NB04} version {version} is main's at commit {head[:7]}" in lines
    assert "checked: 5 times above zero" in lines, "whole_s null; core_s, 3 steps, one _us figure"
    assert ("checked: 1 GB/s and FLOP/s figures within Tesla T4's datasheet peaks (+10 %)"
            in lines), "the CPU's GFLOP/s is not held against the GPU's peak"
    filed = throwaway / "records" / "gpu" / "2026-11-25_tesla-t4_notebook.json"
    assert lines[-1] == f"accepted: filed as records/gpu/{filed.name}"
    assert json.loads(filed.read_text()) == record
    done = run_in(throwaway, "--accept", str(sent))
    assert (done.returncode, done.stdout.strip()) == (
        1, f"refused: the same record is filed already as {filed.name}")

    assert run_in(throwaway, "--check").returncode == 1, "README and the title lag the records"
    done = run_in(throwaway, "--render")
    assert done.returncode == 0, done.stdout + done.stderr
    assert readme_row(throwaway, NB04).endswith("| T4: 2 min core, 1 run, 2026-11-25 |")
    assert readme_row(throwaway, NB03).endswith(f"| {gpu_run.NOT_MEASURED} |")
    notebook = nbformat.read(throwaway / "notebooks" / NB04, as_version=4)
    assert anatomy.workshop_t4(notebook) == (estimate[0], 2.0)
    assert "measured, 1 run" in title_row(throwaway, NB04)
    assert "an estimate" not in title_row(throwaway, NB04)
    nbformat.write(notebook, str(throwaway.parent / "as-nbformat-writes.ipynb"))
    assert (throwaway / "notebooks" / NB04).read_bytes() == (
        throwaway.parent / "as-nbformat-writes.ipynb").read_bytes()
    changed = git(throwaway, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(line.split(maxsplit=1)[1] for line in changed) == [
        "README.md", f"notebooks/{NB04}", f"records/gpu/{filed.name}"], changed
    done = run_in(throwaway, "--check")
    assert done.returncode == 0, done.stdout


def test_a_notebooks_older_version_on_main_is_accepted_and_a_branchs_version_is_refused(
        throwaway):
    old = version_in(throwaway, NB04)
    path = throwaway / "notebooks" / NB04
    notebook = nbformat.read(path, as_version=4)
    notebook.cells[-1].source += "\n\nA change on a branch."
    git(throwaway, "checkout", "--quiet", "-b", "branch")
    nbformat.write(notebook, str(path))
    git(throwaway, "commit", "--quiet", "-am", "a change")
    new = version_in(throwaway, NB04)
    assert new != old
    assert "is not a version of any commit on main" in refused(throwaway,
                                                               notebook_record(version=new))
    git(throwaway, "update-ref", "refs/heads/main", "branch")  # merged: main has both versions now
    gpu_run._versions.cache_clear()
    accepted(throwaway, notebook_record(version=old))
    accepted(throwaway, notebook_record(version=new, made_at="2026-11-26T12:00:00+00:00"))


def test_a_record_with_a_version_no_commit_on_main_has_is_refused_with_its_reason(throwaway):
    line = refused(throwaway, notebook_record(version="0123456789abcdef"))
    assert line == (f"refused: {NB04} version 0123456789abcdef is not a version of any commit on "
                    "main (a changed notebook, or a branch not merged yet)")


def test_a_file_that_is_not_json_or_breaks_the_schema_is_refused(throwaway):
    path = throwaway.parent / "broken.json"
    path.write_text('{"schema_version": 2,')
    code, lines = gpu_run.accept(path, folder=throwaway / "records" / "gpu", repo=throwaway)
    assert code == 1 and lines[0].startswith("refused: broken.json is not JSON")
    record = notebook_record(folder=throwaway)
    record["machine"]["cpu"] = "Intel Xeon"
    assert refused(throwaway, record).startswith(
        "refused: it breaks records/gpu/schema.json: machine/cpu")
    done = run_in(throwaway, "--accept", str(path))
    assert done.returncode == 1 and len(done.stdout.strip().splitlines()) == 1


BANDWIDTH = "copy GB_per_s"  # as notebook 09 names its kernels' bandwidth


@pytest.mark.parametrize("figures, reason", [
    ({BANDWIDTH: 352.0}, None),  # the T4's 320 GB/s × 1.1, exactly
    ({BANDWIDTH: 352.1}, "copy GB_per_s = 352.1 GB/s is above Tesla T4's memory bandwidth"),
    ({"read_gbps": {"big": 400.0}}, "read_gbps/big = 400 GB/s is above"),
    ({"cuda_matmul_gflop_per_s": 8910.0}, None),  # 8.1 TFLOP/s × 1.1, exactly
    ({"cuda_matmul_gflop_per_s": 8911.0}, "= 8911 GFLOP/s is above Tesla T4's float32 peak"),
    ({"matmul_tflops": 8.91}, None),
    ({"matmul_tflops": 8.92}, "matmul_tflops = 8.92 TFLOP/s is above Tesla T4's float32 peak"),
    ({"matmul_gflops": {"cpu": 20000.0, "cuda:0": 8000.0}}, None),  # the CPU's: no GPU peak
    ({"fp16_matmul_tflops": 40.0}, None),  # float16 on tensor cores: not the float32 peak
    ({"step_ms": 0.001}, None),
    ({"step_ms": 0}, "figures/step_ms is 0, and a time must be above zero"),
    ({"p50_ms": {"batcher at 50 per s": -1.0}}, "figures/p50_ms/batcher at 50 per s is -1"),
    ({"launch_overhead_us": 0.0}, "launch_overhead_us is 0"),
    ({"samples_per_s": 0}, None),  # a rate, not a time
])
def test_a_figure_is_checked_against_the_datasheet_and_times_above_zero(throwaway, figures,
                                                                       reason):
    record = notebook_record(figures=figures, folder=throwaway)
    if reason is None:
        accepted(throwaway, record)
    else:
        assert reason in refused(throwaway, record)


@pytest.mark.parametrize("where, value, reason", [
    ("core_s", 0.0, f"{NB04}: core_s is 0, and a time must be above zero"),
    ("core_s", 0.1, None),
    ("steps", {"Setup": 0.0, "Step 1": 4.0}, f"{NB04}: steps/Setup is 0, and a time must be"),
    ("steps", {"Setup": 0.001, "Step 1": 4.0}, None),
])
def test_a_zero_core_or_step_time_is_refused(throwaway, where, value, reason):
    record = notebook_record(folder=throwaway, **{where: value})
    if reason is None:
        accepted(throwaway, record)
    else:
        assert reason in refused(throwaway, record)


def test_a_gpu_the_datasheet_does_not_know_skips_the_peak_checks_and_says_so(throwaway):
    h200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "memory_gib": 139.8,
            "multiprocessors": 132}
    record = notebook_record(gpu=h200, figures={BANDWIDTH: 99999.0, "matmul_tflops": 9999.0},
                             folder=throwaway)
    lines = accepted(throwaway, record)
    assert ("checked: the datasheet does not know NVIDIA H200: GB/s and FLOP/s figures not "
            "checked") in lines
    zero = notebook_record(gpu=h200, figures={"step_ms": 0.0}, folder=throwaway,
                           made_at="2026-11-26T00:00:00+00:00")
    assert "a time must be above zero" in refused(throwaway, zero)


def test_a_gpu_run_record_is_accepted_when_its_hashes_are_its_commits(throwaway):
    head = git(throwaway, "rev-parse", "HEAD")
    record = gpu_record(folder=throwaway, commit=head)
    lines = accepted(throwaway, record)
    assert f"checked: the notebooks' hashes are commit {head[:7]}'s" in lines
    assert (throwaway / "records" / "gpu" / "2026-11-25_tesla-t4_gpu_run.json").exists()
    record = gpu_record(folder=throwaway, commit=head, made_at="2026-11-26T12:00:00+00:00")
    record["notebooks_sha256"][NB04] = "f" * 64
    assert refused(throwaway, record) == (
        f"refused: {NB04} differs from commit {head[:7]}'s")


# ---- README's GPU column and the titles' T4 minutes ----------------------------------------------

TABLE = """intro
| notebook | what | GPU, measured |
|---|---|---|
| [03_is_it_a_bird.ipynb](notebooks/03_is_it_a_bird.ipynb) | birds | not measured yet |
| [04_when_does_the_gpu_win.ipynb](notebooks/04_when_does_the_gpu_win.ipynb) | MLPs | \
not measured yet |

after"""


def row_of(text, name):
    return next(line for line in text.splitlines() if f"[{name}](" in line)


A100 = {"name": "NVIDIA A100-SXM4-40GB", "compute_capability": "8.0", "memory_gib": 39.4,
        "multiprocessors": 108}


def test_the_gpu_column_gives_the_median_count_and_newest_date_per_gpu():
    t4s = [notebook_record(core_s=seconds, made_at=f"2026-{date}T08:00:00+00:00")
           for seconds, date in ((60.0, "11-01"), (300.0, "12-01"), (120.0, "10-15"))]
    rendered = gpu_run.render_readme(TABLE, t4s)
    assert row_of(rendered, NB04).endswith("| MLPs | T4: 2 min core, 3 runs, 2026-12-01 |")
    assert row_of(rendered, NB03).endswith("| birds | not measured yet |")
    a100s = [notebook_record(gpu=A100, core_s=seconds, made_at=f"2026-{date}T08:00:00+00:00")
             for seconds, date in ((30.0, "09-01"), (66.0, "09-02"))]
    two_t4 = notebook_record(count=2, core_s=150.0)
    rendered = gpu_run.render_readme(TABLE, t4s + a100s + [two_t4])
    assert row_of(rendered, NB04).endswith(
        "| 2× T4: 2.5 min core, 1 run, 2026-11-25; A100-SXM4-40GB: 0.8 min core, 2 runs, "
        "2026-09-02; T4: 2 min core, 3 runs, 2026-12-01 |")
    assert gpu_run.render_readme(TABLE, []) == TABLE


def test_the_gpu_column_counts_gpu_run_records_too_and_only_measured_entries():
    # 04 measured (85.2 s whole, 60.1 s core); 03 ran on a stand-in: not a measurement
    rendered = gpu_run.render_readme(TABLE, [example_record()])
    assert row_of(rendered, NB04).endswith("| T4: 1 min core, 1 run, 2026-11-25 |")
    assert row_of(rendered, NB03).endswith("| birds | not measured yet |"), \
        "a stand-in run is not a measurement"


@pytest.mark.parametrize("change", [
    {"partial": True, "measured": False,
     "cells": {"ran": 13, "of": 14, "twice": [], "skipped": [14], "failed": [],
               "out_of_order": False}},
    {"partial": True, "measured": False,
     "cells": {"ran": 14, "of": 14, "twice": [3], "skipped": [], "failed": [],
               "out_of_order": True}},
    {"branch": "cpu", "measured": False},
    {"branch": "stand-in", "fallback": "stand-in pictures", "measured": False},
    {"status": "error", "error": "OutOfMemoryError: CUDA out of memory", "measured": False},
    {"core_s": None},
])
def test_partial_and_non_gpu_entries_are_not_counted(change):
    counted = notebook_record(core_s=60.0)
    record = notebook_record(core_s=600.0, made_at="2026-12-24T00:00:00+00:00")
    record["notebooks"][0].update(change)
    assert gpu_run.validation_errors(record) == []
    rendered = gpu_run.render_readme(TABLE, [counted, record])
    assert row_of(rendered, NB04).endswith("| T4: 1 min core, 1 run, 2026-11-25 |")
    assert gpu_run.t4_minutes(NB04, [counted, record]) == gpu_run.T4Minutes(True, 1, 1)
    assert gpu_run.t4_minutes(NB04, [record]) == gpu_run.T4Minutes(False, None, 0)


def test_t4_minutes_are_the_median_rounded_to_a_whole_minute_at_least_one():
    def minutes(*seconds, **kwargs):
        return gpu_run.t4_minutes(NB04, [notebook_record(core_s=s, **kwargs) for s in seconds])

    assert minutes(60.0, 120.0) == gpu_run.T4Minutes(True, 2, 2)  # 1.5 min: up
    assert minutes(80.0, 90.0, 600.0) == gpu_run.T4Minutes(True, 2, 3)  # 1.5 min
    assert minutes(85.0) == gpu_run.T4Minutes(True, 1, 1)  # 1.42 min: down
    assert minutes(5.0) == gpu_run.T4Minutes(True, 1, 1), "at least 1"
    assert minutes(150.0, count=2) == gpu_run.T4Minutes(False, None, 0), "2× T4 is not one T4"
    assert minutes(150.0, gpu=A100) == gpu_run.T4Minutes(False, None, 0)
    assert gpu_run.t4_minutes(NB03, [notebook_record(core_s=60.0)]).measured is False


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name[:2])
def test_each_titles_plan_takes_measured_minutes_and_still_parses(path):
    entry = manifest.notebook(path.name[:2])
    titles = {number: "A title" for number in manifest.notebooks()}
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 99 · T")])
    for t4, stated, said in [(None, entry.t4_run_minutes, "an estimate"), ((7, 3), 7, "measured, 3 runs"),
                             ((1, 1), 1, "measured, 1 run")]:
        notebook.cells[0].source = sync_cells.plan_text(entry, titles, t4)
        assert anatomy.workshop_t4(notebook) == (entry.teaching_minutes, float(stated))
        assert said in notebook.cells[0].source
    assert "measured, 3 runs" not in sync_cells.plan_text(entry, titles, (1, 1))


def test_readme_gpu_column_agrees_with_the_records_in_the_repository():
    records, broken = gpu_run.valid_records()
    assert broken == [], f"records that break the schema: {broken}"
    readme = (REPO / "README.md").read_text()
    assert gpu_run.render_readme(readme, records) == readme, "run tools/gpu_run.py --render"
    assert [what for _, what in sync_cells.differences(sync_cells.notebooks())
            if "title's plan" in what] == [], "run tools/gpu_run.py --render"
    assert run_tool("--check").returncode == 0


def test_check_fails_when_readme_shows_a_figure_no_record_holds(tmp_path):
    readme = (REPO / "README.md").read_text()
    row = next(line for line in readme.splitlines() if "04_when_does_the_gpu_win.ipynb](" in line)
    faked = readme.replace(row, row.replace("not measured yet", "T4: 9 s"))
    records, _ = gpu_run.valid_records()
    assert gpu_run.render_readme(faked, records) != faked


def test_check_fails_when_a_title_says_measured_minutes_no_record_holds(throwaway):
    path = throwaway / "notebooks" / NB04
    notebook = nbformat.read(path, as_version=4)
    notebook.cells[0].source = notebook.cells[0].source.replace("(an estimate)", "(measured, 4 runs)")
    nbformat.write(notebook, str(path))
    done = run_in(throwaway, "--check")
    assert done.returncode == 1
    assert (f"{NB04}: the title's T4 minutes differ from the records: run tools/gpu_run.py "
            "--render") in done.stdout


# ---- A record from a copy of the files (no .git), checked in a clone -----------------------------

SHA = "0123456789abcdef0123456789abcdef01234567"


def test_each_commit_refusal_holds_on_its_side_only():
    assert gpu_run.commit_refusal(True, None) is None  # a clone: HEAD
    assert gpu_run.commit_refusal(False, SHA) is None  # a copy that names its commit
    assert gpu_run.commit_refusal(True, SHA).startswith("refused: --commit is for a copy")
    assert gpu_run.commit_refusal(False, None).startswith("refused: no .git here")
    assert gpu_run.commit_refusal(False, SHA[:7]).startswith(
        "refused: --commit '0123456' is not a full")
    assert gpu_run.commit_refusal(False, "g" * 40).startswith("refused: --commit")
    for why in (gpu_run.commit_refusal(True, SHA), gpu_run.commit_refusal(False, None)):
        assert "\n" not in why, "one line"


@pytest.fixture
def copy_of_the_files(clone, tmp_path):
    """The clone's files without .git, as a GPU machine that got an archive has them; and its
    commit."""
    folder = tmp_path / "copy"
    shutil.copytree(clone, folder, ignore=shutil.ignore_patterns(".git"))
    return folder, git(clone, "rev-parse", "HEAD")


def copy_tool(folder, *args):
    return subprocess.run([sys.executable, str(folder / "tools" / "gpu_run.py"), *args],
                          capture_output=True, text=True, cwd=folder,
                          env={**os.environ, "TUTORIAL_FAST": "0"})


def test_the_real_tool_in_a_copy_asks_for_the_commit_then_goes_on_to_the_gpu_check(
        copy_of_the_files):
    folder, head = copy_of_the_files
    done = copy_tool(folder)
    assert done.returncode == 2 and done.stdout.strip() == gpu_run.commit_refusal(False, None)
    assert "Traceback" not in done.stderr, "git status is not run where there is no .git"
    done = copy_tool(folder, "--commit", head)
    assert done.returncode == 2
    assert done.stdout.strip().splitlines() == [gpu_run.refusal(False, [], False)], "no GPU here"
    assert copy_tool(folder, "--check").returncode == 2, "--check compares with commits: a clone's"
    assert copy_tool(folder, "--accept", "x.json").returncode == 2, "so does --accept"


def test_a_copy_with_commit_writes_a_record_naming_that_commit_with_the_copys_hashes(
        copy_of_the_files, monkeypatch, capsys):
    # In process, with stand-ins for what needs a GPU: torch.cuda.is_available() says True, the
    # machine is a T4 (shaped like torch.cuda.get_device_properties), and each notebook "runs" in no
    # time.
    import torch
    import torch.utils.collect_env

    folder, head = copy_of_the_files
    monkeypatch.setattr(gpu_run, "REPO", folder)
    monkeypatch.setattr(gpu_run, "RECORDS", folder / "records" / "gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("TUTORIAL_FAST", "0")  # a record holds full-size runs (the tests set 1)
    monkeypatch.setattr(torch.utils.collect_env, "get_pretty_env_info",
                        lambda: "PyTorch (stand-in)")
    t4 = gpu_run.machine_facts(fake_torch(), run=nvidia_smi())
    monkeypatch.setattr(gpu_run, "machine_facts", lambda torch: t4)
    monkeypatch.setattr(gpu_run, "run_notebook", lambda path: gpu_run.notebook_entry(
        path.name, [{"outputs": [figures_output("cuda", a=1)]}], 10.0, 5.0))
    written = []
    monkeypatch.setattr(gpu_run, "write_record", lambda record: written.append(record)
                        or folder / "records" / "gpu" / "record.json")
    notebook = folder / "notebooks" / NB04
    notebook.write_text(notebook.read_text() + " ")  # changed in the copy: nothing here can tell
    assert gpu_run.main(["--commit", head.upper(), "04", "10"]) == 0
    [record] = written
    assert record["commit"] == head and gpu_run.validation_errors(record) == []
    assert record["notebooks_sha256"] == {name: gpu_run.sha256(folder / "notebooks" / name)
                                          for name in (NB04, NB10)}
    assert record["notebooks_version"] == {name: version_in(folder, name) for name in (NB04, NB10)}
    assert f"the record names commit {head[:7]}" in capsys.readouterr().out


def record_of(clone, commit, notebooks=(NB03, NB04, NB10)):
    """A record (made with stand-ins, not a measurement) of `commit` with its notebooks' hashes
    there."""
    record = example_record(commit=commit)
    record["notebooks_sha256"] = {name: gpu_run.sha256(clone / "notebooks" / name)
                                  for name in notebooks}
    record["notebooks_version"] = {name: version_in(clone, name) for name in notebooks}
    return record


def test_check_in_the_clone_refuses_a_record_whose_notebooks_differ_from_its_commits(clone):
    head = git(clone, "rev-parse", "HEAD")
    path = clone / "records" / "gpu" / "2026-11-25_tesla-t4_gpu_run.json"
    try:
        record = record_of(clone, head)
        path.write_text(json.dumps(record))
        assert run_in(clone, "--render").returncode == 0
        done = run_in(clone, "--check")
        assert done.returncode == 0, done.stdout
        record["notebooks_sha256"][NB10] = "f" * 64  # a notebook changed in a copy
        path.write_text(json.dumps(record))
        done = run_in(clone, "--check")
        assert done.returncode == 1
        assert (f"refused 2026-11-25_tesla-t4_gpu_run.json: {NB10} differs from commit "
                f"{head[:7]}'s") in done.stdout
        path.write_text(json.dumps(record_of(clone, SHA)))  # a commit this clone does not have
        done = run_in(clone, "--check")
        assert done.returncode == 1 and f"commit {SHA[:7]} is not in this clone" in done.stdout
    finally:
        path.unlink(missing_ok=True)
        git(clone, "checkout", "--quiet", "--", "README.md", "notebooks")
