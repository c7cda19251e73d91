"""tools/make_photo_zip.py, the script an instructor runs to make notebook 03's photo zip: real folders and real
zips in a temporary folder; the round trip through the notebook's own unpacking is in test_03_photo_zip.py."""
import subprocess
import sys
import zipfile

import pytest

from support.notebook_code import REPO
from support.photos import jpeg_bytes, make_photo_folder, plant_broken_pictures

sys.path.insert(0, str(REPO / "tools"))
import make_photo_zip  # noqa: E402


def test_the_zip_holds_every_photo_that_decodes_under_the_folders_name(tmp_path):
    source = tmp_path / "bird_or_not"
    make_photo_folder(source, 3)
    planted = plant_broken_pictures(source / "forest")  # an empty file, a web page, a JPEG cut short
    (source / "manifest.json").write_text("{}")  # the search's bookkeeping: not a photo
    (source / "bird" / "notes.txt").write_text("not a picture")
    counts = make_photo_zip.make_photo_zip(source, tmp_path / "out" / "photos.zip")
    assert counts == {"bird": (3, 1), "forest": (3, len(planted))}
    with zipfile.ZipFile(tmp_path / "out" / "photos.zip") as archive:
        names = archive.namelist()
        assert sorted(names) == sorted(f"bird_or_not/{label}/photo_{index:03d}.jpg"
                                       for label in ("bird", "forest") for index in range(3))
        assert archive.read("bird_or_not/bird/photo_002.jpg") == (source / "bird" / "photo_002.jpg").read_bytes()
        assert {info.compress_type for info in archive.infolist()} == {zipfile.ZIP_STORED}


def test_other_labels_for_the_exercise(tmp_path):
    source = tmp_path / "cat_or_dog"
    for label in ("cat", "dog"):
        (source / label).mkdir(parents=True)
        (source / label / "a.png").write_bytes(jpeg_bytes(10, 10))  # a JPEG named .png still decodes
    counts = make_photo_zip.make_photo_zip(source, tmp_path / "cat_or_dog.zip", labels=("cat", "dog"))
    assert counts == {"cat": (1, 0), "dog": (1, 0)}


@pytest.mark.parametrize("per_class, code", [(50, 0), (49, 1)])  # notebook 03 needs 50 per class at full size
def test_the_command_line_writes_beside_the_source_and_warns_below_the_notebooks_minimum(tmp_path, capsys,
                                                                                       per_class, code):
    source = tmp_path / "bird_or_not"
    make_photo_folder(source, per_class)
    assert make_photo_zip.main([str(source)]) == code
    out = capsys.readouterr().out
    assert (tmp_path / "bird_or_not.zip").is_file() and f"bird: {per_class} photos" in out
    assert ("Warning: fewer than 50 photos for bird, forest" in out) == (code == 1)


def test_a_source_without_the_label_folders_is_refused_plainly(tmp_path, capsys):
    (tmp_path / "photos" / "bird").mkdir(parents=True)
    assert make_photo_zip.main([str(tmp_path / "photos"), "-o", str(tmp_path / "x.zip")]) == 2
    assert "has no subfolder forest" in capsys.readouterr().out and not (tmp_path / "x.zip").exists()


def test_it_runs_as_a_script_with_its_defaults_documented():
    done = subprocess.run([sys.executable, str(REPO / "tools" / "make_photo_zip.py"), "--help"],
                          capture_output=True, text=True, check=True)
    assert "data/bird_or_not" in done.stdout and "--labels" in done.stdout
