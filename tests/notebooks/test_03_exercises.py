"""Notebook 03's exercises: each check given a likely wrong answer, and the message meant for it."""
import pytest
import torch
from PIL import Image

from support.notebook_code import load_helpers_quietly


@pytest.fixture(scope="module")
def nb():
    return load_helpers_quietly("03")


@pytest.fixture(scope="module")
def tiny_dls(nb, tmp_path_factory):
    folder = tmp_path_factory.mktemp("standin")
    nb.make_standin_dataset(folder, 5)
    return nb.bird_data_block(32).dataloaders(folder, device=torch.device("cpu"), bs=2, num_workers=0)


# ---------------------------------------------------------------- the exercises: a likely wrong answer each
# The untouched starters (NOT DONE YET) and the answers (PASSED) are checked in the nbval run of the notebook.

@pytest.fixture(scope="module")
def untrained_learner(nb, tiny_dls):
    return nb.vision_learner(tiny_dls, nb.resnet18, metrics=nb.error_rate, pretrained=False)


@pytest.mark.exercise("03", "error-rate")
def test_exercise_1_the_share_it_gets_right_is_named_as_such(nb, untrained_learner, tiny_dls):
    model = untrained_learner
    files = [*tiny_dls.valid_ds.items, *tiny_dls.train_ds.items][:3]  # three files: a share is never 0.5

    def share_right(files):  # the likely slip: == where != was meant
        probabilities, _ = model.get_preds(dl=model.dls.test_dl(files))
        labels = torch.tensor([model.dls.vocab.o2i[nb.parent_label(file)] for file in files])
        return (probabilities.argmax(dim=1) == labels).float().mean()

    expected = nb.reference_error_rate(model, files)
    feedback = nb.check_error_rate(share_right, model=model, files=files)
    assert feedback.startswith(f"NOT YET RIGHT: for the 3 pictures it returned {1 - expected:.3f}; the model gets "
                               f"{round(3 * expected)} wrong, an error_rate of {expected:.3f}: that is the share "
                               f"it gets right")
    assert nb.check_error_rate(lambda files: 1 / 0, model=model, files=files).startswith(
        "NOT YET RIGHT: it raised ZeroDivisionError")
    returned = []

    def mean_forgotten(files):  # one 1 or 0 per file, not their share
        probabilities, _ = model.get_preds(dl=model.dls.test_dl(files))
        labels = torch.tensor([model.dls.vocab.o2i[nb.parent_label(file)] for file in files])
        returned.append((probabilities.argmax(dim=1) != labels).float())
        return returned[-1]

    feedback = nb.check_error_rate(mean_forgotten, model=model, files=files)
    assert feedback == f"NOT YET RIGHT: it returned {nb.short(returned[0])}, not one number."
    assert nb.short(returned[0]).startswith("tensor([") and nb.short(returned[0]).endswith(" (a Tensor)")


@pytest.mark.exercise("03", "data-block")
def test_exercise_2_a_resize_that_crops_and_a_percentage_are_named(nb, tmp_path):
    nb.make_standin_dataset(tmp_path, 10)  # 20 pictures: 6 of them are 30 %
    squish = [nb.Resize(48, method="squish")]
    crop = nb.check_data_block(nb.RandomSplitter(valid_pct=0.3, seed=42), [nb.Resize(48)], folder=tmp_path)
    assert crop.startswith("NOT YET RIGHT: a 96 x 48 picture came out 48 x 48, but its left and right edges are "
                           "cut away: Resize crops unless you pass method=\"squish\".")
    percent = nb.check_data_block(nb.RandomSplitter(valid_pct=30, seed=42), squish, folder=tmp_path)
    assert percent == ("NOT YET RIGHT: your validation set holds 20 of the 20 pictures; 30% of them is 6. "
                       "valid_pct is a share: 0.3, not 30.")
    another_seed = nb.check_data_block(nb.RandomSplitter(valid_pct=0.3, seed=24), squish, folder=tmp_path)
    assert another_seed == ("NOT YET RIGHT: your validation set holds 6 pictures, as it should, but not the "
                            "ones RandomSplitter picks with seed=42.")
    the_split = nb.RandomSplitter(valid_pct=0.3, seed=42)(nb.get_image_files(tmp_path))  # not the splitter
    assert nb.check_data_block(the_split, squish, folder=tmp_path) == (
        "NOT YET RIGHT: the DataBlock cannot use them (TypeError: 'tuple' object is not callable)")
    small = nb.check_data_block(nb.RandomSplitter(valid_pct=0.3, seed=42), [nb.Resize(64, method="squish")],
                                folder=tmp_path)
    assert small == "NOT YET RIGHT: a 96 x 48 picture came out 64 x 64 pixels; 48 x 48 is wanted."


@pytest.mark.exercise("03", "readable")
def test_exercise_3_a_check_that_reads_only_the_header_misses_the_cut_jpeg(nb):
    def header_only(file):  # the likely slip: Image.open (and .verify()) read the header, not the pixels
        try:
            with Image.open(file) as picture:
                picture.verify()
        except Exception:
            return False
        return True

    assert nb.check_readable(header_only) == (
        "NOT YET RIGHT: cut_short.jpg, a JPEG cut short after 2,000 bytes, is not readable; it returned True. "
        "Image.open reads only the header: .load() decodes the pixels.")
    no_try = nb.check_readable(lambda file: Image.open(file).load() is not None)
    assert no_try == ("NOT YET RIGHT: on empty.jpg, an empty file, it raised UnidentifiedImageError: return "
                      "False instead (try ... except).")
