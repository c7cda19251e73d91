"""The pictures notebook 03 trains on: every picture is decoded, broken ones (an empty .jpg, a web page
named .jpg, a JPEG cut after 300 bytes) are moved aside in each path (a prepared folder, the stand-ins), too
few pictures mean the stand-in drawings, and the stand-in dataset is the same on every run. The
end-to-end run beside a prepared data/bird_or_not, with ddgs unavailable, is
tests/collection/test_broken_packages.py's."""
import pytest
import torch
from PIL import Image

from support.notebook_code import load_helpers_quietly
from support.photos import LABELS, files_in, jpeg_bytes, make_photo_folder, plant_broken_pictures


@pytest.fixture(scope="module")
def nb():
    return load_helpers_quietly("03")


# ---------------------------------------------------------------- broken pictures in the folder to train on

def test_picture_decodes_reads_every_pixel(nb, tmp_path):
    good, half = tmp_path / "good.jpg", tmp_path / "half.jpg"
    good.write_bytes(jpeg_bytes(400, 300))
    half.write_bytes(jpeg_bytes(400, 300)[:2000])  # opens, and passes PIL's verify(), but cannot be decoded
    with Image.open(half) as picture:
        picture.verify()
    assert nb.picture_decodes(good) and not nb.picture_decodes(half)
    for name in plant_broken_pictures(tmp_path / "broken"):
        assert not nb.picture_decodes(tmp_path / "broken" / name), name


def test_reuse_path_moves_broken_pictures_aside_and_the_data_loads(nb, tmp_path, capsys):
    photos = tmp_path / "bird_or_not"
    make_photo_folder(photos, 60)
    planted = plant_broken_pictures(photos / "bird")
    assert nb.count_images(photos, LABELS) == {"bird": 63, "forest": 60}

    folder, plan = nb.pictures_to_train_on("reuse", photos, tmp_path / "standin", LABELS, 50, 5)
    assert (folder, plan) == (photos, "reuse") and not (tmp_path / "standin").exists()
    assert nb.count_images(photos, LABELS) == {"bird": 60, "forest": 60}
    assert files_in(tmp_path / "bird_or_not_broken" / "bird") == planted  # moved aside, not deleted
    out = capsys.readouterr().out
    assert "3 picture(s)" in out and str(tmp_path / "bird_or_not_broken") in out

    dls = nb.bird_data_block(32).dataloaders(folder, device=torch.device("cpu"), bs=16, num_workers=0)
    assert sum(len(x) for loader in (dls.train, dls.valid) for x, _ in loader) >= 100  # every batch decodes


def test_a_second_check_finds_nothing_and_never_overwrites_what_was_moved_aside(nb, tmp_path, capsys):
    photos = tmp_path / "bird_or_not"
    make_photo_folder(photos, 3)
    first = plant_broken_pictures(photos / "forest")
    nb.check_pictures(photos, LABELS)
    capsys.readouterr()
    assert nb.check_pictures(photos, LABELS) == {"bird": 3, "forest": 3}
    assert capsys.readouterr().out == ""  # nothing to report

    (photos / "forest" / "empty.jpg").write_bytes(b"")  # the same name again, in a later run
    nb.check_pictures(photos, LABELS)
    aside = files_in(tmp_path / "bird_or_not_broken" / "forest")
    assert {name: aside[name] for name in first} == first and aside["empty_1.jpg"] == b""


def test_too_few_pictures_after_the_check_means_the_standins(nb, tmp_path, capsys):
    photos, standin = tmp_path / "bird_or_not", tmp_path / "bird_or_not_standin"
    make_photo_folder(photos, 50)
    plant_broken_pictures(photos / "bird")
    plant_broken_pictures(photos / "forest")
    counts = nb.count_images(photos, LABELS)
    assert nb.plan_dataset(counts, 52, False, True) == "reuse"  # the broken files still count here

    folder, plan = nb.pictures_to_train_on("reuse", photos, standin, LABELS, 52, 5)
    assert (folder, plan) == (standin, "stand-in")
    assert nb.count_images(standin, LABELS) == {"bird": 5, "forest": 5}
    assert nb.count_images(photos, LABELS) == {"bird": 50, "forest": 50}  # the photos stay where they were
    out = capsys.readouterr().out
    assert "Too few usable photos" in out and "STAND-IN DATA" in out


@pytest.mark.parametrize("per_class, minimum, expected", [(3, 3, "reuse"), (3, 4, "stand-in")])
def test_photos_are_used_from_exactly_the_minimum_per_class(nb, tmp_path, capsys, per_class, minimum, expected):
    photos, standin = tmp_path / "bird_or_not", tmp_path / "standin"
    make_photo_folder(photos, per_class)
    folder, plan = nb.pictures_to_train_on("reuse", photos, standin, LABELS, minimum, 2)
    assert plan == expected and folder == (photos if expected == "reuse" else standin)
    assert ("STAND-IN DATA" in capsys.readouterr().out) == (expected == "stand-in")


def test_standin_path_checks_its_folder_and_redraws_a_broken_drawing(nb, tmp_path, capsys):
    photos, standin = tmp_path / "bird_or_not", tmp_path / "bird_or_not_standin"
    nb.make_standin_dataset(standin, 5)
    planted = plant_broken_pictures(standin / "forest")
    cut_drawing = (standin / "bird" / "standin_bird_002.jpg").read_bytes()[:300]
    (standin / "bird" / "standin_bird_002.jpg").write_bytes(cut_drawing)

    folder, plan = nb.pictures_to_train_on("stand-in", photos, standin, LABELS, 3, 5)
    assert (folder, plan) == (standin, "stand-in")
    assert nb.count_images(standin, LABELS) == {"bird": 5, "forest": 5}
    assert all(nb.picture_decodes(file) for file in standin.rglob("*.jpg"))  # the cut drawing is drawn again
    assert files_in(standin.with_name("bird_or_not_standin_broken") / "forest") == planted
    assert files_in(standin.with_name("bird_or_not_standin_broken") / "bird") == {
        "standin_bird_002.jpg": cut_drawing}
    assert "STAND-IN DATA" in capsys.readouterr().out


# ---------------------------------------------------------------- stand-in data, batch size, learner weights

def test_standin_dataset_is_deterministic_and_reruns_add_nothing(nb, tmp_path):
    assert nb.make_standin_dataset(tmp_path, 5) == {"bird": 5, "forest": 5}
    first = {file.name: file.read_bytes() for file in tmp_path.rglob("*.jpg")}
    assert nb.make_standin_dataset(tmp_path, 5) == {"bird": 5, "forest": 5}
    assert {file.name: file.read_bytes() for file in tmp_path.rglob("*.jpg")} == first
    other = tmp_path / "bird" / "a_learners_photo.jpg"
    other.write_bytes(jpeg_bytes(20, 20))
    assert nb.make_standin_dataset(tmp_path, 3) == {"bird": 4, "forest": 3}  # only surplus drawings go
    assert other.exists()
    with Image.open(tmp_path / "bird" / "standin_bird_000.jpg") as picture:
        assert picture.size == (256, 192) and picture.mode == "RGB"
