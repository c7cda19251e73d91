"""What notebook 02's code itself must hold: every table it shows goes through rounded_columns, the core
mixes devices only through not_the_cpu, every torch.cuda call it makes exists and is not deprecated, and
the torch.load warning it quotes is still PyTorch's own."""
import ast
import re

import torch

from support.notebook_code import core_cells, is_folded, notebook_path, read, shared_copy_of


def test_the_core_mixes_devices_through_not_the_cpu_only():
    """No visible cell of the core names `meta` itself: on a GPU every error shown is the real one."""
    for cell in core_cells(read(notebook_path("02"))):
        if cell.cell_type == "code" and not is_folded(cell):
            assert not re.search(r'(device=|\.to\()\s*"meta"', cell.source), cell.get("id")


def _displayed(statement):
    """The expression a cell shows as its result, or None (a call to print, show_figure or display)."""
    if not isinstance(statement, ast.Expr):
        return None
    if isinstance(statement.value, ast.Call) and ast.unparse(statement.value.func) in {
            "print", "show_figure", "display"}:
        return None
    return statement.value


def test_every_table_the_notebook_shows_goes_through_rounded_columns():
    shown = 0
    for cell in read(notebook_path("02")).cells:
        if cell.cell_type != "code" or shared_copy_of(cell):
            continue  # the collection's own cells: report_figures displays a record, not a table
        tree = ast.parse(cell.source)
        results = [_displayed(tree.body[-1])] if tree.body else []
        results += [call.args[0] for call in ast.walk(tree) if isinstance(call, ast.Call)
                    and ast.unparse(call.func) == "display"]
        for result in filter(None, results):
            if cell.get("id", "").startswith("exercise-"):
                continue  # an exercise's cell shows its check's Feedback
            assert isinstance(result, ast.Call) and ast.unparse(result.func) == "rounded_columns", (
                f"cell {cell.get('id')} shows {ast.unparse(result)!r} without rounding it through rounded_columns()")
            shown += 1
    assert shown > 0


def test_every_torch_cuda_call_exists_and_is_not_deprecated():
    names = set()
    for cell in read(notebook_path("02")).cells:
        if cell.cell_type == "code":
            for node in ast.walk(ast.parse(cell.source)):
                if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "torch.cuda":
                    names.add(node.attr)
    assert {"memory_allocated", "memory_reserved", "max_memory_allocated", "mem_get_info",
            "reset_peak_memory_stats", "empty_cache"} <= names
    for name in names:
        function = getattr(torch.cuda, name)
        assert not (function.__doc__ or "").lstrip().startswith("Deprecated"), name
    assert torch.cuda.OutOfMemoryError is torch.OutOfMemoryError
    assert issubclass(torch.OutOfMemoryError, RuntimeError)


def test_the_quoted_torch_load_warning_is_still_pytorchs_own():
    """The notebook quotes torch.load's documentation (its wording is a promise in tests/promises.py)."""
    assert "Never load data from an untrusted source" in torch.load.__doc__
