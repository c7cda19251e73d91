"""A notebook run in a real JupyterLab in a real browser, through the menu, as a learner runs it.

Every notebook's page is checked in the nbval run (tests/notebook_items.py): nbval executes each
notebook once, alone in an empty folder, and the page of that executed notebook is opened in JupyterLab
and checked there (tests/jupyterlab_page.py says what is checked). This file adds what only a run
through JupyterLab's own menu shows, for the learner's first notebook: Run > Run All Cells works, the
kernel never dies, and the page after the run passes the same checks. It also tests the page checks'
rules on made-up cells, without a browser.

The notebooks run in fast mode (TUTORIAL_FAST=1) whatever the command line says. Without a
Chromium-family browser the test is skipped with a line saying how to get one; when the environment
variable CI is true (shared_checks.skip_or_fail), it fails instead.
"""
import shutil
import sys

import pytest

from support.jupyterlab_page import (allowed_stderr, LINKS, CELLS, NOTEBOOK_SECONDS, WATCH_KERNEL, Browser,
                             LabServer, Page, expected_figures, expected_tables, find_browser,
                             folded_by_title, page_problems, require_browser,
                             run_all_cells_through_the_menu, server_environment, stderr_messages,
                             unexplained_stderr, wait_until_done)
from support.notebook_code import notebook_path, read

# The learner's first notebook, run through the menu: the one run of a notebook through JupyterLab's
# own Run All (every notebook's page is checked on its nbval run).
RUN_THROUGH_THE_MENU = "01"


@pytest.fixture(scope="module")
def browser_path():
    return require_browser()


@pytest.fixture(scope="module")
def lab(tmp_path_factory, browser_path):
    server = LabServer(tmp_path_factory.mktemp("jupyterlab"))
    yield server
    server.stop()
    assert server.process.poll() is not None


@pytest.fixture(scope="module")
def browser(tmp_path_factory, browser_path):
    """A Chromium with a fresh profile, driven by playwright; closed and checked gone afterwards."""
    chromium = Browser(browser_path, tmp_path_factory.mktemp("chromium-profile"))
    yield chromium
    chromium.close()


def test_the_first_notebook_runs_all_cells_through_jupyterlabs_menu(lab, browser, tmp_path_factory):
    notebook = notebook_path(RUN_THROUGH_THE_MENU)
    folder = lab.root / notebook.stem  # uploaded alone: an empty folder with this one file
    folder.mkdir()
    shutil.copy(notebook, folder / notebook.name)
    path = f"{notebook.stem}/{notebook.name}"
    screenshots = tmp_path_factory.getbasetemp() / "browser-screenshots"
    screenshots.mkdir(exist_ok=True)
    page = Page(browser, lab, path)
    problems = ["the page could not be read"]
    try:
        page.evaluate(WATCH_KERNEL)
        run_all_cells_through_the_menu(page.page)
        progress = wait_until_done(page.page, path, NOTEBOOK_SECONDS)
        cells, links = page.evaluate(CELLS), page.evaluate(LINKS)
        statuses = page.page.evaluate("() => window.kernelStatuses")
        died = {"dead", "restarting", "autorestarting"} & set(statuses)
        problems = ([f"the kernel died: {statuses}"] if died else []) + page_problems(
            RUN_THROUGH_THE_MENU, cells, read(notebook).cells, links, page.console_errors,
            progress["dialogs"] + page.dialogs)
    finally:  # a screenshot only of a page with problems, as for every notebook's page
        page.close(screenshots / f"{notebook.stem}.run-all.jpg" if problems else None)
    assert problems == []


# --- The rules above, checked on made-up cells (these run without a browser) -------------------------

def test_figures_expected_from_plt_show_calls_that_always_run():
    assert expected_figures("figure, axis = plt.subplots()\naxis.plot([1, 2])\nplt.show()") == 1
    assert expected_figures("with plt.style.context('default'):\n    plt.plot([1])\n    plt.show()\nplt.show()") == 2
    assert expected_figures("if GPU:\n    plt.show()\nfor x in xs:\n    plt.show()") == 0
    assert expected_figures("def draw():\n    plt.show()\nprint('no figure')") == 0


def test_tables_expected_from_dataframes_shown_on_paths_that_always_run():
    assert expected_tables("pd.DataFrame({'a': [1]})") == 1
    assert expected_tables("table = pd.DataFrame(rows).set_index('x')\ntable.index.name = 'x'\ntable.round(2)") == 1
    assert expected_tables("display(pd.DataFrame(rows))\nprint('and')\ndisplay(frame)\npd.Series(r).to_frame()") == 2
    assert expected_tables("table = pd.DataFrame(rows)\ntable['seconds']") == 0, "a column is a Series, not a table"
    assert expected_tables("table = pd.DataFrame(rows)\ntable = 'no GPU here'\ntable") == 0
    assert expected_tables("if GPU:\n    table = pd.DataFrame(rows)\nelse:\n    table = 'text'\ntable") == 0
    assert expected_tables("table = pd.DataFrame(rows)\nprint(table)") == 0


def test_stderr_is_split_into_messages_and_only_allowed_ones_pass():
    warning = ("/x/fastai/learner.py:456: UserWarning: load_learner` uses Python's insecure pickle module, "
               "which can run code.\nIf you only need the weights, use `Learner.load`.\n  warn(\"load_learner\")\n")
    other = "/x/torch/nn.py:12: FutureWarning: something else\n  warnings.warn(msg)\n"
    assert stderr_messages(warning + other) == [warning.rstrip("\n"), other.rstrip("\n")]
    cells = [{"outputs": [{"output_type": "stream", "name": "stderr", "text": warning + other}]},
             {"outputs": [{"output_type": "stream", "name": "stdout", "text": other}]}]
    assert unexplained_stderr(cells, allowed_stderr("03")) == [(0, other.rstrip("\n"))]
    assert unexplained_stderr(cells, []) == [(0, warning.rstrip("\n")), (0, other.rstrip("\n"))]


def test_server_environment_draws_figures_in_fast_mode(tmp_path):
    environment = server_environment({"MPLBACKEND": "Agg", "TUTORIAL_FAST": "0", "HOME": "/home/x"}, tmp_path)
    assert "MPLBACKEND" not in environment, "an inherited MPLBACKEND=Agg would make every figure vanish"
    assert environment["TUTORIAL_FAST"] == "1" and environment["HOME"] == "/home/x"
    assert environment["JUPYTER_CONFIG_DIR"].startswith(str(tmp_path))


def test_title_cells_are_the_ones_to_fold():
    assert folded_by_title("#@title Check the packages\nimport os")
    assert not folded_by_title("# Setup\nimport os")


def test_a_browser_chosen_by_tutorial_browser_must_exist(monkeypatch, tmp_path):
    monkeypatch.setenv("TUTORIAL_BROWSER", str(tmp_path / "no-such-browser"))
    assert find_browser() is None
    monkeypatch.setenv("TUTORIAL_BROWSER", sys.executable)
    assert find_browser() == sys.executable


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), (None, pytest.skip.Exception),
                                         ("false", pytest.skip.Exception)])
def test_a_missing_browser_skips_the_test_but_fails_it_in_ci(monkeypatch, tmp_path, ci, outcome):
    monkeypatch.setenv("TUTORIAL_BROWSER", str(tmp_path / "no-such-browser"))
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="TUTORIAL_BROWSER=.*no-such-browser is not an executable file"):
        require_browser()
