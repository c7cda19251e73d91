"""Notebook 03's training with made-up data: the DataBlock's batches and the batch size, the device
fastai is handed, fine_tune's recipe and what it freezes, the pretrained weights from a stand-in
resnet18 file in a temporary TORCH_HOME (and the fall-back to random weights), the training cell's
verdicts, the export a broken fastai cannot do, and the figures the run reports."""
import io
import socket
import types
import urllib.error
from pathlib import Path

import pytest
import torch
import torchvision

from support.notebook_code import load_helpers_quietly, notebook_constant, run_cell


@pytest.fixture(scope="module")
def nb():
    return load_helpers_quietly("03")


def test_what_fine_tune_freezes_is_what_going_deeper_says(nb, tiny_dls):
    """What fine_tune's frozen epoch trains (the whole new head and the body's BatchNorm layers, fastai's
    train_bn=True) and the discriminative learning rates of the unfrozen epochs, checked against fastai."""
    learn = nb.vision_learner(tiny_dls, nb.resnet18, pretrained=False)
    learn.freeze()  # what fine_tune does first
    body, head = learn.model[0], learn.model[1]
    assert all(p.requires_grad for p in head.parameters()) and len(list(head.children())) > 3
    norm = (torch.nn.BatchNorm2d,)
    for module in body.modules():
        if isinstance(module, (torch.nn.Conv2d, *norm)):
            assert all(p.requires_grad == isinstance(module, norm) for p in module.parameters())
    learn.unfreeze()
    learn.opt.set_hyper("lr", slice(1e-5, 1e-3))  # fine_tune's slice(base_lr / lr_mult, base_lr)
    assert [round(h["lr"], 8) for h in learn.opt.hypers] == [1e-5, 1e-4, 1e-3]  # earlier layers learn slower


def test_the_device_argument_overrides_fastais_default_device(nb, tmp_path, monkeypatch):
    """Without device=, fastai's dataloaders use default_device() (the GPU when there is one)."""
    import fastai.data.core
    nb.make_standin_dataset(tmp_path, 5)
    block = nb.bird_data_block(32)
    monkeypatch.setattr(fastai.data.core, "default_device", lambda *args: torch.device("meta"))
    assert block.dataloaders(tmp_path, bs=2, num_workers=0).device == torch.device("meta")  # fastai's pick
    chosen = block.dataloaders(tmp_path, device=torch.device("cpu"), bs=2, num_workers=0)
    assert chosen.device == torch.device("cpu")


def test_the_training_recipe_follows_the_weights(nb):
    calls = []

    class FakeLearner:
        def fine_tune(self, epochs):
            calls.append(("fine_tune", epochs))

        def fit_one_cycle(self, epochs, lr):
            calls.append(("fit_one_cycle", epochs, lr))

    nb.train(FakeLearner(), pretrained=True, epochs=3, scratch_epochs=12)
    nb.train(FakeLearner(), pretrained=False, epochs=3, scratch_epochs=12)
    assert calls == [("fine_tune", 3), ("fit_one_cycle", 12, nb.SCRATCH_LR)]
    assert notebook_constant("03", "SCRATCH_EPOCHS", FAST=False) >= 3 * (
        1 + notebook_constant("03", "EPOCHS", FAST=False))


def test_the_training_cell_says_what_its_error_rate_means(nb):
    good_standin = nb.interpret_training(0.05, pretrained=False, standin=True)
    assert "95%" in good_standin and "tells the drawings apart" in good_standin
    assert "Stand-in drawings" in good_standin and "nothing about birds" in good_standin
    poor_standin = nb.interpret_training(0.4, pretrained=False, standin=True)
    assert "not tell the drawings apart" in poor_standin and "more epochs" in poor_standin
    random_photos = nb.interpret_training(0.3, pretrained=False, standin=False)
    assert "random weights" in random_photos and "pretrained weights" in random_photos
    assert "learned the task" in nb.interpret_training(0.0, pretrained=True, standin=False)
    assert "Going deeper C shows the mistakes" in nb.interpret_training(0.25, pretrained=True, standin=False)


@pytest.mark.parametrize("error_rate, good", [(0.1, True), (0.1001, False)])  # the verdicts' edge: 10 % wrong
def test_the_training_verdicts_at_their_edge(nb, error_rate, good):
    photos = nb.interpret_training(error_rate, pretrained=True, standin=False)
    assert ("learned the task" in photos) == good and ("the mistakes" in photos) == (not good)
    drawings = nb.interpret_training(error_rate, pretrained=True, standin=True)
    assert ("it tells the drawings apart" in drawings) == good
    assert "random weights" not in photos and "random weights" in nb.interpret_training(
        error_rate, pretrained=False, standin=False)


# The end-to-end run with a prepared folder, broken files, no ddgs and a fastai that cannot export is
# tests/collection/test_broken_packages.py's: there the setup cell itself finds the export-only breakage.


def test_export_is_skipped_only_when_the_setup_cell_says_fastai_cannot_export(nb):
    why = {"fastai export": "fastai 2.8.8 cannot export a trained model beside plum-dispatch 2.10.1.",
           "ddgs": "not installed"}
    assert nb.export_skip_reason(set(), {}) is None
    assert nb.export_skip_reason({"ddgs"}, why) is None  # another missing package costs no export
    skipped = nb.export_skip_reason({"ddgs", "fastai export"}, why)
    assert skipped.startswith("Export skipped: fastai 2.8.8 cannot export a trained model beside "
                              "plum-dispatch 2.10.1. The model")  # the reason, one period
    assert "learn.export" in skipped and "load_learner" in skipped  # what a working install does
    assert "cannot export" in nb.export_skip_reason({"fastai export"}, {})  # a reason even without one


def test_the_export_cell_skips_saving_with_the_setup_cells_reason(nb, tmp_path):
    """The export cell, run with what the setup cell found (UNAVAILABLE, UNAVAILABLE_WHY): a fastai that cannot
    export is never asked to, and the cell prints why."""
    class NoExport:
        def export(self, path):
            raise AssertionError("the export must be skipped")

    why = {"fastai export": "fastai 2.8.8 cannot export a trained model beside plum-dispatch 2.10.1."}
    space = {**vars(nb), "DATA_DIR": tmp_path, "data_folder": Path("bird_or_not"), "learn": NoExport(),
             "UNAVAILABLE": set(why), "UNAVAILABLE_WHY": why}
    out = run_cell("03", "export", space)
    assert out.startswith("Export skipped: fastai 2.8.8 cannot export") and not list(tmp_path.iterdir())


@pytest.mark.parametrize("n_train, expected", [(32, 8), (128, 32), (256, 64), (255, 32), (5000, 64), (10, 2),
                                               (8, 2), (7, 1), (3, 1), (0, 1)])
def test_choose_batch_size(nb, n_train, expected):
    batch_size = nb.choose_batch_size(n_train)
    assert batch_size == expected
    assert batch_size == 1 or n_train // batch_size >= 4


@pytest.fixture(scope="module")
def tiny_dls(nb, tmp_path_factory):
    folder = tmp_path_factory.mktemp("standin")
    nb.make_standin_dataset(folder, 5)
    return nb.bird_data_block(32).dataloaders(folder, device=torch.device("cpu"), bs=2, num_workers=0)


def test_a_batch_larger_than_the_training_set_gives_no_batch(nb, tiny_dls):
    n_train = len(tiny_dls.train_ds)
    assert n_train == 8  # 10 pictures, 20 % held back for validation
    assert len(tiny_dls.train.new(bs=n_train + 1)) == 0  # the trap the notebook warns about
    assert len(tiny_dls.train.new(bs=nb.choose_batch_size(n_train))) >= 4


DOWNLOAD_TIMEOUTS = []  # the socket time limit in force each time torch.hub tried to download


@pytest.fixture
def torch_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))

    def no_network(url, *args, **kwargs):
        DOWNLOAD_TIMEOUTS.append(socket.getdefaulttimeout())
        raise urllib.error.URLError("no network in this test")

    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    DOWNLOAD_TIMEOUTS.clear()
    return tmp_path


def test_pretrained_path_loads_weights_from_torch_home(nb, tiny_dls, torch_home, capsys):
    standin = torchvision.models.resnet18(weights=None).state_dict()  # random weights, real resnet18 layout
    checkpoints = torch_home / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    torch.save(standin, checkpoints / "resnet18-f37072fd.pth")

    assert nb.pretrained_weights_ready(nb.resnet18) is True and capsys.readouterr().out == ""
    learn = nb.vision_learner(tiny_dls, nb.resnet18, metrics=nb.error_rate, pretrained=True)  # Step 4's call
    assert DOWNLOAD_TIMEOUTS == []  # both read the file in TORCH_HOME: no download tried
    first_conv = learn.model[0][0].weight
    assert torch.equal(first_conv.detach().cpu(), standin["conv1.weight"])


def test_without_weights_it_warns_and_says_random_weights(nb, torch_home, capsys):
    socket.setdefaulttimeout(12.5)  # a value of the caller's that the check must give back
    try:
        assert nb.pretrained_weights_ready(nb.resnet18, socket_timeout=7) is False
        assert socket.getdefaulttimeout() == 12.5
    finally:
        socket.setdefaulttimeout(None)
    assert DOWNLOAD_TIMEOUTS == [7]  # the download ran with a time limit, so it cannot hang
    out = capsys.readouterr().out
    assert "Warning: the pretrained weights could not be loaded (URLError" in out
    assert "Random weights instead" in out and str(torch_home / "hub" / "checkpoints") in out


def test_a_damaged_weights_file_falls_back_too(nb, torch_home, capsys):
    checkpoints = torch_home / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    buffer = io.BytesIO()
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), buffer)
    (checkpoints / "resnet18-f37072fd.pth").write_bytes(buffer.getvalue()[:1000])  # cut short
    assert nb.pretrained_weights_ready(nb.resnet18) is False
    assert "RuntimeError" in capsys.readouterr().out


# ---------------------------------------------------------------- the figures this run reports

@pytest.mark.parametrize("plan, pretrained, fallback", [
    ("search", True, None), ("reuse", True, None), ("stand-in", True, "stand-in pictures"),
    ("reuse", False, "random weights"), ("stand-in", False, "stand-in pictures, random weights")])
def test_report_figures_gets_the_runs_figures_and_says_what_stood_in(nb, plan, pretrained, fallback):
    reported = []
    dls = types.SimpleNamespace(train_ds=range(400), valid_ds=range(100))
    space = {**vars(nb), "plan": plan, "pretrained": pretrained, "EPOCHS": 3, "SCRATCH_EPOCHS": 12, "dls": dls,
             "image_size": 192, "batch_size": 64, "train_seconds": 48.0, "final_error_rate": 0.0125,
             "report_figures": lambda fallback=None, **figures: reported.append((fallback, figures))}
    assert run_cell("03", "report", space) == ""  # it shows nothing a learner reads
    epochs = 4 if pretrained else 12
    assert reported == [(fallback, {"pictures_train": 400, "pictures_valid": 100, "image_size": 192,
                                    "batch_size": 64, "epochs": epochs, "train_s": 48.0,
                                    "train_s_per_epoch": round(48.0 / epochs, 2), "error_rate": 0.0125})]
