"""Notebook 03's helpers, driven with made-up inputs: no internet and no real search engine needed.

- The search wrapper gets fake `DDGS` classes (fail N times then succeed, always fail, return nothing) and a
  `sleep` that only records the pauses, so retries, pauses and fallback decisions are checked instantly.
- The download path runs for real (fastai's download_images, verify_images, resize_images) against an HTTP
  server started on 127.0.0.1: good pictures, an HTML page named .jpg, a truncated JPEG, a 404 and slow URLs.
- The pretrained-weights path runs offline from a stand-in resnet18-f37072fd.pth in a temporary TORCH_HOME.
"""
import functools
import http.server
import io
import socket
import threading
import time
import urllib.error
import warnings

import pytest
import torch
import torchvision
from ddgs.exceptions import DDGSException
from PIL import Image

from notebook_code import load_helpers


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
           {"title": "an entry without a picture URL"}]


def test_search_fails_twice_then_succeeds_after_growing_pauses(nb):
    ddgs, calls = fake_ddgs(DDGSException("202 Ratelimit"), DDGSException("202 Ratelimit"), RESULTS)
    pauses = []
    urls = nb.search_images("bird photo", 50, ddgs_factory=ddgs, sleep=pauses.append, attempts=3,
                            first_pause=10.0, timeout=7)
    assert urls == ["https://a.example/1.jpg", "https://a.example/2.jpg"]
    assert len(calls) == 3
    assert calls[0] == {"query": "bird photo", "max_results": 50, "timeout": 7}
    assert pauses == [10.0, 20.0]  # a pause before each retry, twice as long each time, none before the first try


def test_search_that_always_fails_gives_up_after_all_attempts(nb):
    ddgs, calls = fake_ddgs(DDGSException("DNSError: no records found"))
    pauses = []
    with pytest.raises(nb.SearchFailed) as failure:
        nb.search_images("bird photo", 50, ddgs_factory=ddgs, sleep=pauses.append, attempts=4, first_pause=1.0)
    assert len(calls) == 4
    assert pauses == [1.0, 2.0, 4.0]
    assert "4 times" in str(failure.value) and "DNSError" in str(failure.value)


def test_empty_search_result_counts_as_a_failure(nb):
    ddgs, calls = fake_ddgs([])
    pauses = []
    with pytest.raises(nb.SearchFailed, match="no pictures"):
        nb.search_images("forest photo", 50, ddgs_factory=ddgs, sleep=pauses.append, attempts=2)
    assert len(calls) == 2 and len(pauses) == 1

    ddgs, calls = fake_ddgs([], RESULTS)
    assert len(nb.search_images("forest photo", 50, ddgs_factory=ddgs, sleep=lambda s: None)) == 2
    assert len(calls) == 2


def test_search_does_not_hide_programming_errors(nb):
    ddgs, calls = fake_ddgs(TypeError("a bug, not a blocked search"))
    with pytest.raises(TypeError):
        nb.search_images("bird photo", 50, ddgs_factory=ddgs, sleep=lambda s: None)
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


def test_blocked_search_falls_back_and_a_later_run_only_searches_what_is_missing(nb, tmp_path):
    manifest = tmp_path / "manifest.json"
    queries = {"bird": ["bird photo"], "forest": ["forest photo"]}
    blocked, calls = fake_ddgs([{"image": "u/b1"}], DDGSException("202 Ratelimit"))
    pauses = []
    search = functools.partial(nb.search_images, ddgs_factory=blocked, sleep=pauses.append, attempts=3,
                               first_pause=10.0)
    urls, problem = nb.collect_urls(queries, manifest, 30, search=search, sleep=pauses.append, pause=5.0)
    assert urls is None
    assert "'forest photo' failed 3 times" in problem and "again later" in problem
    assert len(calls) == 4  # one good bird search, then three forest attempts
    assert pauses == [5.0, 10.0, 20.0]  # the pause between searches, then the two retry pauses
    assert list(nb.read_manifest(manifest)["searches"]) == ["bird photo"]  # the good search is kept

    working, calls = fake_ddgs([{"image": "u/f1"}])
    search = functools.partial(nb.search_images, ddgs_factory=working, sleep=pauses.append)
    urls, problem = nb.collect_urls(queries, manifest, 30, search=search, sleep=pauses.append)
    assert problem is None and urls == {"bird": ["u/b1"], "forest": ["u/f1"]}
    assert [call["query"] for call in calls] == ["forest photo"]


@pytest.mark.parametrize("counts, online, expected", [
    ({"bird": 60, "forest": 55}, False, "reuse"),  # a prepared workshop folder: no internet needed
    ({"bird": 60, "forest": 55}, True, "reuse"),  # a rerun does not search again
    ({"bird": 60, "forest": 10}, True, "search"),
    ({"bird": 0, "forest": 0}, False, "stand-in"),
    ({"bird": 60, "forest": 49}, False, "stand-in"),
    ({}, True, "search"),
])
def test_plan_dataset(nb, counts, online, expected):
    assert nb.plan_dataset(counts, 50, online) == expected


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


# ---------------------------------------------------------------- the real download path, against a local server

def jpeg_bytes(width, height, colour=(200, 120, 40)):
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


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


def test_download_keeps_good_pictures_removes_bad_ones_and_counts_every_url(nb, tmp_path, server):
    folder, manifest = tmp_path / "bird_or_not", tmp_path / "bird_or_not" / "manifest.json"
    learners_own = folder / "bird" / "my_own_photo.jpg"  # a picture that was there before: must survive
    learners_own.parent.mkdir(parents=True)
    learners_own.write_bytes(jpeg_bytes(50, 40))
    names = ["good-big.jpg", "good-small.jpg", "good.png", "page.jpg", "truncated.jpg", "missing.jpg", "slow.jpg",
             "stalls.jpg"]
    urls = {"bird": [f"{server}/{name}" for name in names]}

    start = time.perf_counter()
    table = nb.download_dataset(urls, folder, manifest, timeout=1)
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
    again = nb.download_dataset(urls, folder, manifest, timeout=1).loc["bird"].to_dict()
    assert again == {"new_urls": 0, "saved": 0, "broken": 0, "failed": 0, "added": 0, "images": 4}
    assert len(PictureServer.requests) == requests_before
    assert sorted((folder / "bird").iterdir()) == files


def test_download_with_a_dead_network_leaves_the_urls_for_a_later_try(nb, tmp_path, server):
    folder, manifest = tmp_path / "data", tmp_path / "data" / "manifest.json"
    dead = "http://127.0.0.1:9"  # the discard port: nothing listens there, so every connection is refused
    counts = nb.download_dataset({"forest": [f"{dead}/a.jpg", f"{dead}/b.jpg"]}, folder, manifest, timeout=1)
    assert counts.loc["forest"].to_dict() == {"new_urls": 2, "saved": 0, "broken": 0, "failed": 2, "added": 0,
                                              "images": 0}
    assert "forest" not in nb.read_manifest(manifest)["attempted"]

    later = nb.download_dataset({"forest": [f"{server}/good-small.jpg"]}, folder, manifest, timeout=1)
    assert later.loc["forest", "added"] == 1 and nb.count_images(folder, ["forest"]) == {"forest": 1}


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


@pytest.mark.parametrize("n_train, expected", [(32, 8), (128, 32), (256, 64), (5000, 64), (10, 2), (3, 1)])
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


def test_pretrained_path_loads_weights_from_torch_home(nb, tiny_dls, torch_home):
    standin = torchvision.models.resnet18(weights=None).state_dict()  # random weights, real resnet18 layout
    checkpoints = torch_home / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    torch.save(standin, checkpoints / "resnet18-f37072fd.pth")

    learn, pretrained = nb.make_learner(tiny_dls)
    assert pretrained is True and DOWNLOAD_TIMEOUTS == []  # read from TORCH_HOME, no download tried
    first_conv = learn.model[0][0].weight
    assert torch.equal(first_conv.detach().cpu(), standin["conv1.weight"])


def test_without_weights_it_warns_and_uses_random_weights(nb, tiny_dls, torch_home, capsys):
    socket.setdefaulttimeout(12.5)  # a value of the caller's that make_learner must give back
    try:
        learn, pretrained = nb.make_learner(tiny_dls, socket_timeout=7)
        assert socket.getdefaulttimeout() == 12.5
    finally:
        socket.setdefaulttimeout(None)
    assert DOWNLOAD_TIMEOUTS == [7]  # the download ran with a time limit, so it cannot hang
    assert pretrained is False and learn.model is not None
    out = capsys.readouterr().out
    assert "Warning" in out and "URLError" in out and "poor accuracy" in out


def test_a_damaged_weights_file_falls_back_too(nb, tiny_dls, torch_home, capsys):
    checkpoints = torch_home / "hub" / "checkpoints"
    checkpoints.mkdir(parents=True)
    buffer = io.BytesIO()
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), buffer)
    (checkpoints / "resnet18-f37072fd.pth").write_bytes(buffer.getvalue()[:1000])  # cut short
    _, pretrained = nb.make_learner(tiny_dls)
    assert pretrained is False
    assert "RuntimeError" in capsys.readouterr().out
