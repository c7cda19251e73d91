"""A stand-in for the ddgs package's search, for notebook 03's tests (tests/notebooks/test_03_*.py): a
DDGS class whose .images() calls raise or return what a test chooses, put where the notebook's
search_photos imports it from."""


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


def put_ddgs(monkeypatch, fake):
    """Put a fake DDGS class where search_photos imports it from (`from ddgs import DDGS`, at call time)."""
    import ddgs

    monkeypatch.setattr(ddgs, "DDGS", fake)
