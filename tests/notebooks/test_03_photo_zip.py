"""A workshop's photo zip for notebook 03 (tools/make_photo_zip.py makes it): unpacked from a local path,
from Kaggle's input folder or from Colab's upload, refused whole when a name leaves the folder, broken
pictures in it moved aside; the plan and check cells that bring it in."""
import functools
import io
import sys
import types
import zipfile
from pathlib import Path

import pytest

from support.notebook_code import load_helpers_quietly, run_cell
from support.photos import LABELS, files_in, jpeg_bytes, make_photo_folder

import make_photo_zip  # noqa: E402  (tools/make_photo_zip.py, the instructor's script; conftest.py puts tools/ on the path)


@pytest.fixture(scope="module")
def nb():
    return load_helpers_quietly("03")


# Real zips made here: a good one (made by tools/make_photo_zip.py, as an instructor makes it), one with broken
# pictures, and ones whose names try to leave the folder (zip slip). Colab's upload is a stand-in shaped like
# google.colab.files.upload() (colabtools' google/colab/files.py): it prints "Saving <name> to <name>", writes each
# file into the working folder and returns {file name: its bytes}, {} when the learner clicks "Cancel upload".

def zip_bytes(members):
    """A real zip, in memory, holding {member name: bytes}."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def prepared_zip(tmp_path, per_class=4, broken=False):
    """The zip an instructor makes with tools/make_photo_zip.py from a run's bird_or_not folder, as bytes;
    with broken=True, the broken files of a real folder added under bird/ (a zip made by hand keeps them)."""
    source = tmp_path / "instructor" / "bird_or_not"
    make_photo_folder(source, per_class)
    path = tmp_path / "instructor" / "bird_or_not.zip"
    assert make_photo_zip.make_photo_zip(source, path) == {"bird": (per_class, 0), "forest": (per_class, 0)}
    if broken:
        with zipfile.ZipFile(path, "a") as archive:
            for name, data in {"empty.jpg": b"", "page.jpg": b"<html>Access denied</html>",
                               "cut.jpg": jpeg_bytes(400, 300)[:300]}.items():
                archive.writestr(f"bird_or_not/bird/{name}", data)
    return path.read_bytes()


def test_a_good_zip_from_the_instructors_script_unpacks_into_the_dataset_folder(nb, tmp_path, capsys):
    data = prepared_zip(tmp_path, per_class=4)
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert sorted(names)[0] == "bird_or_not/bird/photo_000.jpg" and len(names) == 8
    dataset = tmp_path / "data" / "bird_or_not"
    assert nb.unpack_photos(data, dataset, LABELS) == 8
    assert nb.count_images(dataset, LABELS) == {"bird": 4, "forest": 4}
    assert (dataset / "bird" / "photo_001.jpg").read_bytes() == (
        tmp_path / "instructor" / "bird_or_not" / "bird" / "photo_001.jpg").read_bytes()
    assert "Unpacked 8 new files from the uploaded zip" in capsys.readouterr().out
    assert nb.unpack_photos(data, dataset, LABELS) == 0  # again: nothing overwritten, nothing added


def test_a_zip_with_broken_pictures_is_unpacked_and_the_check_moves_them_aside(nb, tmp_path, capsys):
    path = tmp_path / "bird_or_not.zip"
    path.write_bytes(prepared_zip(tmp_path, per_class=3, broken=True))
    dataset = tmp_path / "data" / "bird_or_not"
    assert nb.unpack_photos(path, dataset, LABELS) == 9
    folder, plan = nb.pictures_to_train_on("reuse", dataset, tmp_path / "standin", LABELS, 3, 2)
    assert (folder, plan) == (dataset, "reuse")
    assert nb.count_images(dataset, LABELS) == {"bird": 3, "forest": 3}
    assert sorted(files_in(tmp_path / "data" / "bird_or_not_broken" / "bird")) == ["cut.jpg", "empty.jpg",
                                                                                   "page.jpg"]
    assert "3 picture(s)" in capsys.readouterr().out


@pytest.mark.parametrize("evil", ["../evil.jpg", "bird_or_not/../../evil.jpg", "bird/../../../evil.jpg",
                                  "/tmp/evil.jpg", "..\\evil.jpg", "bird\\..\\..\\evil.jpg", "C:/evil.jpg",
                                  "C:\\evil.jpg", "\\evil.jpg"])
def test_a_zip_with_a_name_that_leaves_the_folder_is_refused_whole(nb, tmp_path, capsys, evil):
    good = {f"bird_or_not/{label}/photo_{index}.jpg": jpeg_bytes(20, 20) for label in LABELS for index in range(3)}
    data = zip_bytes({**good, evil: jpeg_bytes(20, 20)})
    dataset = tmp_path / "inside" / "data" / "bird_or_not"
    assert nb.member_problem(evil) is not None
    assert nb.unpack_photos(data, dataset, LABELS) == 0
    assert not dataset.exists()  # nothing at all was written: the good members neither
    assert sorted(path.name for path in tmp_path.rglob("*")) == []  # and nothing outside
    out = capsys.readouterr().out
    assert out.startswith(f"Refused the uploaded zip: its member {evil!r} is ") and "Nothing was unpacked" in out


@pytest.mark.parametrize("name", ["bird_or_not/bird/a..b.jpg", "bird/x.jpg", "photos/2026/bird/x.jpg",
                                  "./bird/x.jpg"])
def test_names_that_stay_inside_are_accepted(nb, tmp_path, name):
    assert nb.member_problem(name) is None
    assert nb.unpack_photos(zip_bytes({name: jpeg_bytes(10, 10)}), tmp_path / "d", LABELS) == 1
    assert [path.relative_to(tmp_path / "d").as_posix() for path in (tmp_path / "d").rglob("*.jpg")] == [
        f"bird/{name.rsplit('/', 1)[1]}"]


def test_only_pictures_in_a_label_folder_are_taken_and_macos_copies_are_left_out(nb, tmp_path):
    data = zip_bytes({"bird_or_not/manifest.json": b"{}", "bird_or_not/bird/": b"", "bird_or_not/bird/x.jpg": b"1",
                      "__MACOSX/bird_or_not/bird/._x.jpg": b"2", "bird_or_not/bird/.DS_Store": b"3",
                      "bird_or_not/cat/y.jpg": b"4", "bird_or_not/forest/z.jpg": b"5"})
    assert nb.unpack_photos(data, tmp_path / "d", LABELS) == 2
    assert sorted(path.relative_to(tmp_path / "d").as_posix() for path in (tmp_path / "d").rglob("*")
                  if path.is_file()) == ["bird/x.jpg", "forest/z.jpg"]


def test_a_file_that_is_no_zip_and_a_damaged_member_are_said_plainly(nb, tmp_path, capsys):
    assert nb.unpack_photos(b"<html>not a zip</html>", tmp_path / "d", LABELS) == 0
    assert "BadZipFile" in capsys.readouterr().out
    assert nb.unpack_photos(None, tmp_path / "d", LABELS) == 0  # a cancelled upload: nothing to do, quietly
    assert capsys.readouterr().out == ""

    picture = jpeg_bytes(30, 30)
    data = bytearray(zip_bytes({"bird/good.jpg": picture, "bird/bad.jpg": picture}))
    start = data.rindex(picture)  # the second member's bytes (stored: zipfile keeps small members as they are
    data[start + 100] ^= 0xFF  # ... or compresses them; either way its CRC-32 no longer matches)
    assert nb.unpack_photos(bytes(data), tmp_path / "d", LABELS) == 1
    assert "1 damaged members left out" in capsys.readouterr().out
    assert [path.name for path in (tmp_path / "d" / "bird").iterdir()] == ["good.jpg"]


def test_a_missing_zip_names_the_error(nb, tmp_path, capsys):
    nb.unpack_photos(tmp_path / "nowhere.zip", tmp_path / "d", LABELS)
    out = capsys.readouterr().out
    assert out.startswith(f"Cannot open {tmp_path / 'nowhere.zip'} as a zip (FileNotFoundError") and not (
        tmp_path / "d").exists()


def kaggle_input(tmp_path, unpacked=True):
    """Kaggle's /kaggle/input with two attached datasets: another one, and the workshop's photos, which Kaggle
    unpacks from the uploaded zip into folders (unpacked=True) or keeps as the zip."""
    root = tmp_path / "kaggle" / "input"
    (root / "another-dataset" / "bird").mkdir(parents=True)  # a 'bird' folder alone is not the photos
    (root / "another-dataset" / "train.zip").write_bytes(zip_bytes({"a.csv": b"1"}))  # nor is any zip
    workshop = root / "bird-photos-for-the-workshop"
    workshop.mkdir()
    if unpacked:
        make_photo_folder(workshop / "bird_or_not", 3)
    else:
        (workshop / "bird_or_not.zip").write_bytes(prepared_zip(tmp_path, per_class=3))
    return root, workshop


@pytest.mark.parametrize("unpacked", [True, False])
def test_a_kaggle_dataset_is_found_and_copied_into_the_dataset_folder(nb, tmp_path, unpacked):
    root, workshop = kaggle_input(tmp_path, unpacked)
    dataset = tmp_path / "working" / "data" / "bird_or_not"
    found = nb.find_prepared_photos("", [tmp_path / "working", dataset.parent], root, dataset, LABELS)
    assert found == (workshop / "bird_or_not" if unpacked else workshop / "bird_or_not.zip")
    assert nb.unpack_photos(found, dataset, LABELS) == 6
    assert nb.count_images(dataset, LABELS) == {"bird": 3, "forest": 3}
    if unpacked:
        assert nb.count_images(workshop / "bird_or_not", LABELS) == {"bird": 3, "forest": 3}  # read only


def test_where_the_notebook_looks_for_prepared_photos_and_in_which_order(nb, tmp_path):
    root, workshop = kaggle_input(tmp_path)
    here, data = tmp_path / "here", tmp_path / "here" / "data"
    dataset = data / "bird_or_not"
    data.mkdir(parents=True)
    look = functools.partial(nb.find_prepared_photos, folders=[here, data], kaggle_input=root, dataset_dir=dataset,
                             labels=LABELS)
    assert look("") == workshop / "bird_or_not"  # Kaggle: the attached dataset
    (data / "bird_or_not (1).zip").write_bytes(b"")  # a second upload on Colab gets a name like this
    assert look("") == data / "bird_or_not (1).zip"
    (here / "bird_or_not.zip").write_bytes(b"")  # beside the notebook (Colab's Files pane): first
    assert look("") == here / "bird_or_not.zip"
    assert look("/content/drive/MyDrive/photos.zip") == Path("/content/drive/MyDrive/photos.zip")  # PHOTO_ZIP wins
    assert nb.find_prepared_photos("", [tmp_path / "none"], tmp_path / "no_kaggle", dataset, LABELS) is None


@pytest.mark.parametrize("depth, found", [(4, True), (5, False)])
def test_the_kaggle_search_stops_at_a_depth(nb, tmp_path, depth, found):
    root = tmp_path / "input"
    deep = root.joinpath(*[f"level{index}" for index in range(depth)])
    make_photo_folder(deep, 1)
    assert (nb.find_prepared_photos("", [], root, tmp_path / "bird_or_not", LABELS) == deep) == found


def plan_namespace(nb, tmp_path, monkeypatch, **values):
    """What the plan cell and the check cell read: the helpers, and the sizes and folders of a small run (offline,
    without ddgs, as on Kaggle with Internet off)."""
    monkeypatch.chdir(tmp_path)
    space = {**vars(nb), "DATA_DIR": tmp_path / "data", "DATASET_DIR": tmp_path / "data" / "bird_or_not",
             "STANDIN_DIR": tmp_path / "data" / "bird_or_not_standin", "LABELS": LABELS,
             "MIN_IMAGES_PER_CLASS": 3, "STANDIN_PER_CLASS": 2, "IMAGE_SIZE": 192, "UNAVAILABLE": {"ddgs"},
             "internet_available": lambda: False}
    space.update(values)
    return space


@pytest.mark.parametrize("where", ["kaggle", "beside the notebook", "PHOTO_ZIP"])
def test_the_plan_brings_in_a_prepared_zip_and_plans_no_search(nb, tmp_path, monkeypatch, capsys, where):
    """Kaggle with Internet off (so no ddgs): the attached photos, a zip beside the notebook, or the one
    PHOTO_ZIP names, make the plan 'reuse', said in one line."""
    monkeypatch.chdir(tmp_path)
    photo_zip = ""
    if where == "kaggle":
        kaggle_input(tmp_path, unpacked=False)
    elif where == "beside the notebook":
        (tmp_path / "bird_or_not.zip").write_bytes(prepared_zip(tmp_path, per_class=3))
    else:
        photo_zip = tmp_path / "drive" / "photos.zip"
        photo_zip.parent.mkdir()
        photo_zip.write_bytes(prepared_zip(tmp_path, per_class=3))
    dataset = tmp_path / "data" / "bird_or_not"
    plan = nb.plan_pictures(photo_zip, dataset, LABELS, 3, online=False, search_installed=False,
                            kaggle_input=tmp_path / "kaggle" / "input")
    out = capsys.readouterr().out
    assert plan == "reuse" and nb.count_images(dataset, LABELS) == {"bird": 3, "forest": 3}
    assert "Unpacked 6 new files from " in out
    assert out.splitlines()[-1].startswith("Plan: reuse. ") and len(out.splitlines()) == 2  # the plan: one line


def test_the_plan_unpacks_nothing_when_the_folder_has_enough_photos(nb, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bird_or_not.zip").write_bytes(prepared_zip(tmp_path, per_class=5))
    dataset = tmp_path / "data" / "bird_or_not"
    make_photo_folder(dataset, 3)
    assert nb.plan_pictures("", dataset, LABELS, 3, True, True, kaggle_input=tmp_path / "none") == "reuse"
    assert "Unpacked" not in capsys.readouterr().out and nb.count_images(dataset, LABELS) == {"bird": 3, "forest": 3}


def test_the_plan_cell_refuses_a_zip_slip_and_falls_back_to_the_standins(nb, tmp_path, monkeypatch):
    """The plan cell itself, as Step 1 shows it, with a zip beside the notebook whose names leave the folder."""
    (tmp_path / "bird_or_not.zip").write_bytes(zip_bytes({"bird/ok.jpg": jpeg_bytes(9, 9),
                                                          "../../outside.jpg": jpeg_bytes(9, 9)}))
    space = plan_namespace(nb, tmp_path, monkeypatch)
    out = run_cell("03", "plan", space)
    assert "Refused " in out and space["plan"] == "stand-in" and space["PHOTO_ZIP"] == ""
    assert "Plan: stand-in. " in out and "ddgs is not installed" in out and "no internet" in out
    assert not (tmp_path / "outside.jpg").exists() and not (tmp_path / "data" / "bird_or_not").exists()


@pytest.mark.parametrize("service, counts, ask, wanted", [
    ("Colab", {"bird": 2, "forest": 9}, True, True),
    ("Colab", {"bird": 3, "forest": 3}, True, False),  # exactly enough: never ask
    ("Colab", {}, True, True),  # no folder at all
    ("Colab", {"bird": 2, "forest": 9}, False, False),  # ASK_FOR_ZIP = False
    ("Kaggle", {"bird": 2, "forest": 9}, True, False),  # Kaggle has no upload button: attach a dataset
    (None, {"bird": 2, "forest": 9}, True, False),  # JupyterLab, nbval: never wait
])
def test_the_upload_is_asked_for_only_on_colab_with_too_few_photos(nb, service, counts, ask, wanted):
    assert nb.upload_wanted(service, counts, 3, ask) is wanted


def colab_upload(chosen, calls):
    """A stand-in for google.colab.files.upload(): saves each chosen file into the working folder as Colab does,
    and returns {file name: its bytes}; {} when cancelled."""
    def upload():
        calls.append("upload")
        for name, data in chosen.items():
            print(f"Saving {name} to {name}")
            Path(name).write_bytes(data)
        return dict(chosen)
    return upload


@pytest.mark.parametrize("chosen, expected", [
    ({"notes.txt": b"hello", "bird_or_not.zip": b"PK.."}, b"PK.."),
    ({}, None),  # "Cancel upload"
    ({"bird.jpg": b"..."}, None),  # a photo, not the zip
])
def test_ask_for_photo_zip_takes_the_zip_colab_returns(nb, tmp_path, monkeypatch, capsys, chosen, expected):
    monkeypatch.chdir(tmp_path)
    calls = []
    assert nb.ask_for_photo_zip(colab_upload(chosen, calls)) == expected and calls == ["upload"]
    out = capsys.readouterr().out
    assert out.startswith("Too few photos") and "'Cancel upload'" in out
    assert ("No zip was uploaded" in out) == (expected is None)


@pytest.fixture
def on_colab(monkeypatch):
    """sys.modules as on Colab: a google.colab package whose files.upload is the stand-in above."""
    def use(chosen):
        calls = []
        colab = types.ModuleType("google.colab")
        colab.files = types.SimpleNamespace(upload=colab_upload(chosen, calls))
        monkeypatch.setitem(sys.modules, "google.colab", colab)
        return calls
    return use


def test_on_colab_the_check_cell_takes_an_uploaded_zip_after_a_refused_search(nb, tmp_path, monkeypatch, on_colab):
    calls = on_colab({"bird_or_not.zip": prepared_zip(tmp_path, per_class=3, broken=True)})
    space = plan_namespace(nb, tmp_path, monkeypatch, plan="stand-in")  # the search was refused: too few photos
    assert nb.hosted_service() == "Colab"
    out = run_cell("03", "check", space)
    assert calls == ["upload"] and "Unpacked 9 new files from the uploaded zip" in out
    assert space["data_folder"] == tmp_path / "data" / "bird_or_not" and space["plan"] == "reuse"
    assert "3 picture(s)" in out and "STAND-IN" not in out  # the broken ones moved aside, photos used


def test_on_colab_a_cancelled_upload_trains_on_the_standins(nb, tmp_path, monkeypatch, on_colab):
    calls = on_colab({})
    space = plan_namespace(nb, tmp_path, monkeypatch, plan="search")
    out = run_cell("03", "check", space)
    assert calls == ["upload"] and "No zip was uploaded" in out
    assert space["plan"] == "stand-in" and "STAND-IN DATA" in out


@pytest.mark.parametrize("colab, photos", [(True, 3), (False, 0)])
def test_the_check_cell_never_waits_when_no_upload_is_wanted(nb, tmp_path, monkeypatch, on_colab, colab, photos):
    """On Colab with enough photos, and off Colab at all (JupyterLab, Kaggle, nbval), no upload widget."""
    calls = on_colab({"bird_or_not.zip": b"never read"}) if colab else []
    make_photo_folder(tmp_path / "data" / "bird_or_not", photos)
    space = plan_namespace(nb, tmp_path, monkeypatch, plan="reuse" if photos else "stand-in")
    run_cell("03", "check", space)
    assert calls == [] and space["plan"] == ("reuse" if photos else "stand-in")
