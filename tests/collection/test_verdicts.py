"""The table of verdicts the notebooks must print (tests/verdicts.py): every entry names a real cell, and
the check reads nbval's and the notebook model's outputs alike. The checks themselves run inside the
notebook runs the suite already makes (conftest.py for nbval, test_browser.py for the page)."""
import re
import socket

import pytest

from support import verdicts
from support.notebook_code import notebook_path, read
from support.verdicts import SITUATIONS, VERDICTS, Verdict, is_offline, missing_verdicts, printed_text


@pytest.mark.parametrize("place", sorted(VERDICTS), ids=[f"{nb}-{cell}" for nb, cell in sorted(VERDICTS)])
def test_every_entry_names_a_code_cell_that_exists(place):
    notebook, cell_id = place
    cells = {cell.get("id"): cell for cell in read(notebook_path(notebook)).cells}
    assert cell_id in cells, f"notebook {notebook} has no cell {cell_id!r} any more: update its verdicts in notebooks/manifest.toml"
    assert cells[cell_id].cell_type == "code"
    for verdict in VERDICTS[place]:
        re.compile(verdict.pattern)
        assert verdict.when in SITUATIONS and len(verdict.why.split()) >= 4, verdict


def test_the_text_of_nbval_outputs_and_of_a_notebook_model():
    nbval_style = [{"output_type": "stream", "name": "stdout", "text": "All 4 checked variants kept\n"},
                   {"output_type": "execute_result", "data": {"text/plain": "value", "text/html": "<b>x</b>"}}]
    model_style = [{"output_type": "stream", "name": "stdout", "text": ["All 4 ", "checked variants kept\n"]},
                   {"output_type": "display_data", "data": {"text/plain": ["val", "ue"], "image/png": "..."}},
                   {"output_type": "error", "ename": "E", "evalue": "boom", "traceback": []}]
    assert printed_text(nbval_style) == printed_text(model_style) == "All 4 checked variants kept\n\nvalue"


def test_a_missing_verdict_is_reported_only_where_its_situation_holds(monkeypatch):
    monkeypatch.setitem(VERDICTS, ("09", "c1"), [
        Verdict("c1", r"^Plan: stand-in\.", "offline", "offline the stand-ins are announced"),
        Verdict("c1", r"^kept: True$", "always", "the weights survive the round trip"),
    ])
    printed = [{"output_type": "stream", "name": "stdout", "text": "Plan: search.\nkept: True\n"}]
    online = {**SITUATIONS, "offline": lambda: False}
    offline = {**SITUATIONS, "offline": lambda: True}
    assert missing_verdicts("09", "c1", printed, online) == []
    assert [v.pattern for v in missing_verdicts("09", "c1", printed, offline)] == [r"^Plan: stand-in\."]
    assert [v.pattern for v in missing_verdicts("09", "c1", [], online)] == [r"^kept: True$"]
    assert missing_verdicts("09", "no-entry", [], offline) == []


def test_the_offline_probe_tells_a_listening_port_from_a_closed_one():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert is_offline.__wrapped__("127.0.0.1", server.getsockname()[1], 2.0) is False
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, not listening: a connection is refused
        assert is_offline.__wrapped__("127.0.0.1", closed.getsockname()[1], 2.0) is True


def test_nbval_cells_are_checked_by_the_conftest_hook():
    """conftest.py's pytest_runtest_call reads nbval's `test_outputs` and the cell's id: the names
    nbval 0.11 gives them (nbval/plugin.py, IPyNbCell.__init__ and runtest)."""
    from nbval.plugin import IPyNbCell

    source = __import__("inspect").getsource(IPyNbCell)
    assert "self.test_outputs = outs" in source and "self.cell = cell" in source
    assert verdicts.describe_missing("05", "cell-65", [Verdict("cell-65", "x", "always", "a reason in words")], []) \
        .startswith("notebook 05, cell cell-65: a verdict")


def test_the_triton_situation_and_a_table_whose_every_row_must_say_passed():
    import importlib.util

    assert verdicts.has_triton.__wrapped__() == (importlib.util.find_spec("triton") is not None)
    table = "            check_on_this_run\n(16, 16, 16)     passed\n(32, 32, 32)     {}\n"
    always = {**SITUATIONS, "triton": lambda: True}
    stream = lambda text: [{"output_type": "execute_result", "data": {"text/plain": text}}]  # noqa: E731
    assert missing_verdicts("09", "knobs", stream(table.format("passed")), always) == []
    for other in ("failed", "not run"):
        assert missing_verdicts("09", "knobs", stream(table.format(other)), always), other
    assert missing_verdicts("09", "knobs", stream(table.format("failed")),
                            {**SITUATIONS, "triton": lambda: False}) == []


def test_the_compiler_situation_and_step_5_of_09_wants_at_least_one_kernel(monkeypatch):
    import shutil

    monkeypatch.delenv("CXX", raising=False)
    assert verdicts.has_cpp_compiler.__wrapped__() == (shutil.which("g++") is not None)
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    assert verdicts.has_cpp_compiler.__wrapped__() is False
    stream = lambda text: [{"output_type": "stream", "name": "stdout", "text": text}]  # noqa: E731
    line = "Inductor wrote {} kernel(s) for the three operations: {}\n"
    with_compiler = {**SITUATIONS, "cpu_compiler": lambda: True}
    assert missing_verdicts("09", "show-code", stream(line.format(1, "cpp_fused_add_mul_relu_0")),
                            with_compiler) == []
    assert missing_verdicts("09", "show-code", stream(line.format(0, "")), with_compiler)
    assert missing_verdicts("09", "show-code", stream(line.format(0, "")),
                            {**SITUATIONS, "cpu_compiler": lambda: False}) == []


def test_a_cell_titled_as_showing_nothing_may_show_only_the_figures_record():
    from support.verdicts import shows_something

    title = "#@title Hand the figures to the GPU-run tool (shows nothing)\nreport_figures(x=1)"
    record = {"output_type": "display_data",
              "data": {"application/vnd.gpu-tutorials.figures+json": {"x": 1}, "text/plain": ""}}
    assert shows_something(title, [record]) is None
    assert shows_something(title, []) is None
    result = {"output_type": "execute_result", "data": {"text/plain": "{'device': 'cpu'}"}}
    assert shows_something(title, [record, result]).startswith("a execute_result output")
    assert shows_something(title, [{"output_type": "stream", "name": "stdout", "text": "hi"}])
    table = {"output_type": "display_data", "data": {"text/html": "<table></table>", "text/plain": ""}}
    assert shows_something(title, [table]) == "a display of ['text/html', 'text/plain']"
    assert shows_something("#@title Draw the chart\nplt.show()", [result]) is None
    assert shows_something("print(1)  # (shows nothing)", [result]) is None


def test_the_record_cell_must_say_every_core_cell_ran_once_in_order_on_the_test_machine():
    from support.verdicts import record_cell_verdict

    source = "#@title Your run: minutes per Step\nprint(...)"
    cpu = {**SITUATIONS, "cpu": lambda: True}
    gpu = {**SITUATIONS, "cpu": lambda: False}
    good = ("No CUDA GPU here (cpu), so no GPU record. Minutes per section on this machine: Setup 0.0, "
            "Step 1 0.2 (core 0.2); every core cell ran once, in order.\n")
    assert record_cell_verdict(source, good, cpu) is None
    partial = good.replace("every core cell ran once, in order", "partial: cells skipped: 3")
    assert "every core cell ran once, in order" in record_cell_verdict(source, partial, cpu)
    assert record_cell_verdict(source, partial, gpu) is None, "on a GPU the cell shows the record"
    assert record_cell_verdict("#@title Another cell\nprint(1)", partial, cpu) is None
