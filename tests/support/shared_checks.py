"""Checks and decisions that several test files share, written once.

- `skip_or_fail`: a test that cannot find what it needs (a browser, a tool) is skipped with its message on
  a contributor's machine, and FAILS when the environment variable CI is true (as CI systems set it), so a
  green CI run never hides a test that did not run.
- `code_lines_too_long`, `machine_bound_phrases`: the house rules for a notebook's code lines and prose,
  used by test_learner_first.py for the notebooks and by any test that checks generated text.
"""
import os

import pytest

MAX_LINE = 100  # what JupyterLab shows beside its file browser at 1280 px; Colab is no wider

# Phrases that describe the machine a notebook was written on, not the reader's (lower case): the prose
# describes each case (GPU, Mac, CPU) and the cell prints its own interpretation.
# The union of the lists tests/test_02, 03 and 04 kept each for themselves, but for test_03's "as here",
# which notebook 07 uses rightly ("raises where none exists, as here": true on every machine).
MACHINE_BOUND = ["here, on a", "here it printed", "on this machine", "here they say", "here both say",
                 "measured here", "in a full run on this", "here, without", "on the cpu here",
                 "here the model", "here, offline", "here, the", "at full size here",
                 "in the full-size run here"]

CI_TRUE = {"true", "1", "yes"}  # what CI systems put in CI (GitHub Actions, GitLab: "true")


def running_in_ci(environ=None):
    """True when the environment variable CI says this is a CI run ('true', '1' or 'yes', any case)."""
    environ = os.environ if environ is None else environ
    return environ.get("CI", "").strip().lower() in CI_TRUE


def skip_or_fail(message, environ=None):
    """Skip the current test with `message`; in CI (see running_in_ci) fail it instead."""
    if running_in_ci(environ):
        pytest.fail(f"{message} (CI is set, so a test that cannot run fails instead of being skipped)",
                    pytrace=False)
    pytest.skip(message)


def code_lines_too_long(text, limit=MAX_LINE):
    """The lines of `text` longer than `limit` characters."""
    return [line for line in text.splitlines() if len(line) > limit]


def machine_bound_phrases(text):
    """The MACHINE_BOUND phrases in `text` (case and line breaks ignored)."""
    flat = " ".join(text.lower().split())
    return [phrase for phrase in MACHINE_BOUND if phrase in flat]
