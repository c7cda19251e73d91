"""What the notebooks must print on the test machine: their verdicts, checked in the runs the suite makes.

nbval only proves that no cell raised. A notebook that falls back quietly (random weights when the
pretrained ones fail, stand-in pictures when the search fails, a verdict printed where an assertion would
stop) passes nbval whatever it printed. So conftest.py reads the output of every cell nbval runs, and
tests/test_browser.py the output of every cell on the page, and both check it against the verdicts of
each notebook's entry in notebooks/manifest.toml: no notebook runs one more time for this.

A verdict (tools/manifest.py: Verdict) names a cell, a pattern, when it holds and why:
- pattern: a regular expression searched (re.MULTILINE) in everything the cell printed or showed as text
  (stdout, stderr, and the text form of its results and displays);
- when: the situation it holds in, one of SITUATIONS: "always"; "cpu" (PyTorch sees no GPU or other
  accelerator, as on the build machine and in CI); "gpu"; "offline" (duckduckgo.com does not answer, the
  same probe notebook 03 makes); "triton" (Triton is installed, as with PyTorch's Linux wheels; without
  it notebook 09 shows its kernels instead of running them); "cpu_compiler" ("cpu", and a C++
  compiler that Inductor can call, found as notebook 09 finds it); the tests run in fast mode
  (TUTORIAL_FAST=1) anyway;
- why: what it proves, and what quiet fallback it catches.
To add one: find the cell's id (`"id"` in the .ipynb, kept by nbstripout --keep-id), write the line the
cell prints on this machine as a pattern, and say why. test_verdicts.py checks that every entry names a
cell that exists and prints something.
"""
import re
import socket
from functools import lru_cache

from manifest import Verdict, notebooks


def verdicts_by_cell(entries=None):
    """{(notebook, cell id): [Verdict]} of every notebook's verdicts in the manifest."""
    found = {}
    for number, entry in (notebooks() if entries is None else entries).items():
        for verdict in entry.verdicts:
            found.setdefault((number, verdict.cell), []).append(verdict)
    return found


VERDICTS = verdicts_by_cell()


@lru_cache(maxsize=None)
def has_accelerator():
    import torch

    return torch.accelerator.is_available()


@lru_cache(maxsize=None)
def is_offline(host="duckduckgo.com", port=443, timeout=3.0):
    """True when host:port does not answer: the probe notebook 03 makes before it plans a search."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError:
        return True
    return False


@lru_cache(maxsize=None)
def has_triton():
    """True when Triton is installed (PyTorch's Linux wheels bring it; macOS and Windows have none),
    found as notebook 09 finds it, by its distribution's metadata."""
    import importlib.metadata

    try:
        importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@lru_cache(maxsize=None)
def has_cpp_compiler():
    """True when a C++ compiler is found the way notebook 09 looks for the one Inductor calls: $CXX,
    else cl on Windows, clang++ on macOS, g++ elsewhere."""
    import os
    import shutil
    import sys

    default = {"win32": "cl", "darwin": "clang++"}.get(sys.platform, "g++")
    return shutil.which(os.environ.get("CXX") or default) is not None


SITUATIONS = {"always": lambda: True, "cpu": lambda: not has_accelerator(), "gpu": has_accelerator,
              "offline": is_offline, "triton": has_triton,
              "cpu_compiler": lambda: not has_accelerator() and has_cpp_compiler()}


def _text(value):
    return value if isinstance(value, str) else "".join(value)


def printed_text(outputs):
    """Everything a cell printed or showed as text, from nbval's outputs or a notebook model's."""
    parts = []
    for output in outputs:
        if output.get("output_type") == "stream":
            parts.append(_text(output.get("text", "")))
        elif "text/plain" in output.get("data", {}):
            parts.append(_text(output["data"]["text/plain"]))
    return "\n".join(parts)


def missing_verdicts(notebook, cell_id, outputs, situations=SITUATIONS):
    """The verdicts that cell `cell_id` of notebook `notebook` ("05") should have printed, in the
    situations that hold here, and did not: [] when all is well or the cell has no entry."""
    text = printed_text(outputs)
    return [verdict for verdict in VERDICTS.get((notebook, cell_id), [])
            if situations[verdict.when]() and not re.search(verdict.pattern, text, flags=re.MULTILINE)]


def describe_missing(notebook, cell_id, missing, outputs):
    lines = [f"notebook {notebook}, cell {cell_id}: a verdict of its notebooks/manifest.toml entry is missing from its output"]
    lines += [f"  expected ({verdict.when}): /{verdict.pattern}/ -- {verdict.why}" for verdict in missing]
    lines.append("  the cell printed:\n" + "\n".join("    " + line for line in printed_text(outputs).splitlines()[:40]))
    return "\n".join(lines)


# Every exercise's cells (tests/test_exercises.py): in the run, the untouched starter's check says NOT DONE
# YET and the answer's check PASSED, whatever the notebook.
def starter_and_answer_verdicts(cell_id, text):
    """What is wrong with an exercise cell's output in the nbval run (None when nothing is): an untouched
    starter's check must say NOT DONE YET, an answer's PASSED; other cells are not judged."""
    if not re.fullmatch(r"exercise-[\w-]+-(starter|answer)", cell_id or ""):
        return None
    wanted = "NOT DONE YET" if cell_id.endswith("-starter") else "PASSED"
    if not re.search(rf"^{wanted}\b", text, re.M):
        return f"{cell_id} must print a check's verdict starting with {wanted!r}; it printed: {text[-500:]!r}"
    return None


SHOWS_NOTHING = "(shows nothing)"  # in a folded cell's title: the cell has no output a learner sees


def shows_something(source, outputs):
    """What a cell whose #@title says SHOWS_NOTHING shows after all (None when it shows nothing or its
    title promises nothing): any stream, error or result, or a display with text, a table or a figure
    (report_figures' record for the GPU-run tool is a display with no text, which shows nothing)."""
    if not (source.startswith("#@title ") and SHOWS_NOTHING in source.split("\n", 1)[0]):
        return None
    for output in outputs:
        kind = output.get("output_type")
        if kind in ("stream", "error", "execute_result"):
            return f"a {kind} output: {str(output)[:300]}"
        data = {mime: value for mime, value in output.get("data", {}).items()
                if not mime.startswith("application/vnd.gpu-tutorials.")}
        if any("".join(value) if isinstance(value, list) else value for value in data.values()):
            return f"a display of {sorted(data)}"
    return None


# The record cell at the end of every core (tools/shared_cells/run_record.py): in the test run every core
# cell runs once, in order, and the cell clock must have seen each of them under the key the sync tool
# wrote into CORE_CELLS (a key that differs, a cell the clock missed, would make every learner's record
# partial).
RECORD_CELL_TITLE = "#@title Your run: "
RECORD_ON_THE_TEST_MACHINE = re.compile(
    r"^No CUDA GPU here \((cpu|mps)\), so no GPU record\. Minutes per section on this machine: .*; every "
    r"core cell ran once, in order\.$", re.M)


def record_cell_verdict(source, text, situations=SITUATIONS):
    """What is wrong with the record cell's output in the nbval run (None when nothing is, or when the
    cell is another): without a GPU it says so and that every core cell ran once, in order."""
    if not source.startswith(RECORD_CELL_TITLE) or not situations["cpu"]():
        return None
    if RECORD_ON_THE_TEST_MACHINE.search(text):
        return None
    return ("the record cell must say that there is no GPU here and that every core cell ran once, in "
            f"order (its CORE_CELLS and the cell clock must agree); it printed: {text[-600:]!r}")
