"""notebooks/manifest.toml, the one place of per-notebook facts (tools/manifest.py): every notebook has
its entry and every entry its notebook, each entry is complete and readable, README's table says what
the manifest says, and a broken entry is named."""
import re

import pytest

import manifest
from support.notebook_code import NOTEBOOK_DIR, REPO

GOOD = """
[notebooks."11"]
file = "11_a_new_lesson.ipynb"
finds_out = "Something new"
hardware = "Colab T4"
t4_run_minutes_at_least = 1
t4_floor_reason = "an estimate"
test_seconds = {notebook = 10, tests = 5}
taught_calls = ['torch\\.compile\\(', 'a', 'b']
"""


def test_every_notebook_has_an_entry_and_every_entry_a_notebook():
    assert manifest.folder_problems(manifest.notebooks(), NOTEBOOK_DIR) == []


def test_a_notebook_without_an_entry_and_an_entry_without_a_notebook_are_named(tmp_path):
    (tmp_path / "11_a_new_lesson.ipynb").write_text("{}")
    (tmp_path / "12_another.ipynb").write_text("{}")
    entries = manifest.parse(GOOD.replace('"11"', '"13"').replace("11_a_new", "13_a_new"))
    assert manifest.folder_problems(entries, tmp_path) == [
        "11_a_new_lesson.ipynb has no entry in notebooks/manifest.toml",
        "12_another.ipynb has no entry in notebooks/manifest.toml",
        "notebooks/manifest.toml names 13_a_new_lesson.ipynb, which is not in notebooks/"]


def test_an_entry_reads_into_its_fields_with_the_shared_cells_every_notebook_carries():
    entry = manifest.parse(GOOD)["11"]
    assert entry.carries == ("install.py", "shared_setup.py", "run_record.py")
    assert entry.taught_calls == ("torch\\.compile\\(", "a", "b")
    assert entry.allowed_stderr == () and entry.test_seconds == {"notebook": 10, "tests": 5}


@pytest.mark.parametrize("change, problem", [
    (("finds_out = \"Something new\"\n", ""), "lacks finds_out"),
    (("Colab T4", "Colab A100"), "hardware = 'Colab A100': one of ('Colab T4', 'Kaggle T4 x2')"),
    (("11_a_new_lesson", "11-a-new-lesson"), 'expected "11_words.ipynb"'),
    (("'torch\\.compile\\('", "'torch.compile('"), "is no regular expression"),
    (("hardware =", "objectivez = []\nhardware ="), "has fields no tool reads: objectivez"),
    (("{notebook = 10, tests = 5}", "{notebook = 10}"), "test_seconds = {notebook = N, tests = M}"),
    (('[notebooks."11"]', '[notebooks."1"]'), "a notebook's key is its two-digit number"),
])
def test_a_broken_entry_is_named_with_what_is_wrong(change, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        manifest.parse(GOOD.replace(*change))


def test_readme_says_what_each_notebook_finds_out_as_the_manifest_does():
    readme = (REPO / "README.md").read_text()
    for number, entry in manifest.notebooks().items():
        row = re.search(rf"^\| \[{re.escape(entry.file)}\]\(notebooks/{re.escape(entry.file)}\) \| (.*?) \|",
                        readme, re.M)
        assert row, f"README's table has no row for {entry.file}"
        assert row.group(1) == entry.finds_out, f"README's row for {number} says what the manifest does not"


def test_shared_cells_go_where_the_manifest_says():
    import sync_cells

    targets = {shared.file: shared.targets for shared in sync_cells.SHARED}
    assert targets["datasheet.py"] == tuple(number for number, entry in manifest.notebooks().items()
                                            if "datasheet.py" in entry.shared_cells)
    assert targets["shared_setup.py"] is None, "every notebook"
    entries = manifest.parse(GOOD.replace("hardware =", 'shared_cells = ["nowhere.py"]\nhardware ='))
    with pytest.raises(ValueError, match="shared cells that tools/sync_cells.py's TITLES does not know: nowhere.py"):
        sync_cells.shared_from_manifest(entries)


def test_a_notebooks_version_changes_with_its_sources_only():
    import nbformat

    from anatomy import notebook_version, version_line

    def notebook(source, line='NOTEBOOK_VERSION = "x"'):
        return nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_markdown_cell("# 99 · T"),
            nbformat.v4.new_code_cell(f"import torch\n{line}\nprint(1)", id="setup"),
            nbformat.v4.new_code_cell(source, id="c")])

    base = notebook("x = 1")
    assert len(notebook_version(base)) == 16
    assert notebook_version(notebook("x = 2")) != notebook_version(base), "a source changed"
    assert notebook_version(notebook("x = 1", 'NOTEBOOK_VERSION = "99_t.ipynb@abc"')) == \
        notebook_version(base), "the version line is left out"
    run = notebook("x = 1")
    run.cells[2].outputs = [nbformat.v4.new_output("stream", text="1\n")]
    run.cells[2].id, run.cells[2].execution_count = "other-id", 7
    run.metadata["colab"] = {"gpuType": "T4"}
    assert notebook_version(run) == notebook_version(base), "outputs, ids and metadata are left out"
    assert version_line("99_t.ipynb", base) == f'NOTEBOOK_VERSION = "99_t.ipynb@{notebook_version(base)}"'


def test_every_entry_plans_its_slot():
    for number, entry in manifest.notebooks().items():
        assert 2 <= len(entry.objectives) <= 4, f"{number}: two to four objectives"
        assert entry.builds_on == "" or entry.builds_on < number, f"{number} builds on an earlier notebook"
        assert entry.teaching_minutes % 5 == 0 and 0 < entry.teaching_minutes <= 45, number
        assert entry.exercise_minutes > 0, number
        assert entry.t4_run_minutes >= entry.t4_run_minutes_at_least, number
