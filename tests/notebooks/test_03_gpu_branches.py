"""Notebook 03's GPU branches, run with stand-ins: Going deeper trains once more on the CPU only when a GPU
did the first training, the batches are asked for on the device, and the training time is read after the
GPU finished."""
import time
import types
from pathlib import Path

import pytest
import torch

from support.notebook_code import load_helpers_quietly, run_cell


@pytest.fixture(scope="module")
def nb():
    return load_helpers_quietly("03")


# ---------------------------------------------------------------- Going deeper's GPU branch: train again on the CPU

def run_cpu_comparison_cell(nb, device):
    """Run the notebook's own 'same training on the CPU' cell with `device` as the chosen device; the data
    block, the learner and the training are stand-ins that record which device they were asked for."""
    asked = []

    class Block:
        def dataloaders(self, folder, device=None, bs=None):
            asked.append(("dataloaders", device, bs))
            return "cpu dataloaders"

    def vision_learner(dls, arch, metrics=None, pretrained=True):
        asked.append(("vision_learner", dls, arch, pretrained))
        return "cpu learner"

    def train(learn, pretrained, epochs, scratch_epochs):
        asked.append(("train", learn, pretrained, epochs, scratch_epochs))
        time.sleep(0.02)

    space = {**vars(nb), "device": device, "train_seconds": 0.01, "bird_data_block": lambda size: Block(),
             "image_size": 64, "data_folder": "data/bird_or_not", "batch_size": 16, "pretrained": True,
             "vision_learner": vision_learner, "train": train, "EPOCHS": 3, "SCRATCH_EPOCHS": 12}
    out = run_cell("03", "cpu-comparison", space)
    return space, asked, out


@pytest.mark.gpu_branch("03", "cell cpu-comparison: device.type != 'cpu' and COMPARE_WITH_CPU")
def test_on_a_gpu_going_deeper_trains_once_more_on_the_cpu(nb):
    space, asked, out = run_cpu_comparison_cell(nb, torch.device("cuda"))
    assert asked == [("dataloaders", torch.device("cpu"), 16), ("vision_learner", "cpu dataloaders", nb.resnet18, True),
                     ("train", "cpu learner", True, 3, 12)]
    assert [row["device"] for row in space["timings"][:2]] == ["cuda", "cpu"]
    assert space["timings"][1]["train_s"] >= 0.02
    assert out.startswith("Speed-up of cuda over the CPU, this run: ") and " x" in out


def test_on_the_cpu_going_deeper_does_not_train_again(nb):
    space, asked, out = run_cpu_comparison_cell(nb, torch.device("cpu"))
    assert asked == [] and [row["device"] for row in space["timings"]] == ["cpu", "cuda", "cpu"]
    assert "the time above is already the CPU time" in out


# ---------------------------------------------------------------- what a CPU cannot show: the device reaches fastai

class RecordingBlock:
    """A DataBlock stand-in whose dataloaders record the device and batch size they were asked for."""

    def __init__(self, **arguments):
        self.arguments, self.asked = arguments, []

    def dataloaders(self, folder, device=None, bs=None):
        self.asked.append((device, bs))
        return types.SimpleNamespace(show_batch=lambda **kwargs: None)


def test_on_a_gpu_the_batches_are_asked_for_on_the_device(nb):
    blocks = []

    def data_block(**arguments):
        blocks.append(RecordingBlock(**arguments))
        return blocks[-1]

    cuda = torch.device("cuda")
    space = {**vars(nb), "DataBlock": data_block, "device": cuda, "image_size": 192,
             "data_folder": Path("bird_or_not"), "batch_size": 16}
    run_cell("03", "datablock", space)
    (block,) = blocks
    assert block.asked == [(cuda, 16)]  # .dataloaders(data_folder, device=device, bs=batch_size)
    assert block.arguments["get_y"] is nb.parent_label and block.arguments["item_tfms"][0].size == (192, 192)


def test_on_a_gpu_the_training_time_is_read_after_the_gpu_finished(nb, monkeypatch):
    """time_it synchronizes the GPU before it starts the clock and after the training, as the prose says."""
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append(("synchronize", device)))
    recorder = types.SimpleNamespace(metric_names=["epoch", "train_loss", "valid_loss", "error_rate", "time"],
                                     values=[[0.5, 0.4, 0.05]])
    learn = types.SimpleNamespace(recorder=recorder, fine_tune=lambda epochs: events.append(("fine_tune", epochs)))

    def vision_learner(dls, arch, metrics=None, pretrained=True):
        events.append(("vision_learner", dls, arch, metrics, pretrained))
        return learn

    space = {**vars(nb), "device": torch.device("cuda"), "pretrained": True, "plan": "reuse", "EPOCHS": 3,
             "SCRATCH_EPOCHS": 12, "dls": "dls", "vision_learner": vision_learner}
    out = run_cell("03", "train", space)
    cuda = torch.device("cuda")
    assert events == [("vision_learner", "dls", nb.resnet18, nb.error_rate, True),
                      ("synchronize", cuda), ("fine_tune", 3), ("synchronize", cuda)]
    assert out.startswith("Trained on cuda in ") and space["final_error_rate"] == 0.05
    assert "as in fast.ai's notebook, the pretrained network learned the task" in out
