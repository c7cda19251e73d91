"""Notebook 03's downloads, run for real (fastai's download_images, verify_images, resize_images) against
a picture server started on 127.0.0.1: good pictures, an HTML page named .jpg, a truncated JPEG, a 404,
a slow URL and one that stalls; the first look (one photo per class, as fast.ai's notebook), the
dataset's download and a rerun, a dead network, and what an interrupted download left behind."""
import functools
import http.server
import io
import threading
import time
import urllib.error

import pytest
from ddgs.exceptions import DDGSException
from PIL import Image

from support.fake_ddgs import fake_ddgs, put_ddgs
from support.notebook_code import load_helpers_quietly
from support.photos import LABELS, files_in, jpeg_bytes, make_photo_folder, plant_broken_pictures


@pytest.fixture(scope="module")
def nb():
    return load_helpers_quietly("03")


@pytest.fixture
def use_ddgs(monkeypatch):
    """use_ddgs(fake) puts a fake DDGS class where search_photos imports it from."""
    return functools.partial(put_ddgs, monkeypatch)


# ---------------------------------------------------------------- the first look: one photo per class, as fast.ai

def ddgs_result(url, title="a bird"):
    """One result of ddgs 9's DDGS().images(): a dict with ImagesResult's fields (ddgs/results.py)."""
    return {"title": title, "image": url, "thumbnail": "https://tse.example/th?id=1", "url": "https://a.example/page",
            "height": 768, "width": 1024, "source": "Bing"}


@pytest.fixture
def first_look(nb, tmp_path, use_ddgs):
    """A fake ddgs in place, and the first look's search (urls_from_manifest) on a manifest in tmp_path with a
    sleep that only records: returns (find_urls for search_first_photo, the pauses)."""
    def use(ddgs):
        pauses = []
        use_ddgs(ddgs)
        find_urls = functools.partial(nb.urls_from_manifest, manifest_path=tmp_path / "bird_or_not" / "manifest.json",
                                      max_images=100, sleep=pauses.append)
        return find_urls, pauses
    return use


def test_first_look_downloads_the_first_result_that_is_a_picture_and_keeps_the_search(nb, tmp_path, server,
                                                                                      first_look, capsys):
    urls = [f"{server}/missing.jpg", f"{server}/page.jpg", f"{server}/good-big.jpg", f"{server}/good.png"]
    ddgs, calls = fake_ddgs([ddgs_result(url) for url in urls])
    find_urls, _ = first_look(ddgs)
    dest = tmp_path / "first_look" / "bird.jpg"
    photo, detail = nb.search_first_photo("bird photo", dest, "search", find_urls=find_urls)
    assert (photo, detail) == (dest, f"{server}/good-big.jpg")  # the 404 and the web page were skipped
    assert nb.picture_decodes(dest) and Image.open(dest).size == (600, 450)
    assert sorted(path.name for path in dest.parent.iterdir()) == ["bird.jpg"]  # no .part left behind
    assert PictureServer.requests == ["/missing.jpg", "/page.jpg", "/good-big.jpg"]  # stops at the photo
    assert calls == [{"query": "bird photo", "max_results": 100, "timeout": 10}]
    assert nb.first_look_source(photo, None) == "search"
    forest = tmp_path / "first_look" / "forest.jpg"
    forest.write_bytes(jpeg_bytes(30, 20))
    nb.show_first_look({"bird": (photo, detail), "forest": (forest, "u/f")},
                       {"bird": "bird photo", "forest": "forest photo"}, tmp_path / "no_folder")
    out = capsys.readouterr().out
    assert f"bird: the first photo the search for 'bird photo' found, from {server}/good-big.jpg" in out
    assert "STAND-IN" not in out and "prepared" not in out

    def no_search(query, max_images):
        raise AssertionError("Step 2 must reuse the first look's search")

    manifest = tmp_path / "bird_or_not" / "manifest.json"
    reused, problem = nb.collect_urls({"bird": ["bird photo"]}, manifest, 100, search=no_search)
    assert problem is None and reused == {"bird": urls}


def test_first_look_with_failed_downloads_shows_a_labelled_standin_or_the_prepared_photo(nb, tmp_path, server,
                                                                                          first_look, capsys):
    ddgs, _ = fake_ddgs([ddgs_result(f"{server}/missing.jpg"), ddgs_result("http://127.0.0.1:9/refused.jpg")])
    find_urls, _ = first_look(ddgs)
    dest = tmp_path / "first_look" / "bird.jpg"
    photo, problem = nb.search_first_photo("bird photo", dest, "search", find_urls=find_urls)
    assert photo is None and not dest.exists() and not dest.with_name("bird.jpg.part").exists()
    assert problem.startswith("the download failed (URLError:")  # the last one tried: refused
    assert "\n" not in problem

    nothing = tmp_path / "no_folder"
    first_photos = {"bird": (None, problem), "forest": (None, "no search")}
    nb.show_first_look(first_photos, {"bird": "bird photo", "forest": "forest photo"}, nothing)
    out = capsys.readouterr().out
    assert out.count(": STAND-IN DRAWING (") == 2  # labelled, with the reason
    assert problem in out and "forest: STAND-IN DRAWING (no search)." in out

    make_photo_folder(tmp_path / "prepared", 2)
    nb.show_first_look(first_photos, {"bird": "bird photo", "forest": "forest photo"}, tmp_path / "prepared")
    out = capsys.readouterr().out
    assert out.count("the first photo of the prepared folder") == 2 and "STAND-IN" not in out


def test_first_look_when_the_search_is_blocked_or_finds_no_picture(nb, tmp_path, first_look):
    ddgs, calls = fake_ddgs(DDGSException("202 Ratelimit"))
    find_urls, pauses = first_look(ddgs)
    photo, problem = nb.search_first_photo("bird photo", tmp_path / "bird.jpg", "search", find_urls=find_urls)
    assert photo is None and "failed 2 times" in problem and "Ratelimit" in problem
    assert len(calls) == 2 and pauses == [5.0]  # a short retry: the first look goes on soon

    no_images, calls = fake_ddgs([{"title": "a result without a picture URL", "image": ""}])
    find_urls, _ = first_look(no_images)
    photo, problem = nb.search_first_photo("forest photo", tmp_path / "forest.jpg", "search", find_urls=find_urls)
    assert photo is None and "no pictures" in problem


def test_first_look_without_a_search_does_not_try_one(nb, tmp_path):
    """The plan 'stand-in': no internet, or no ddgs (the plan, printed above the first look, says which)."""
    def must_not_search(query):
        raise AssertionError("no search can run")

    photo, problem = nb.search_first_photo("bird photo", tmp_path / "bird.jpg", "stand-in",
                                           find_urls=must_not_search)
    assert (photo, problem) == (None, "no search")


@pytest.mark.parametrize("plan, searched", [("reuse", False), ("search", True), ("stand-in", False)])
def test_first_look_uses_no_network_when_the_plan_is_reuse(nb, tmp_path, plan, searched):
    """A prepared folder (a workshop, or a rerun) means no network at all; only the plan 'search'
    searches."""
    asked = []

    def find_urls(query):
        asked.append(query)
        return None, "the search failed"

    photo, detail = nb.search_first_photo("bird photo", tmp_path / "bird.jpg", plan, find_urls=find_urls)
    assert photo is None and (asked == ["bird photo"]) == searched
    assert ("nothing is searched or downloaded" in detail) == (plan == "reuse")


@pytest.mark.parametrize("bad_results, found", [(4, True), (5, False)])
def test_first_look_tries_exactly_five_results(nb, tmp_path, bad_results, found):
    """A stand-in for fastdownload's download_url(url, dest, timeout=..., show_progress=...): refused
    connections (urllib's URLError, as urlopen raises it) for the first results, then a good JPEG."""
    urls = [f"https://bad.example/{index}.jpg" for index in range(bad_results)] + ["https://good.example/bird.jpg"]
    tried = []

    def download(url, dest, timeout=None, show_progress=True):
        tried.append(url)
        assert timeout and not show_progress
        if "bad" in url:
            raise urllib.error.URLError("[Errno 111] Connection refused")
        dest.write_bytes(jpeg_bytes(40, 30))
        return dest

    photo, detail = nb.search_first_photo("bird photo", tmp_path / "bird.jpg", "search",
                                          find_urls=lambda query: (urls, None), download=download)
    assert (photo is not None) == found and len(tried) == min(len(urls), 5)
    assert detail == ("https://good.example/bird.jpg" if found else
                      "the download failed (URLError: <urlopen error [Errno 111] Connection refused>)")


@pytest.mark.parametrize("photo, prepared, expected", [
    ("bird.jpg", None, "search"), ("bird.jpg", "prepared.jpg", "search"),
    (None, "prepared.jpg", "prepared"), (None, None, "stand-in")])
def test_first_look_source(nb, photo, prepared, expected):
    assert nb.first_look_source(photo, prepared) == expected


# ---------------------------------------------------------------- the real download path, against a local server

def png_bytes(width, height):
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (30, 90, 200)).save(buffer, "PNG")
    return buffer.getvalue()


class PictureServer(http.server.BaseHTTPRequestHandler):
    """Serves ROUTES: path -> (status, content type, body, seconds to wait, bytes to send before stalling)."""

    ROUTES = {}
    requests = []

    def do_GET(self):
        PictureServer.requests.append(self.path)
        status, content_type, body, delay, stall_after = self.ROUTES.get(self.path, (404, "text/plain", b"no", 0, None))
        try:
            time.sleep(delay)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if stall_after is None:
                self.wfile.write(body)
            else:
                self.wfile.write(body[:stall_after])
                self.wfile.flush()
                time.sleep(3)  # the client gives up first
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass  # keep the test output quiet


@pytest.fixture
def server(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    big = jpeg_bytes(600, 450)
    PictureServer.ROUTES = {
        "/good-big.jpg": (200, "image/jpeg", big, 0, None),
        "/good-small.jpg": (200, "image/jpeg", jpeg_bytes(300, 200, (10, 200, 90)), 0, None),
        "/good.png": (200, "image/png", png_bytes(120, 80), 0, None),
        "/page.jpg": (200, "text/html", b"<html><body>Access denied</body></html>", 0, None),
        "/truncated.jpg": (200, "image/jpeg", big[: len(big) // 2], 0, None),
        "/slow.jpg": (200, "image/jpeg", big, 3, None),  # answers only after the client's timeout
        "/stalls.jpg": (200, "image/jpeg", big, 0, len(big) // 3),  # starts, then stops sending
    }
    PictureServer.requests = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), PictureServer)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def quick_download(nb):
    """The notebook's download_photos with a 1 s time limit per URL, so that the slow URLs fail quickly."""
    return functools.partial(nb.download_photos, timeout=1)


def test_download_keeps_good_pictures_removes_bad_ones_and_counts_every_url(nb, tmp_path, server):
    folder, manifest = tmp_path / "bird_or_not", tmp_path / "bird_or_not" / "manifest.json"
    learners_own = folder / "bird" / "my_own_photo.jpg"  # a picture that was there before: must survive
    learners_own.parent.mkdir(parents=True)
    learners_own.write_bytes(jpeg_bytes(50, 40))
    names = ["good-big.jpg", "good-small.jpg", "good.png", "page.jpg", "truncated.jpg", "missing.jpg", "slow.jpg",
             "stalls.jpg"]
    urls = {"bird": [f"{server}/{name}" for name in names]}

    start = time.perf_counter()
    table = nb.download_dataset(urls, folder, manifest, download=quick_download(nb))
    assert time.perf_counter() - start < 20  # the slow URLs cost one timeout, not a hang

    counts = table.loc["bird"].to_dict()
    assert counts == {"new_urls": 8, "saved": 5, "broken": 2, "failed": 3, "added": 3, "images": 4}
    files = sorted((folder / "bird").iterdir())
    assert learners_own in files and learners_own.read_bytes() == jpeg_bytes(50, 40)
    pictures = [Image.open(file) for file in files]
    assert sorted(picture.size for picture in pictures) == sorted([(50, 40), (400, 300), (300, 200), (120, 80)])
    assert sorted(file.suffix for file in files) == [".jpg", ".jpg", ".jpg", ".png"]
    assert not (folder / ".incoming").exists()  # the scratch folder (with the .part of the stalled URL) is gone
    assert nb.read_manifest(manifest)["attempted"]["bird"] == sorted(urls["bird"])

    # A rerun downloads nothing again and changes nothing.
    requests_before = len(PictureServer.requests)
    again = nb.download_dataset(urls, folder, manifest, download=quick_download(nb)).loc["bird"].to_dict()
    assert again == {"new_urls": 0, "saved": 0, "broken": 0, "failed": 0, "added": 0, "images": 4}
    assert len(PictureServer.requests) == requests_before
    assert sorted((folder / "bird").iterdir()) == files


def test_step_2_downloads_only_with_the_plan_search_and_shows_the_count(nb, tmp_path, server, use_ddgs, capsys,
                                                                          monkeypatch):
    """download_if_planned, Step 2's one call: no search and no download unless the plan is 'search'; then the
    searches (saved in the manifest) and the table that counts every URL; a failed search says why."""
    folder, manifest = tmp_path / "bird_or_not", tmp_path / "bird_or_not" / "manifest.json"
    ddgs, calls = fake_ddgs([ddgs_result(f"{server}/good-big.jpg"), ddgs_result(f"{server}/page.jpg")])
    use_ddgs(ddgs)
    for plan in ("reuse", "stand-in"):
        assert nb.download_if_planned(plan, {"bird": ["bird photo"]}, folder, manifest, 30) is None
        assert capsys.readouterr().out == f"No download: the plan is {plan!r}.\n"
    assert calls == [] and PictureServer.requests == [] and not folder.exists()

    table = nb.download_if_planned("search", {"bird": ["bird photo"]}, folder, manifest, 30)
    assert table.loc["bird"].to_dict() == {"new_urls": 2, "saved": 2, "broken": 1, "failed": 0, "added": 1,
                                           "images": 1}
    out = capsys.readouterr().out
    assert "'bird photo': 2 URLs, searched now" in out and "Downloading:" in out
    assert [call["query"] for call in calls] == ["bird photo"]

    refused = "search 'forest photo' failed 3 times; last problem: DDGSException: 202 Ratelimit. Run again later."
    monkeypatch.setitem(nb.download_if_planned.__globals__, "collect_urls", lambda *args: (None, refused))
    assert nb.download_if_planned("search", {"forest": ["forest photo"]}, folder, manifest, 30) is None
    assert capsys.readouterr().out == refused + "\n"


def test_download_with_a_dead_network_leaves_the_urls_for_a_later_try(nb, tmp_path, server):
    folder, manifest = tmp_path / "data", tmp_path / "data" / "manifest.json"
    dead = "http://127.0.0.1:9"  # the discard port: nothing listens there, so every connection is refused
    counts = nb.download_dataset({"forest": [f"{dead}/a.jpg", f"{dead}/b.jpg"]}, folder, manifest,
                                 download=quick_download(nb))
    assert counts.loc["forest"].to_dict() == {"new_urls": 2, "saved": 0, "broken": 0, "failed": 2, "added": 0,
                                              "images": 0}
    assert "forest" not in nb.read_manifest(manifest)["attempted"]

    later = nb.download_dataset({"forest": [f"{server}/good-small.jpg"]}, folder, manifest,
                                download=quick_download(nb))
    assert later.loc["forest", "added"] == 1 and nb.count_images(folder, ["forest"]) == {"forest": 1}


def test_download_path_checks_what_an_interrupted_run_left_behind(nb, tmp_path, server):
    photos = tmp_path / "bird_or_not"
    planted = plant_broken_pictures(photos / "bird")  # an earlier download that was stopped half-way
    urls = {"bird": [f"{server}/good-big.jpg", f"{server}/good-small.jpg", f"{server}/page.jpg"],
            "forest": [f"{server}/good.png"]}
    table = nb.download_dataset(urls, photos, photos / "manifest.json", download=quick_download(nb))
    assert table.loc["bird", "added"] == 2 and table.loc["bird", "images"] == 5  # the leftovers still count

    folder, plan = nb.pictures_to_train_on("search", photos, tmp_path / "standin", LABELS, 1, 5)
    assert (folder, plan) == (photos, "search")
    assert nb.count_images(photos, LABELS) == {"bird": 2, "forest": 1}
    assert files_in(tmp_path / "bird_or_not_broken" / "bird") == planted
