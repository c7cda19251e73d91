"""The few wording promises a learner relies on, in one table, checked by one test (test_promises.py).

Tests do not pin sentences: a one-sentence edit must not fail the suite. But a handful of words are
promises that a learner acts on, such as the menu path to Kaggle's two GPUs, and losing them would send
a learner the wrong way while every behaviour test still passed. Each entry says what must be said, not
how: a regular expression searched, case-sensitively and with line breaks read as spaces, in
- "title": the notebook's first cell (what you will find out, the title table);
- "core": the markdown before the Summary;
- "notebook": every markdown cell.
What a cell prints is not here: tests/verdicts.py holds the verdicts.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Promise:
    pattern: str
    where: str
    why: str


WHERE = ("title", "core", "notebook")

PROMISES = {
    "06": [
        Promise(r"Settings > Accelerator > GPU T4 x2", "title",
                "the menu path that gives a Kaggle learner two real GPUs for the processes of Steps 4-6"),
    ],
    "08": [
        Promise(r"Settings > Accelerator > GPU T4 x2", "title",
                "the menu path that gives a Kaggle learner two real GPUs for Step 4's sharding"),
    ],
}
