"""The branch-coverage report of the notebooks' helpers (tests/helper_coverage.py): measured in this very
run, copies of the shared cells counted once, and the figures summed right."""
import inspect

import pytest

from support.helper_coverage import SHARED_ROW, Figures, report_lines, summary
from support.notebook_code import helper_file, load_helpers


def test_this_run_measures_the_helpers_in_their_generated_files(request):
    if request.config.getoption("--no-helper-coverage"):
        pytest.skip("this run was started with --no-helper-coverage")
    measurement = request.config.helper_coverage
    assert measurement is not None, "the test process must be measuring the notebooks' helpers"
    assert measurement.depth == 1, "switched on for this test, which imports load_helpers"
    nb = load_helpers("01")
    nb.version_tuple("2.6.1+cu130")
    lines, first = inspect.getsourcelines(nb.version_tuple)
    body = [first + offset for offset, line in enumerate(lines) if "numbers.append" in line]
    data = measurement.coverage.get_data()
    assert str(helper_file("01")) in data.measured_files()
    assert set(body) <= set(data.lines(str(helper_file("01")))), "the loop body of version_tuple ran"


def region(start, statements, branches, executed_lines, executed_branches):
    """A function's entry in coverage.py's JSON report, lines numbered in its file."""
    return {"start_line": start, "executed_lines": executed_lines, "executed_branches": executed_branches,
            "summary": {"num_statements": statements, "num_branches": branches}}


def test_copies_of_one_function_count_once_with_what_any_copy_ran():
    figures = Figures()
    # The same function at line 10 of one file and line 110 of another. Its `if` at +1 either
    # returns (an exit arc: coverage.py writes it as minus the function's first line) or goes on to
    # +2; its `if` at +2 goes to +3 or +5. Each copy ran some of it.
    figures.add("synchronize", region(10, 5, 4, [11, 12, 13], [[11, 12], [12, 13]]))
    figures.add("synchronize", region(110, 5, 4, [111, 112, 115], [[111, -110], [112, 115]]))
    figures.add("synchronize", region(210, 5, 4, [211], [[211, -210]]))
    run, lines, taken, branches = figures.totals()
    assert (lines, branches) == (5, 4), "a copy's lines and branches count once"
    assert run == 4, "lines +1, +2, +3 and +5 ran in some copy; +4 in none"
    assert taken == 4, "both sides of both ifs; the two copies' exits are one arc"
    assert figures.unfinished() == ["synchronize"]


def test_a_function_with_a_branch_never_taken_is_listed_least_covered_first():
    figures = Figures()
    figures.add("half", region(1, 4, 2, [2, 3], [[2, 3]]))
    figures.add("most", region(20, 4, 2, [21, 22, 23, 24], [[22, 23]]))
    figures.add("done", region(40, 2, 0, [41, 42], []))
    assert figures.unfinished() == ["half", "most"]
    assert figures.totals() == (8, 10, 2, 4)


def test_the_shared_cells_get_a_row_of_their_own():
    # synchronize: the shared setup cell, in every notebook; datasheet: the datasheet cell, in 01 and 09
    nb = load_helpers("01")
    shared_start = inspect.getsourcelines(nb.synchronize)[1]
    datasheet_start = inspect.getsourcelines(nb.datasheet)[1]
    own_start = inspect.getsourcelines(nb.arch_supported)[1]
    files = {str(helper_file("01")): {"functions": {
        "synchronize": region(shared_start, 6, 6, [shared_start + 1], []),
        "datasheet": region(datasheet_start, 5, 4, [datasheet_start + 1], []),
        "arch_supported": region(own_start, 10, 8, [own_start + 1, own_start + 2], []),
        "": region(1, 5, 0, [1, 2, 3, 4, 5], []),
    }}}
    rows = summary(files)
    own, shared = rows[helper_file("01").stem], rows[SHARED_ROW]
    assert set(own.functions) == {"arch_supported", "(top level)"}
    assert set(shared.functions) == {"synchronize", "datasheet"}
    assert own.totals() == (7, 15, 0, 8)


def test_the_report_gives_each_row_and_the_sum():
    done, half = Figures(), Figures()
    done.add("a", region(1, 2, 2, [1, 2], [[1, 2], [1, 3]]))
    half.add("b", region(1, 4, 4, [1, 2], [[1, 2]]))
    lines = report_lines({"01_x": done, "02_y": half})
    assert lines[1].split()[:5] == ["01_x", "2/2", "100", "%", "2/2"]
    assert lines[2].split()[:5] == ["02_y", "2/4", "50", "%", "1/4"]
    assert lines[3] == "    not all run (least covered first): b"
    assert lines[-1].split()[:7] == ["all", "4/6", "67", "%", "3/6", "50", "%"]


def test_only_tests_that_can_run_helpers_are_measured(request):
    from support.helper_coverage import runs_helpers

    assert runs_helpers(request.node), "this module imports load_helpers"
    assert runs_helpers(type("Item", (), {"module": type("Module", (), {"load_shared": None})})()), (
        "a module that imports load_shared runs a shared cell's copy")
    assert not runs_helpers(type("NbvalCell", (), {})()), "an nbval cell has no module"
    assert not runs_helpers(type("Item", (), {"module": __import__("support.shared_checks", fromlist=["shared_checks"])})())


def test_the_cells_tests_run_whole_count_in_their_notebooks_row():
    """run_cell's files (01_name.<cell id>.py) join the row of their notebook; their top-level code is
    named after the cell, and a function the cell defines counts once with its helper-file copy."""
    from support.notebook_code import cell_file

    nb = load_helpers("01")
    own_start = inspect.getsourcelines(nb.arch_supported)[1]
    files = {str(helper_file("01")): {"functions": {
        "arch_supported": region(own_start, 10, 8, [own_start + 1], []),
    }}, str(cell_file("01", "cell-07")): {"functions": {
        "": region(1, 6, 4, [1, 2, 3], [[2, 3]]),
        "arch_supported": region(40, 10, 8, [41, 42], []),
    }}}
    rows = summary(files)
    assert set(rows) == {helper_file("01").stem, SHARED_ROW}
    own = rows[helper_file("01").stem]
    assert set(own.functions) == {"arch_supported", "cell cell-07"}
    assert own.totals() == (2 + 3, 10 + 6, 0 + 1, 8 + 4)
