"""Test-run settings shared by every test, and the one switch that makes the notebooks small.

The test command sets TUTORIAL_FAST=1 here itself, so a run never depends on the caller's
environment; `--full-size` runs the notebooks at the size a learner gets instead.
The notebook kernels that nbval starts inherit this process's environment.
"""
import os
import re
import sys
import time
from pathlib import Path

import pytest

# One PyTorch thread per process during the test run: two workers share two cores, and PyTorch's
# OpenMP threads wait for each other by spinning, so two processes of two threads each slow down
# many times over. Measured on the 2-core build machine, notebooks 04 and 05 in fast mode side by
# side (tests/time_notebooks.py): 128 s and 145 s with PyTorch's default threads, 13 s and 39 s with
# one each (alone: 12 s and 34 s). Set before anything imports torch; notebook kernels, the browser
# test's JupyterLab and other child processes inherit it (06's and 08's launches set their own).
os.environ.setdefault("OMP_NUM_THREADS", "1")

# What the tests share (tests/support/: notebook_code, verdicts, the JupyterLab page, ...) is the
# package `support` in tests/, imported as support.<module>.
sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))
# What the tests share with the tools (tools/anatomy.py, tools/notebook_run.py, ...).
sys.path.insert(0, str(Path(__file__).resolve().parent / "tools"))
# branch coverage of the notebooks' helpers, printed at the end; the notebooks run alone, their pages
# checked in JupyterLab (tests/notebook_items.py)
pytest_plugins = ["support.helper_coverage", "support.notebook_items"]

import manifest  # noqa: E402  (tools/manifest.py: the per-notebook facts)


def pytest_addoption(parser):
    parser.addoption(
        "--full-size",
        action="store_true",
        help="run the notebooks at full size (TUTORIAL_FAST=0) instead of the small, fast test size",
    )


def pytest_configure(config):
    os.environ["TUTORIAL_FAST"] = "0" if config.getoption("--full-size") else "1"
    # Matplotlib must not try to open a window from plain tests (the notebooks draw inline).
    os.environ.setdefault("MPLBACKEND", "Agg")


# The longest files first, so that the two workers of `-n 2 --dist loadfile` finish together instead
# of one of them running the browser test alone at the end (pytest.ini turns off xdist's own
# reordering, which puts files with the most tests first). A notebook's nbval run and its test files
# take the seconds its manifest entry gives (test_seconds); the files that are no one notebook's, these.
COLLECTION_SECONDS = {"tests/collection/test_browser.py": 200,
                      "tests/collection/test_missing_packages.py": 55,
                      "tests/collection/test_broken_packages.py": 50,
                      "tests/shared_cells/test_process_plumbing.py": 30}  # starts programs and torchrun
NOTEBOOK_FILE = re.compile(r"^(?:notebooks/|tests/notebooks/test_)(\d\d)_")


def run_seconds(nodeid):
    """About how long the file of a test takes in a test run (0 when nothing says)."""
    path = nodeid.split("::")[0]
    if path in COLLECTION_SECONDS:
        return COLLECTION_SECONDS[path]
    found = NOTEBOOK_FILE.match(path)
    entry = manifest.notebooks().get(found.group(1)) if found else None
    if entry is None:
        return 0
    return entry.test_seconds["notebook" if path.startswith("notebooks/") else "tests"]


def run_order(nodeid):
    """Where a test goes: the longest files first (a file's tests keep their order)."""
    return -run_seconds(nodeid)


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: run_order(item.nodeid))  # stable: a file's tests keep their order


# What each notebook's core printed and showed so far, counted as nbval runs its cells (one notebook
# runs whole on one worker: --dist loadfile): {path: {cell id: (printed words, tables and figures,
# outputs)}}.
CORE_SHOWN = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """After nbval ran a notebook cell without error: check the verdicts it must print on this machine
    (tests/verdicts.py), which nbval itself does not compare, an exercise's starter and answer among
    them; after the core's last code cell, check the
    core against the class rule (tools/anatomy.py: budget_problems) and the notebook's instructor
    note's timing plan against the same counts (tools/instructor_kit.py)."""
    started = time.perf_counter()
    result = yield
    seconds = time.perf_counter() - started
    outputs, cell = getattr(item, "test_outputs", None), getattr(item, "cell", None)
    if outputs is not None and cell is not None:  # an nbval cell (nbval.plugin.IPyNbCell)
        from support.verdicts import (describe_missing, missing_verdicts, printed_text, record_cell_verdict,
                                      shows_something, starter_and_answer_verdicts)

        notebook = item.path.name[:2]
        missing = missing_verdicts(notebook, cell.get("id"), outputs)
        if missing:
            raise AssertionError(describe_missing(notebook, cell.get("id"), missing, outputs))
        wrong = (starter_and_answer_verdicts(cell.get("id"), printed_text(outputs))
                 or record_cell_verdict(cell.get("source", ""), printed_text(outputs)))
        if wrong:
            raise AssertionError(wrong)
        shown = shows_something(cell.get("source", ""), outputs)
        if shown:
            raise AssertionError(f"{cell.get('id')}: its title says it shows nothing, but it shows {shown}")
        if cell.get("id", "").startswith("exercise-") and cell.get("id", "").endswith("-starter"):
            probe_the_check(item, cell)
        check_core_budget(item.path, cell.get("id"), outputs, seconds)
    return result


def probe_the_check(item, cell, timeout=600):
    """Call an exercise's check from its starter's line again, in the notebook's kernel, with the
    learner's work replaced by a function that raises, returns None or a string, or by None and a
    string (tests/exercise_probes.py); fail unless every call says NOT YET RIGHT or NOT DONE YET."""
    from support.exercise_probes import probe_code, probe_problems

    kernel = item.parent.kernel
    message = kernel.execute_cell_input(probe_code(cell.get("source", "")), allow_stdin=False)
    kernel.await_reply(message, timeout=timeout)
    printed = []
    while True:
        reply = kernel.get_message(stream="iopub", timeout=timeout)
        if reply["parent_header"].get("msg_id") != message:
            continue
        if reply["msg_type"] == "stream":
            printed.append(reply["content"]["text"])
        elif reply["msg_type"] == "error":
            printed.append(f"{reply['content']['ename']}: {reply['content']['evalue']}")
        elif reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
            break
    problems = probe_problems("".join(printed))
    if problems:
        raise AssertionError(f"{cell.get('id')}: a check must answer whatever the learner wrote "
                             f"(CONTRIBUTING.md, 'Exercises'):\n" + "\n".join(problems))


def check_core_budget(path, cell_id, outputs, seconds=0.0):
    """Add up what the core's cells printed and showed; at its last code cell, fail on a broken rule
    or an instructor note whose timing plan the run does not give."""
    from support import notebook_code as nc

    notebook = nc.read(path)
    core_ids = [cell.get("id") for cell in nc.core_cells(notebook) if cell.cell_type == "code"]
    if cell_id not in core_ids:
        return
    key = str(path)
    if cell_id == core_ids[0]:
        CORE_SHOWN[key] = {}
    CORE_SHOWN.setdefault(key, {})[cell_id] = (nc.printed_prose_words(outputs),
                                               nc.tables_and_figures(outputs), outputs, seconds)
    if cell_id != core_ids[-1]:
        return
    counted = CORE_SHOWN[key]
    problems = nc.budget_problems(notebook, sum(n for n, _, _, _ in counted.values()),
                                  sum(n for _, n, _, _ in counted.values()), nc.CORE_LIMIT_MINUTES)
    problems += note_problems(path, notebook, counted)
    if problems:
        # which cells printed prose, and the prose lines of the one that printed most: a run on a
        # busy machine may print lines a quiet one does not, and the log is all CI keeps
        heaviest = max(counted, key=lambda cell: counted[cell][0])
        lines = [line for output in counted[heaviest][2] for line in nc.output_text(output).splitlines()
                 if len(line.split()) >= nc.PROSE_LINE_WORDS]
        raise AssertionError(
            f"{path.name}, the class rule (CONTRIBUTING.md, 'The class rule'): " + "; ".join(problems)
            + "\nprinted words, tables and figures per cell: "
            + ", ".join(f"{cell} {n}/{t}" for cell, (n, t, _, _) in counted.items() if n or t)
            + f"\nthe prose lines of {heaviest}:\n" + "\n".join(lines))


def note_problems(path, notebook, counted):
    """Where the notebook's instructor note (docs/instructors/) disagrees with this run's counts, section
    by section: the note's timing plan is the class rule's, computed as this run is."""
    import anatomy
    import instructor_kit

    entry = manifest.notebooks().get(path.name[:2])
    if entry is None:
        return []
    note = instructor_kit.note_path(entry)
    if not note.exists():
        return [f"it has no instructor note ({note.relative_to(instructor_kit.REPO)}): run "
                f"tools/instructor_kit.py {path.name[:2]}"]
    stated = anatomy.workshop_t4(notebook)
    shown = {cell: (printed, tables) for cell, (printed, tables, _, _) in counted.items()}
    seconds = {cell: spent for cell, (_, _, _, spent) in counted.items()}
    minutes = anatomy.section_minutes(notebook, shown, seconds, stated[1] if stated else 0.0)
    return [f"its instructor note's timing plan is stale ({problem}): run tools/instructor_kit.py "
            f"{path.name[:2]}" for problem in instructor_kit.timing_problems(note.read_text(), minutes)]
