"""The wording promises of tests/promises.py, each found where it must be; the rule tried on made-up
notebooks."""
import re

import nbformat
import pytest

from support.notebook_code import NOTEBOOKS, core_markdown, read
from support.promises import PROMISES, WHERE, Promise


def promise_text(notebook, where):
    """The text a promise is searched in, line breaks read as spaces."""
    if where == "title":
        text = notebook.cells[0].source
    elif where == "core":
        text = core_markdown(notebook)
    else:
        text = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    return " ".join(text.split())


def broken_promises(number, notebook, promises=PROMISES):
    """The promises of notebook `number` that its text breaks: a pattern missing, or one that must not
    come back found."""
    return [promise for promise in promises.get(number, [])
            if bool(re.search(promise.pattern, promise_text(notebook, promise.where))) != promise.present]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.name for path in NOTEBOOKS])
def test_every_promise_is_kept(path):
    broken = broken_promises(path.name[:2], read(path))
    assert broken == [], "\n".join(f"/{p.pattern}/ {'missing from' if p.present else 'back in'} the "
                                    f"{p.where}: {p.why}" for p in broken)


def test_every_promise_names_a_notebook_and_a_place():
    numbers = {path.name[:2] for path in NOTEBOOKS}
    assert set(PROMISES) <= numbers
    assert all(promise.where in WHERE and promise.why for promises in PROMISES.values() for promise in promises)


def test_a_promise_is_searched_only_where_it_must_be():
    cells = [nbformat.v4.new_markdown_cell("# 99 · T\n\nTitle words."),
             nbformat.v4.new_markdown_cell("Core words, on\ntwo lines."),
             nbformat.v4.new_markdown_cell("## Summary\n\nLate words.")]
    notebook = nbformat.v4.new_notebook(cells=cells)
    table = {"99": [Promise("Title words", "title", "."), Promise("Core words, on two", "core", "."),
                    Promise("Late words", "notebook", ".")]}
    assert broken_promises("99", notebook, table) == []
    moved = {"99": [Promise("Core words", "title", "."), Promise("Late words", "core", ".")]}
    assert [p.pattern for p in broken_promises("99", notebook, moved)] == ["Core words", "Late words"]
    gone = {"99": [Promise("Late words", "core", ".", present=False),
                   Promise("Late words", "notebook", ".", present=False)]}
    assert [p.where for p in broken_promises("99", notebook, gone)] == ["notebook"], "a claim came back"
