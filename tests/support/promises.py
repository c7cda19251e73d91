"""The few wording promises a learner relies on, each notebook's `promises` in notebooks/manifest.toml,
checked by one test (test_promises.py).

Tests do not pin sentences: a one-sentence edit must not fail the suite. But a handful of words are
promises that a learner acts on, such as the menu path to Kaggle's two GPUs, and losing them would send
a learner the wrong way while every behaviour test still passed. Each entry says what must be said, not
how: a regular expression searched, case-sensitively and with line breaks read as spaces, in
- "title": the notebook's first cell (what you will find out, the title table);
- "core": the markdown before the Summary;
- "notebook": every markdown cell.
A promise with `present = false` is a corrected error that must not come back (a claim that was wrong).
What a cell prints is not here: the verdicts are.
"""
from manifest import PLACES as WHERE, Promise, notebooks  # noqa: F401  (Promise: for made-up tables)

PROMISES = {number: list(entry.promises) for number, entry in notebooks().items() if entry.promises}
