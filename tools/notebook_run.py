"""Run one notebook alone, as a learner who uploaded it to Colab or Kaggle runs it: the one way this
repository runs a notebook outside nbval.

The notebook is copied alone into an empty temporary folder and run there top to bottom by nbclient, in
fast mode (TUTORIAL_FAST=1, the size the tests use) or at full size, stopping at the first error as
"Run All" does. The result holds the executed notebook (outputs and nbclient's timestamps), the whole
run's seconds (kernel start included), the core's seconds (the code cells before the Summary heading,
tools/anatomy.py) and the first error. tools/budget.py, tools/time_notebooks.py, tools/gpu_run.py and
the tests that run a notebook whole (tests/collection/test_missing_packages.py, test_broken_packages.py)
all use it.

As a command, it runs a notebook in the Python that runs it, which is how the tests run a notebook in a
throwaway environment with a package missing:

    python tools/notebook_run.py NOTEBOOK [--full-size] [--out RUN.ipynb] [--timeout S] [--folder F]

It writes the executed notebook to --out, prints one JSON line (whole_s, core_s, error) and exits 0,
also when a cell failed (the error is in the line).
"""
import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import anatomy  # noqa: E402  (beside this file)


@dataclass
class Run:
    """One run of a notebook alone: the executed notebook, its seconds, its first error (or None)."""
    notebook: dict
    whole_s: float
    core_s: float
    error: str

    def code_cells(self):
        return [cell for cell in self.notebook["cells"] if cell["cell_type"] == "code"]


def cell_seconds(cell):
    """How long a code cell ran, from the timestamps nbclient records (0 when there are none)."""
    execution = cell.get("metadata", {}).get("execution", {})
    start, end = execution.get("iopub.execute_input"), execution.get("shell.execute_reply")
    if not start or not end:
        return 0.0

    def parse(stamp):
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))

    return (parse(end) - parse(start)).total_seconds()


def core_seconds(notebook):
    """The time of the core's code cells (ValueError when the notebook has no Summary heading)."""
    return sum(cell_seconds(cell) for cell in anatomy.core_cells(notebook)
               if cell["cell_type"] == "code")


@contextlib.contextmanager
def environment(changes):
    """os.environ with `changes` (None removes a variable) while the block runs; the kernel that
    nbclient starts inherits it."""
    saved = {name: os.environ.get(name) for name in changes}
    try:
        for name, value in changes.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
        yield
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)


def first_error(notebook):
    """'Name: message' of the first error output in the notebook, or None."""
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                return f"{output.get('ename')}: {output.get('evalue')}"[:500]
    return None


def run_alone(path, fast=True, timeout=1200, keep=None, env=None, folder=None):
    """Run the notebook at `path` alone in an empty temporary folder (deleted afterwards); a Run.
    `keep`: a folder to save the executed notebook in; `env`: more environment variables; `folder`:
    run there instead (a test prepares what a learner would have put beside the notebook), and keep it."""
    import nbformat  # here, so that importing this module needs no Jupyter packages
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    temporary = folder is None
    folder = Path(tempfile.mkdtemp(prefix="notebook_run_")) if temporary else Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        copy = folder / Path(path).name
        shutil.copy(path, copy)
        notebook = nbformat.read(copy, as_version=4)
        client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", record_timing=True,
                                resources={"metadata": {"path": str(folder)}})
        error = None
        started = time.perf_counter()
        with environment({"TUTORIAL_FAST": "1" if fast else "0", **(env or {})}):
            try:
                client.execute()
            except CellExecutionError:
                pass  # like Run All: stop at the first error; its output is in the notebook
            except Exception as failure:  # the kernel died, a cell timed out: recorded, not raised
                lines = str(failure).strip().splitlines() or [""]
                error = f"{type(failure).__name__}: {lines[-1][:400]}"
        whole = time.perf_counter() - started
        error = error or first_error(notebook)
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            nbformat.write(notebook, str(Path(keep) / Path(path).name))
        try:
            core = core_seconds(notebook) if error is None else None
        except ValueError:
            core = None
        return Run(notebook, whole, core, error)
    finally:
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)


def run_in(python, path, fast=True, timeout=1200, env=None, folder=None):
    """run_alone in another Python (a throwaway environment): this file run as a command there. `env`
    is that process's whole environment (None: this one's); `folder` as in run_alone."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="notebook_run_in_") as scratch:
        out = Path(scratch) / "run.ipynb"
        command = [str(python), str(Path(__file__).resolve()), str(path), "--out", str(out),
                   "--timeout", str(timeout), *([] if fast else ["--full-size"]),
                   *([] if folder is None else ["--folder", str(folder)])]
        done = subprocess.run(command, env=env, cwd=folder or scratch, capture_output=True, text=True,
                              timeout=timeout + 300, check=True)
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        return Run(json.loads(out.read_text()), summary["whole_s"], summary["core_s"],
                   summary["error"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook")
    parser.add_argument("--full-size", action="store_true", help="TUTORIAL_FAST=0 (default: fast)")
    parser.add_argument("--out", help="write the executed notebook here")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds one cell may take")
    parser.add_argument("--folder", help="run in this folder (kept) instead of an empty temporary one")
    args = parser.parse_args(argv)
    run = run_alone(args.notebook, fast=not args.full_size, timeout=args.timeout, folder=args.folder)
    if args.out:
        Path(args.out).write_text(json.dumps(run.notebook))
    print(json.dumps({"whole_s": run.whole_s, "core_s": run.core_s, "error": run.error}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
