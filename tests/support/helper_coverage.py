"""Branch coverage of the notebooks' helpers, measured in every test run and printed at its end.

conftest.py loads this pytest plugin. The unit tests run a notebook's definitions from a generated file
per notebook (notebook_code.load_helpers writes .test-cache/notebook_helpers/NN_name.py, each line the
same line of its cell), and the whole cells that tests run with stand-ins from one file per cell
(notebook_code.run_cell writes NN_name.<cell id>.py there), so coverage.py, told to measure those files
only, can say which lines and which branches of the helpers and cells the tests executed. The notebooks' own runs (nbval, the browser test) happen in
Jupyter kernels, other processes, and are not measured: the figures are the unit tests' alone.

Only tests whose module imports load_helpers, and load_helpers itself, are measured (the tracer slows
everything it watches); with pytest-xdist every worker measures the tests it runs and saves its data in a folder of this run;
the controller combines them and prints the report. `--no-helper-coverage` turns it all off.
Afterwards `.venv/bin/python -m coverage report -m --data-file=.test-cache/coverage/helpers` lists the
missing lines and branches (`coverage html` with the same option draws them); every generated file
names, above each cell's lines, the notebook cell they come from.
"""
import contextlib
import functools
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from support import notebook_code
from support.notebook_code import (HELPER_DIR, NOTEBOOKS, REPO, helper_source, notebook_path, read,
                                   shared_copy_of, write_helper_file)

COVERAGE_DIR = REPO / ".test-cache" / "coverage"
DATA_FILE = COVERAGE_DIR / "helpers"  # the last run's combined data, for `coverage report -m`
MOST_NAMES = 6  # helpers named per notebook in the report, the least covered first


def pytest_addoption(parser):
    parser.addoption("--no-helper-coverage", action="store_true",
                     help="do not measure the branch coverage of the notebooks' helpers")


class Measurement:
    """coverage.py for the generated helper files, switched on only while something can run them: a
    test whose module imports load_helpers, and load_helpers itself (a module's `nb = load_helpers(..)`
    runs at collection, while the test modules import torch, fastai, ...: too slow to trace)."""

    def __init__(self, run_dir):
        import coverage

        self.coverage = coverage.Coverage(data_file=str(Path(run_dir) / DATA_FILE.name), data_suffix=True,
                                          branch=True, include=[str(HELPER_DIR / "*.py")], config_file=False)
        self.coverage.set_option("run:disable_warnings", ["no-data-collected"])  # ran only notebooks
        self.depth = 0

    @contextlib.contextmanager
    def on(self):
        """Measure inside this block (blocks may nest)."""
        if self.depth == 0:
            self.coverage.start()
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if self.depth == 0:
                self.coverage.stop()

    def save(self):
        self.coverage.save()


def start_measuring(config, run_dir):
    """Set up the measurement of this process, and make load_helpers measure what it runs."""
    measurement = config.helper_coverage = Measurement(run_dir)
    plain_load_helpers = notebook_code.load_helpers

    @functools.wraps(plain_load_helpers)
    def load_helpers(prefix):
        with measurement.on():
            return plain_load_helpers(prefix)

    # The test modules are imported after this, so `from notebook_code import load_helpers` gets it.
    notebook_code.load_helpers = load_helpers


def pytest_configure(config):
    config.helper_coverage = None
    if config.getoption("--no-helper-coverage") or config.getoption("collectonly"):
        return
    worker_input = getattr(config, "workerinput", None)
    if worker_input is not None:  # an xdist worker: measure into the folder the controller made
        if worker_input.get("helper_coverage_dir"):
            start_measuring(config, worker_input["helper_coverage_dir"])
        return
    COVERAGE_DIR.mkdir(parents=True, exist_ok=True)
    # Every notebook's file, also those no test loads: the report lists them too, with nothing run.
    config.helper_files = [str(write_helper_file(path.name[:2])) for path in NOTEBOOKS]
    config.helper_coverage_dir = tempfile.mkdtemp(prefix="run-", dir=COVERAGE_DIR)
    distributed = config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))
    if not distributed:  # the tests run in this process
        start_measuring(config, config.helper_coverage_dir)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist's controller, for each worker it starts: where the worker saves its coverage data."""
    node.workerinput["helper_coverage_dir"] = getattr(node.config, "helper_coverage_dir", None)


LOADERS = ("load_helpers", "load_helpers_quietly", "load_shared", "run_cell")  # what runs a notebook's code


def runs_helpers(item):
    """True for a test whose module imports load_helpers (or load_helpers_quietly, load_shared) or
    run_cell: only those can run a notebook's code. The others (nbval's cells, the browser test, ...) run
    without the tracer, which costs time."""
    module = getattr(item, "module", None)
    return any(hasattr(module, name) for name in LOADERS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    measurement = item.config.helper_coverage
    if measurement is None or not runs_helpers(item):
        return (yield)
    with measurement.on():
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    """Save this process's data; a worker does so before xdist tells the controller it has finished."""
    measurement = session.config.helper_coverage
    if measurement is not None:
        measurement.save()
        session.config.helper_coverage = None


class Figures:
    """Lines and branches run of some functions; a function copied into several notebooks (the
    shared cells of tools/shared_cells/) counts once, with what any copy ran."""

    def __init__(self):
        self.functions = {}  # name: [statements, branches, lines run, branches taken], relative lines

    def add(self, name, region):
        start = region["start_line"]

        def relative(line):
            return line - start if line > 0 else ("exit", line + start)

        figures = region["summary"]
        known = self.functions.setdefault(name, [figures["num_statements"], figures["num_branches"],
                                                 set(), set()])
        known[2] |= {relative(line) for line in region["executed_lines"]}
        known[3] |= {(relative(a), relative(b)) for a, b in region["executed_branches"]}

    def totals(self):
        """(lines run, lines, branches taken, branches)."""
        return tuple(sum(values) for values in zip(
            *[(len(run), lines, len(taken), branches) for lines, branches, run, taken in self.functions.values()]
        )) or (0, 0, 0, 0)

    def unfinished(self):
        """The functions with a line or a branch never run, the least covered first."""
        shares = [((len(run) + len(taken)) / max(1, lines + branches), name)
                  for name, (lines, branches, run, taken) in self.functions.items()
                  if len(run) < lines or len(taken) < branches]
        return [name for _, name in sorted(shares)]


SHARED_ROW = "shared cells (tools/shared_cells/, each copy counted once)"


def shared_lines(prefix):
    """The lines of notebook `prefix`'s generated file that come from a shared cell's copy (the install
    and shared setup cells in every notebook, the datasheet, the plumbing, ...): tools/shared_cells/
    holds their one source, and tests/shared_cells/ tests one copy of each."""
    text, line_map = helper_source(prefix)
    cells = read(notebook_path(prefix)).cells
    copied = {index for index, cell in enumerate(cells) if shared_copy_of(cell)}
    return {number for number, entry in enumerate(line_map, start=1) if entry and entry[0] in copied}


def summary(files):
    """{row name: Figures} from coverage.py's JSON report of the generated files: one row per
    notebook, and one for the shared cells' copies, each function counted once. A notebook's row holds its
    helper file and the files of the whole cells tests ran with run_cell (`01_name.<cell id>.py`),
    whose top-level code is named "cell <cell id>"."""
    rows, copied = {}, Figures()
    for path, data in sorted(files.items()):
        notebook, _, cell_id = Path(path).stem.partition(".")
        copied_lines = set() if cell_id else shared_lines(Path(path).name[:2])
        row = rows.setdefault(notebook, Figures())
        top_level = f"cell {cell_id}" if cell_id else "(top level)"
        for name, region in data["functions"].items():
            (copied if region["start_line"] in copied_lines else row).add(name or top_level, region)
    rows[SHARED_ROW] = copied
    return rows


def cell_files(measured):
    """The files of whole cells (notebook_code.run_cell) among coverage.py's measured files."""
    return sorted(path for path in measured
                  if Path(path).parent == HELPER_DIR and "." in Path(path).stem and Path(path).is_file())


def _fraction(done, total):
    return f"{done}/{total} " + (f"{100 * done / total:3.0f} %" if total else "  - %")


def report_lines(rows):
    """The report: one line per notebook, its lines and branches run, the helpers left unfinished."""
    lines = [f"{'notebook':52} {'lines run':>14} {'branches taken':>15}"]
    for name, row in rows.items():
        run, total, taken, branches = row.totals()
        lines.append(f"{name:52} {_fraction(run, total):>14} {_fraction(taken, branches):>15}")
        names = row.unfinished()[:MOST_NAMES]
        more = len(row.unfinished()) - len(names)
        if names:
            lines.append("    not all run (least covered first): " + ", ".join(names)
                         + (f" and {more} more" if more > 0 else ""))
    totals = [sum(values) for values in zip(*[row.totals() for row in rows.values()])]
    lines.append(f"{'all':52} {_fraction(*totals[:2]):>14} {_fraction(*totals[2:]):>15}")
    return lines


def pytest_terminal_summary(terminalreporter, config):
    run_dir = getattr(config, "helper_coverage_dir", None)
    if run_dir is None:  # an xdist worker, or coverage turned off
        return
    import coverage

    try:
        combined = coverage.Coverage(data_file=str(DATA_FILE), branch=True, config_file=False)
        combined.combine([run_dir], keep=False)
        combined.save()
        terminalreporter.section("branch coverage of the notebooks' helpers")
        if not combined.get_data().measured_files():
            terminalreporter.write_line("No test loaded a notebook's helpers in this run.")
            return
        report_path = Path(run_dir) / "report.json"
        combined.json_report(morfs=config.helper_files + cell_files(combined.get_data().measured_files()),
                             outfile=str(report_path))
        for line in report_lines(summary(json.loads(report_path.read_text())["files"])):
            terminalreporter.write_line(line)
        terminalreporter.write_line(
            "Only the unit tests count: nbval and the browser test run the notebooks in other processes.\n"
            "Missing lines and branches: .venv/bin/python -m coverage report -m "
            f"--data-file={DATA_FILE.relative_to(REPO)}\n(in .test-cache/notebook_helpers/, a header "
            "line above each cell's lines names the notebook cell they come from).")
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
