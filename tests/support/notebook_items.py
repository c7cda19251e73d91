"""The notebooks in the test run: each runs once, alone in an empty folder, under nbval, and that one run
is checked three ways.

1. nbval runs every code cell in a kernel started in an empty folder that holds nothing but a copy of
   the notebook (as when it is uploaded alone to Colab or Kaggle), and fails a cell that raises.
2. After each cell, conftest.py checks what the cell printed against tests/verdicts.py; after the core's
   last cell, the class rule of the core (tools/anatomy.py: budget_problems) on what the core printed
   and showed.
3. A last item per notebook writes the executed notebook, outputs and all, into its folder and opens it
   in JupyterLab in headless Chromium (tests/jupyterlab_page.py): the page must show what the notebook
   promises (figures as images, tables as HTML tables, folded cells folded, glossary entries, no error
   in the console, no unexplained red output). Without a browser that item is skipped (it fails when CI
   is true); one JupyterLab and one browser serve every notebook of a test worker.

`pytest notebooks/05_find_the_bottleneck.ipynb` runs one notebook this way (`--no-page`: without the
third check, while writing a notebook). With nbval's own options
(`--nbval-lax`, `--nbval`) nbval collects the notebooks itself, in place, without these checks' third.
"""
import shutil
from pathlib import Path

import nbformat
import pytest
from nbval.kernel import RunningKernel
from nbval.plugin import IPyNbCell, IPyNbFile

from support.notebook_code import NOTEBOOK_DIR
from notebook_run import environment


def is_collection_notebook(file_path):
    path = Path(file_path)
    return path.suffix == ".ipynb" and path.parent.resolve() == NOTEBOOK_DIR.resolve()


def pytest_addoption(parser):
    parser.addoption("--no-page", action="store_true",
                     help="run the notebooks without checking their pages in JupyterLab (quicker, while "
                          "writing a notebook; the test command checks them)")


def pytest_collect_file(file_path, parent):
    option = parent.config.option
    if is_collection_notebook(file_path) and not (option.nbval or option.nbval_lax):
        return NotebookAlone.from_parent(parent, path=file_path)
    return None


class NotebookAlone(IPyNbFile):
    """nbval's notebook collector, but the kernel runs in an empty folder holding only a copy of the
    notebook, outputs are not compared (they depend on the machine), and a last item checks the page."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.compare_outputs = False  # as --nbval-lax: run every cell, fail on an error
        self.folder = None

    def setup(self):
        base = self.config._tmp_path_factory.getbasetemp() / "notebooks-alone"
        self.folder = base / self.path.stem
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        shutil.copy(self.path, self.folder / self.path.name)
        kernel_name = self.nb.metadata.get("kernelspec", {}).get("name", "python")
        # the learner's environment: conftest.py's MPLBACKEND=Agg, for the plain tests, would make every
        # figure of the notebook vanish
        with environment({"MPLBACKEND": None}):
            self.kernel = RunningKernel(kernel_name, cwd=str(self.folder),
                                        startup_timeout=self.config.option.nbval_kernel_startup_timeout)
        self.setup_sanitize_files()

    def collect(self):
        yield from super().collect()
        if not self.config.getoption("--no-page"):
            yield RenderedInJupyterLab.from_parent(self, name="page in JupyterLab")

    def executed_notebook(self):
        """The notebook with the outputs nbval's cells recorded (an unrun cell has none)."""
        notebook = nbformat.from_dict(self.nb)
        cells = [item for item in self.session.items
                 if isinstance(item, IPyNbCell) and item.parent is self]
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        for count, (cell, item) in enumerate(zip(code, cells), start=1):
            ran = item.test_outputs is not None
            cell.outputs = [nbformat.from_dict(dict(output)) for output in item.test_outputs or []]
            for output in cell.outputs:
                if output.output_type == "execute_result":
                    output.execution_count = count
            cell.execution_count = count if ran else None
        return notebook


class RenderedInJupyterLab(pytest.Item):
    """The page of the notebook that nbval just ran, in JupyterLab (see the module's docstring)."""

    def runtest(self):
        notebook_file = self.parent
        notebook = notebook_file.executed_notebook()
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        if any(cell.execution_count is None for cell in code) or any(
                output.output_type == "error" for cell in code for output in cell.outputs):
            pytest.skip("a cell of the nbval run failed or did not run: its failure is reported there")
        page_for = self.config.stash.get(PAGES, None)
        if page_for is None:
            page_for = PageMaker(self.config._tmp_path_factory.getbasetemp() / "notebooks-alone")
            self.config.stash[PAGES] = page_for
        nbformat.write(notebook, str(notebook_file.folder / notebook_file.path.name))
        problems = page_for.check(notebook_file.path, nbformat.read(str(notebook_file.path),
                                                                   as_version=4))
        assert problems == [], "\n".join(problems)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: its page in JupyterLab"


PAGES = pytest.StashKey()


class PageMaker:
    """One JupyterLab serving the folder the notebooks run in, and one browser, for one test worker;
    started at the first notebook, stopped at the end of the session."""

    def __init__(self, root):
        from support.jupyterlab_page import Browser, LabServer, require_browser

        executable = require_browser()
        self.lab = LabServer(root.parent, root=root)
        self.browser = Browser(executable, root.parent / "chromium-profile")
        self.screenshots = root.parent / "browser-screenshots"
        self.screenshots.mkdir(exist_ok=True)
        self.page = None

    def check(self, notebook_path, file_notebook):
        from support.jupyterlab_page import LINKS, Page, page_problems, wait_until_drawn

        path = f"{notebook_path.stem}/{notebook_path.name}"
        problems = ["the page could not be read"]
        try:
            # one page for every notebook of this worker: loading JupyterLab anew took most of the time
            if self.page is None:
                self.page = Page(self.browser, self.lab, path)
            else:
                self.page.reopen(path)
            page = self.page
            cells = wait_until_drawn(page.page, path, file_notebook.cells)
            links = page.evaluate(LINKS)
            problems = page_problems(notebook_path.name[:2], cells, file_notebook.cells, links,
                                     page.console_errors, page.dialogs)
        finally:
            # a screenshot only of a page with problems: a tall page takes seconds to draw and encode,
            # and a passing one is never looked at; after problems the next notebook gets a new page
            screenshot = self.screenshots / f"{notebook_path.stem}.jpg" if problems else None
            if self.page is not None and problems:
                self.page, page = None, self.page
                page.close(screenshot)
            elif self.page is not None:
                self.page.done()
            else:
                self.lab.shut_down_kernels()
        return problems

    def stop(self):
        page, self.page = self.page, None
        try:
            try:
                if page is not None:
                    page.close()
            finally:
                self.browser.close()
        finally:
            self.lab.stop()


def pytest_sessionfinish(session):
    pages = session.config.stash.get(PAGES, None)
    if pages is not None:
        pages.stop()
        del session.config.stash[PAGES]
