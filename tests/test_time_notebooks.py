"""The timing script behind README's run times: what counts as the core of a notebook."""
import pytest

from time_notebooks import cell_seconds, core_seconds


def code(seconds):
    start = "2026-11-22T10:00:00.000000Z"
    end = f"2026-11-22T10:00:{seconds:02d}.500000Z"
    return {"cell_type": "code", "source": "x = 1",
            "metadata": {"execution": {"iopub.execute_input": start, "shell.execute_reply": end}}}


def markdown(text):
    return {"cell_type": "markdown", "source": text, "metadata": {}}


def test_a_cell_lasts_from_its_input_to_its_reply_and_an_unrun_cell_lasts_nothing():
    assert cell_seconds(code(3)) == pytest.approx(3.5)
    assert cell_seconds({"cell_type": "code", "source": "", "metadata": {}}) == 0.0


def test_the_core_is_the_code_before_the_summary_heading():
    cells = [markdown("# 04 · Title\nno summary here"), code(2), markdown("## Step 1\nSummary of it"),
             code(4), markdown("## Summary\n- it works"), code(9), markdown("## Going deeper")]
    assert core_seconds(cells) == pytest.approx(2.5 + 4.5)


def test_a_notebook_without_a_summary_has_no_core():
    with pytest.raises(ValueError, match="no Summary"):
        core_seconds([code(1), markdown("## Step 1")])


def test_printed_words_counts_the_cores_printed_prose_only():
    import nbformat

    from time_notebooks import printed_words

    prose = "one two three four five six seven eight\n"  # a line of eight words is prose
    cells = [nbformat.v4.new_markdown_cell("# 04 · Title"),
             nbformat.v4.new_code_cell("print()", outputs=[nbformat.v4.new_output("stream", text=prose * 2)]),
             nbformat.v4.new_code_cell("print()", outputs=[nbformat.v4.new_output("stream", text="a b c\n")]),
             nbformat.v4.new_markdown_cell("## Summary"),
             nbformat.v4.new_code_cell("print()", outputs=[nbformat.v4.new_output("stream", text=prose)])]
    assert printed_words(nbformat.v4.new_notebook(cells=cells)) == 16
