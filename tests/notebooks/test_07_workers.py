"""Notebook 07's Going deeper D, DataLoader workers for real: a worker's error carries its traceback, a
hanging worker ends at the loader's time limit, every loader with workers in the notebook has one, the
broken sample is found, and the module the workers import is written and reloaded."""
import ast
import multiprocessing
import os
import time

import pytest
import torch
from torch.utils.data import DataLoader

from support.notebook_code import load_helpers, notebook_path, read

nb = load_helpers("07")


# --- Going deeper D: DataLoader workers -----------------------------------------------------------

@pytest.fixture(scope="module")
def files_module(tmp_path_factory):
    return nb.load_module(tmp_path_factory.mktemp("nb07_code"), nb.FILES_MODULE, nb.FILES_MODULE_SOURCE)


def test_a_worker_error_carries_the_workers_traceback(files_module):
    broken = files_module.PictureFiles(32, broken_index=21)
    before = set(multiprocessing.active_children())
    message, raised_in = nb.first_error(DataLoader(broken, batch_size=8, num_workers=2))
    # the loader's workers end with first_error, not whenever the garbage collector gets to them
    assert set(multiprocessing.active_children()) == before
    assert "Caught RuntimeError in DataLoader worker process 0" in message
    assert "Original Traceback" in message and "nb07_files.py" in message
    assert "invalid for input of size 63" in message
    assert not raised_in.startswith("nb07_files.py"), "the training process raises it again itself"
    assert nb.triage(message) == 5
    message, raised_in = nb.first_error(DataLoader(broken, batch_size=8, num_workers=0))
    assert raised_in.startswith("nb07_files.py") and "worker" not in message


class HangingSamples(torch.utils.data.Dataset):
    """Every sample takes far longer than the loader's timeout (a worker stuck on a network drive)."""

    def __len__(self):
        return 4

    def __getitem__(self, index):
        time.sleep(60)
        return torch.zeros(1)


def test_a_hanging_worker_ends_at_the_loaders_timeout_and_is_triaged_as_a_worker_problem():
    start = time.monotonic()
    before = set(multiprocessing.active_children())
    message, _ = nb.first_error(DataLoader(HangingSamples(), batch_size=2, num_workers=1, timeout=1))
    assert message == "RuntimeError: DataLoader timed out after 1 seconds"
    assert set(multiprocessing.active_children()) == before, "the hanging worker was stopped"
    assert time.monotonic() - start < 30, "the timeout, not the 60 s sample, ended the wait"
    assert nb.triage(message) == 5


def test_every_loader_with_workers_in_the_notebook_has_a_time_limit():
    loaders = [call for cell in read(notebook_path("07")).cells if cell.cell_type == "code"
               for call in ast.walk(ast.parse(cell.source))
               if isinstance(call, ast.Call) and ast.unparse(call.func) == "DataLoader"]
    with_workers = [call for call in loaders
                    if any(k.arg == "num_workers" and ast.unparse(k.value) != "0" for k in call.keywords)]
    assert with_workers, [ast.unparse(call) for call in loaders]
    for call in with_workers:
        assert any(k.arg == "timeout" and ast.literal_eval(k.value) > 0 for k in call.keywords), \
            ast.unparse(call)


def test_broken_samples_finds_the_one_cut_short(files_module):
    broken = files_module.PictureFiles(32, broken_index=21)
    found = nb.broken_samples(broken)
    assert list(found) == [21] and "size 63" in found[21]
    assert nb.broken_samples(files_module.PictureFiles(32)) == {}
    assert nb.first_error(DataLoader(files_module.PictureFiles(32), batch_size=8)) is None


def test_load_module_picks_up_a_changed_source(tmp_path):
    first = nb.load_module(tmp_path, "nb07_changing", "VALUE = 1\n")
    assert first.VALUE == 1
    assert nb.load_module(tmp_path, "nb07_changing", "VALUE = 2\n").VALUE == 2


def test_load_module_leaves_an_unchanged_file_alone(tmp_path):
    nb.load_module(tmp_path, "nb07_same", "VALUE = 1\n")
    path = tmp_path / "nb07_same.py"
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))  # an old time: a rewrite would change it
    assert nb.load_module(tmp_path, "nb07_same", "VALUE = 1\n").VALUE == 1
    assert path.stat().st_mtime_ns == 1_000_000_000
