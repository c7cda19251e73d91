"""Notebook 03's helpers, driven with made-up inputs: no internet and no real search engine needed.

- The search (`search_photos`, the notebook's one `DDGS().images` call) gets fake `DDGS` classes put in the ddgs
  package's place (fail N times then succeed, always fail, return nothing) and a `sleep` that only records the
  pauses, so retries, pauses and fallback decisions are checked instantly.
- The download path runs for real (fastai's download_images, verify_images, resize_images) against an HTTP
  server started on 127.0.0.1: good pictures, an HTML page named .jpg, a truncated JPEG, a 404 and slow URLs.
- The pretrained-weights path runs offline from a stand-in resnet18-f37072fd.pth in a temporary TORCH_HOME.
- Broken pictures (an empty .jpg, a web page named .jpg, a JPEG cut after 300 bytes) are planted in the folder
  each path trains on (a prepared folder, a download, the stand-ins); the end-to-end run beside a prepared
  data/bird_or_not, with ddgs made unavailable, is tests/test_broken_packages.py's.
- Each exercise's check gets a likely wrong answer and must say what is wrong with it.
"""
import ast
import functools
import http.server
import io
import socket
import sys
import threading
import time
import types
import urllib.error
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
import torchvision
from ddgs.exceptions import DDGSException
from PIL import Image

from support.notebook_code import code_cells, core_cells, load_helpers, notebook_path, read, run_cell
from support.photos import LABELS, files_in, jpeg_bytes, make_photo_folder, plant_broken_pictures


@pytest.fixture(scope="module")
def nb():
    with warnings.catch_warnings():
        # fastai's import warns that torch.jit.script is deprecated (the notebook silences the same message),
        # and that a pandas option it sets is deprecated: both are fastai's to fix, not this test's.
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"fastai\.")
        return load_helpers("03")


# ---------------------------------------------------------------- the search wrapper, with fake DDGS classes

def fake_ddgs(*outcomes):
    """A DDGS stand-in class whose successive .images() calls raise or return `outcomes` (the last one repeats)."""
    calls = []

    class FakeDDGS:
        def __init__(self, timeout=None):
            self.timeout = timeout

        def images(self, query, max_results=None):
            calls.append({"query": query, "max_results": max_results, "timeout": self.timeout})
            outcome = outcomes[min(len(calls), len(outcomes)) - 1]
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

    return FakeDDGS, calls


RESULTS = [{"image": "https://a.example/1.jpg", "title": "one"},
           {"image": "https://a.example/2.jpg", "title": "two"},
           {"image": "https://a.example/1.jpg", "title": "one again"},  # duplicate: kept once
           {"image": "", "title": "an entry without a picture URL"}]


@pytest.fixture
def use_ddgs(monkeypatch):
    """Put a fake DDGS class where search_photos imports it from (`from ddgs import DDGS`, at call time)."""
    import ddgs

    def use(fake):
        monkeypatch.setattr(ddgs, "DDGS", fake)
    return use


def test_search_photos_is_ddgs_images_with_a_time_limit(nb, use_ddgs):
    ddgs, calls = fake_ddgs(RESULTS)
    use_ddgs(ddgs)
    assert nb.search_photos("bird photo", 50) == [result["image"] for result in RESULTS]
    assert calls == [{"query": "bird photo", "max_results": 50, "timeout": 10}]


def test_search_fails_twice_then_succeeds_after_growing_pauses(nb, use_ddgs):
    ddgs, calls = fake_ddgs(DDGSException("202 Ratelimit"), DDGSException("202 Ratelimit"), RESULTS)
    use_ddgs(ddgs)
    pauses = []
    urls = nb.search_images("bird photo", 50, sleep=pauses.append, attempts=3, first_pause=10.0)
    assert urls == ["https://a.example/1.jpg", "https://a.example/2.jpg"]  # no duplicate, no empty address
    assert len(calls) == 3
    assert calls[0] == {"query": "bird photo", "max_results": 50, "timeout": 10}
    assert pauses == [10.0, 20.0]  # a pause before each retry, twice as long each time, none before the first try


def test_search_that_always_fails_gives_up_after_all_attempts(nb, use_ddgs):
    ddgs, calls = fake_ddgs(DDGSException("DNSError: no records found"))
    use_ddgs(ddgs)
    pauses = []
    with pytest.raises(nb.SearchFailed) as failure:
        nb.search_images("bird photo", 50, sleep=pauses.append, attempts=4, first_pause=1.0)
    assert len(calls) == 4
    assert pauses == [1.0, 2.0, 4.0]
    assert "4 times" in str(failure.value) and "DNSError" in str(failure.value)


def test_empty_search_result_counts_as_a_failure(nb, use_ddgs):
    ddgs, calls = fake_ddgs([])
    use_ddgs(ddgs)
    pauses = []
    with pytest.raises(nb.SearchFailed, match="no pictures"):
        nb.search_images("forest photo", 50, sleep=pauses.append, attempts=2)
    assert len(calls) == 2 and len(pauses) == 1

    ddgs, calls = fake_ddgs([], RESULTS)
    use_ddgs(ddgs)
    assert len(nb.search_images("forest photo", 50, sleep=lambda s: None)) == 2
    assert len(calls) == 2


def test_search_does_not_hide_programming_errors(nb, use_ddgs):
    ddgs, calls = fake_ddgs(TypeError("a bug, not a blocked search"))
    use_ddgs(ddgs)
    with pytest.raises(TypeError):
        nb.search_images("bird photo", 50, sleep=lambda s: None)
    assert len(calls) == 1


def test_collect_urls_pauses_between_searches_dedupes_and_saves_the_manifest(nb, tmp_path):
    manifest = tmp_path / "bird_or_not" / "manifest.json"
    answers = {"bird photo": ["u/b1", "u/b2", "u/shared"], "bird sun photo": ["u/b2", "u/b3"],
               "forest photo": ["u/f1", "u/shared"], "forest sun photo": ["u/f2"]}
    searched, pauses = [], []

    def search(query, max_images):
        searched.append((query, max_images))
        return answers[query]

    queries = {"bird": ["bird photo", "bird sun photo"], "forest": ["forest photo", "forest sun photo"]}
    urls, problem = nb.collect_urls(queries, manifest, 30, search=search, sleep=pauses.append, pause=5.0)
    assert problem is None
    assert urls == {"bird": ["u/b1", "u/b2", "u/b3"], "forest": ["u/f1", "u/f2"]}  # u/shared dropped from both
    assert [query for query, _ in searched] == list(answers) and {n for _, n in searched} == {30}
    assert pauses == [5.0, 5.0, 5.0]  # between the four searches, not before the first
    assert set(nb.read_manifest(manifest)["searches"]) == set(answers)

    # A rerun searches nothing and pauses never: everything comes from the manifest.
    searched.clear()
    pauses.clear()
    assert nb.collect_urls(queries, manifest, 30, search=search, sleep=pauses.append) == (urls, None)
    assert searched == [] and pauses == []

    # Asking for more pictures per search than the manifest holds searches again.
    nb.collect_urls({"bird": ["bird photo"]}, manifest, 100, search=search, sleep=pauses.append)
    assert searched == [("bird photo", 100)]


def test_blocked_search_falls_back_and_a_later_run_only_searches_what_is_missing(nb, tmp_path, use_ddgs):
    manifest = tmp_path / "manifest.json"
    queries = {"bird": ["bird photo"], "forest": ["forest photo"]}
    blocked, calls = fake_ddgs([{"image": "u/b1"}], DDGSException("202 Ratelimit"))
    use_ddgs(blocked)
    pauses = []
    search = functools.partial(nb.search_images, sleep=pauses.append, attempts=3, first_pause=10.0)
    urls, problem = nb.collect_urls(queries, manifest, 30, search=search, sleep=pauses.append, pause=5.0)
    assert urls is None
    assert "'forest photo' failed 3 times" in problem and "again later" in problem
    assert len(calls) == 4  # one good bird search, then three forest attempts
    assert pauses == [5.0, 10.0, 20.0]  # the pause between searches, then the two retry pauses
    assert list(nb.read_manifest(manifest)["searches"]) == ["bird photo"]  # the good search is kept

    working, calls = fake_ddgs([{"image": "u/f1"}])
    use_ddgs(working)
    search = functools.partial(nb.search_images, sleep=pauses.append)
    urls, problem = nb.collect_urls(queries, manifest, 30, search=search, sleep=pauses.append)
    assert problem is None and urls == {"bird": ["u/b1"], "forest": ["u/f1"]}
    assert [call["query"] for call in calls] == ["forest photo"]


@pytest.mark.parametrize("counts, online, search_installed, expected", [
    ({"bird": 60, "forest": 55}, False, True, "reuse"),  # a prepared workshop folder: no internet needed
    ({"bird": 60, "forest": 55}, True, True, "reuse"),  # a rerun does not search again
    ({"bird": 60, "forest": 55}, False, False, "reuse"),  # Kaggle with Internet off: no ddgs, yet a folder
    ({"bird": 60, "forest": 10}, True, True, "search"),
    ({"bird": 60, "forest": 10}, True, False, "stand-in"),  # online, but ddgs is missing: nothing to search with
    ({"bird": 0, "forest": 0}, False, True, "stand-in"),
    ({"bird": 60, "forest": 49}, False, True, "stand-in"),
    ({}, True, True, "search"),
    ({}, True, False, "stand-in"),
    ({}, False, True, "stand-in"),
    ({"bird": 50, "forest": 50}, False, False, "reuse"),  # exactly the minimum per class: enough
    ({"bird": 50, "forest": 49}, True, True, "search"),  # one short: search for more
    ({"bird": 50, "forest": 49}, False, True, "stand-in"),
])
def test_plan_dataset(nb, counts, online, search_installed, expected):
    assert nb.plan_dataset(counts, 50, online, search_installed) == expected


def test_the_plan_says_plainly_why_there_is_no_search(nb):
    counts = {"bird": 0, "forest": 0}
    without_ddgs = nb.describe_plan("stand-in", counts, 50, True, False)
    assert "ddgs" in without_ddgs and "not installed" in without_ddgs and "no internet" not in without_ddgs
    offline = nb.describe_plan("stand-in", counts, 50, False, True)
    assert "no internet" in offline and "ddgs" not in offline
    both = nb.describe_plan("stand-in", counts, 50, False, False)
    assert "not installed" in both and "no internet" in both
    for text in (without_ddgs, offline, both):
        assert text.startswith("Plan: stand-in") and "stand-in drawings" in text and "PHOTO_ZIP" in text
    assert nb.describe_plan("reuse", {"bird": 60, "forest": 55}, 50, False, False).startswith("Plan: reuse")
    search = nb.describe_plan("search", {"bird": 3, "forest": 0}, 50, True, True)
    assert search.startswith("Plan: search") and "downloads photos" in search
    assert nb.no_search_reasons(True, True) == []
    assert "the search failed" in nb.describe_plan("stand-in", counts, 50, True, True)  # online, yet it failed


def test_without_ddgs_the_notebook_code_loads_and_never_searches(monkeypatch):
    """Kaggle's image ships fastai but not ddgs (and starts with Internet off); Colab lacks ddgs too."""
    for name in [name for name in sys.modules if name == "ddgs" or name.startswith("ddgs.")]:
        monkeypatch.delitem(sys.modules, name)  # restored after the test
    monkeypatch.setitem(sys.modules, "ddgs", None)  # `import ddgs` now fails as if it were not installed
    helpers = load_helpers("03")  # runs every import of the notebook: none may need ddgs
    assert helpers.plan_dataset({"bird": 0, "forest": 0}, 50, True, False) == "stand-in"
    with pytest.raises(ImportError):
        helpers.search_images("bird photo", 10)  # ddgs is imported only when a search really runs


def test_ddgs_is_imported_only_inside_the_search_and_the_plan_asks_unavailable():
    sources = code_cells(read(notebook_path("03")))
    for source in sources:
        for node in ast.parse(source).body:  # statements at the top level of a cell always run
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module]
            else:
                continue
            assert not any(module.split(".")[0] == "ddgs" for module in modules), ast.unparse(node)
    assert any('"ddgs" not in UNAVAILABLE' in source for source in sources)


def test_internet_check_uses_a_short_timeout_and_never_raises(nb):
    attempts = []

    class Connection:
        def close(self):
            attempts.append("closed")

    def reachable(address, timeout):
        attempts.append((address, timeout))
        return Connection()

    def unreachable(address, timeout):
        raise OSError("[Errno -2] Name or service not known")

    assert nb.internet_available(connect=reachable, timeout=2.0) is True
    assert attempts == [(("duckduckgo.com", 443), 2.0), "closed"]
    assert nb.internet_available(connect=unreachable) is False


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
    photo, detail = nb.search_first_photo("bird photo", dest, "search", online=True, search_installed=True,
                                          find_urls=find_urls)
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
    photo, problem = nb.search_first_photo("bird photo", dest, "search", online=True, search_installed=True,
                                           find_urls=find_urls)
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
    photo, problem = nb.search_first_photo("bird photo", tmp_path / "bird.jpg", "search", True, True,
                                           find_urls=find_urls)
    assert photo is None and "failed 2 times" in problem and "Ratelimit" in problem
    assert len(calls) == 2 and pauses == [5.0]  # a short retry: the first look goes on soon

    no_images, calls = fake_ddgs([{"title": "a result without a picture URL", "image": ""}])
    find_urls, _ = first_look(no_images)
    photo, problem = nb.search_first_photo("forest photo", tmp_path / "forest.jpg", "search", True, True,
                                           find_urls=find_urls)
    assert photo is None and "no pictures" in problem


@pytest.mark.parametrize("online, search_installed", [(False, True), (True, False), (False, False)])
def test_first_look_without_a_search_does_not_try_one(nb, tmp_path, online, search_installed):
    def must_not_search(query):
        raise AssertionError("no search can run")

    photo, problem = nb.search_first_photo("bird photo", tmp_path / "bird.jpg", "stand-in", online,
                                           search_installed, find_urls=must_not_search)
    assert (photo, problem) == (None, "no search")  # the plan, printed above the first look, says why


@pytest.mark.parametrize("plan, searched", [("reuse", False), ("search", True), ("stand-in", True)])
def test_first_look_uses_no_network_when_the_plan_is_reuse(nb, tmp_path, plan, searched):
    """A prepared folder (a workshop, or a rerun) means no network at all; otherwise the search runs
    whenever it can, even when Step 2 will not (the plan may be 'stand-in' after a failed search)."""
    asked = []

    def find_urls(query):
        asked.append(query)
        return None, "the search failed"

    photo, detail = nb.search_first_photo("bird photo", tmp_path / "bird.jpg", plan, True, True,
                                          find_urls=find_urls)
    assert photo is None and (asked == ["bird photo"]) == searched
    assert ("nothing is searched or downloaded" in detail) == (not searched)


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

    photo, detail = nb.search_first_photo("bird photo", tmp_path / "bird.jpg", "search", True, True,
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


def notebook_constant(name, fast):
    """The value the notebook gives the UPPER_CASE constant `name`, in fast mode or at full size."""
    for source in code_cells(read(notebook_path("03"))):
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == name:
                return eval(compile(ast.Expression(node.value), name, "eval"), {"FAST": fast})
    raise LookupError(name)


def test_a_search_asks_for_no_more_than_one_page_of_ddgs_results():
    """ddgs 9's DuckDuckGo image engine fetches one page (up to 100 results) per call: asking for 200
    gives 100 at most, so the notebook asks for what one call gives."""
    assert notebook_constant("IMAGES_PER_SEARCH", fast=False) <= 100
    assert notebook_constant("IMAGES_PER_SEARCH", fast=True) <= 100


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
    assert notebook_constant("SCRATCH_EPOCHS", fast=False) >= 3 * (1 + notebook_constant("EPOCHS", fast=False))


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


# The end-to-end run with a prepared folder, broken files, no ddgs and a fastai that cannot export is
# tests/test_broken_packages.py's: there the setup cell itself finds the export-only breakage.


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


# ---------------------------------------------------------------- a workshop's photo zip: Colab, Kaggle, a local path
# Real zips made here: a good one (made by tools/make_photo_zip.py, as an instructor makes it), one with broken
# pictures, and ones whose names try to leave the folder (zip slip). Colab's upload is a stand-in shaped like
# google.colab.files.upload() (colabtools' google/colab/files.py): it prints "Saving <name> to <name>", writes each
# file into the working folder and returns {file name: its bytes}, {} when the learner clicks "Cancel upload".

sys.path.insert(0, str(notebook_path("03").parents[1] / "tools"))
import make_photo_zip  # noqa: E402  (tools/make_photo_zip.py, the instructor's script)


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
    """What the plan cell and the check cell read: the helpers, and the sizes and folders of a small run."""
    monkeypatch.chdir(tmp_path)
    space = {**vars(nb), "DATA_DIR": tmp_path / "data", "DATASET_DIR": tmp_path / "data" / "bird_or_not",
             "STANDIN_DIR": tmp_path / "data" / "bird_or_not_standin", "LABELS": LABELS,
             "MIN_IMAGES_PER_CLASS": 3, "STANDIN_PER_CLASS": 2, "KAGGLE_INPUT": tmp_path / "kaggle" / "input",
             "IMAGE_SIZE": 192, "UNAVAILABLE": {"ddgs"}, "internet_available": lambda: False}
    space.update(values)
    return space


@pytest.mark.parametrize("where", ["kaggle", "beside the notebook"])
def test_the_plan_cell_brings_in_a_prepared_zip_and_plans_no_search(nb, tmp_path, monkeypatch, where):
    """Kaggle with Internet off (so no ddgs): the attached photos make the plan 'reuse'."""
    if where == "kaggle":
        kaggle_input(tmp_path, unpacked=False)
    else:
        (tmp_path / "bird_or_not.zip").write_bytes(prepared_zip(tmp_path, per_class=3))
    space = plan_namespace(nb, tmp_path, monkeypatch)
    out = run_cell("03", "plan", space)
    assert space["plan"] == "reuse" and space["image_counts"] == {"bird": 3, "forest": 3}
    assert "Unpacked 6 new files from " in out and "Plan: reuse." in out


def test_the_plan_cell_refuses_a_zip_slip_and_falls_back_to_the_standins(nb, tmp_path, monkeypatch):
    (tmp_path / "bird_or_not.zip").write_bytes(zip_bytes({"bird/ok.jpg": jpeg_bytes(9, 9),
                                                          "../../outside.jpg": jpeg_bytes(9, 9)}))
    space = plan_namespace(nb, tmp_path, monkeypatch)
    out = run_cell("03", "plan", space)
    assert "Refused " in out and space["plan"] == "stand-in"
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


def test_report_figures_is_called_once_in_the_core():
    """tools/gpu_run.py records what one call in the core reports."""
    notebook = read(notebook_path("03"))
    calls = [cell.get("id") for cell in notebook.cells if cell.cell_type == "code" and "report_figures(" in cell.source
             and not cell.source.startswith("#@title Shared setup")]
    assert calls == ["report"] and "report" in [cell.get("id") for cell in core_cells(notebook)]


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
