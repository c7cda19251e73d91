"""Code two notebooks carry is shared: it comes from tools/shared_cells/, and nothing else is defined
under the same name in two notebooks.

Each notebook must run alone, so a helper that two notebooks need is copied into both; a copy made by
hand drifts (three did: find_cpp_compiler, choose_compile_backend, interleaved_rounds). So a top-level
function or class that two notebooks define, outside the copies tools/sync_cells.py writes, fails here:
make it a shared cell (tools/shared_cells/, the notebooks' `shared_cells` in notebooks/manifest.toml),
or, when the two mean different things, give each a name of its own.
"""
import ast

import nbformat

import sync_cells
from support.notebook_code import NOTEBOOKS, read


def shared_copy_titles():
    return tuple(shared.title for shared in sync_cells.SHARED)


def definitions(notebooks):
    """{name: {notebook: cell id}} of the top-level functions and classes of every code cell that is not
    a shared cell's copy (`notebooks`: {number: notebook})."""
    found = {}
    for number, notebook in notebooks.items():
        for cell in notebook.cells:
            if cell.cell_type != "code" or cell.source.startswith(shared_copy_titles()):
                continue
            for node in ast.parse(cell.source).body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    found.setdefault(node.name, {})[number] = cell.get("id")
    return found


def defined_twice(notebooks):
    """['name: 05 (cell id), 10 (cell id)'] for every name defined in more than one notebook."""
    return [f"{name}: " + ", ".join(f"{number} ({cell})" for number, cell in sorted(where.items()))
            for name, where in sorted(definitions(notebooks).items()) if len(where) > 1]


def test_no_helper_is_defined_in_two_notebooks_outside_a_shared_cell():
    twice = defined_twice({path.name[:2]: read(path) for path in NOTEBOOKS})
    assert twice == [], (
        "defined in two notebooks outside tools/shared_cells/ (share it, or give each its own name):\n"
        + "\n".join(twice))


def test_a_copy_made_by_hand_is_found_and_a_shared_copy_is_not():
    def notebook(*sources):
        return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source, id=f"c{index}")
                                               for index, source in enumerate(sources)])

    setup = sync_cells.SHARED[1].title + " (the same cell in every notebook)\ndef synchronize(d):\n    pass"
    one = notebook(setup, "def spread_pct(values):\n    return 1", "class Run:\n    pass")
    two = notebook(setup, "def spread_pct(values):\n    return 2", "def run():\n    pass")
    assert defined_twice({"05": one, "10": two}) == ["spread_pct: 05 (c1), 10 (c1)"]
    assert defined_twice({"05": one}) == []
