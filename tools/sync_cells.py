"""Copy every shared cell from its one source into the notebooks that carry a copy.

Each notebook must run alone (uploaded to Colab or Kaggle with nothing beside it), so a few cells are
copies: the install cell and the shared setup cell in every notebook, notebook 06's process plumbing in
08, notebook 01's datasheet table in 09 (SHARED below names each one's source notebook; a copy is found
by its `#@title` first line, and only its source text is replaced: cell ids, metadata and outputs stay,
and the install cell keeps each notebook's own PACKAGES), and each notebook's last cell, "Words used
here": the entries of GLOSSARY.md that the notebook's links `[word](#glossary-<anchor>)` point to, each
with its anchor `<a id="glossary-<anchor>">`, so that the links work in a notebook uploaded alone.

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
GLOSSARY = REPO / "GLOSSARY.md"
WORDS_HEADING = "## Words used here"
WORDS_CELL_ID = "words-used-here"
GLOSSARY_LINK = re.compile(r"\]\(#(glossary-[a-z0-9-]+)\)")


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


WORDS = Shared(WORDS_HEADING, "GLOSSARY.md")  # how differences name the words cells


def differences(paths, glossary=None):
    """[(number, shared)] for every copy that differs from its source (WORDS for a words cell)."""
    read, wanted = expected_copies(paths)
    found = [(number, shared) for shared, number, index, text in wanted
             if read[number].cells[index].source != text]
    entries = glossary_entries((glossary or GLOSSARY).read_text())
    found += [(number, WORDS) for number in read if words_difference(read[number], entries)[2]]
    return found


def sync(paths, glossary=None):
    """Rewrite every copy that differs; returns [(number, shared)] of the copies rewritten."""
    read, wanted = expected_copies(paths)
    changed = []
    for shared, number, index, text in wanted:
        if read[number].cells[index].source != text:
            read[number].cells[index].source = text
            changed.append((number, shared))
    entries = glossary_entries((glossary or GLOSSARY).read_text())
    changed += [(number, WORDS) for number in read if sync_words(read[number], entries)]
    for number in sorted({number for number, _ in changed}):
        nbformat.write(read[number], str(paths[number]))
    return changed


def describe(number, shared, paths):
    if shared is WORDS:
        return (f"{paths[number].name}: its {WORDS_HEADING!r} cell is not what GLOSSARY.md and the "
                f"notebook's glossary links make; edit GLOSSARY.md or the links, then run "
                f"tools/sync_cells.py")
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
        print(f"rewrote {paths[number].name}: {shared.title!r} from {shared.source}")
    print(f"sync_cells: {len(found)} cop{'y' if len(found) == 1 else 'ies'} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
