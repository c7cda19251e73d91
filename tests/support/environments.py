"""Throwaway virtual environments that lack one package, or hold a broken one, and a notebook run in
them offline and "on Kaggle": Kaggle starts notebooks with Internet off and its image lacks ddgs.

An environment holds everything of the project's environment (by symlinks, so it costs seconds, not
gigabytes) except one package; the kernel believes it runs on Kaggle (KAGGLE_KERNEL_RUN_TYPE), and pip
has no index and no configuration (PIP_NO_INDEX=1, PIP_CONFIG_FILE pointing at nothing), so that the
install cell's pip call fails as it does offline. A notebook is copied alone into an empty folder and
run top to bottom in that environment by tools/notebook_run.py, stopping at the first error as
"Run All" does.
"""
import os
import subprocess
import sysconfig
import venv
from pathlib import Path

import nbformat

from notebook_run import run_in
from support.notebook_code import notebook_path


def _top_level_entries(site_packages, distribution):
    """The site-packages entries that belong to `distribution`: its dist-info and what its RECORD lists."""
    infos = [p for p in site_packages.glob("*.dist-info")
             if p.name.split("-")[0].lower().replace("_", "-") == distribution]
    assert infos, f"{distribution} is not installed in {site_packages}"
    entries = {infos[0].name}
    for line in (infos[0] / "RECORD").read_text().splitlines():
        first = line.split(",")[0].split("/")[0]
        if first and not first.startswith(".."):
            entries.add(first)
    return entries


def environment_without(distribution, folder, *others):
    """A virtual environment in `folder` with every package of this one except `distribution` (and
    `others`); its python."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    python = folder / "bin" / "python"
    here = Path(sysconfig.get_paths()["purelib"])
    there = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                capture_output=True, text=True, check=True).stdout.strip())
    hidden = set().union(*(_top_level_entries(here, name) for name in (distribution, *others)))
    for entry in here.iterdir():
        if entry.name not in hidden and not (there / entry.name).exists():
            (there / entry.name).symlink_to(entry)
    return python


def environment_with_a_broken(distribution, folder, message):
    """Like environment_without, but `distribution`'s real metadata stays (importlib.metadata says it is
    installed, so the install cell is content) and importing it raises ImportError(message), as a package
    built for another PyTorch does; its python."""
    python = environment_without(distribution, folder)
    site = next(folder.glob("lib/python*/site-packages"))
    here = Path(sysconfig.get_paths()["purelib"])
    (info,) = here.glob(f"{distribution}-*.dist-info")
    (site / info.name).symlink_to(info)  # the metadata says it is installed
    (site / distribution).mkdir()
    (site / distribution / "__init__.py").write_text(f"raise ImportError({message!r})\n")
    return python


def run_offline_on_kaggle(python, prefix, folder, through=None, then=""):
    """Copy notebook `prefix` alone into `folder`, run it there in `python`'s kernel, offline and 'on
    Kaggle', stopping at the first error as Run All does (tools/notebook_run.py, run as a command in
    that environment): its code cells as {"source", "count", "outputs"}.

    With `through`, a cell id, only the cells up to that one run, then a cell of code `then` (which
    prints the state the rest of the notebook depends on): for a run whose remaining cells take the
    same path as a run that another test makes whole."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env.update(TUTORIAL_FAST="1", KAGGLE_KERNEL_RUN_TYPE="Interactive", PIP_NO_INDEX="1",
               PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    path = notebook_path(prefix)
    if through is not None:
        notebook = nbformat.read(str(path), as_version=4)
        ids = [cell.get("id") for cell in notebook.cells]
        notebook.cells = notebook.cells[:ids.index(through) + 1] + [nbformat.v4.new_code_cell(then)]
        path = folder.parent / f"{folder.name}_source" / path.name  # the same name, alone
        path.parent.mkdir()
        nbformat.write(notebook, str(path))
    run = run_in(python, path, fast=True, timeout=900, env=env, folder=folder)
    return [{"source": cell["source"], "count": cell.get("execution_count"),
             "outputs": cell.get("outputs", [])} for cell in run.code_cells()]


def shown_text(cell):
    """Everything a cell showed: printed text, results and error messages."""
    parts = []
    for output in cell["outputs"]:
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/plain", ""))
        parts.extend(output.get("traceback", []))
    return "\n".join(parts)


def errors(cells):
    return [(cell["source"][:60], output) for cell in cells for output in cell["outputs"]
            if output["output_type"] == "error"]
