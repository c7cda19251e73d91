"""Copy every shared cell from its one source into the notebooks that carry a copy.

Each notebook must run alone (uploaded to Colab or Kaggle with nothing beside it), so a few cells are
copies: the install cell and the shared setup cell in every notebook, notebook 06's process plumbing in
08, notebook 01's datasheet table in 09, and each notebook's "Words used here", made from README's
glossary. SHARED below names, for each, the notebook (or README) that is its one source; a copy is
found by its first line (the `#@title` line, or the heading), and only its source text is replaced:
cell ids, metadata and outputs stay, and the install cell keeps each notebook's own PACKAGES.

    .venv/bin/python tools/sync_cells.py           # rewrite the copies from their sources
    .venv/bin/python tools/sync_cells.py --check   # change nothing; list every copy that differs

--check exits 1 when a copy differs and says which source to edit; tests/test_sync_cells.py runs it.
"""
import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = REPO / "notebooks"


@dataclass(frozen=True)
class Shared:
    """A code cell copied from notebook `source` into `targets` (None: every other notebook)."""
    title: str  # the start of the cell's first line, the same in every copy
    source: str  # the number of the notebook that holds the one source
    targets: tuple = None
    keep: tuple = ()  # top-level names whose assignment each copy keeps as its own


SHARED = [
    Shared("#@title Setup, part 1: install what Colab or Kaggle lack", "01", keep=("PACKAGES",)),
    Shared("#@title Shared setup: helpers, the device and the fast switch", "01"),
    Shared("#@title Plumbing: run programs with a time limit", "06", ("08",)),
    Shared("#@title The datasheet table: published peaks of a few NVIDIA GPUs", "01", ("09",)),
]


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


def expected_copies(paths):
    """[(shared, number, cell index, wanted source)] for every copy of every shared cell; raises
    ValueError when a source or a copy is missing or found twice."""
    read = {number: nbformat.read(str(path), as_version=4) for number, path in paths.items()}
    wanted = []
    for shared in SHARED:
        sources = find_cells(read[shared.source], shared.title)
        if len(sources) != 1:
            raise ValueError(f"notebook {shared.source} must hold the source of {shared.title!r} once, "
                             f"found {len(sources)}")
        source_text = sources[0].source
        key = first_line(source_text)
        targets = shared.targets or tuple(n for n in read if n != shared.source)
        for number in targets:
            cells = [(index, cell) for index, cell in enumerate(read[number].cells)
                     if cell.cell_type == "code" and first_line(cell.source) == key]
            if len(cells) != 1:
                raise ValueError(f"notebook {number} must hold one copy of {key!r} (its first line the "
                                 f"same as in notebook {shared.source}), found {len(cells)}")
            index, cell = cells[0]
            wanted.append((shared, number, index, with_kept(source_text, cell.source, shared.keep)))
    return read, wanted


def differences(paths):
    """[(number, shared)] for every copy that differs from its source."""
    read, wanted = expected_copies(paths)
    return [(number, shared) for shared, number, index, text in wanted
            if read[number].cells[index].source != text]


def sync(paths):
    """Rewrite every copy that differs; returns [(number, shared)] of the copies rewritten."""
    read, wanted = expected_copies(paths)
    changed = []
    for shared, number, index, text in wanted:
        if read[number].cells[index].source != text:
            read[number].cells[index].source = text
            changed.append((number, shared))
    for number in sorted({number for number, _ in changed}):
        nbformat.write(read[number], str(paths[number]))
    return changed


def describe(number, shared, paths):
    source = paths[shared.source].name
    return (f"{paths[number].name}: the copy of {shared.title!r} differs from its source, "
            f"{source}; edit it there, then run tools/sync_cells.py")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on a difference")
    parser.add_argument("--folder", default=None, help="the notebooks' folder (default: notebooks/)")
    args = parser.parse_args(argv)
    paths = notebooks(args.folder)
    try:
        found = differences(paths) if args.check else sync(paths)
    except ValueError as error:
        print(f"sync_cells: {error}")
        return 2
    if args.check:
        for number, shared in found:
            print(describe(number, shared, paths))
        print(f"sync_cells: {len(found)} cop{'y differs' if len(found) == 1 else 'ies differ'}"
              if found else "sync_cells: every copy matches its source")
        return 1 if found else 0
    for number, shared in found:
        print(f"rewrote {paths[number].name}: {shared.title!r} from notebook {shared.source}")
    print(f"sync_cells: {len(found)} cop{'y' if len(found) == 1 else 'ies'} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
