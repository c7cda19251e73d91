"""tools/notebook_run.py, the one way a notebook runs alone outside nbval, and the timing tool on top of it:
what counts as the core's time, a run in an empty folder that is gone afterwards, the first error, the
environment given to the kernel and taken back."""
import os

import nbformat
import pytest

import anatomy
import notebook_run
from time_notebooks import report_line


def code(seconds, source="x = 1"):
    start = "2026-11-22T10:00:00.000000Z"
    end = f"2026-11-22T10:00:{seconds:02d}.500000Z"
    return nbformat.v4.new_code_cell(source, metadata={"execution": {"iopub.execute_input": start,
                                                                      "shell.execute_reply": end}})


def markdown(text):
    return nbformat.v4.new_markdown_cell(text)


def test_a_cell_lasts_from_its_input_to_its_reply_and_an_unrun_cell_lasts_nothing():
    assert notebook_run.cell_seconds(code(3)) == pytest.approx(3.5)
    assert notebook_run.cell_seconds(nbformat.v4.new_code_cell("")) == 0.0


def test_the_core_is_the_code_before_the_summary_heading():
    cells = [markdown("# 04 · Title\nno summary here"), code(2), markdown("## Step 1 · X\nSummary of it"),
             code(4), markdown("## Summary\n- it works"), code(9), markdown("## Going deeper")]
    assert notebook_run.core_seconds(nbformat.v4.new_notebook(cells=cells)) == pytest.approx(2.5 + 4.5)
    with pytest.raises(ValueError, match="no '## Summary' heading"):
        notebook_run.core_seconds(nbformat.v4.new_notebook(cells=[code(1), markdown("## Step 1 · X")]))


def test_shown_in_core_counts_the_cores_printed_prose_and_tables_only():
    prose = "one two three four five six seven eight\n"  # a line of eight words is prose
    cells = [markdown("# 04 · Title"),
             nbformat.v4.new_code_cell("print()", outputs=[nbformat.v4.new_output("stream", text=prose * 2)]),
             nbformat.v4.new_code_cell("print()", outputs=[nbformat.v4.new_output("stream", text="a b c\n")]),
             markdown("## Summary"),
             nbformat.v4.new_code_cell("print()", outputs=[nbformat.v4.new_output("stream", text=prose)])]
    assert anatomy.shown_in_core(nbformat.v4.new_notebook(cells=cells)) == (16, 0)


def test_the_environment_is_given_for_the_block_and_taken_back(monkeypatch):
    monkeypatch.setenv("TUTORIAL_RUN_A", "kept")
    monkeypatch.delenv("TUTORIAL_RUN_B", raising=False)
    with notebook_run.environment({"TUTORIAL_RUN_A": None, "TUTORIAL_RUN_B": "given"}):
        assert "TUTORIAL_RUN_A" not in os.environ and os.environ["TUTORIAL_RUN_B"] == "given"
    assert os.environ["TUTORIAL_RUN_A"] == "kept" and "TUTORIAL_RUN_B" not in os.environ


def made_up_notebook(folder, *sources):
    cells = [markdown("# 99 · T"), *(nbformat.v4.new_code_cell(s) for s in sources), markdown("## Summary")]
    path = folder / "99_made_up.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}}),
                   str(path))
    return path


def test_a_run_is_alone_in_an_empty_folder_in_the_size_asked_and_stops_at_the_first_error(tmp_path):
    path = made_up_notebook(tmp_path, "import os\nprint(sorted(os.listdir('.')), os.environ['TUTORIAL_FAST'])",
                            "raise ValueError('on purpose')", "print('never')")
    (tmp_path / "beside.txt").write_text("a file beside the notebook in the repository")
    run = notebook_run.run_alone(path, fast=False, timeout=120, keep=tmp_path / "kept")
    shown = [cell.get("outputs", []) for cell in run.code_cells()]
    assert shown[0][0]["text"] == "['99_made_up.ipynb'] 0\n", "alone in its folder, at full size"
    assert run.error == "ValueError: on purpose" and run.core_s is None
    assert shown[2] == [] and run.code_cells()[2].get("execution_count") is None, "Run All stops there"
    kept = nbformat.read(str(tmp_path / "kept" / "99_made_up.ipynb"), as_version=4)
    assert kept.cells[1].outputs[0]["text"].endswith(" 0\n")


def test_the_temporary_folder_is_deleted_and_a_given_folder_kept(tmp_path, monkeypatch):
    made = []
    real = notebook_run.tempfile.mkdtemp
    monkeypatch.setattr(notebook_run.tempfile, "mkdtemp", lambda **kw: made.append(real(**kw)) or made[-1])
    path = made_up_notebook(tmp_path, "print('ok')")
    run = notebook_run.run_alone(path, timeout=120)
    assert run.error is None and run.core_s >= 0 and made and not os.path.exists(made[0])
    folder = tmp_path / "prepared"
    folder.mkdir()
    assert notebook_run.run_alone(path, timeout=120, folder=folder).error is None
    assert (folder / "99_made_up.ipynb").is_file(), "a folder the caller prepared is kept"


def test_the_report_line_says_failed_with_the_error():
    run = notebook_run.Run({"cells": []}, 12.3, None, "ValueError: on purpose")
    assert report_line("99.ipynb", True, run, "0.1", "0.2") == ("99.ipynb fast: FAILED after 12 s: "
                                                                "ValueError: on purpose")
