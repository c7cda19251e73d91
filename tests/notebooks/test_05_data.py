"""Notebook 05's data (Steps 1 and 3): its dataset module, written to a file so that workers started
with `spawn` (Windows, macOS) can import it, and rewritten only when its code changed; DataLoader workers
started for real with `spawn` giving the baseline's batches; and the jobs' feeds, decoded on the device
or on every read."""
import itertools
import os

import pytest
import torch
from torch.utils.data import DataLoader

from support.notebook_05 import CPU, tiny_job
from support.notebook_05 import one_thread, shapes_module  # noqa: F401 (pytest fixtures, used by name)
from support.notebook_code import load_helpers

nb = load_helpers("05")


def test_the_dataset_module_is_written_imported_and_deterministic(shapes_module):
    assert shapes_module.__name__ == nb.DATASET_MODULE
    assert shapes_module.__file__.endswith(f"{nb.DATASET_MODULE}.py")
    data = shapes_module.MadeUpShapes(8, source_size=48, image_size=16, seed=3)
    image, label = data[5]
    assert image.shape == (3, 16, 16) and image.dtype == torch.float32
    assert label == 5 % len(shapes_module.SHAPES)
    assert torch.equal(data[5][0], image)  # the same augmentation every time, in every process


def test_the_dataset_module_is_rewritten_only_when_its_code_changed(tmp_path):
    nb.load_dataset_module(tmp_path)
    path = tmp_path / f"{nb.DATASET_MODULE}.py"  # (the module itself may come from an earlier import)
    os.utime(path, ns=(0, 0))  # mark the file: a rewrite would give it a new modification time
    nb.load_dataset_module(tmp_path)
    assert os.stat(path).st_mtime_ns == 0
    with open(path, "a") as file:
        file.write("# changed by hand\n")
    nb.load_dataset_module(tmp_path)
    assert os.stat(path).st_mtime_ns != 0 and "changed by hand" not in open(path).read()


def loader_batches(loader):
    """Every batch of one epoch, as a list of (images, labels)."""
    return [(images.clone(), labels.clone()) for images, labels in loader]


def test_spawned_workers_import_the_dataset_module_and_give_the_baselines_batches(shapes_module):
    data = shapes_module.MadeUpShapes(12, source_size=48, image_size=16, seed=4)
    baseline = DataLoader(data, batch_size=4, drop_last=True, sampler=nb.shuffled(data))  # make_run's
    loader = nb.loader_with_workers(data, 4, workers=1, device=CPU)
    loader.multiprocessing_context = "spawn"  # a fresh Python, as on Windows and macOS
    with_workers, in_process = loader_batches(loader), loader_batches(baseline)
    assert len(with_workers) == len(in_process) == 3
    for (images_a, labels_a), (images_b, labels_b) in zip(in_process, with_workers):
        assert torch.equal(images_a, images_b) and torch.equal(labels_a, labels_b)


def test_a_class_that_lives_only_in_this_process_cannot_go_to_spawned_workers():
    # the notebook's fallback when the module file cannot be written: a module no other process can import
    module = nb.module_from_source(name="nb05_shapes_in_this_process_only")
    data = module.MadeUpShapes(4, source_size=32, image_size=8)
    loader = DataLoader(data, batch_size=2, num_workers=1, multiprocessing_context="spawn")
    # PyTorch warns about the pickling error, then it is raised
    with pytest.warns(UserWarning, match="pickle"), pytest.raises(Exception, match="(?i)pickl|import"):
        next(iter(loader))


def test_a_job_decodes_on_the_device_only_where_its_setting_says_so(shapes_module):
    on_device = tiny_job(nb, shapes_module)
    images, labels = on_device.decoded
    assert images.shape == (64, 3, 16, 16) and labels.tolist()[:5] == [0, 1, 2, 3, 0]
    assert on_device.test[0].shape == (32, 3, 16, 16) and on_device.device == CPU
    every_read = tiny_job(nb, shapes_module, feed="decode on every read")
    assert every_read.decoded is None and len(every_read.train) == 64


def test_a_setting_that_decodes_on_every_read_gets_endless_batches_from_a_dataloader(shapes_module):
    job = tiny_job(nb, shapes_module, feed="decode on every read")
    for variant in ({}, {"workers": 1}):  # the baseline, and Step 3's fix
        run = nb.make_run(job, variant)
        shapes = [tuple(images.shape) for images, _ in itertools.islice(run.batches, 64 // 8 + 2)]
        assert shapes == [(8, 3, 16, 16)] * (64 // 8 + 2)  # the loader starts again after an epoch
        run.batches.close()
