"""Make, accept and render GPU run records; README's GPU column and the titles' T4 minutes.

README's GPU column says "not measured yet" until a record of a GPU run is accepted under
records/gpu/. A record (schema version 2, records/gpu/schema.json) comes from one of two places:
this tool, run in a clone on a CUDA machine (source "gpu_run"), or a notebook's own record cell, the
folded cell at the end of its core, run by a learner on Colab, Kaggle or anywhere with a CUDA GPU
(source "notebook").

    .venv/bin/python tools/gpu_run.py --name "Your Name" --note "Colab T4, free tier"  # all
    .venv/bin/python tools/gpu_run.py 04 05           # some of the notebooks
    .venv/bin/python tools/gpu_run.py --commit SHA    # in a copy of the files without .git: the
                                                      # commit they came from (the record names it)
    .venv/bin/python tools/gpu_run.py --accept FILE   # check a record sent in; file it if sound
    .venv/bin/python tools/gpu_run.py --render        # README's GPU column, the titles' T4 minutes
    .venv/bin/python tools/gpu_run.py --check         # exit 1 when they differ from the records

Making one: each notebook runs alone in an empty folder at full size (tools/notebook_run.py, as
tools/time_notebooks.py times them); a failure is recorded and the run goes on. The record,
`records/gpu/<date>_<gpu>[-xN]_gpu_run.json`, holds the commit, the notebooks' hashes and versions
(tools/anatomy.py's notebook_version); the GPUs, driver, CUDA and cuDNN, CPU, OS and hosted service;
PyTorch's own environment report; and per notebook its status, whole and core seconds, seconds per
section of the core (from nbclient's timing of each cell), which core cells ran, its error, which
branch it ran (a notebook that fell back to the CPU or to a stand-in counts as not measured) and the
figures it reported itself (report_figures in the shared setup cell). Nothing is typed by hand but a
name and a note. The tool refuses, in one line, to write a record without a CUDA device, in fast
mode, or from a checkout whose notebooks have uncommitted changes.

A GPU machine is often reached with a copy of the files rather than a clone (a cluster node, a
rented box that got an archive). There, with no .git, `--commit SHA` names the commit the files came
from: the record names it and holds the copy's notebook hashes as usual. Nothing in the copy can say
whether its notebooks were changed, so `--accept`, `--check` and `--render`, run in a clone, compare
every record's hashes with its commit's notebooks and refuse a record that differs (or whose commit
the clone lacks).

Accepting one (`--accept FILE`, in a clone) refuses, in one line and with exit code 1: a file that
is not JSON; a record that breaks the schema; a notebook version that no commit on main has (for a
gpu_run record also hashes that differ from its commit's); a figure the record's GPU cannot reach by
the datasheet (tools/shared_cells/datasheet.py: GB/s above the memory bandwidth, FLOP/s above the
float32 peak, each with 10 % of headroom; a GPU the datasheet does not know skips these and says
so); a time that is zero or negative. Otherwise it says what it checked and files the record.

Rendering: README's GPU column holds, per notebook and per GPU model and count, the median of the
core's minutes over the measured entries of the records, how many, and the newest record's date;
each title's plan takes its T4 running minutes from the one-T4 records where they
exist and says "measured, N runs" instead of "estimate". Where no record measured a notebook, both
stay as they are. `--render` and `--check` count only the records `--accept` would accept.
"""
import argparse
import ast
import functools
import hashlib
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
from collections import namedtuple
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import anatomy  # noqa: E402  (beside this file; standard library only)
from notebook_run import cell_seconds  # noqa: E402  (imports no Jupyter package)

RECORDS = REPO / "records" / "gpu"
SCHEMA = RECORDS / "schema.json"
README = REPO / "README.md"
DATASHEET_CELL = Path(__file__).resolve().parent / "shared_cells" / "datasheet.py"
FIGURES_MIME = "application/vnd.gpu-tutorials.figures+json"  # the shared setup's report_figures
NOT_MEASURED = "not measured yet"
GPU_COLUMN = "GPU, measured"
SCHEMA_VERSION = 2
MAIN = ("main", "origin/main")  # the branch whose notebook versions a record may carry: the first
HEADROOM = 1.1  # a figure may exceed a datasheet peak by 10 % (boost clocks), not more


# ---- Refusals ------------------------------------------------------------------------------------

def refusal(fast_mode, dirty_notebooks, cuda_available):
    """The one line that says why no record may be written, or None."""
    if fast_mode:
        return ("refused: TUTORIAL_FAST=1 makes the notebooks small; a record holds full-size runs "
                "(unset TUTORIAL_FAST)")
    if dirty_notebooks:
        return (f"refused: {len(dirty_notebooks)} notebook(s) have uncommitted changes "
                f"({', '.join(dirty_notebooks[:3])}); commit or stash them, so the record names "
                "what ran")
    if not cuda_available:
        return ("refused: PyTorch sees no CUDA GPU (torch.cuda.is_available() is False); a record "
                "holds GPU measurements only")
    return None


def has_git(repo=None):
    """True in a clone (a .git folder, or a worktree's .git file), False in a copy of the files."""
    return (Path(REPO if repo is None else repo) / ".git").exists()


def commit_refusal(in_clone, commit):
    """The one line that refuses --commit as given, or None. A copy without .git must name the
    commit its files came from, in full; a clone names its own HEAD."""
    if in_clone and commit:
        return ("refused: --commit is for a copy of the files without .git; in a clone the record "
                "names HEAD (check out the commit you mean)")
    if not in_clone and not commit:
        return ("refused: no .git here (a copy of the files?): name the commit they came from with "
                "--commit SHA (git rev-parse HEAD where they were copied from)")
    if commit and not re.fullmatch(r"[0-9a-f]{40}", commit):
        return f"refused: --commit {commit!r} is not a full commit hash (40 hexadecimal digits)"
    return None


def dirty_notebooks(repo=REPO):
    """The notebooks with uncommitted changes (git status), as paths relative to the repository."""
    done = subprocess.run(["git", "status", "--porcelain", "--", "notebooks"], cwd=repo,
                          capture_output=True, text=True, check=True)
    return [line[3:].strip() for line in done.stdout.splitlines() if line.strip()]


# ---- What the machine is -------------------------------------------------------------------------

def gpu_facts(properties):
    """One GPU's facts from an object shaped like torch.cuda.get_device_properties(i)."""
    return {"name": properties.name, "compute_capability": f"{properties.major}.{properties.minor}",
            "memory_gib": round(properties.total_memory / 2**30, 1),
            "multiprocessors": properties.multi_processor_count}


def driver_version(run=subprocess.run):
    """The NVIDIA driver's version from nvidia-smi, or None when nvidia-smi is missing or fails."""
    try:
        done = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                   capture_output=True, text=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    versions = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return versions[0] if versions else None


def cpu_name(cpuinfo=Path("/proc/cpuinfo")):
    """The CPU's model name (Linux's /proc/cpuinfo), else what platform says."""
    try:
        found = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.M)
    except OSError:
        found = None
    return found.group(1).strip() if found else (platform.processor() or platform.machine())


def hosted_service(modules=None, environ=None):
    """'Kaggle', 'Colab' or 'other': the service this process runs on. Kaggle first: its image is
    built on Colab's and sets Colab's variables too (COLAB_RELEASE_TAG); a command run from a Colab
    cell (`!python tools/gpu_run.py`) has Colab's variables but has not imported google.colab."""
    modules = sys.modules if modules is None else modules
    environ = os.environ if environ is None else environ
    if "KAGGLE_KERNEL_RUN_TYPE" in environ:
        return "Kaggle"
    if "google.colab" in modules or "COLAB_RELEASE_TAG" in environ or "COLAB_GPU" in environ:
        return "Colab"
    return "other"


def machine_facts(torch, run=subprocess.run, modules=None, environ=None):
    """The machine's part of a record; `torch` is the torch module (or a stand-in shaped so)."""
    count = torch.cuda.device_count()
    return {"gpus": [gpu_facts(torch.cuda.get_device_properties(i)) for i in range(count)],
            "gpu_count": count, "driver": driver_version(run), "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "torch": torch.__version__,
            "python": platform.python_version(), "cpu": cpu_name(), "os": platform.platform(),
            "service": hosted_service(modules, environ)}


# ---- One notebook --------------------------------------------------------------------------------

def reported_figures(cells):
    """(the records report_figures showed, merged: figures, device type, fallback), from a run's
    cells."""
    figures, device_type, fallback = {}, None, None
    for cell in cells:
        for output in cell.get("outputs", []):
            record = output.get("data", {}).get(FIGURES_MIME)
            if record:
                figures.update(record.get("figures", {}))
                device_type = record.get("device_type", device_type)
                fallback = record.get("fallback") or fallback
    return figures, device_type, fallback


def branch_of(device_type, fallback):
    """Which branch a notebook ran: 'gpu' only on a CUDA device with no stand-in."""
    if device_type is None:
        return "unknown"
    if fallback:
        return "stand-in"
    return "gpu" if device_type == "cuda" else "cpu"


def first_error(cells):
    """'ename: evalue' of the first error output, or None."""
    for cell in cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                return f"{output.get('ename')}: {output.get('evalue')}"[:500]
    return None


def section_name(heading):
    """The key of `steps` a level-2 heading opens: 'Setup', 'Step 1', ...; None for any other."""
    found = anatomy.STEP.match(heading)
    if found:
        return f"Step {int(found.group(1))}"
    return "Setup" if heading == "Setup" else None


def core_progress(notebook):
    """(steps, cells) of a run notebook's core: the seconds of each section's code cells, from the
    timing nbclient records in each cell's metadata.execution (iopub.execute_input to
    shell.execute_reply, as tools/notebook_run.py's core_s); and which of the core's code cells ran,
    failed or were skipped, numbered from 1 among the core's code cells. A cell ran when nbclient
    recorded its reply; one after a failure has none."""
    steps, number, section = {}, 0, None
    cells = {"ran": 0, "of": 0, "twice": [], "skipped": [], "failed": [], "out_of_order": False}
    for cell in anatomy.core_cells(notebook):
        if cell.get("cell_type") == "markdown":
            for _, heading in anatomy.headings({"cells": [cell]}):
                section = section_name(heading)
            continue
        if cell.get("cell_type") != "code":
            continue
        number += 1
        if "shell.execute_reply" not in cell.get("metadata", {}).get("execution", {}):
            cells["skipped"].append(number)
            continue
        cells["ran"] += 1
        if first_error([cell]):
            cells["failed"].append(number)
        if section:
            steps[section] = steps.get(section, 0.0) + cell_seconds(cell)
    cells["of"] = number
    # nbclient's stamps are in microseconds and a section that ran took some: never round it to 0
    return {name: max(round(seconds, 3), 0.001) for name, seconds in steps.items()}, cells


NOT_TRACED = {"ran": 0, "of": 0, "twice": [], "skipped": [], "failed": [], "out_of_order": False}


def notebook_entry(name, cells, whole_s, core_s, error=None, progress=None):
    """A record's entry for one notebook run; `progress` is core_progress's (steps, cells) of the
    run notebook (None: no steps and no cells traced, as a stand-in's run)."""
    figures, device_type, fallback = reported_figures(cells)
    error = error or first_error(cells)
    branch = branch_of(device_type, fallback)
    steps, traced = progress or ({}, dict(NOT_TRACED))
    partial = error is not None or bool(traced["skipped"] or traced["failed"] or traced["twice"]
                                        or traced["out_of_order"])
    return {"notebook": name, "status": "error" if error else "ok", "whole_s": round(whole_s, 1),
            "core_s": None if core_s is None else round(core_s, 1), "steps": steps, "cells": traced,
            "partial": partial, "error": error, "branch": branch, "fallback": fallback,
            "measured": error is None and branch == "gpu" and not partial, "figures": figures}


def run_notebook(path, timeout_s=3600):
    """Run one notebook alone in an empty folder at full size (tools/notebook_run.py); its record
    entry. A failure is recorded in the entry, and the run goes on."""
    from notebook_run import run_alone

    run = run_alone(path, fast=False, timeout=timeout_s)
    try:
        progress = core_progress(run.notebook)
    except ValueError:  # no Summary heading, so no core: nothing to trace
        progress = None
    return notebook_entry(Path(path).name, run.notebook["cells"], run.whole_s, run.core_s,
                          run.error, progress)


# ---- The record ----------------------------------------------------------------------------------

def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def version_of(path):
    """tools/anatomy.py's notebook_version of the notebook file at `path`."""
    return anatomy.notebook_version(json.loads(Path(path).read_text()))


def make_record(machine, entries, commit, notebook_paths, collect_env, name="", note="", now=None):
    now = now or datetime.now(timezone.utc)
    return {"schema_version": SCHEMA_VERSION, "source": "gpu_run",
            "made_at": now.isoformat(timespec="seconds"), "person": {"name": name, "note": note},
            "commit": commit, "notebooks_sha256": {Path(p).name: sha256(p) for p in notebook_paths},
            "notebooks_version": {Path(p).name: version_of(p) for p in notebook_paths},
            "machine": machine, "collect_env": collect_env, "notebooks": entries}


def validation_errors(record, schema=None):
    """What makes `record` break records/gpu/schema.json ([] when it satisfies it)."""
    import jsonschema

    def message(error):  # {"not": {}}: the schema's way to say that a key must be absent
        if error.validator == "not" and error.validator_value == {}:
            return "not allowed in a record of this source"
        return error.message

    schema = schema or json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, error.path)) or '(record)'}: {message(error)}"
            for error in sorted(validator.iter_errors(record),
                                key=lambda error: list(map(str, error.path)))]


def record_path(record, folder=RECORDS):
    """records/gpu/<date>_<gpu>[-xN]_<source>.json"""
    gpu = record["machine"]["gpus"][0]["name"] if record["machine"]["gpus"] else "no-gpu"
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")
    count = record["machine"]["gpu_count"]
    return Path(folder) / (f"{record['made_at'][:10]}_{slug}{f'-x{count}' if count > 1 else ''}"
                           f"_{record.get('source', 'gpu_run')}.json")


def record_text(record):
    """A record as a file holds it."""
    return json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def write_record(record, folder=RECORDS):
    """Write a record that satisfies the schema; refuse (ValueError) one that does not."""
    problems = validation_errors(record)
    if problems:
        raise ValueError("the record breaks records/gpu/schema.json: " + "; ".join(problems[:5]))
    path = record_path(record, folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(record_text(record))
    return path


# ---- Does a record describe a notebook of ours? --------------------------------------------------

def git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, capture_output=True)


def hash_mismatches(record, repo=None):
    """Why a gpu_run `record` does not describe its commit's notebooks in the clone at `repo`: []
    when every notebook hash (and version) it holds is that notebook's at its commit."""
    commit, repo = record["commit"], REPO if repo is None else repo
    if git(repo, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        return [f"commit {commit[:7]} is not in this clone (git fetch it, or the record is not "
                "ours)"]
    problems = []
    for name, digest in sorted(record["notebooks_sha256"].items()):
        shown = git(repo, "show", f"{commit}:notebooks/{name}")
        if shown.returncode != 0:
            problems.append(f"{name} is not in commit {commit[:7]}")
        elif hashlib.sha256(shown.stdout).hexdigest() != digest:
            problems.append(f"{name} differs from commit {commit[:7]}'s")
        elif record.get("notebooks_version", {}).get(name, None) not in (
                None, anatomy.notebook_version(json.loads(shown.stdout))):
            problems.append(f"{name}'s version differs from commit {commit[:7]}'s")
    return problems


def main_ref(repo=None):
    """The first of MAIN this clone has (a fresh clone may have only origin/main), or None."""
    for ref in MAIN:
        if git(REPO if repo is None else repo, "rev-parse", "--verify", "--quiet",
               f"{ref}^{{commit}}").returncode == 0:
            return ref
    return None


@functools.lru_cache(maxsize=None)
def _versions(repo, ref, tip, name):
    """{version: [commits, newest first]} of each revision of notebooks/<name> on `ref`."""
    log = git(repo, "log", "--format=%H", tip, "--", f"notebooks/{name}")
    versions = {}
    for commit in log.stdout.decode().split():
        shown = git(repo, "show", f"{commit}:notebooks/{name}")
        if shown.returncode != 0:  # the commit that deleted it
            continue
        try:
            version = anatomy.notebook_version(json.loads(shown.stdout))
        except (ValueError, KeyError, TypeError):
            continue
        versions.setdefault(version, []).append(commit)
    return versions


def versions_on_main(name, repo=None):
    """{version: [commits of main that gave notebooks/<name> that version, newest first]}: git log
    of main for that file, each revision's notebook_version computed."""
    repo = str(REPO if repo is None else repo)
    ref = main_ref(repo)
    if ref is None:
        return {}
    tip = git(repo, "rev-parse", f"{ref}^{{commit}}").stdout.decode().strip()
    return _versions(repo, ref, tip, name)


def version_problems(record, repo=None):
    """(problems, what was checked): each notebook entry's version must be one that a commit on main
    gave that notebook."""
    problems, checked = [], []
    if main_ref(repo) is None:
        return [f"this clone has no branch {' or '.join(MAIN)} to find notebook versions on"], []
    for entry in record["notebooks"]:
        name = entry["notebook"]
        version = record["notebooks_version"].get(name)
        if version is None:
            problems.append(f"{name} has no version in notebooks_version")
            continue
        commits = versions_on_main(name, repo).get(version)
        if commits:
            checked.append(f"{name} version {version} is main's at commit {commits[0][:7]}")
        else:
            problems.append(f"{name} version {version} is not a version of any commit on main "
                            f"(a changed notebook, or a branch not merged yet)")
    return problems, checked


# ---- Is every figure possible? -------------------------------------------------------------------

def load_datasheet(path=DATASHEET_CELL):
    """tools/shared_cells/datasheet.py's table and its `datasheet(gpu_name)` function, without
    running the rest of the cell (a notebook cell: its last function needs pandas as `pd`)."""
    wanted = {"DATASHEETS", "DATASHEET_PAGES", "SXM_UNLESS_NAMED", "form_factor", "memory_gb",
              "datasheet"}
    tree = ast.parse(Path(path).read_text())
    kept = [node for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name in wanted
            or isinstance(node, ast.Assign) and {getattr(target, "id", None)
                                                 for target in node.targets} & wanted]
    namespace = {"re": re}
    exec(compile(ast.Module(body=kept, type_ignores=[]), str(path), "exec"), namespace)
    return namespace["datasheet"]


GB_PER_S = re.compile(r"gb_per_s|gbps|gb/s", re.I)
FLOP_PER_S = re.compile(r"([gt])flop", re.I)
TIME = re.compile(r"_(s|ms|us)$", re.I)
RATE = re.compile(r"_per_(s|ms|us)$", re.I)
NOT_GPU_FLOAT32 = re.compile(
    r"(?<![a-z])(cpu|fp16|float16|half|bf16|bfloat16|tf32|fp8|int8)(?![a-z])", re.I)


def unit_of(names):
    """('GB/s' | 'GFLOP/s' | 'TFLOP/s' | 'time' | None) of a figure, by its name: the innermost name
    (of a figure inside a dict of figures) that says a unit decides."""
    for name in reversed(names):
        if GB_PER_S.search(name):
            return "GB/s"
        found = FLOP_PER_S.search(name)
        if found:
            return f"{found.group(1).upper()}FLOP/s"
        if TIME.search(name) and not RATE.search(name):
            return "time"
    return None


def numbers_in(figures, names=()):
    """(names, number) of every number in `figures`, a dict that may hold dicts and lists."""
    for key, value in figures.items():
        here = (*names, str(key))
        values = value if isinstance(value, list) else [value]
        for item in values:
            if isinstance(item, dict):
                yield from numbers_in(item, here)
            elif isinstance(item, (int, float)) and not isinstance(item, bool):
                yield here, item


def peaks(record, datasheet):
    """(memory GB/s, float32 TFLOP/s, the GPU's name) of the record's GPUs, the higher where they
    differ; or (None, None, name of a GPU the datasheet does not know)."""
    names = sorted({gpu["name"] for gpu in record["machine"]["gpus"]})
    found = {name: datasheet(name) for name in names}
    unknown = [name for name, row in found.items() if row is None]
    if unknown:
        return None, None, unknown[0]
    best = max(names, key=lambda name: found[name][0])
    return max(row[0] for row in found.values()), max(row[1] for row in found.values()), best


def figure_problems(record, datasheet=None):
    """(problems, what was checked): no time zero or negative (whole_s, core_s, steps and every
    figure whose name ends _s, _ms or _us); no GB/s above the GPU's memory bandwidth and no FLOP/s
    above its float32 peak, each with HEADROOM (not for a figure named for the CPU or another
    precision; not at all for a GPU the datasheet does not know)."""
    bandwidth, tflops, gpu = peaks(record, datasheet or load_datasheet())
    problems, times, rates = [], 0, 0
    for entry in record["notebooks"]:
        name = entry["notebook"]
        timed = [(("whole_s",), entry["whole_s"]), (("core_s",), entry["core_s"]),
                 *((("steps", step), seconds) for step, seconds in entry["steps"].items())]
        for names, value in timed + list(numbers_in(entry["figures"], ("figures",))):
            unit = "time" if names[0] != "figures" else unit_of(names)
            shown = "/".join(names)
            if value is None or unit is None:
                continue
            if unit == "time":
                times += 1
                if value <= 0:
                    problems.append(f"{name}: {shown} is {value:g}, and a time must be above zero")
                continue
            if bandwidth is None or any(NOT_GPU_FLOAT32.search(part) for part in names):
                continue
            rates += 1
            peak, what = ((bandwidth, "memory bandwidth") if unit == "GB/s" else
                          (tflops * (1000 if unit == "GFLOP/s" else 1), "float32 peak"))
            unit_shown = "GB/s" if unit == "GB/s" else unit
            if value > peak * HEADROOM * (1 + 1e-9):
                problems.append(f"{name}: {shown} = {value:g} {unit_shown} is above {gpu}'s {what} "
                                f"({peak:g} {unit_shown} by the datasheet, {HEADROOM:g}× allowed)")
    checked = [f"{times} times above zero"]
    checked.append(f"the datasheet does not know {gpu}: GB/s and FLOP/s figures not checked"
                   if bandwidth is None else
                   f"{rates} GB/s and FLOP/s figures within {gpu}'s datasheet peaks "
                   f"(+{round(100 * (HEADROOM - 1))} %)")
    return problems, checked


# ---- Accepting a record sent in ------------------------------------------------------------------

def acceptance(record, repo=None, datasheet=None):
    """(problems, what was checked) of a record that satisfies the schema: its versions (and for a
    gpu_run record its hashes) against the clone at `repo`, its figures against the datasheet."""
    problems, checked = [], []
    if record["source"] == "gpu_run":
        mismatches = hash_mismatches(record, repo)
        problems += mismatches
        if not mismatches:
            checked.append(f"the notebooks' hashes are commit {record['commit'][:7]}'s")
    for check in (version_problems(record, repo), figure_problems(record, datasheet)):
        problems += check[0]
        checked += check[1]
    return problems, checked


def accept(path, folder=None, repo=None):
    """(exit code, lines to print) of accepting the record in the file at `path`: 1 and one line
    that says why it is refused, or 0, what was checked, and where it was filed."""
    folder = Path(RECORDS if folder is None else folder)
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as failure:
        return 1, [f"refused: cannot read {path}: {failure}"]
    except ValueError as failure:
        return 1, [f"refused: {Path(path).name} is not JSON ({failure})"]
    broken = validation_errors(record) if isinstance(record, dict) else ["(record): not an object"]
    if broken:
        return 1, [f"refused: it breaks records/gpu/schema.json: {'; '.join(broken[:3])}"[:1000]]
    problems, checked = acceptance(record, repo)
    if problems:
        return 1, [f"refused: {'; '.join(problems)}"]
    for other in sorted(folder.glob("*.json")):
        if other.name != SCHEMA.name and other.read_text() == record_text(record):
            return 1, [f"refused: the same record is filed already as {other.name}"]
    target = first = record_path(record, folder)
    number = 1
    while target.exists():  # another record of that GPU, day and source
        number += 1
        target = first.with_name(f"{first.stem}-{number}.json")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(record_text(record))
    clone = Path(REPO if repo is None else repo).resolve()
    shown = target.resolve()
    shown = shown.relative_to(clone) if shown.is_relative_to(clone) else shown
    lines = [f"checked: JSON; records/gpu/schema.json (version {SCHEMA_VERSION}, source "
             f"{record['source']})", *(f"checked: {line}" for line in checked),
             f"accepted: filed as {shown}"]
    return 0, lines


def accepted_records(records, repo=None):
    """(the (file name, record) pairs --accept would accept, [one line per refused record])."""
    kept, refused = [], []
    datasheet = load_datasheet()
    for name, record in records:
        problems, _ = acceptance(record, repo, datasheet)
        if problems:
            refused.append(f"refused {name}: {'; '.join(problems[:3])}")
        else:
            kept.append((name, record))
    return kept, refused


# ---- README's GPU column and the titles' T4 minutes ----------------------------------------------

def record_files(folder=RECORDS):
    """([(file name, record)] of every record in `folder` that satisfies the schema, [file names of
    the ones that do not])."""
    records, broken = [], []
    for path in sorted(Path(folder).glob("*.json")):
        if path.name == SCHEMA.name:
            continue
        try:
            record = json.loads(path.read_text())
        except ValueError:
            broken.append(path.name)
            continue
        if not isinstance(record, dict) or validation_errors(record):
            broken.append(path.name)
        else:
            records.append((path.name, record))
    return records, broken


def valid_records(folder=RECORDS):
    """Every record in `folder` that satisfies the schema (a broken one is left out, and named)."""
    records, broken = record_files(folder)
    return [record for _, record in records], broken


def gpu_label(record):
    gpus = record["machine"]["gpus"]
    name = re.sub(r"^(NVIDIA|Tesla)\s+", "", gpus[0]["name"]) if gpus else "?"
    count = record["machine"]["gpu_count"]
    return f"{count}× {name}" if count > 1 else name


def measured_runs(notebook_name, records):
    """{GPU label: [(core seconds, date), ...]} of the measured entries of `notebook_name` that
    have core seconds, one per record (an entry that fell back, failed or ran part of the core is
    left out)."""
    runs = {}
    for record in records:
        for entry in record["notebooks"]:
            if (entry["notebook"] == notebook_name and entry["measured"] and not entry["partial"]
                    and entry["core_s"] is not None):
                runs.setdefault(gpu_label(record), []).append((entry["core_s"],
                                                               record["made_at"][:10]))
    return runs


def minutes_text(seconds):
    """Minutes with one decimal, no trailing zero: '3 min', '2.5 min', '0.4 min'."""
    return f"{f'{seconds / 60:.1f}'.removesuffix('.0')} min"


def runs_text(count):
    return f"{count} run{'' if count == 1 else 's'}"


def gpu_cell(notebook_name, records):
    """README's GPU cell for one notebook: 'T4: 3 min core, 4 runs, 2026-12-01; 2× T4: ...', per GPU
    model and count the median of the core's minutes, how many, the newest date; or not measured."""
    parts = []
    for label, runs in sorted(measured_runs(notebook_name, records).items()):
        seconds = statistics.median(core for core, _ in runs)
        parts.append(f"{label}: {minutes_text(seconds)} core, {runs_text(len(runs))}, "
                     f"{max(date for _, date in runs)}")
    return "; ".join(parts) or NOT_MEASURED


def render_readme(text, records):
    """README's text with the GPU column of its notebook table rendered from `records`."""
    lines = text.split("\n")
    header = next(i for i, line in enumerate(lines) if line.startswith("| notebook |"))
    columns = [c.strip() for c in lines[header].strip().strip("|").split("|")]
    column = columns.index(GPU_COLUMN)
    for i in range(header + 2, len(lines)):
        if not lines[i].startswith("|"):
            break
        cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
        name = re.search(r"\[([^\]]+\.ipynb)\]", cells[0]).group(1)
        cells[column] = gpu_cell(name, records)
        lines[i] = "| " + " | ".join(cells) + " |"
    return "\n".join(lines)


T4Minutes = namedtuple("T4Minutes", "measured minutes runs")
T4_LABEL = "T4"  # one T4, as a Colab T4: the GPU the title tables and the class rule speak of


def t4_minutes(notebook_name, records, label=T4_LABEL):
    """T4Minutes(measured, minutes, runs) of a notebook's core on one T4 (or the GPUs `label` names,
    '2× T4' for Kaggle's) by the records: the median of the measured runs' core minutes, rounded to a
    whole minute and at least 1; (False, None, 0) when no record measured it there (the title keeps
    its estimate)."""
    runs = measured_runs(notebook_name, records).get(label, [])
    if not runs:
        return T4Minutes(False, None, 0)
    minutes = statistics.median(core for core, _ in runs) / 60
    return T4Minutes(True, max(1, math.floor(minutes + 0.5)), len(runs))


LABEL_OF_HARDWARE = {"Colab T4": T4_LABEL, "Kaggle T4 x2": f"2× {T4_LABEL}"}


def taught_on_minutes(notebook_name, hardware, records=None):
    """T4Minutes of a notebook's core on the hardware it is taught on (the manifest's: a Colab T4, or
    Kaggle's T4 x2), from the records --accept accepts (those in records/gpu/ when `records` is None).
    tools/sync_cells.py writes them into the title's plan."""
    if records is None:
        files, _ = record_files(RECORDS)
        records = [record for _, record in accepted_records(files)[0]] if files else []
    return t4_minutes(notebook_name, records, LABEL_OF_HARDWARE[hardware])


# ---- The command ---------------------------------------------------------------------------------

def notebook_paths(numbers):
    paths = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    return [p for p in paths if not numbers or p.name[:2] in numbers]


def render_or_check(check):
    """--render and --check: README's column and the titles' plans (tools/sync_cells.py writes those,
    with the T4 minutes of the records), from the records --accept accepts."""
    import sync_cells

    files, broken = record_files(RECORDS)
    for name in broken:
        print(f"left out {name}: it breaks records/gpu/schema.json")
    files, refused = accepted_records(files)
    for line in refused:
        print(line)
    records = [record for _, record in files]
    rendered = render_readme(README.read_text(), records)
    paths = sync_cells.notebooks()
    if check:
        same = rendered == README.read_text()
        print("README's GPU column matches the records" if same else
              "README's GPU column differs from the records: run tools/gpu_run.py --render")
        titles = [(number, what) for number, what in sync_cells.differences(paths)
                  if "title's plan" in what]
        for number, _ in titles:
            print(f"{paths[number].name}: the title's T4 minutes differ from the records: run "
                  "tools/gpu_run.py --render")
        return 0 if same and not titles and not refused else 1
    README.write_text(rendered)
    changed, _ = sync_cells.sync(paths)
    titles = sorted({number for number, what in changed if "title's plan" in what})
    print(f"README's GPU column rendered from {len(records)} record(s); "
          f"{len(titles)} title(s) rewritten")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="notebook numbers (01 ... 10); all when none")
    parser.add_argument("--name", default="", help="who ran it (goes into the record)")
    parser.add_argument("--note", default="", help="anything worth knowing (the service, the tier)")
    parser.add_argument("--render", action="store_true",
                        help="rewrite README's GPU column and the titles' T4 minutes from the "
                             "records")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when README's GPU column or a title's T4 minutes are stale, "
                             "or a record would not be accepted")
    parser.add_argument("--accept", metavar="FILE",
                        help="check a record sent in and file it under records/gpu (exit 1: "
                             "refused)")
    parser.add_argument("--commit", help="in a copy of the files without .git: the commit (40 hex "
                                         "digits) they came from")
    args = parser.parse_args(argv)
    if args.render or args.check or args.accept:
        if not has_git():
            print("refused: --accept, --check and --render compare records with the notebooks on "
                  "main and their commits: run them in a clone")
            return 2
        if args.accept:
            code, lines = accept(args.accept)
            print("\n".join(lines))
            return code
        return render_or_check(args.check)
    commit = args.commit.lower() if args.commit else None
    why = commit_refusal(has_git(), commit)
    if why:
        print(why)
        return 2
    import torch

    dirty = dirty_notebooks() if commit is None else []  # a copy cannot tell: --accept in a clone
    why = refusal(os.environ.get("TUTORIAL_FAST") == "1", dirty, torch.cuda.is_available())
    if why:
        print(why)
        return 2
    if commit:
        print(f"a copy of the files: the record names commit {commit[:7]}; tools/gpu_run.py "
              "--accept, run in a clone, compares the notebooks' hashes with that commit's")
    from torch.utils.collect_env import get_pretty_env_info

    paths = notebook_paths(set(args.notebooks))
    entries = []
    for path in paths:
        print(f"running {path.name} at full size ...", flush=True)
        entry = run_notebook(path)
        entries.append(entry)
        print(f"  {entry['status']}, {entry['whole_s']} s, branch {entry['branch']}"
              + (f", {entry['error']}" if entry["error"] else ""), flush=True)
    commit = commit or subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                      text=True, check=True).stdout.strip()
    record = make_record(machine_facts(torch), entries, commit, paths, get_pretty_env_info(),
                         args.name, args.note)
    path = write_record(record)
    print(f"wrote {path.relative_to(REPO)}: send it back as CONTRIBUTING.md says")
    return 0


if __name__ == "__main__":
    sys.exit(main())
