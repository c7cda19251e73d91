"""Write the notebooks a class gets when it should not see the answers: each notebook without its
exercises' answer cells and without the "What a good answer says" blocks of its open questions. The
checks stay, so a learner's answer is still checked.

    .venv/bin/python tools/handout.py                 # every notebook, into handout/
    .venv/bin/python tools/handout.py 05 --out /tmp/x # one notebook, into a folder you choose

The handout notebooks run with Run All as the notebooks do: each starter says NOT DONE YET
(tests/tooling/test_handout.py runs one). Hand out the instructor's own copy after class.
"""
import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import anatomy  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GOOD_ANSWER = re.compile(r"\n*<details>\s*<summary>\s*What a good answer says.*?</details>\n*", re.S | re.I)


def handout(notebook):
    """A copy of `notebook` (an nbformat node) without its answer cells and its good answers; the
    cell ids of what stays are kept."""
    import copy

    copied = copy.deepcopy(notebook)
    answers = {id(parts["answer"]) for parts in anatomy.exercises(notebook).values() if parts["answer"]}
    kept = []
    for original, cell in zip(notebook.cells, copied.cells):
        if id(original) in answers:
            continue
        if cell.cell_type == "markdown" and GOOD_ANSWER.search(cell.source):
            cell.source = GOOD_ANSWER.sub("\n\n", cell.source).strip("\n")
        kept.append(cell)
    copied.cells = kept
    return copied


def main(argv=None):
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="notebook numbers (all when none)")
    parser.add_argument("--out", default=str(REPO / "handout"), help="the folder to write them to")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        if args.notebooks and path.name[:2] not in args.notebooks:
            continue
        notebook = nbformat.read(str(path), as_version=4)
        nbformat.write(handout(notebook), str(out / path.name))
        print(f"wrote {out / path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
