"""Write every shared cell from its source in tools/shared_cells/ into the notebooks that carry a copy.

Each notebook must run alone (uploaded to Colab or Kaggle with nothing beside it), so a few cells are
copies. Their one source each is a plain file in tools/shared_cells/ (its text is the cell's source, its
first line the cell's `#@title ...` line); TITLES below names each file, the start of its first line
(which finds the copies) and the names each copy keeps as its own (the install cell's PACKAGES); which
notebooks carry it is each notebook's `shared_cells` in notebooks/manifest.toml. Only a copy's source text is replaced: its cell id, metadata and
outputs stay. No notebook is the source of another's cell. The tool also makes each notebook's last
cell, "Words used here": the entries of GLOSSARY.md that the notebook's links
`[word](#glossary-<anchor>)` point to, each with its anchor `<a id="glossary-<anchor>">`, so that the
links work in a notebook uploaded alone.

    .venv/bin/python tools/sync_cells.py           # rewrite the copies from their sources
    .venv/bin/python tools/sync_cells.py --check   # change nothing; list every copy that differs

--check exits 1 when a copy differs, is missing or is there twice, and names the file to edit
(tools/shared_cells/<file>, or GLOSSARY.md) and, for a copy that differs, the tests of that file to run
after the edit (tests/shared_cells/test_<file>); tests/tooling/test_sync_cells.py runs it. Exit code 2: the
sources themselves are wrong (a file TITLES names is missing, or one it does not name is there).
"""
import argparse
import ast
import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from manifest import EVERY_NOTEBOOK_CARRIES, notebooks as notebooks_in_manifest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = REPO / "notebooks"
SOURCE_DIR = REPO / "tools" / "shared_cells"
GLOSSARY = REPO / "GLOSSARY.md"
TEST_DIR = REPO / "tests" / "shared_cells"  # test_<stem>.py tests tools/shared_cells/<stem>.py
WORDS_HEADING = "## Words used here"
WORDS_CELL_ID = "words-used-here"
GLOSSARY_LINK = re.compile(r"\]\(#(glossary-[a-z0-9-]+)\)")


@dataclass(frozen=True)
class Shared:
    """A code cell whose source is the file `file` of tools/shared_cells/, copied into `targets`."""
    file: str  # the source's file name in tools/shared_cells/
    title: str  # the start of its first line: a code cell of a target starting so is its copy
    targets: tuple = None  # the numbers of the notebooks that carry a copy; None: every notebook
    keep: tuple = ()  # top-level names whose assignment each copy keeps as its own


RECORD_TITLE = "#@title Your run: "  # the record cell's first line (tools/shared_cells/run_record.py)
SETUP_TITLE = "#@title Shared setup: "

# Each shared cell's file and the start of its first line. Which notebooks carry it is each notebook's
# `shared_cells` in notebooks/manifest.toml (install.py and shared_setup.py: every notebook);
# tools/shared_cells/README.md says what each file holds.
TITLES = {
    "install.py": ("#@title Setup, part 1: ", ("PACKAGES",)),
    "shared_setup.py": (SETUP_TITLE, ("NOTEBOOK_VERSION",)),
    "datasheet.py": ("#@title The datasheet table: ", ()),
    "process_plumbing.py": ("#@title Plumbing: run programs with a time limit", ()),
    "torchrun_helpers.py": ("#@title Shared torchrun helpers: ", ()),
    "run_record.py": (RECORD_TITLE, ("CORE_CELLS",)),
    "compile_helpers.py": ("#@title Shared compile helpers: ", ()),
    "rounds.py": ("#@title Shared timing rounds: ", ()),
}


def shared_from_manifest(entries=None):
    """[Shared] for every file in TITLES, its targets read from the manifest's entries; ValueError when
    an entry names a shared cell that TITLES does not know."""
    entries = notebooks_in_manifest() if entries is None else entries
    unknown = sorted({name for entry in entries.values() for name in entry.shared_cells} - set(TITLES))
    if unknown:
        raise ValueError(f"notebooks/manifest.toml names shared cells that tools/sync_cells.py's TITLES "
                         f"does not know: {', '.join(unknown)}")
    return [Shared(file, title, None if file in EVERY_NOTEBOOK_CARRIES else
                   tuple(number for number, entry in entries.items() if file in entry.carries), keep)
            for file, (title, keep) in TITLES.items()]


SHARED = shared_from_manifest()


def notebooks(folder=None):
    """{number: path} of the numbered notebooks in `folder` (notebooks/ by default)."""
    folder = NOTEBOOK_DIR if folder is None else Path(folder)
    return {path.name[:2]: path for path in sorted(folder.glob("[0-9][0-9]_*.ipynb"))}


def first_line(text):
    return text.split("\n", 1)[0]


def find_cells(notebook, title):
    """The code cells of `notebook` whose first line starts with `title`."""
    return [cell for cell in notebook.cells
            if cell.cell_type == "code" and first_line(cell.source).startswith(title)]


def assignment_spans(source, names):
    """{name: (first line, last line)} (1-based, inclusive) of the top-level assignments to `names`."""
    spans = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = ast.unparse(node.targets[0])
            if target in names:
                spans[target] = (node.lineno, node.end_lineno)
    return spans


def with_kept(source_text, copy_text, keep):
    """`source_text` with the assignments to the names in `keep` taken from `copy_text`."""
    if not keep:
        return source_text
    lines = source_text.split("\n")
    copy_lines = copy_text.split("\n")
    theirs = assignment_spans(copy_text, keep)
    ours = assignment_spans(source_text, keep)
    missing = [name for name in keep if name not in theirs or name not in ours]
    if missing:
        raise ValueError(f"{' and '.join(missing)} must be assigned once at the top level of every copy")
    for name in sorted(ours, key=lambda n: ours[n][0], reverse=True):  # from the bottom up
        start, end = ours[name]
        first, last = theirs[name]
        lines[start - 1:end] = copy_lines[first - 1:last]
    return "\n".join(lines)


# ---- "Words used here": each notebook's glossary entries, made from GLOSSARY.md --------------------

def slug(text):
    """'launch (of a GPU kernel)' -> 'launch', 'accelerator, device' -> 'accelerator-device'."""
    return re.sub(r"[^a-z0-9]+", "-", re.sub(r"\(.*?\)", "", text).lower()).strip("-")


def glossary_entries(text):
    """{anchor: (terms, the entry's text on one line)} for each item of GLOSSARY.md's list; the anchor is
    'glossary-' and the slug of the item's first bold words, its terms are every bold term in it."""
    listing = text.split("\n## ")[0]
    entries = {}
    for item in re.split(r"\n(?=- \*\*)", listing):
        if not item.startswith("- **"):
            continue
        bold = re.findall(r"\*\*(.+?)\*\*", item)
        terms = [term.lower() for words in bold
                 for term in re.sub(r"\s*\(.*?\)", "", words).split(", ")]  # "percentile (p50, ...)"
        entries["glossary-" + slug(bold[0])] = (terms, " ".join(item[2:].split()))
    return entries


def anchor_for(word, entries):
    """The anchor of the entry that explains `word` (a link's text), or None: an exact term first,
    else the longest term that the word contains or that contains the word."""
    word = word.strip("`*").lower()
    exact = [anchor for anchor, (terms, _) in entries.items() if word in terms]
    if exact:
        return exact[0]
    near = [(len(term), anchor) for anchor, (terms, _) in entries.items() for term in terms
            if term in word or word in term]
    return max(near)[1] if near else None


def linked_anchors(notebook):
    """The glossary anchors the notebook's markdown links to, in order of first use."""
    found = []
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and not cell.source.startswith(WORDS_HEADING):
            found += [a for a in GLOSSARY_LINK.findall(cell.source) if a not in found]
    return found


def words_cell_text(anchors, entries):
    """The "Words used here" cell for these anchors, in the glossary's order."""
    missing = [anchor for anchor in anchors if anchor not in entries]
    if missing:
        raise ValueError(f"a link points at {', '.join('#' + a for a in missing)}, which GLOSSARY.md "
                         f"does not define (its anchors: 'glossary-' and the slug of an entry's first words)")
    lines = [WORDS_HEADING, "",
             "The words this notebook links to, in plain terms (from the collection's glossary, "
             "GLOSSARY.md in its repository).", ""]
    lines += [f'- <a id="{anchor}"></a>{text}' for anchor, (_, text) in entries.items() if anchor in anchors]
    return "\n".join(lines)


def words_cells(notebook):
    return [index for index, cell in enumerate(notebook.cells)
            if cell.cell_type == "markdown" and first_line(cell.source) == WORDS_HEADING]


def words_difference(notebook, entries):
    """(wanted text or None, index of the present cell or None, what is wrong or None)."""
    anchors = linked_anchors(notebook)
    present = words_cells(notebook)
    if len(present) > 1:
        raise ValueError(f"{len(present)} cells start with {WORDS_HEADING!r}; one is made per notebook")
    index = present[0] if present else None
    if not anchors:
        return None, index, None if index is None else "a words cell, but no glossary link"
    wanted = words_cell_text(anchors, entries)
    if index is None:
        return wanted, None, f"no {WORDS_HEADING!r} cell"
    if notebook.cells[index].source != wanted:
        return wanted, index, f"its {WORDS_HEADING!r} cell differs from what GLOSSARY.md makes"
    if index != len(notebook.cells) - 1:
        return wanted, index, f"its {WORDS_HEADING!r} cell is not the last cell"
    return wanted, index, None


def sync_words(notebook, entries):
    """Make the notebook's words cell what GLOSSARY.md makes, as its last cell; True when changed."""
    wanted, index, problem = words_difference(notebook, entries)
    if problem is None:
        return False
    cell = notebook.cells.pop(index) if index is not None else None
    if wanted is not None:
        if cell is None:
            cell = nbformat.v4.new_markdown_cell(wanted, id=WORDS_CELL_ID)
        cell.source = wanted
        notebook.cells.append(cell)
    return True


def shown(path):
    """`path` as a contributor types it: relative to the repository when it is inside it."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def read_sources(source_dir=None, manifest=None):
    """{Shared: the cell source its file holds} (the file's text without its final newline); raises
    ValueError when a file the manifest names is missing, does not start with its title, is not Python
    or lacks a name its copies keep, or when the folder holds a .py file the manifest does not name."""
    source_dir = SOURCE_DIR if source_dir is None else Path(source_dir)
    manifest = SHARED if manifest is None else manifest
    sources, problems = {}, []
    for shared in manifest:
        path = source_dir / shared.file
        if not path.is_file():
            problems.append(f"{shown(path)} is missing (tools/sync_cells.py's TITLES names it)")
            continue
        text = path.read_text(encoding="utf-8").removesuffix("\n")
        if not first_line(text).startswith(shared.title):
            problems.append(f"{shown(path)} must start with {shared.title!r}: that line finds its copies")
            continue
        try:
            ast.parse(text)
        except SyntaxError as error:
            problems.append(f"{shown(path)} is not Python: line {error.lineno}: {error.msg}")
            continue
        unassigned = [name for name in shared.keep if name not in assignment_spans(text, shared.keep)]
        if unassigned:
            problems.append(f"{shown(path)} must assign {' and '.join(unassigned)} once at the top level "
                            f"(a line that stands for each copy's own)")
            continue
        sources[shared] = text
    named = {shared.file for shared in manifest}
    problems += [f"{shown(path)} is named in no entry of tools/sync_cells.py's TITLES: add it there, or "
                 f"remove the file" for path in sorted(source_dir.glob("*.py")) if path.name not in named]
    if problems:
        raise ValueError("\n".join(problems))
    return sources


def test_file(shared):
    """Where the tests of a shared cell live: tests/shared_cells/test_<its file's stem>.py."""
    return TEST_DIR / f"test_{Path(shared.file).stem}.py"


@dataclass
class Copy:
    """What one target notebook holds of one shared cell: the index of its copy (None when the notebook
    has no copy or more than one), the text the copy should have, and what is wrong with it."""
    shared: Shared
    number: str
    index: int = None
    wanted: str = None
    problem: str = None


def first_difference(have, want):
    """'line 12 is "..." where the source has "..."': where a copy first departs from its source."""
    have_lines, want_lines = have.split("\n"), want.split("\n")
    for number, (mine, theirs) in enumerate(zip(have_lines, want_lines), start=1):
        if mine != theirs:
            return f"line {number} is {mine.strip()[:60]!r} where the source has {theirs.strip()[:60]!r}"
    number = min(len(have_lines), len(want_lines)) + 1
    longer = "the copy" if len(have_lines) > len(want_lines) else "the source"
    return f"{longer} goes on after line {number - 1}"


def copies(read, sources, source_dir=None):
    """[Copy] for every target notebook of every shared cell, in the manifest's order."""
    source_dir = SOURCE_DIR if source_dir is None else Path(source_dir)
    found = []
    for shared, text in sources.items():
        where = shown(source_dir / shared.file)
        for number in shared.targets or tuple(read):
            if number not in read:
                found.append(Copy(shared, number, problem=f"notebook {number}, a target of {where} in "
                                                          f"notebooks/manifest.toml, is not there"))
                continue
            cells = [index for index, cell in enumerate(read[number].cells)
                     if cell.cell_type == "code" and first_line(cell.source).startswith(shared.title)]
            if not cells:
                found.append(Copy(shared, number, problem=(
                    f"no code cell starts with {shared.title!r}, the copy of {where}: put the cell "
                    f"back with that first line, or take {where} out of notebook {number}'s "
                    f"shared_cells in notebooks/manifest.toml")))
                continue
            if len(cells) > 1:
                ids = ", ".join(str(read[number].cells[index].get("id")) for index in cells)
                found.append(Copy(shared, number, problem=(
                    f"{len(cells)} code cells start with {shared.title!r} (ids {ids}): keep one "
                    f"copy of {where}")))
                continue
            index = cells[0]
            have = read[number].cells[index].source
            try:
                wanted = with_kept(text, have, shared.keep)
            except ValueError as error:
                found.append(Copy(shared, number, index, problem=f"its copy of {where}: {error}"))
                continue
            problem = None
            if have != wanted:
                problem = (f"its copy of {where} differs ({first_difference(have, wanted)}): edit "
                           f"{where}, not the copy, then run tools/sync_cells.py and its tests, "
                           f"{shown(test_file(shared))}")
            found.append(Copy(shared, number, index, wanted, problem))
    return found


def words_problems(read, glossary=None):
    """[(number, what is wrong)] for every words cell that is not what GLOSSARY.md makes."""
    entries = glossary_entries((glossary or GLOSSARY).read_text())
    found = []
    for number, notebook in read.items():
        problem = words_difference(notebook, entries)[2]
        if problem:
            found.append((number, f"{problem}: edit GLOSSARY.md or the notebook's glossary links "
                                  f"(never the words cell), then run tools/sync_cells.py"))
    return found


def read_notebooks(paths):
    return {number: nbformat.read(str(path), as_version=4) for number, path in paths.items()}


# ---- What each notebook carries of its own: its metadata, its core's cells, its version -----------

CORE_CELLS_NAME = "CORE_CELLS"


def wanted_metadata(entry):
    """The notebook metadata Colab and Kaggle read (notebooks/manifest.toml's entry says which
    notebook needs the internet): a GPU runtime, a T4 on Colab, Kaggle's T4 x2, the only T4 it offers;
    and the Python 3 kernel Jupyter starts."""
    return {"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []},
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "kaggle": {"accelerator": "nvidiaTeslaT4", "dataSources": [], "isGpuEnabled": True,
                       "isInternetEnabled": bool(entry.internet), "language": "python",
                       "sourceType": "notebook"}}


def core_sections(notebook):
    """[(cell index, 'Setup' or 'Step N')] of the core's code cells after the shared setup cell, the
    record cell left out: the cells whose runs the record cell adds up."""
    from anatomy import STEP, headings, summary_index

    end = summary_index(notebook)
    if end is None:
        return []
    marks = headings(notebook)
    setup = next((index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"
                  and cell.source.startswith(SETUP_TITLE)), None)
    found = []
    for index, cell in enumerate(notebook.cells[:end]):
        if cell.cell_type != "code" or setup is None or index <= setup or \
                cell.source.startswith(RECORD_TITLE):
            continue
        heading = next((text for at, text in reversed(marks) if at < index), "Setup")
        step = STEP.match(heading)
        found.append((index, "Step " + step.group(1) if step else heading))
    return found


def cell_key(source):
    """The key of a cell's source, as the shared setup cell's CellClock computes it."""
    return hashlib.sha256(source.strip().encode("utf-8")).hexdigest()[:10]


def core_cells_text(notebook):
    """The record cell's assignment of CORE_CELLS for this notebook, three cells to a line."""
    pairs = [f"({cell_key(notebook.cells[index].source)!r}, {section!r})"
             for index, section in core_sections(notebook)]
    lines = [f"{CORE_CELLS_NAME} = ["]
    lines += ["    " + ", ".join(pairs[start:start + 3]) + "," for start in range(0, len(pairs), 3)]
    return "\n".join(lines + ["]"])


def with_assignment(source, name, text):
    """`source` with its top-level assignment to `name` replaced by `text`."""
    span = assignment_spans(source, (name,)).get(name)
    if span is None:
        raise ValueError(f"no top-level assignment to {name}")
    lines = source.split("\n")
    lines[span[0] - 1:span[1]] = text.split("\n")
    return "\n".join(lines)


PLAN_START = "**You will be able to:**"
PLAN_END = "**Builds on:**"
TAUGHT_ON = {"Colab T4": "a Colab T4 (one GPU)", "Kaggle T4 x2": "Kaggle's T4 x2 (two GPUs)"}
RUNNING_ON = {"Colab T4": "a T4", "Kaggle T4 x2": "Kaggle's T4 x2"}


def measured_t4(file_name, hardware):
    """The minutes the GPU records give this notebook's core on the hardware it is taught on
    (tools/gpu_run.py: taught_on_minutes): (minutes, runs), or None where no record measured it."""
    import gpu_run

    found = gpu_run.taught_on_minutes(file_name, hardware)
    return (found.minutes, found.runs) if found.measured else None


def plan_text(entry, titles, t4=None):
    """The title cell's plan, from the manifest: what a learner will be able to do, the notebook it
    builds on, what it is taught on, the teaching minutes (of which the T4's running, measured where a
    GPU record says, else the manifest's estimate) and the exercises' minutes."""
    lines = [PLAN_START] + [f"- {objective}" for objective in entry.objectives] + [""]
    builds = f"notebook {entry.builds_on}" if entry.builds_on else "nothing before it"
    on = RUNNING_ON[entry.hardware]
    if t4 is None:
        running = f"about {entry.t4_run_minutes:g} min running on {on} (an estimate)"
    else:
        running = f"about {t4[0]:g} min running on {on} (measured, {t4[1]} run{'s' * (t4[1] != 1)})"
    lines.append(f"{PLAN_END} {builds}. **Taught on:** {TAUGHT_ON[entry.hardware]}. **In class:** about "
                 f"{entry.teaching_minutes} min of teaching, of which {running}, then about "
                 f"{entry.exercise_minutes} min of exercises.")
    return "\n".join(lines)


def with_plan(title, plan):
    """The title cell's source with its plan replaced by `plan`, or put before its table (or at its
    end) when it has none."""
    lines = title.split("\n")
    if PLAN_START in lines:
        start = lines.index(PLAN_START)
        end = next(index for index in range(start, len(lines)) if lines[index].startswith(PLAN_END))
        return "\n".join(lines[:start] + plan.split("\n") + lines[end + 1:])
    table = next((index for index, line in enumerate(lines) if line.startswith("|")), None)
    if table is None:
        return title.rstrip("\n") + "\n\n" + plan
    return "\n".join(lines[:table] + plan.split("\n") + [""] + lines[table:])


def stamp(notebook, file_name, entry, titles=None, t4=None):
    """Write this notebook's own part into it, in memory: the metadata, the record cell's CORE_CELLS
    and the setup cell's NOTEBOOK_VERSION (last: the version hashes everything else); returns what
    changed, in words."""
    from anatomy import VERSION_LINE, version_line

    changed = []
    if titles is not None and notebook.cells and notebook.cells[0].cell_type == "markdown":
        wanted = with_plan(notebook.cells[0].source, plan_text(entry, titles, t4))
        if wanted != notebook.cells[0].source:
            notebook.cells[0].source = wanted
            changed.append("its title's plan")
    for key, value in wanted_metadata(entry).items():
        if notebook.metadata.get(key) != value:
            notebook.metadata[key] = value
            changed.append(f"its metadata {key!r}")
    for cell in notebook.cells:
        if cell.cell_type == "code" and cell.source.startswith(RECORD_TITLE):
            wanted = with_assignment(cell.source, CORE_CELLS_NAME, core_cells_text(notebook))
            if wanted != cell.source:
                cell.source = wanted
                changed.append(f"its record cell's {CORE_CELLS_NAME}")
    setups = [cell for cell in notebook.cells
              if cell.cell_type == "code" and cell.source.startswith(SETUP_TITLE)]
    for cell in setups:
        wanted = VERSION_LINE.sub(version_line(file_name, notebook) + "\n", cell.source, count=1)
        if wanted != cell.source:
            cell.source = wanted
            changed.append("its NOTEBOOK_VERSION")
    return changed


NO_ENTRY = ("has no entry in notebooks/manifest.toml, so its plan, metadata, record cell and version "
            "are not written: add one (CONTRIBUTING.md, 'Adding a notebook') and run "
            "tools/sync_cells.py again")


def apply_everything(read, paths, source_dir=None, glossary=None):
    """Every copy, words cell, metadata and stamp written into `read` (in memory); returns
    ([(number, what was rewritten)], [(number, what could not be mended)])."""
    changed, unmended = [], []
    for copy in copies(read, read_sources(source_dir), source_dir):
        if copy.wanted is None:
            unmended.append((copy.number, copy.problem))
        elif copy.problem:
            read[copy.number].cells[copy.index].source = copy.wanted
            changed.append((copy.number, f"the copy of {copy.shared.file}"))
    entries = glossary_entries((glossary or GLOSSARY).read_text())
    changed += [(number, f"its {WORDS_HEADING!r} cell") for number in read
                if sync_words(read[number], entries)]
    manifest = notebooks_in_manifest()
    titles = {number: first_line(notebook.cells[0].source).split("·", 1)[-1].strip()
              for number, notebook in read.items() if notebook.cells}
    for number, notebook in read.items():
        if number not in manifest:
            unmended.append((number, NO_ENTRY))
        else:
            name = paths[number].name
            changed += [(number, what) for what in stamp(notebook, name, manifest[number], titles,
                                                         measured_t4(name, manifest[number].hardware))]
    return changed, unmended


def differences(paths, source_dir=None, glossary=None):
    """[(number, what is wrong)] for every copy that differs from its source, is missing or is doubled,
    every words cell that GLOSSARY.md would make otherwise, and every notebook whose metadata, core
    cells or version the tool would write otherwise. Changes nothing."""
    read = read_notebooks(paths)
    found = [(copy.number, copy.problem) for copy in copies(read, read_sources(source_dir), source_dir)
             if copy.problem]
    found += words_problems(read, glossary)
    copied, unmended = apply_everything(read, paths, source_dir, glossary)
    found += [(number, what) for number, what in unmended if what == NO_ENTRY]
    shown = {number for number, _ in found}
    found += [(number, f"{what} is not what tools/sync_cells.py writes: run it") for number, what in copied
              if number not in shown and not what.startswith(("the copy of", "its " + repr(WORDS_HEADING)))]
    return found


def sync(paths, source_dir=None, glossary=None):
    """Rewrite every copy that differs, every words cell, and each notebook's own metadata, core cells
    and version; returns ([(number, what was rewritten)], [(number, what could not be mended)]): a
    missing or doubled copy is left for a person to mend. Notebooks are written as nbformat writes them."""
    read = read_notebooks(paths)
    changed, unmended = apply_everything(read, paths, source_dir, glossary)
    for number in sorted({number for number, _ in changed}):
        nbformat.write(read[number], str(paths[number]))
    return changed, unmended


def plural(count, one, many):
    return f"{count} {one if count == 1 else many}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on a difference")
    parser.add_argument("--folder", default=None, help="the notebooks' folder (default: notebooks/)")
    parser.add_argument("--sources", default=None,
                        help="the shared cells' folder (default: tools/shared_cells/)")
    args = parser.parse_args(argv)
    paths = notebooks(args.folder)
    try:
        if args.check:
            found = differences(paths, args.sources)
        else:
            changed, found = sync(paths, args.sources)
    except ValueError as error:
        print(f"sync_cells: {error}")
        return 2
    if not args.check:
        for number, what in changed:
            print(f"rewrote {paths[number].name}: {what}")
        print(f"sync_cells: {plural(len(changed), 'cell', 'cells')} rewritten")
    for number, problem in found:
        print(f"{paths[number].name if number in paths else number}: {problem}")
    if args.check:
        print("sync_cells: " + plural(len(found), "cell differs from its source or is missing",
                                      "cells differ from their sources or are missing")
              if found else "sync_cells: every copy matches its source")
    elif found:
        print(f"sync_cells: {plural(len(found), 'copy', 'copies')} could not be written (above)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
