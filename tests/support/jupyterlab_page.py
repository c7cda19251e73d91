"""A notebook's page in a real JupyterLab in headless Chromium, as a learner sees it: the server, the
browser, what the page shows and the checks made on it.

Two tests use it. tests/test_browser.py opens a notebook alone in an empty folder and runs it through
the menu, Run > Run All Cells, as a learner does. tests/notebook_items.py opens every notebook that the
nbval run has just executed alone in an empty folder, with its outputs, so that each notebook runs
once in the test run and both nbval and the page are checked on that one run.

The checks (page_problems): every code cell ran and no output is an error (read from the notebook
model: the page draws a traceback and a warning on stderr alike); no dialog (a dead kernel opens one)
and no error in the browser console; the figures are on the page as images with alt text and the tables as HTML
tables, as many as the notebook's own source promises; warnings shown in red are ones the prose
explains (allowed_stderr: the manifest's); cells folded with `#@title` are shown folded; every glossary link has its
entry on the page. A screenshot of each page is saved. The server, its kernels and the browser are
stopped by process id.
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

from support.shared_checks import skip_or_fail

# Chromium refuses to start as root without --no-sandbox; the other flags keep it from calling
# home (on a closed network those connections fail, and some of the failures reach the console).
VIEWPORT = {"width": 1400, "height": 900}
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

def allowed_stderr(number):
    """Red (stderr) messages a learner may see in notebook `number`, each explained by its prose:
    [(pattern searched in the message's first line, why)], from its `allowed_stderr` in
    notebooks/manifest.toml; anything else fails. A message is a Python warning (its `file:line:
    Category: text` line and what follows it) or any other run of stderr lines."""
    from manifest import notebooks

    entry = notebooks().get(number)
    return [(allowed.pattern, allowed.why) for allowed in entry.allowed_stderr] if entry else []


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
    """How many figures a cell must show: its `show_figure(...)` (and `plt.show()`) calls that always
    run."""
    return sum(1 for node in _unconditional_statements(ast.parse(source).body)
               if isinstance(node, ast.Expr) and _is_call(node.value, "plt.show", "matplotlib.pyplot.show",
                                                          "show_figure"))


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


# JupyterLab 4 draws only the cells near the window of a long notebook (its windowing mode), so that the
# page of a notebook opened with its outputs would lack most of them: every cell is drawn instead.
LAB_SETTINGS = {"@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"}}


def write_settings(folder):
    """Write LAB_SETTINGS as the user settings JupyterLab reads from `folder` (JUPYTERLAB_SETTINGS_DIR)."""
    for name, values in LAB_SETTINGS.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


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
    """A `jupyter lab` started from this Python environment, serving `root` (an empty folder of its own
    by default); its settings and log are kept in `folder`."""

    def __init__(self, folder, root=None):
        self.root = root or folder / "notebooks"
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.token = secrets.token_hex(16)
        self.log_path = folder / "jupyterlab.log"
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                   f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                   f"--ServerApp.root_dir={self.root}", "--ServerApp.allow_root=True",
                   "--LabApp.expose_app_in_browser=True"]  # window.jupyterapp: the notebook model
        environment = server_environment(os.environ, folder)
        write_settings(folder / "lab-settings")
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


# --- Reading the page --------------------------------------------------------------------------------

# The notebook panel for `path`, from the app that --LabApp.expose_app_in_browser puts on window.
FIND_PANEL = """path => {
    const app = window.jupyterapp;
    if (!app) return null;
    return Array.from(app.shell.widgets('main')).find(w => w.context && w.context.path === path) || null;
}"""

# Dispose of every document in the main area (no "save changes?" dialog can stop it); then open
# `path` as a double click in the file browser would.
CLOSE_ALL = """() => {
    for (const widget of Array.from(window.jupyterapp.shell.widgets('main'))) widget.dispose();
}"""
OPEN_INSTEAD = f"""async path => {{
    ({CLOSE_ALL})();
    await window.jupyterapp.commands.execute('docmanager:open', {{path}});
}}"""

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
            images_without_alt: Array.from(node.querySelectorAll('.jp-OutputArea-output img'))
                .filter(img => !(img.getAttribute('alt') || '').trim()).length,
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




# --- A browser, a page, and the checks made on it ---------------------------------------------------

class Browser:
    """A Chromium with a fresh profile in `profile`, driven by playwright; close() stops it and what it
    started, by process id."""

    def __init__(self, executable, profile):
        try:
            import playwright.sync_api as playwright_api
        except ImportError:
            skip_or_fail("the browser test needs playwright: .venv/bin/python -m pip install -r "
                         "requirements.txt")
        self.playwright = playwright_api.sync_playwright().start()
        before = {process.pid for process in psutil.Process().children(recursive=True)}
        self.context = self.playwright.chromium.launch_persistent_context(
            str(profile), executable_path=executable, headless=True, args=CHROMIUM_FLAGS,
            viewport=VIEWPORT)
        self.started = [process for process in psutil.Process().children(recursive=True)
                        if process.pid not in before]

    def close(self):
        self.context.close()
        self.playwright.stop()
        stop_processes([process for process in self.started if process.is_running()])


class Page:
    """One notebook opened in a page of its own: what the console and dialogs said while it was open."""

    def __init__(self, browser, lab, path):
        self.path, self.lab = path, lab
        self.console_errors, self.dialogs = [], []
        self.page = browser.context.new_page()
        self.page.on("console", lambda message: self.console_errors.append(
            f"{message.text} ({message.location})") if message.type == "error" else None)
        self.page.on("pageerror", lambda error: self.console_errors.append(f"uncaught: {error}"))
        self.page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        workspace = path.split("/")[0]
        # A workspace of its own, reset, so that the page holds this notebook only.
        self.page.goto(f"{lab.url}/lab/workspaces/{workspace}/tree/{path}?reset&token={lab.token}")
        self._wait_until_open()

    def _wait_until_open(self):
        self.page.wait_for_function(
            f"path => {{ const p = ({FIND_PANEL})(path); return p && p.context.isReady "
            f"&& p.sessionContext.session && p.sessionContext.session.kernel "
            f"&& p.sessionContext.session.kernel.status === 'idle'; }}",
            arg=self.path, timeout=SERVER_START_SECONDS * 1000)

    def reopen(self, path):
        """Open notebook `path` in this page instead, the one before closed unsaved: JupyterLab is
        not loaded again (most of a new page's time); the console and dialogs count afresh."""
        self.path = path
        self.console_errors.clear()
        self.dialogs.clear()
        self.page.evaluate(OPEN_INSTEAD, path)
        self._wait_until_open()

    def evaluate(self, script):
        return self.page.evaluate(script, self.path)

    def done(self):
        """Close the notebook and shut its kernel down; the page stays, for reopen. Closing first lets
        what the closing logs (a debugger request cancelled, say) arrive before reopen counts afresh,
        rather than land on the next notebook."""
        try:
            self.page.evaluate(CLOSE_ALL)
        finally:
            self.lab.shut_down_kernels()

    def close(self, screenshot=None):
        """Save a screenshot (when asked), close the page and shut its kernel down."""
        try:
            if screenshot:
                full_screenshot(self.page, self.path, screenshot)
        finally:
            self.page.close()
            self.lab.shut_down_kernels()


def page_problems(number, cells, file_cells, links, console_errors, dialogs):
    """What is wrong with a notebook's page ([] when nothing is): `cells` as CELLS reads them, the
    notebook file's cells, the LINKS it found, the console's errors and the dialogs seen."""
    problems = []
    if dialogs:
        problems.append(f"a dialog appeared: {dialogs}")
    if [cell["model"]["source"] for cell in cells] != [cell.source for cell in file_cells]:
        return problems + ["the page shows other cells than the file"]
    code = [(index, cell) for index, cell in enumerate(cells) if cell["model"]["cell_type"] == "code"]
    if not all(cell["attached"] for _, cell in code):
        problems.append("JupyterLab left cells out of the page (windowing mode?)")
    errors = [(index, output_summary(cell["model"])) for index, cell in code
              if any(output["output_type"] == "error" for output in cell["model"]["outputs"])]
    if errors:
        problems.append(f"cells with an error output (cell index, outputs): {errors}")
    not_run = [index for index, cell in code if cell["model"]["execution_count"] is None]
    if not_run and not errors:
        problems.append(f"code cells that did not run (cell indexes): {not_run}")
    if console_errors:
        problems.append(f"the browser console logged errors: {console_errors}")
    for index, cell in code:
        wanted_figures = expected_figures(cell["model"]["source"])
        wanted_tables = expected_tables(cell["model"]["source"])
        shown = f"cell {index} shows {output_summary(cell['model'])}"
        if cell["images"] < wanted_figures:
            problems.append(f"{shown}: {wanted_figures} figure(s) expected as images")
        if cell.get("images_without_alt"):
            problems.append(f"{shown}: {cell['images_without_alt']} figure(s) without alt text "
                            f"(show them with show_figure(figure, alt))")
        if cell["tables"] < wanted_tables:
            problems.append(f"{shown}: {wanted_tables} table(s) expected as HTML tables")
    unexplained = unexplained_stderr([cell["model"] for cell in cells], allowed_stderr(number))
    if unexplained:
        problems.append(f"red (stderr) output that the prose does not explain: {unexplained}")
    wanted_links = sum(len(re.findall(r"\]\(#glossary-", cell.source)) for cell in file_cells
                       if cell.cell_type == "markdown")
    if links["glossary"] != wanted_links:
        problems.append(f"{links['glossary']} glossary links on the page, {wanted_links} in the file")
    if links["missing"]:
        problems.append(f"glossary links whose entry the page lacks: {links['missing']}")
    folded = [index for index, cell in enumerate(cells) if folded_by_title(cell["model"]["source"])]
    shown_open = [index for index in folded
                  if not cells[index]["input_hidden"] or cells[index]["editor_visible"]]
    if shown_open:
        problems.append(f"cells starting with #@title are shown unfolded in JupyterLab: {shown_open}")
    return problems


def wait_until_drawn(page, path, file_cells, seconds=60):
    """Poll an opened, already executed notebook until every figure and table its source promises is
    drawn (images load a moment after the page); returns what CELLS reads then."""
    deadline = time.monotonic() + seconds
    while True:
        cells = page.evaluate(CELLS, path)
        drawn = all(cell["images"] >= expected_figures(cell["model"]["source"])
                    and cell["tables"] >= expected_tables(cell["model"]["source"])
                    for cell in cells if cell["model"]["cell_type"] == "code")
        if drawn or time.monotonic() > deadline:
            return cells
        time.sleep(0.3)
