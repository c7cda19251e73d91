"""The record cell at the end of every core, tested once: tools/shared_cells/run_record.py, with the cell
clock of the shared setup cell that feeds it (tools/shared_cells/shared_setup.py).

- The clock, driven by a real IPython shell and by events shaped like IPython 7.34's (Colab's and Kaggle's
  kernels: no cell_id) and like 9.x's, times each cell once, also when the setup cell runs again.
- What a run adds up to: seconds per section, and the cells that ran twice, were skipped, failed or ran out
  of order, each on both sides of its boundary.
- The cell's GPU branch, run whole (notebook_code.run_cell) with stand-ins shaped like torch.cuda's real
  answers on a T4, on Kaggle's two T4s and on an A100, with Colab's and Kaggle's markers, in order and out
  of order: the record it writes satisfies records/gpu/schema.json, holds nothing personal, and a T4's
  passes tools/gpu_run.py --accept in a throwaway clone and renders into README's GPU column there.
- Its CPU and Mac branch: one line, no record.
The nbval run checks, for every notebook, that the cell clock saw every core cell once, in order
(support/verdicts.py: record_cell_verdict), which proves the keys the sync tool writes are the keys the
kernel sees.
"""
import json
import os
import sys
import types
from pathlib import Path

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell

from support.clones import clone_of_the_working_tree, fresh_clone
from support.notebook_code import REPO, load_helpers, load_shared, notebook_path, read, run_cell

sys.path.insert(0, str(REPO / "tools"))
import gpu_run  # noqa: E402
import sync_cells  # noqa: E402

SOURCE = "tools/shared_cells/run_record.py"
record = load_shared("run_record.py")
setup = load_shared("shared_setup.py")
NOTEBOOK = "02"  # any notebook carries the cell; 02's core is short


# ---- The cell clock ------------------------------------------------------------------------------

def test_the_clock_times_each_cell_a_real_ipython_shell_runs_and_says_which_failed():
    shell = InteractiveShell.instance()
    ticks = iter(range(100))
    clock = setup.start_cell_clock(shell)
    clock.clock = lambda: next(ticks)
    try:
        shell.run_cell("x = 1", store_history=True)
        shell.run_cell("1 / 0", store_history=True)
    finally:
        setup.start_cell_clock(shell, clock)  # stops listening (and starts a clock we drop)
        for event in ("pre_run_cell", "post_run_cell"):
            for callback in list(shell.events.callbacks[event]):
                if getattr(callback, "__self__", None).__class__.__name__ == "CellClock":
                    shell.events.unregister(event, callback)
    assert clock.runs == [{"key": setup.cell_key("x = 1"), "seconds": 1, "failed": False},
                          {"key": setup.cell_key("1 / 0"), "seconds": 1, "failed": True}], SOURCE


def test_events_shaped_like_ipython_7_34s_and_9s_are_read_alike():
    old = types.SimpleNamespace(raw_cell="y = 2\n")  # 7.34: no cell_id attribute
    new = types.SimpleNamespace(raw_cell="y = 2", cell_id="abc", cell_meta={})
    done = types.SimpleNamespace(error_in_exec=None, error_before_exec=None)
    broken = types.SimpleNamespace(error_before_exec=SyntaxError("x"))  # 7.34 names only what it has
    clock = setup.CellClock(clock=iter(range(10)).__next__)
    for info, result in ((old, done), (new, done), (new, broken)):
        clock.pre(info)
        clock.post(result)
    assert [run["key"] for run in clock.runs] == [setup.cell_key("y = 2")] * 3, "stripped alike"
    assert [run["failed"] for run in clock.runs] == [False, False, True], SOURCE
    clock.post(done)  # a post without its pre: the cell that started the clock
    assert len(clock.runs) == 3


def test_running_the_setup_cell_again_keeps_one_clock_listening():
    shell = InteractiveShell.instance()
    first = setup.start_cell_clock(shell)
    second = setup.start_cell_clock(shell, first)
    try:
        shell.run_cell("z = 3", store_history=True)
        assert first.runs == [] and len(second.runs) == 1, SOURCE
    finally:
        setup.start_cell_clock(shell, second)
        for event in ("pre_run_cell", "post_run_cell"):
            for callback in list(shell.events.callbacks[event]):
                if getattr(callback, "__self__", None).__class__.__name__ == "CellClock":
                    shell.events.unregister(event, callback)
    assert isinstance(setup.start_cell_clock(None), setup.CellClock), "outside IPython: a clock"


# ---- What a run adds up to -----------------------------------------------------------------------

CORE = [("a", "Setup"), ("b", "Step 1"), ("c", "Step 1"), ("d", "Step 2")]


def runs(*keys, failed=()):
    return [{"key": key, "seconds": 10.0, "failed": key in failed} for key in keys]


def test_one_run_of_every_cell_in_order_is_complete():
    summary = record.run_summary(runs("a", "b", "c", "d", "exercise"), CORE)
    assert summary == {"steps": {"Setup": 10.0, "Step 1": 20.0, "Step 2": 10.0}, "core_s": 40.0,
                       "cells": {"ran": 4, "of": 4, "twice": [], "skipped": [], "failed": [],
                                 "out_of_order": False}, "partial": False}, SOURCE


@pytest.mark.parametrize("keys, failed, marked", [
    (("a", "b", "b", "c", "d"), (), ("twice", [2])),
    (("a", "b", "d"), (), ("skipped", [3])),
    (("a", "b", "c", "d"), ("c",), ("failed", [3])),
    (("a", "c", "b", "d"), (), ("out_of_order", True)),
    (("a", "b", "c", "d", "b"), (), ("twice", [2])),  # a cell run again later: twice, not out of order
])
def test_a_cell_run_twice_skipped_failed_or_out_of_order_makes_the_run_partial(keys, failed, marked):
    summary = record.run_summary(runs(*keys, failed=failed), CORE)
    assert summary["cells"][marked[0]] == marked[1] and summary["partial"] is True, SOURCE
    assert record.partial_reasons(summary["cells"]), "the reason is said"


def test_a_section_adds_the_last_run_of_each_of_its_cells():
    twice = [{"key": "b", "seconds": 50.0, "failed": False}, {"key": "b", "seconds": 5.0, "failed": False}]
    assert record.run_summary(twice, CORE)["steps"] == {"Step 1": 5.0}
    assert record.run_summary([], CORE)["core_s"] is None


# ---- The GPU branch, run whole with stand-ins ----------------------------------------------------

def device_properties(name, major, minor, gib, multiprocessors):
    """Shaped like torch.cuda.get_device_properties(i)."""
    return types.SimpleNamespace(name=name, major=major, minor=minor, total_memory=int(gib * 2**30),
                                 multi_processor_count=multiprocessors)


T4 = device_properties("Tesla T4", 7, 5, 14.74, 40)
A100 = device_properties("NVIDIA A100-SXM4-40GB", 8, 0, 39.4, 108)


def torch_with(gpus):
    """torch, but for torch.cuda's answers about `gpus` and the CUDA and cuDNN versions."""
    cuda = types.SimpleNamespace(device_count=lambda: len(gpus),
                                 get_device_properties=lambda index: gpus[index])
    return types.SimpleNamespace(cuda=cuda, version=types.SimpleNamespace(cuda="12.6"),
                                 backends=types.SimpleNamespace(
                                     cudnn=types.SimpleNamespace(version=lambda: 91002)),
                                 __version__="2.14.1+cu126", device=torch.device)


def core_keys(number):
    notebook = read(notebook_path(number))
    return [sync_cells.cell_key(notebook.cells[index].source)
            for index, _ in sync_cells.core_sections(notebook)]


def run_the_cell(tmp_path, gpus, keys, monkeypatch, service=None):
    """Run notebook 02's record cell on a stand-in CUDA machine whose clock saw `keys`; returns (what it
    printed, the records it wrote, what it displayed, what Colab was asked to download)."""
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    downloads = []
    if service == "Kaggle":
        monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    if service == "Colab":
        files = types.SimpleNamespace(download=downloads.append)
        monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
        colab = types.ModuleType("google.colab")
        colab.files = files
        monkeypatch.setitem(sys.modules, "google.colab", colab)
    clock = setup.CellClock()
    clock.runs = [{"key": key, "seconds": 30.0, "failed": False} for key in keys]
    shown = []
    version = next(line for cell in read(notebook_path(NOTEBOOK)).cells
                   for line in cell.source.splitlines() if line.startswith("NOTEBOOK_VERSION = "))
    namespace = {**vars(load_helpers(NOTEBOOK)), "device": torch.device("cuda"),
                 "torch": torch_with(gpus), "CELL_CLOCK": clock, "DATA_DIR": tmp_path,
                 "display": shown.append, "NOTEBOOK_VERSION": version.split('"')[1],
                 "FIGURES_REPORTED": [{"device": "cuda:0", "device_type": "cuda", "fast": False,
                                       "fallback": None, "figures": {"epoch_ms": {"gpu": 41.5}}}]}
    printed = run_cell(NOTEBOOK, "run-record", namespace)
    written = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("gpu_record_*.json"))]
    return printed, written, shown, downloads


@pytest.mark.gpu_branch("shared", "cell run-record: device.type != 'cuda'")
@pytest.mark.gpu_branch("shared", "record_name: gpus")
@pytest.mark.gpu_branch("shared", "this_runs_record: report['device_type'] == 'cuda'")
@pytest.mark.parametrize("gpus, service", [([T4], "Colab"), ([T4, T4], "Kaggle"), ([A100], None)])
def test_on_a_gpu_the_cell_writes_a_record_the_schema_accepts_and_says_where(
        tmp_path, monkeypatch, gpus, service):
    printed, written, shown, downloads = run_the_cell(tmp_path, gpus, core_keys(NOTEBOOK), monkeypatch,
                                                      service)
    [made] = written
    assert gpu_run.validation_errors(made) == [], SOURCE
    machine = made["machine"]
    assert (machine["gpu_count"], machine["gpus"][0]["name"], machine["service"]) == (
        len(gpus), gpus[0].name, service or "other")
    assert machine["gpus"][0]["compute_capability"] == f"{gpus[0].major}.{gpus[0].minor}"
    [entry] = made["notebooks"]
    assert entry["measured"] is True and entry["partial"] is False and entry["branch"] == "gpu"
    assert entry["figures"] == {"epoch_ms": {"gpu": 41.5}}
    assert set(entry["steps"]) == {section for _, section in
                                   sync_cells.core_sections(read(notebook_path(NOTEBOOK)))}
    assert "A complete run (every core cell ran once, in order)" in printed
    assert len(shown) == 1 and list(shown[0].columns) == ["minutes"], "the minutes per section"
    if service == "Colab":
        assert downloads == [str(tmp_path / record.record_name(made))], "the browser downloads it"
    elif service == "Kaggle":
        assert "Kaggle keeps /kaggle/working as the notebook's Output" in printed and downloads == []
    else:
        assert f"The record is {tmp_path / record.record_name(made)}." in printed


def test_a_record_holds_nothing_personal(tmp_path, monkeypatch):
    _, [made], _, _ = run_the_cell(tmp_path, [T4], core_keys(NOTEBOOK), monkeypatch)
    text = json.dumps(made)
    for personal in (str(tmp_path), str(Path.home()), os.environ.get("USER", "no-user-set"),
                     os.uname().nodename):
        assert personal not in text, f"{personal!r} in the record ({SOURCE})"
    assert set(made) == {"schema_version", "source", "made_at", "notebooks_version", "machine",
                         "notebooks"}


def test_a_run_out_of_order_gives_a_partial_record_that_says_why(tmp_path, monkeypatch):
    keys = core_keys(NOTEBOOK)
    printed, [made], _, _ = run_the_cell(tmp_path, [T4], [keys[1], keys[0], *keys[2:], keys[2]],
                                         monkeypatch)
    [entry] = made["notebooks"]
    assert entry["partial"] is True and entry["measured"] is False
    assert entry["cells"]["out_of_order"] is True and entry["cells"]["twice"] == [3]
    assert "A partial: cells run twice: 3; cells run out of order. Run all cells once" in printed
    assert record.utc_now(lambda: 0.0) == "1970-01-01T00:00:00+00:00"
    assert gpu_run.validation_errors(made) == []


def test_the_cpu_and_a_mac_print_one_line_and_write_no_record(tmp_path):
    keys = core_keys(NOTEBOOK)
    for device_type in ("cpu", "mps"):
        clock = setup.CellClock()
        clock.runs = [{"key": key, "seconds": 6.0, "failed": False} for key in keys]
        namespace = {**vars(load_helpers(NOTEBOOK)), "device": torch.device(device_type),
                     "CELL_CLOCK": clock, "DATA_DIR": tmp_path}
        printed = run_cell(NOTEBOOK, "run-record", namespace)
        assert printed.startswith(f"No CUDA GPU here ({device_type}), so no GPU record. Minutes per "
                                  f"section on this machine: Setup ")
        assert printed.endswith("; every core cell ran once, in order.\n") and printed.count("\n") == 1
    assert list(tmp_path.iterdir()) == [], "no record without a GPU"


def test_the_driver_is_read_from_nvidia_smi_or_left_out():
    def smi(stdout):
        return lambda *args, **kwargs: types.SimpleNamespace(stdout=stdout)

    assert record.nvidia_driver(smi("550.54.15\n550.54.15\n")) == "550.54.15"
    assert record.nvidia_driver(smi("")) is None

    def missing(*args, **kwargs):
        raise FileNotFoundError("nvidia-smi")

    assert record.nvidia_driver(missing) is None


# ---- A record made by the cell is accepted and rendered -----------------------------------------

@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    return clone_of_the_working_tree(tmp_path_factory.mktemp("record-clone") / "repo")


def test_a_t4_record_the_cell_made_passes_accept_and_renders_into_readmes_column(
        clone, tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    _, [made], _, _ = run_the_cell(tmp_path / "data", [T4], core_keys(NOTEBOOK), monkeypatch, "Colab")
    copy = fresh_clone(clone, tmp_path / "throwaway")
    sent = tmp_path / "sent-in.json"
    sent.write_text(json.dumps(made))
    code, lines = gpu_run.accept(sent, folder=copy / "records" / "gpu", repo=copy)
    assert code == 0 and lines[-1].startswith("accepted: filed as records/gpu/"), lines
    records, _ = gpu_run.valid_records(copy / "records" / "gpu")
    name = notebook_path(NOTEBOOK).name
    readme = gpu_run.render_readme((copy / "README.md").read_text(), records)
    row = next(line for line in readme.splitlines() if f"[{name}](" in line)
    assert row.endswith(f"| T4: {gpu_run.minutes_text(made['notebooks'][0]['core_s'])} core, 1 run, "
                        f"{made['made_at'][:10]} |"), row
