"""Time notebooks the way README's table and the title tables were measured.

Each notebook is copied alone into an empty temporary folder and run there by nbclient, one at a time.
"whole" is the wall time of the run, kernel start included; "core" adds up the code cells before the
notebook's Summary heading. Full size unless --fast. The load average before and after is printed too,
because PyTorch on a few cores slows down a lot when anything else runs.

    .venv/bin/python tests/time_notebooks.py notebooks/04_when_does_the_gpu_win.ipynb [--fast] [--keep out/]
"""
import argparse
import os
import re
import shutil
import tempfile
import time
from datetime import datetime
from pathlib import Path


def cell_seconds(cell):
    """How long a code cell ran, from the timestamps nbclient records (0 when there are none)."""
    execution = cell.get("metadata", {}).get("execution", {})
    start, end = execution.get("iopub.execute_input"), execution.get("shell.execute_reply")
    if not start or not end:
        return 0.0
    parse = lambda stamp: datetime.fromisoformat(stamp.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


def core_seconds(cells):
    """The time of the code cells before the first markdown heading named Summary."""
    total = 0.0
    for cell in cells:
        if cell["cell_type"] == "markdown" and re.search(r"^#+ Summary", cell["source"], re.M):
            return total
        if cell["cell_type"] == "code":
            total += cell_seconds(cell)
    raise ValueError("the notebook has no Summary heading")


def load_average():
    return " ".join(f"{value:.2f}" for value in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def time_notebook(path, fast, keep=None):
    import nbformat  # here, so that importing this file for its tests needs no Jupyter packages
    from nbclient import NotebookClient

    os.environ["TUTORIAL_FAST"] = "1" if fast else "0"
    folder = Path(tempfile.mkdtemp(prefix="time_notebook_"))
    try:
        copy = folder / Path(path).name
        shutil.copy(path, copy)
        notebook = nbformat.read(copy, as_version=4)
        client = NotebookClient(notebook, timeout=3600, kernel_name="python3", record_timing=True,
                                resources={"metadata": {"path": str(folder)}})
        start = time.perf_counter()
        client.execute()
        whole = time.perf_counter() - start
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            nbformat.write(notebook, str(Path(keep) / Path(path).name))
        return whole, core_seconds(notebook.cells), printed_words(notebook)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def printed_words(notebook):
    """The core's printed prose, as the workshop budget counts it."""
    import notebook_code as nc  # beside this file

    return nc.core_printed_words(notebook)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--fast", action="store_true", help="fast mode (TUTORIAL_FAST=1)")
    parser.add_argument("--keep", metavar="FOLDER", help="save each executed notebook, outputs and all, there")
    args = parser.parse_args()
    for path in args.notebooks:
        before = load_average()
        whole, core, printed = time_notebook(path, args.fast, args.keep)
        print(f"{Path(path).name} {'fast' if args.fast else 'full size'}: whole {whole:.0f} s, "
              f"core {core:.0f} s, {printed} words of printed prose in the core "
              f"(load average before {before}, after {load_average()})", flush=True)


if __name__ == "__main__":
    main()
