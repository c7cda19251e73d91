#@title Your run: minutes per Step, and on a GPU a record you can send in
import platform
import re
import subprocess

import pandas as pd

# Each code cell of the core after the shared setup, in order: (the key of its source, its section).
# The collection's sync tool writes this list; this cell itself is not in it.
CORE_CELLS = [
]


def run_summary(runs, core_cells):
    """What the cell clock saw of the core: seconds per section (each cell's last run), the cells
    that ran twice, were skipped or failed (1-based positions among core_cells), whether they ran
    out of order, and whether any of that makes the run partial."""
    positions = {key: number for number, (key, _) in enumerate(core_cells, start=1)}
    seen = {}
    for run in runs:
        if run["key"] in positions:
            seen.setdefault(positions[run["key"]], []).append(run)
    steps = {}
    for number, (_, section) in enumerate(core_cells, start=1):
        if number in seen:
            steps[section] = steps.get(section, 0.0) + seen[number][-1]["seconds"]
    first_order = list(dict.fromkeys(positions[run["key"]] for run in runs
                                     if run["key"] in positions))
    cells = {"ran": len(seen), "of": len(core_cells),
             "twice": sorted(number for number, done in seen.items() if len(done) > 1),
             "skipped": [number for number in range(1, len(core_cells) + 1) if number not in seen],
             "failed": sorted(number for number, done in seen.items()
                              if any(run["failed"] for run in done)),
             "out_of_order": first_order != sorted(first_order)}
    partial = bool(cells["twice"] or cells["skipped"] or cells["failed"] or cells["out_of_order"])
    return {"steps": {name: round(seconds, 2) for name, seconds in steps.items()},
            "core_s": round(sum(steps.values()), 2) if steps else None, "cells": cells,
            "partial": partial}


def partial_reasons(cells):
    """Why a run is partial, in words ('' when it is not)."""
    said = {"skipped": "cells skipped", "twice": "cells run twice", "failed": "cells failed"}
    parts = [f"{words}: {', '.join(map(str, cells[key]))}" for key, words in said.items()
             if cells[key]]
    return "; ".join(parts + (["cells run out of order"] if cells["out_of_order"] else []))


def completeness(summary):
    """'every core cell ran once, in order' or 'partial: ...', for the line a run ends with."""
    reasons = partial_reasons(summary["cells"])
    return f"partial: {reasons}" if reasons else "every core cell ran once, in order"


def nvidia_driver(run=subprocess.run):
    """The NVIDIA driver's version (nvidia-smi), or None when nvidia-smi is missing or fails."""
    try:
        done = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                   capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    versions = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return versions[0] if versions else None


def machine_of_this_run(torch, service, driver):
    """The GPUs, driver, CUDA, cuDNN, PyTorch, Python and service of this run: nothing personal."""
    gpus = []
    for index in range(torch.cuda.device_count()):
        properties = torch.cuda.get_device_properties(index)
        gpus.append({"name": properties.name,
                     "compute_capability": f"{properties.major}.{properties.minor}",
                     "memory_gib": round(properties.total_memory / 2**30, 1),
                     "multiprocessors": properties.multi_processor_count})
    return {"gpus": gpus, "gpu_count": len(gpus), "driver": driver, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "torch": torch.__version__,
            "python": platform.python_version(), "service": service or "other"}


def utc_now(clock=time.time):
    """The time now, UTC, to the second: '2026-12-01T10:30:00+00:00'."""
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(clock()))


def this_runs_record(version, machine, summary, reported, made_at):
    """The record of this run (source "notebook"): the figures the core reported, the minutes
    per section, which cells ran how, and the machine."""
    file_name, _, digits = version.partition("@")
    report = reported[0] if reported else {"device_type": None, "fallback": None, "figures": {}}
    branch = ("unknown" if report["device_type"] is None else "stand-in" if report["fallback"]
              else "gpu" if report["device_type"] == "cuda" else "cpu")
    failed = summary["cells"]["failed"]
    error = f"core cells {', '.join(map(str, failed))} raised an error" if failed else None
    entry = {"notebook": file_name, "status": "error" if error else "ok", "whole_s": None,
             "core_s": summary["core_s"], "steps": summary["steps"], "cells": summary["cells"],
             "partial": summary["partial"], "error": error, "branch": branch,
             "fallback": report["fallback"],
             "measured": error is None and branch == "gpu" and not summary["partial"],
             "figures": report["figures"]}
    return {"schema_version": 2, "source": "notebook", "made_at": made_at,
            "notebooks_version": {file_name: digits}, "machine": machine, "notebooks": [entry]}


def record_name(record):
    """The record's file name in data/: gpu_record_05_tesla-t4_2026-12-01T10-30-00.json"""
    gpus = record["machine"]["gpus"]
    slug = re.sub(r"[^a-z0-9]+", "-", gpus[0]["name"].lower()).strip("-") if gpus else "no-gpu"
    count = record["machine"]["gpu_count"]
    when = record["made_at"][:19].replace(":", "-")
    number = record["notebooks"][0]["notebook"][:2]
    return f"gpu_record_{number}_{slug}{f'-x{count}' if count > 1 else ''}_{when}.json"


def minutes_line(summary, where):
    """'Minutes per section on this machine: Setup 0.2, Step 1 0.4 (core 0.6)'."""
    shown = ", ".join(f"{name} {seconds / 60:.1f}" for name, seconds in summary["steps"].items())
    core = "" if summary["core_s"] is None else f" (core {summary['core_s'] / 60:.1f})"
    return f"Minutes per section {where}: {shown or 'none timed'}{core}"


def where_to_find(path, service):
    """What to tell the learner about the record file, by service."""
    if service == "Kaggle":
        return f"The record is {path} (Kaggle keeps /kaggle/working as the notebook's Output)."
    if service == "Colab":
        return f"The record is {path.name}: your browser downloads it (Files, left, holds it too)."
    return f"The record is {path}."


summary = run_summary(CELL_CLOCK.runs, CORE_CELLS)
if device.type != "cuda":
    print(f"No CUDA GPU here ({device.type}), so no GPU record. "
          + minutes_line(summary, "on this machine") + f"; {completeness(summary)}.")
else:
    service = hosted_service()
    machine = machine_of_this_run(torch, service, nvidia_driver())
    record = this_runs_record(NOTEBOOK_VERSION, machine, summary, FIGURES_REPORTED, utc_now())
    record_path = DATA_DIR / record_name(record)
    record_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    minutes = {name: round(seconds / 60, 2) for name, seconds in summary["steps"].items()}
    display(pd.DataFrame({"minutes": minutes}))
    print("Figures:", json.dumps(record["notebooks"][0]["figures"]))
    gpus = machine["gpus"]
    print(f"{len(gpus)} x {gpus[0]['name']} (compute capability {gpus[0]['compute_capability']}), "
          f"driver {machine['driver']}, CUDA {machine['cuda']}, PyTorch {machine['torch']}, "
          f"on {machine['service']}.")
    if summary["partial"]:
        print(f"A {completeness(summary)}. Run all cells once, in order, for a complete record.")
    else:
        print(f"A complete run ({completeness(summary)}): send the record in (README says how).")
    print(where_to_find(record_path, service))
    if service == "Colab":
        from google.colab import files  # Colab only

        files.download(str(record_path))
