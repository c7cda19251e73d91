"""Run the notebooks on a CUDA GPU and write one record of what they measured; render README's GPU column.

README's GPU column says "not measured yet" until someone with a GPU runs the notebooks. This makes that
one command, with a record trustworthy enough to print:

    .venv/bin/python tools/gpu_run.py --name "Your Name" --note "Colab T4, free tier"   # every notebook
    .venv/bin/python tools/gpu_run.py 04 05                                              # some of them
    .venv/bin/python tools/gpu_run.py --render      # README's GPU column from records/gpu/*.json
    .venv/bin/python tools/gpu_run.py --check       # exit 1 when README's column and the records differ
    .venv/bin/python tools/gpu_run.py --commit SHA  # in a copy of the files without .git: the commit
                                                    # they came from, which the record then names

Each notebook runs alone in an empty folder at full size (tools/notebook_run.py, as tools/time_notebooks.py
times them); a failure is recorded and the run goes on. The record, `records/gpu/<date>_<gpu>.json`,
must satisfy `records/gpu/schema.json`. It holds the commit and the notebooks' hashes; the GPUs, driver,
CUDA and cuDNN, CPU and OS; PyTorch's own environment report; and per notebook its status, whole and core
seconds, its error, which branch it ran (a notebook that fell back to the CPU or to a stand-in counts as
not measured) and the figures it reported itself (report_figures in the shared setup cell). Nothing is
typed by hand but a name and a note. The tool refuses, in one line, to write a record without a CUDA
device, in fast mode, or from a checkout whose notebooks have uncommitted changes.

A GPU machine is often reached with a copy of the files rather than a clone (a cluster node, a rented
box that got an archive). There, with no .git, `--commit SHA` names the commit the files came from:
the record names it and holds the copy's notebook hashes as usual. Nothing in the copy can say whether
its notebooks were changed, so `--check` and `--render`, run in a clone, compare every record's hashes
with its commit's notebooks and refuse a record that differs (or whose commit the clone lacks).
"""
import argparse
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORDS = REPO / "records" / "gpu"
SCHEMA = RECORDS / "schema.json"
README = REPO / "README.md"
FIGURES_MIME = "application/vnd.gpu-tutorials.figures+json"  # the shared setup cell's report_figures
NOT_MEASURED = "not measured yet"
GPU_COLUMN = "GPU, measured"


# ---- Refusals -------------------------------------------------------------------------------------

def refusal(fast_mode, dirty_notebooks, cuda_available):
    """The one line that says why no record may be written, or None."""
    if fast_mode:
        return ("refused: TUTORIAL_FAST=1 makes the notebooks small; a record holds full-size runs "
                "(unset TUTORIAL_FAST)")
    if dirty_notebooks:
        return (f"refused: {len(dirty_notebooks)} notebook(s) have uncommitted changes "
                f"({', '.join(dirty_notebooks[:3])}); commit or stash them, so the record names what ran")
    if not cuda_available:
        return ("refused: PyTorch sees no CUDA GPU (torch.cuda.is_available() is False); a record holds "
                "GPU measurements only")
    return None


def has_git(repo=None):
    """True in a clone (a .git folder, or the .git file of a worktree), False in a copy of the files."""
    return (Path(REPO if repo is None else repo) / ".git").exists()


def commit_refusal(in_clone, commit):
    """The one line that refuses --commit as given, or None. A copy without .git must name the commit
    its files came from, in full; a clone names its own HEAD."""
    if in_clone and commit:
        return ("refused: --commit is for a copy of the files without .git; in a clone the record names "
                "HEAD (check out the commit you mean)")
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


# ---- What the machine is --------------------------------------------------------------------------

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


def machine_facts(torch, run=subprocess.run):
    """The machine's part of a record; `torch` is the torch module (or a stand-in shaped like it)."""
    count = torch.cuda.device_count()
    return {"gpus": [gpu_facts(torch.cuda.get_device_properties(i)) for i in range(count)],
            "gpu_count": count, "driver": driver_version(run), "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "torch": torch.__version__,
            "python": platform.python_version(), "cpu": cpu_name(), "os": platform.platform()}


# ---- One notebook ---------------------------------------------------------------------------------

def reported_figures(cells):
    """(the records report_figures showed, merged: figures, device type, fallback), from a run's cells."""
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


def notebook_entry(name, cells, whole_s, core_s, error=None):
    """A record's entry for one notebook run."""
    figures, device_type, fallback = reported_figures(cells)
    error = error or first_error(cells)
    branch = branch_of(device_type, fallback)
    return {"notebook": name, "status": "error" if error else "ok", "whole_s": round(whole_s, 1),
            "core_s": None if core_s is None else round(core_s, 1), "error": error, "branch": branch,
            "fallback": fallback, "measured": error is None and branch == "gpu", "figures": figures}


def run_notebook(path, timeout_s=3600):
    """Run one notebook alone in an empty folder at full size (tools/notebook_run.py); its record entry.
    A failure is recorded in the entry, and the run goes on."""
    sys.path.insert(0, str(REPO / "tools"))
    from notebook_run import run_alone

    run = run_alone(path, fast=False, timeout=timeout_s)
    return notebook_entry(Path(path).name, run.notebook["cells"], run.whole_s, run.core_s, run.error)


# ---- The record -----------------------------------------------------------------------------------

def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def make_record(machine, entries, commit, notebook_paths, collect_env, name="", note="", now=None):
    now = now or datetime.now(timezone.utc)
    return {"schema_version": 1, "made_at": now.isoformat(timespec="seconds"),
            "person": {"name": name, "note": note}, "commit": commit,
            "notebooks_sha256": {Path(p).name: sha256(p) for p in notebook_paths},
            "machine": machine, "collect_env": collect_env, "notebooks": entries}


def validation_errors(record, schema=None):
    """What makes `record` break records/gpu/schema.json ([] when it satisfies it)."""
    import jsonschema

    schema = schema or json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, error.path)) or '(record)'}: {error.message}"
            for error in sorted(validator.iter_errors(record), key=lambda e: list(e.path))]


def record_path(record, folder=RECORDS):
    gpu = record["machine"]["gpus"][0]["name"] if record["machine"]["gpus"] else "no-gpu"
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")
    count = record["machine"]["gpu_count"]
    return folder / f"{record['made_at'][:10]}_{slug}{f'-x{count}' if count > 1 else ''}.json"


def write_record(record, folder=RECORDS):
    """Write a record that satisfies the schema; refuse (ValueError) one that does not."""
    problems = validation_errors(record)
    if problems:
        raise ValueError("the record breaks records/gpu/schema.json: " + "; ".join(problems[:5]))
    path = record_path(record, folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return path


def hash_mismatches(record, repo=None):
    """Why `record` does not describe its commit's notebooks in the clone at `repo`: [] when every
    notebook hash it holds is the hash of that notebook at its commit."""
    commit, repo = record["commit"], REPO if repo is None else repo
    known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=repo,
                           capture_output=True)
    if known.returncode != 0:
        return [f"commit {commit[:7]} is not in this clone (git fetch it, or the record is not ours)"]
    problems = []
    for name, digest in sorted(record["notebooks_sha256"].items()):
        shown = subprocess.run(["git", "show", f"{commit}:notebooks/{name}"], cwd=repo,
                               capture_output=True)
        if shown.returncode != 0:
            problems.append(f"{name} is not in commit {commit[:7]}")
        elif hashlib.sha256(shown.stdout).hexdigest() != digest:
            problems.append(f"{name} differs from commit {commit[:7]}'s")
    return problems


def records_matching_their_commits(records, repo=None):
    """(the records whose notebook hashes match their commits, [one line per refused record])."""
    kept, refused = [], []
    for record in records:
        problems = hash_mismatches(record, repo)
        if problems:
            refused.append(f"refused {record_path(record).name}: {'; '.join(problems[:3])}")
        else:
            kept.append(record)
    return kept, refused


# ---- README's GPU column --------------------------------------------------------------------------

def valid_records(folder=RECORDS):
    """Every record in `folder` that satisfies the schema (a broken one is left out, and named)."""
    records, broken = [], []
    for path in sorted(folder.glob("*.json")):
        if path.name == SCHEMA.name:
            continue
        try:
            record = json.loads(path.read_text())
        except ValueError:
            broken.append(path.name)
            continue
        (broken.append(path.name) if validation_errors(record) else records.append(record))
    return records, broken


def gpu_label(record):
    gpus = record["machine"]["gpus"]
    name = re.sub(r"^(NVIDIA|Tesla)\s+", "", gpus[0]["name"]) if gpus else "?"
    return f"{record['machine']['gpu_count']}× {name}" if record["machine"]["gpu_count"] > 1 else name


def newest_per_gpu(records):
    """The newest record of each GPU (name and count)."""
    newest = {}
    for record in records:
        label = gpu_label(record)
        if label not in newest or record["made_at"] > newest[label]["made_at"]:
            newest[label] = record
    return [newest[label] for label in sorted(newest)]


def seconds_text(seconds):
    return f"{seconds:.0f} s" if seconds < 60 else f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def gpu_cell(notebook_name, records):
    """README's GPU cell for one notebook: 'T4: 35 s; A100: 20 s (commit abc1234)', or not measured."""
    parts = []
    for record in newest_per_gpu(records):
        for entry in record["notebooks"]:
            if entry["notebook"] == notebook_name and entry["measured"]:
                parts.append(f"{gpu_label(record)}: {seconds_text(entry['whole_s'])} "
                             f"({record['made_at'][:10]}, {record['commit'][:7]})")
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


# ---- The command ----------------------------------------------------------------------------------

def notebook_paths(numbers):
    paths = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    return [p for p in paths if not numbers or p.name[:2] in numbers]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="notebook numbers (01 ... 10); all when none")
    parser.add_argument("--name", default="", help="who ran it (goes into the record)")
    parser.add_argument("--note", default="", help="anything worth knowing (the service, the tier)")
    parser.add_argument("--render", action="store_true", help="rewrite README's GPU column from the records")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when README's GPU column is stale or a record's notebooks differ "
                             "from its commit's")
    parser.add_argument("--commit", help="in a copy of the files without .git: the commit (40 hex "
                                         "digits) they came from")
    args = parser.parse_args(argv)
    if args.render or args.check:
        if not has_git():
            print("refused: --check and --render compare the records with their commits' notebooks: "
                  "run them in a clone")
            return 2
        records, broken = valid_records()
        for name in broken:
            print(f"left out {name}: it breaks records/gpu/schema.json")
        records, refused = records_matching_their_commits(records)
        for line in refused:
            print(line)
        rendered = render_readme(README.read_text(), records)
        if args.check:
            same = rendered == README.read_text()
            print("README's GPU column matches the records" if same else
                  "README's GPU column differs from the records: run tools/gpu_run.py --render")
            return 0 if same and not refused else 1
        README.write_text(rendered)
        print(f"README's GPU column rendered from {len(records)} record(s)")
        return 0
    commit = args.commit.lower() if args.commit else None
    why = commit_refusal(has_git(), commit)
    if why:
        print(why)
        return 2
    import torch

    dirty = dirty_notebooks() if commit is None else []  # a copy cannot tell: --check in a clone does
    why = refusal(os.environ.get("TUTORIAL_FAST") == "1", dirty, torch.cuda.is_available())
    if why:
        print(why)
        return 2
    if commit:
        print(f"a copy of the files: the record names commit {commit[:7]}; tools/gpu_run.py --check, "
              "run in a clone, compares the notebooks' hashes with that commit's")
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
