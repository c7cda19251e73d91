"""Notebook 03's search for photos, with fake DDGS classes put in the ddgs package's place (fail N times
then succeed, always fail, return nothing) and a `sleep` that only records the pauses, so retries, pauses
and fallbacks are checked at once: search_photos, collect_urls and its manifest, the plan (search, reuse,
stand-ins) with and without internet or ddgs, and how many results one search asks for. No internet and
no real search engine are needed."""
import ast
import functools
import sys

import pytest
from ddgs.exceptions import DDGSException

from support.fake_ddgs import fake_ddgs, put_ddgs
from support.notebook_code import code_cells, load_helpers_quietly, notebook_constant, notebook_path, read


@pytest.fixture(scope="module")
def nb():
    return load_helpers_quietly("03")


RESULTS = [{"image": "https://a.example/1.jpg", "title": "one"},
           {"image": "https://a.example/2.jpg", "title": "two"},
           {"image": "https://a.example/1.jpg", "title": "one again"},  # duplicate: kept once
           {"image": "", "title": "an entry without a picture URL"}]


@pytest.fixture
def use_ddgs(monkeypatch):
    """use_ddgs(fake) puts a fake DDGS class where search_photos imports it from."""
    return functools.partial(put_ddgs, monkeypatch)


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
    helpers = load_helpers_quietly("03")  # runs every import of the notebook: none may need ddgs
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


def test_a_search_asks_for_no_more_than_one_page_of_ddgs_results():
    """ddgs 9's DuckDuckGo image engine fetches one page (up to 100 results) per call: asking for 200
    gives 100 at most, so the notebook asks for what one call gives."""
    assert notebook_constant("03", "IMAGES_PER_SEARCH", FAST=False) <= 100
    assert notebook_constant("03", "IMAGES_PER_SEARCH", FAST=True) <= 100
