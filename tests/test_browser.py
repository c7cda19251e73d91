"""Every notebook in a real JupyterLab in a real browser, as a learner runs it.

nbval proves that every cell runs in a kernel, not what a learner sees. This test copies each
notebook alone into an empty folder, starts `jupyter lab` from this environment (127.0.0.1, a free
port, a random token), opens the notebook in headless Chromium, clicks Run > Run All Cells, waits
until the kernel is idle, and checks the page: every code cell ran; no output is an error (read
from the notebook model, because the page draws a traceback and a warning on stderr alike); no
dialog (a dead kernel opens one) and no error in the browser console; the figures are on the page
as images and the tables as HTML tables, as many as the notebook's own source promises; warnings
shown in red are ones the prose explains (ALLOWED_STDERR); every verdict tests/verdicts.py expects on
this machine is on the page; cells folded with `#@title` are shown folded; every glossary link has its entry on the page. It saves a screenshot of each notebook under the pytest temporary folder
(`browser-screenshots/`), and stops the server, its kernels and the browser by process id.

The notebooks run in fast mode (TUTORIAL_FAST=1) whatever the command line says. Without a
Chromium-family browser the test is skipped with a line saying how to get one; when the environment
variable CI is true (shared_checks.skip_or_fail), it fails instead.
"""
import ast
import json
import os
import re
import shutil
import socket
import secrets
import subprocess
import sys
import time
import urllib.request

import psutil  # comes with ipykernel, which JupyterLab needs
import pytest

from notebook_code import NOTEBOOKS, read
from shared_checks import skip_or_fail
from verdicts import describe_missing, missing_verdicts

NOTEBOOK_IDS = [path.name for path in NOTEBOOKS]

# Chromium refuses to start as root without --no-sandbox; the other flags keep it from calling
# home (on a closed network those connections fail, and some of the failures reach the console).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
BROWSER_NAMES = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"]
BROWSER_PATHS = ["/Applications/Chromium.app/Contents/MacOS/Chromium",
                 "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
                 r"C:\Program Files\Google\Chrome\Application\chrome.exe"]
HOW_TO_GET_A_BROWSER = ("install Chromium (Debian/Ubuntu: `sudo apt-get install chromium`; elsewhere: "
                        "`.venv/bin/python -m playwright install chromium`) or set TUTORIAL_BROWSER to a "
                        "Chrome or Chromium executable")

SERVER_START_SECONDS = 120
NOTEBOOK_SECONDS = 600  # one notebook, in fast mode, from page load to the last cell

# Red (stderr) messages a learner may see, each explained by the notebook's prose; anything else fails.
# A message is a Python warning (its `file:line: Category: text` line and what follows it) or any other
# run of stderr lines. Notebook number: [(pattern searched in the message's first line, why it is allowed)].
ALLOWED_STDERR = {
    "03": [(r"UserWarning: load_learner` uses Python's insecure pickle module",
            "Step 6's prose: the saved model is a pickle, so only load files you trust "
            "(fastai prints a warning saying the same)")],
}
WARNING_LINE = re.compile(r"^\S.*:\d+: \w+: ")  # what warnings.showwarning prints first


# --- What the notebook's own source promises: figures and tables -----------------------------------

def _unconditional_statements(body):
    """The statements that always run: top level and inside `with` blocks, not in if/for/try/def."""
    for node in body:
        if isinstance(node, (ast.With, ast.AsyncWith)):
            yield from _unconditional_statements(node.body)
        else:
            yield node


def _is_call(node, *names):
    return isinstance(node, ast.Call) and ast.unparse(node.func) in names


def expected_figures(source):
    """How many figures a cell must show: its `plt.show()` calls that always run."""
    return sum(1 for node in _unconditional_statements(ast.parse(source).body)
               if isinstance(node, ast.Expr) and _is_call(node.value, "plt.show", "matplotlib.pyplot.show"))


# Methods after which a pandas DataFrame is still a DataFrame (rendered as an HTML table).
FRAME_METHODS = {"round", "set_index", "reset_index", "sort_values", "sort_index", "head", "tail", "rename",
                 "transpose", "fillna", "dropna", "astype", "to_frame", "copy", "query", "style"}


def _is_frame(node, frames):
    """True when `node` is surely a DataFrame: built by pd.DataFrame(...) or .to_frame(), then only reshaped."""
    if isinstance(node, ast.Call):
        function = ast.unparse(node.func)
        if re.fullmatch(r"(pd|pandas)\.(DataFrame|DataFrame\.from_\w+|read_csv|concat)", function):
            return True
        if isinstance(node.func, ast.Attribute) and node.func.attr in FRAME_METHODS:
            return node.func.attr == "to_frame" or _is_frame(node.func.value, frames)
        return False
    if isinstance(node, ast.Attribute):
        return node.attr == "T" and _is_frame(node.value, frames)
    if isinstance(node, ast.Subscript):  # frame[mask] and frame[[columns]] are frames; frame["column"] is not
        is_column = isinstance(node.slice, ast.Constant)
        return not is_column and _is_frame(node.value, frames)
    if isinstance(node, ast.Name):
        return node.id in frames
    return False


def expected_tables(source):
    """How many HTML tables a cell must show: DataFrames it displays or ends with, on paths that always run."""
    body = list(_unconditional_statements(ast.parse(source).body))
    frames, count = set(), 0
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            frames = frames | {name} if _is_frame(node.value, frames) else frames - {name}
        elif isinstance(node, ast.Expr) and _is_call(node.value, "display") and node.value.args:
            count += _is_frame(node.value.args[0], frames)
    if body and isinstance(body[-1], ast.Expr) and _is_frame(body[-1].value, frames):
        count += 1
    return count


def folded_by_title(source):
    """True for a plumbing cell that the house style folds: its first line is `#@title ...`."""
    return source.lstrip().startswith("#@title")


# --- Finding a browser, starting and stopping JupyterLab ---------------------------------------------

def find_browser():
    """A Chromium-family executable: TUTORIAL_BROWSER, one on PATH, a usual install place, or playwright's own."""
    chosen = os.environ.get("TUTORIAL_BROWSER")
    if chosen is not None:
        return chosen if os.path.isfile(chosen) and os.access(chosen, os.X_OK) else None
    for name in BROWSER_NAMES:
        if shutil.which(name):
            return shutil.which(name)
    for path in BROWSER_PATHS:
        if os.path.isfile(path):
            return path
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            path = playwright.chromium.executable_path
        return path if os.path.isfile(path) else None
    except Exception:  # no playwright, or no browser of its own downloaded
        return None


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_environment(base, folder):
    """The learner's environment, with the test run's own settings taken out and Jupyter's state kept apart."""
    environment = dict(base)
    # conftest.py sets MPLBACKEND=Agg for the plain tests; a kernel that inherits it draws no figure at all.
    environment.pop("MPLBACKEND", None)
    environment["TUTORIAL_FAST"] = "1"
    for variable, name in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                           ("JUPYTERLAB_SETTINGS_DIR", "lab-settings"),
                           ("JUPYTERLAB_WORKSPACES_DIR", "lab-workspaces")]:
        environment[variable] = str(folder / name)
    return environment


def stop_processes(processes, seconds=20):
    """Terminate these processes by id, wait, then kill the ones still there."""
    for process in processes:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=seconds)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=seconds)


class LabServer:
    """A `jupyter lab` started from this Python environment, serving an empty folder."""

    def __init__(self, folder):
        self.root = folder / "notebooks"
        self.root.mkdir()
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.log_path = folder / "jupyterlab.log"
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                   f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                   f"--ServerApp.root_dir={self.root}", "--ServerApp.allow_root=True",
                   "--LabApp.expose_app_in_browser=True"]  # window.jupyterapp: the notebook model
        environment = server_environment(os.environ, folder)
        environment["JUPYTER_TOKEN"] = self.token  # not on the command line, where `ps` shows it
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        self._wait_until_up()

    def api(self, path, method="GET"):
        request = urllib.request.Request(f"{self.url}{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def _wait_until_up(self):
        deadline = time.monotonic() + SERVER_START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.process.returncode}:\n{self.log()}")
            try:
                self.api("/api/status")
                return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"jupyter lab did not answer within {SERVER_START_SECONDS} s:\n{self.log()}")

    def log(self):
        return self.log_path.read_text(errors="replace")[-3000:]

    def shut_down_kernels(self):
        """Shut down every kernel through the server, then make sure their processes are gone."""
        kernel_processes = self.kernel_processes()
        for kernel in self.api("/api/kernels"):
            self.api(f"/api/kernels/{kernel['id']}", method="DELETE")
        stop_processes(kernel_processes)

    def kernel_processes(self):
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self):
        """Stop the server (it shuts its kernels down), then kill whatever it started that is left, by id."""
        children = self.kernel_processes()
        if self.process.poll() is None:
            self.process.terminate()  # SIGTERM: the server shuts its kernels down and exits
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        stop_processes([child for child in children if child.is_running()])


def require_browser():
    """The browser's path; without one, skip the test saying how to get one (fail it in CI)."""
    path = find_browser()
    if path is None and os.environ.get("TUTORIAL_BROWSER") is not None:
        skip_or_fail(f"TUTORIAL_BROWSER={os.environ['TUTORIAL_BROWSER']} is not an executable file: "
                     f"{HOW_TO_GET_A_BROWSER}")
    if path is None:
        skip_or_fail(f"no Chromium-family browser found for the browser test: {HOW_TO_GET_A_BROWSER}")
    return path


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
    try:
        import playwright.sync_api as playwright_api
    except ImportError:
        skip_or_fail("the browser test needs playwright: .venv/bin/python -m pip install -r requirements.txt")
    playwright = playwright_api.sync_playwright().start()
    before = {process.pid for process in psutil.Process().children(recursive=True)}
    context = playwright.chromium.launch_persistent_context(
        str(tmp_path_factory.mktemp("chromium-profile")), executable_path=browser_path, headless=True,
        args=CHROMIUM_FLAGS, viewport={"width": 1400, "height": 900})
    started = [process for process in psutil.Process().children(recursive=True) if process.pid not in before]
    yield context
    context.close()
    playwright.stop()
    stop_processes([process for process in started if process.is_running()])


@pytest.fixture(scope="module")
def screenshot_folder(tmp_path_factory):
    folder = tmp_path_factory.getbasetemp() / "browser-screenshots"
    folder.mkdir(exist_ok=True)
    return folder


# --- Reading the page --------------------------------------------------------------------------------

# The notebook panel for `path`, from the app that --LabApp.expose_app_in_browser puts on window.
FIND_PANEL = """path => {
    const app = window.jupyterapp;
    if (!app) return null;
    return Array.from(app.shell.widgets('main')).find(w => w.context && w.context.path === path) || null;
}"""

WATCH_KERNEL = f"""path => {{
    const panel = ({FIND_PANEL})(path);
    window.kernelStatuses = [];
    panel.sessionContext.statusChanged.connect((_, status) => window.kernelStatuses.push(status));
}}"""

# Where the run is: kernel status, execution counts, error outputs, open dialogs.
PROGRESS = f"""path => {{
    const panel = ({FIND_PANEL})(path);
    const kernel = panel && panel.sessionContext.session && panel.sessionContext.session.kernel;
    const cells = panel ? panel.content.model.toJSON().cells.filter(c => c.cell_type === 'code') : [];
    return {{
        ready: Boolean(panel && panel.context.isReady && kernel),
        kernel: kernel ? kernel.status : null,
        counted: cells.filter(c => c.execution_count !== null).length,
        code_cells: cells.length,
        errors: cells.filter(c => c.outputs.some(o => o.output_type === 'error')).length,
        running: panel ? panel.content.widgets.filter(w => w.model.type === 'code' && (
            w.model.executionState === 'running' || (w.promptNode && w.promptNode.textContent.includes('*')))).length : 0,
        dialogs: Array.from(document.querySelectorAll('.jp-Dialog')).map(d => d.innerText.slice(0, 300)),
    }};
}}"""

# What the page shows for each cell, in notebook order, next to the cell's model.
CELLS = f"""path => {{
    const panel = ({FIND_PANEL})(path);
    const visible = node => Boolean(node && node.getClientRects().length && getComputedStyle(node).visibility !== 'hidden');
    return panel.content.widgets.map(widget => {{
        const node = widget.node;
        const outputs = Array.from(node.querySelectorAll('.jp-OutputArea-output'));
        return {{
            model: widget.model.toJSON(),
            attached: node.isConnected,
            input_hidden: widget.inputHidden,
            editor_visible: visible(node.querySelector('.jp-InputArea')),
            images: node.querySelectorAll('.jp-OutputArea-output img').length,
            tables: node.querySelectorAll('.jp-OutputArea-output table').length,
            mime_types: outputs.map(o => o.getAttribute('data-mime-type')),
        }};
    }});
}}"""


# The in-page links of the rendered markdown (a notebook uploaded alone has nothing beside it), and those
# whose target the page lacks. JupyterLab's sanitizer turns each glossary entry's <a id="x"> into
# data-jupyter-id="x", which its handler of in-page links scrolls to (Colab and nbviewer keep the id).
LINKS = f"""path => {{
    const panel = ({FIND_PANEL})(path);
    const hrefs = Array.from(panel.content.node.querySelectorAll('.jp-RenderedMarkdown a[href^="#"]'))
        .map(a => a.getAttribute('href'));
    const missing = hrefs.filter(h => h.startsWith('#glossary-') && !panel.content.node.querySelector(
        '[data-jupyter-id="' + h.slice(1) + '"]'));
    return {{glossary: hrefs.filter(h => h.startsWith('#glossary-')).length, missing: missing}};
}}"""


def run_all_cells_through_the_menu(page):
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()


def wait_until_done(page, path, seconds):
    """Poll the page until the kernel is idle and no cell is queued, with every cell counted or an error shown."""
    deadline = time.monotonic() + seconds
    settled = 0
    while time.monotonic() < deadline:
        progress = page.evaluate(PROGRESS, path)
        finished = (progress["kernel"] == "idle" and progress["running"] == 0
                    and (progress["counted"] == progress["code_cells"] or progress["errors"]))
        if progress["dialogs"]:
            return progress
        settled = settled + 1 if finished else 0
        if settled >= 2:  # idle twice in a row, half a second apart
            return progress
        time.sleep(0.5)
    raise AssertionError(f"{path}: not done after {seconds} s: {page.evaluate(PROGRESS, path)}")


def full_screenshot(page, path, target):
    """A screenshot of the whole notebook: the window made as tall as the notebook's scroll height."""
    scroll_to_top = f"""path => {{
        const panel = ({FIND_PANEL})(path);
        const scroller = panel.content.node.querySelector('.jp-WindowedPanel-outer') || panel.content.node;
        scroller.scrollTop = 0;
        return scroller.scrollHeight;
    }}"""
    height = page.evaluate(scroll_to_top, path)
    page.set_viewport_size({"width": 1400, "height": max(900, min(int(height) + 200, 30000))})
    page.evaluate(scroll_to_top, path)
    page.wait_for_timeout(300)  # a moment to draw the taller window
    # JPEG: PNG took a second or more to encode a notebook tens of thousands of pixels tall, each time
    page.screenshot(path=str(target), type="jpeg", quality=70)


def stderr_messages(text):
    """Split stderr text into messages: each Python warning with its following lines, and other runs of lines."""
    messages = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if not messages or WARNING_LINE.match(line):
            messages.append(line)
        else:
            messages[-1] += "\n" + line
    return messages


def unexplained_stderr(model_cells, allowed):
    """(cell index, message) for every stderr message that no allowed pattern explains."""
    found = []
    for index, cell in enumerate(model_cells):
        for output in cell.get("outputs", []):
            if output["output_type"] == "stream" and output["name"] == "stderr":
                text = output["text"] if isinstance(output["text"], str) else "".join(output["text"])
                found += [(index, message) for message in stderr_messages(text)
                          if not any(re.search(pattern, message.splitlines()[0]) for pattern, _ in allowed)]
    return found


def output_summary(cell):
    kinds = []
    for output in cell.get("outputs", []):
        kind = output["output_type"]
        if kind == "stream":
            kinds.append(output["name"])
        elif kind == "error":
            kinds.append(f"error {output['ename']}: {output['evalue'][:200]}")
        else:
            kinds.append(",".join(output.get("data", {})))
    return kinds


# --- The test ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_notebook_runs_in_jupyterlab_in_a_browser(notebook, lab, browser, screenshot_folder):
    folder = lab.root / notebook.stem  # uploaded alone: an empty folder with this one file
    folder.mkdir()
    shutil.copy(notebook, folder / notebook.name)
    path = f"{notebook.stem}/{notebook.name}"
    console_errors, browser_dialogs = [], []
    page = browser.new_page()
    page.on("console", lambda message: console_errors.append(f"{message.text} ({message.location})")
            if message.type == "error" else None)
    page.on("pageerror", lambda error: console_errors.append(f"uncaught: {error}"))
    page.on("dialog", lambda dialog: (browser_dialogs.append(dialog.message), dialog.dismiss()))
    try:
        # A workspace of its own, reset, so that the page holds this notebook only.
        page.goto(f"{lab.url}/lab/workspaces/{notebook.stem}/tree/{path}?reset&token={lab.token}")
        page.wait_for_function(f"path => {{ const p = ({FIND_PANEL})(path); "
                               f"return p && p.context.isReady && p.sessionContext.session "
                               f"&& p.sessionContext.session.kernel && p.sessionContext.session.kernel.status === 'idle'; }}",
                               arg=path, timeout=SERVER_START_SECONDS * 1000)
        page.evaluate(WATCH_KERNEL, path)
        run_all_cells_through_the_menu(page)
        progress = wait_until_done(page, path, NOTEBOOK_SECONDS)
        cells = page.evaluate(CELLS, path)
        statuses = page.evaluate("() => window.kernelStatuses")
        links = page.evaluate(LINKS, path)
        full_screenshot(page, path, screenshot_folder / f"{notebook.stem}.jpg")
    finally:
        page.close()
        lab.shut_down_kernels()

    assert not progress["dialogs"] and not browser_dialogs, f"a dialog appeared: {progress['dialogs'] or browser_dialogs}"
    assert not {"dead", "restarting", "autorestarting"} & set(statuses), f"the kernel died: statuses {statuses}"
    source = [cell["model"]["source"] for cell in cells]
    assert source == [cell.source for cell in read(notebook).cells], "the page shows other cells than the file"
    code = [(index, cell) for index, cell in enumerate(cells) if cell["model"]["cell_type"] == "code"]
    assert all(cell["attached"] for _, cell in code), "JupyterLab left cells out of the page (windowing mode?)"

    not_run = [index for index, cell in code if cell["model"]["execution_count"] is None]
    errors = [(index, output_summary(cell["model"])) for index, cell in code
              if any(output["output_type"] == "error" for output in cell["model"]["outputs"])]
    assert not errors, f"cells with an error output (cell index, outputs): {errors}"
    assert not not_run, f"code cells that did not run (cell indexes): {not_run}"
    assert not console_errors, f"the browser console logged errors: {console_errors}"

    for index, cell in code:
        wanted_figures = expected_figures(cell["model"]["source"])
        wanted_tables = expected_tables(cell["model"]["source"])
        shown = f"cell {index} shows {output_summary(cell['model'])}"
        assert cell["images"] >= wanted_figures, f"{shown}: {wanted_figures} figure(s) expected as images"
        assert cell["tables"] >= wanted_tables, f"{shown}: {wanted_tables} table(s) expected as HTML tables"

    allowed = ALLOWED_STDERR.get(notebook.name[:2], [])
    unexplained = unexplained_stderr([cell["model"] for cell in cells], allowed)
    assert not unexplained, f"red (stderr) output that the prose does not explain: {unexplained}"

    file_cells = read(notebook).cells
    missing = [describe_missing(notebook.name[:2], file_cells[index].get("id"), found, cell["model"]["outputs"])
               for index, cell in code
               if (found := missing_verdicts(notebook.name[:2], file_cells[index].get("id"),
                                             cell["model"]["outputs"]))]
    assert not missing, "\n".join(missing)

    wanted_links = sum(len(re.findall(r"\]\(#glossary-", cell.source)) for cell in file_cells
                       if cell.cell_type == "markdown")
    assert links["glossary"] == wanted_links, f"{links['glossary']} glossary links on the page, {wanted_links} in the file"
    assert not links["missing"], f"glossary links whose entry the page lacks: {links['missing']}"

    folded = [index for index, cell in enumerate(cells) if folded_by_title(cell["model"]["source"])]
    shown_open = [index for index in folded if not cells[index]["input_hidden"] or cells[index]["editor_visible"]]
    assert not shown_open, f"cells starting with #@title are shown unfolded in JupyterLab: {shown_open}"


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
    assert unexplained_stderr(cells, ALLOWED_STDERR["03"]) == [(0, other.rstrip("\n"))]
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
