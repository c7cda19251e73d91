"""README.md's promises that a script can check: the two commands, CI running the test command, every notebook listed."""
import os
import re
import types

import pytest

import anatomy
import conftest
from support.notebook_code import NOTEBOOKS, REPO, read, workshop_t4

README = (REPO / "README.md").read_text()
README_PROSE_WORDS = 1100  # tables and commands not counted: a learner reads it before the first notebook


def start_section():
    """The text of README's 'Two commands' section, up to its first subsection."""
    match = re.search(r"^## Two commands\n(.*?)(?=^##)", README, flags=re.M | re.S)
    assert match, "README needs a '## Two commands' section"
    return match.group(1)


def commands():
    return re.findall(r"```bash\n(.*?)\n```", start_section(), flags=re.S)


def test_exactly_two_commands_one_for_jupyterlab_one_for_the_tests():
    lab, test = commands()
    assert "\n" not in lab and "\n" not in test, "each must be one command line"
    for command in (lab, test):
        assert "python3 -m venv .venv" in command and "pip install -r requirements-lock.txt" in command
    assert lab.endswith("jupyter lab notebooks/")
    assert test.endswith("-m pytest")


def test_ci_runs_the_readme_test_command_and_the_ranges_only_when_asked():
    test_command = commands()[1]
    ci = (REPO / ".ci" / "run").read_text()
    assert test_command in [line.strip() for line in ci.splitlines()]
    ranges = test_command.replace("-r requirements-lock.txt", "--upgrade -r requirements.txt")
    assert ranges in [line.strip() for line in ci.splitlines()]
    assert re.search(r'if \[ "\$\{CI_RANGES:-0\}" = 1 \]; then\n(.*\n)*\s*' + re.escape(ranges) + r"\nelse\n\s*"
                     + re.escape(test_command) + r"\nfi", ci)


def test_every_notebook_is_in_the_readme_table():
    for path in NOTEBOOKS:
        assert re.search(rf"^\|.*\b{re.escape(path.name)}\b", README, flags=re.M), f"{path.name} missing from README"


def test_the_workshop_column_is_each_title_tables_estimate():
    """README's table and each notebook's title table give the same Colab T4 workshop minutes."""
    for path in NOTEBOOKS:
        row = re.search(rf"^\|.*\b{re.escape(path.name)}\b.*$", README, flags=re.M).group()
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        stated = workshop_t4(read(path))
        assert stated and cells[2] == f"{stated[0]} min", f"{path.name}: README says {cells[2]!r}, its title table {stated}"


def test_readme_states_the_class_rule_the_tests_apply():
    """README's formula, its weights read back, gives the same minutes as tools/anatomy.py."""
    rule = re.search(r"([\d.]+) × \((\d+) \+ words read / (\d+) \+ ([\d.]+) × visible code cells "
                     r"\+ ([\d.]+) × visible code lines \+ ([\d.]+) × folded code cells outside Setup "
                     r"\+ ([\d.]+) × tables and figures shown \+ the core's run time on a T4\) minutes",
                     " ".join(README.split()))
    assert rule, "README states the class rule"
    factor, opening, per_minute, cell, line, folded, shown = map(float, rule.groups())
    for counts in [(0, 0, 0, 0, 0, 0, 0), (1234, 56, 7, 89, 3, 2.5, 4)]:
        words, printed, cells, lines, tables, t4, folded_cells = counts
        readme = factor * (opening + (words + printed) / per_minute + cell * cells + line * lines
                           + folded * folded_cells + shown * tables + t4)
        assert readme == pytest.approx(anatomy.class_rule_minutes(*counts))
    limit = re.search(r"A core takes at most (\d+) minutes", " ".join(README.split()))
    assert limit and int(limit.group(1)) == anatomy.CORE_LIMIT_MINUTES


def test_fast_switch_and_full_size_run_are_documented_for_contributors():
    contributing = (REPO / "CONTRIBUTING.md").read_text()
    assert "TUTORIAL_FAST=1" in contributing
    assert "--full-size" in contributing


def prose_words(markdown):
    """The words of markdown's prose: tables and fenced code (commands) left out."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"^\|.*\|\s*$", " ", text, flags=re.M)
    return len(text.split())


def test_readme_is_for_learners_and_instructors_and_short():
    words = prose_words(README)
    assert words <= README_PROSE_WORDS, (f"README has {words} words of prose, over {README_PROSE_WORDS} "
                                         f"(CONTRIBUTING.md, 'Limits'): what maintainers need goes to "
                                         f"CONTRIBUTING.md, what instructors need to docs/")
    start = README[:README.index("## Two commands")]
    for must in ("Start with 01", "T4 GPU", "GPU T4 x2", "JupyterLab"):
        assert must in start, f"README's opening part should say {must!r}"


@pytest.mark.parametrize("caller, full_size, expected", [("0", False, "1"), (None, False, "1"), ("1", True, "0")])
def test_the_test_command_sets_the_notebook_size_itself(monkeypatch, caller, full_size, expected):
    """README: "The test command sets it itself, whatever your shell says"; --full-size gives full size."""
    if caller is None:
        monkeypatch.delenv("TUTORIAL_FAST", raising=False)
    else:
        monkeypatch.setenv("TUTORIAL_FAST", caller)
    config = types.SimpleNamespace(getoption=lambda name: full_size if name == "--full-size" else None)
    conftest.pytest_configure(config)
    assert os.environ["TUTORIAL_FAST"] == expected


def test_this_run_is_in_the_size_its_command_line_asked_for(request):
    expected = "0" if request.config.getoption("--full-size") else "1"
    assert os.environ["TUTORIAL_FAST"] == expected


@pytest.mark.parametrize("name", ["README.md", "CONTRIBUTING.md", "docs/measurements.md",
                                  "tools/shared_cells/README.md"])
def test_every_link_of_the_maintainers_and_learners_pages_stays_in_the_repository(name):
    """The project stands alone: a relative link names a file of this repository, never one beside it."""
    page = REPO / name
    targets = re.findall(r"\]\(([^)\s#]+)[^)]*\)", page.read_text())
    local = [target for target in targets if not target.startswith(("https://", "http://", "mailto:"))]
    assert all((page.parent / target).resolve().is_relative_to(REPO) for target in local), local
    assert all((page.parent / target).exists() for target in local), local
