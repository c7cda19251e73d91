"""Pages everyone can read, asserted once for every notebook (the Carpentries' lesson checks, in the house
style's words, "Pages everyone can read"):

- every figure is shown with show_figure(figure, alt) (the shared setup cell), so a screen reader gets its
  alt text; plt.show() is not used (it shows a PNG without one). The page test in JupyterLab checks that
  each image on the page carries its alt (tests/support/jupyterlab_page.py);
- colour never carries a difference alone: a line drawn with plot() also says its line style or marker
  (SERIES_STYLES, a format string, or the keywords), a colour named in code is one of PALETTE's (Okabe
  and Ito's, which reads for the common colour-vision deficiencies), a colour map is cividis or viridis;
- headings in order: one "# " title, then "##", then "###", none skipped, none repeated in a notebook;
- link text says where it goes: never "here", "this", "link" or "click here".
"""
import ast
import re

import nbformat
import pytest

from anatomy import is_folded
from support.notebook_code import NOTEBOOKS, load_helpers, read

NOTEBOOK_IDS = [path.name for path in NOTEBOOKS]
PALETTE = set(load_helpers("01").PALETTE.values())
COLOUR_MAPS = {"cividis", "viridis"}
VAGUE_LINK_TEXT = {"here", "this", "link", "click here", "this page", "this link", "see here"}
SHARED_SETUP = "#@title Shared setup: "


def code_of(notebook):
    """(cell id, syntax tree) of every code cell but the shared setup (which defines show_figure)."""
    return [(cell.get("id"), ast.parse(cell.source)) for cell in notebook.cells
            if cell.cell_type == "code" and not cell.source.startswith(SHARED_SETUP)]


def call_name(node):
    return ast.unparse(node.func) if isinstance(node, ast.Call) else ""


def alt_of(call):
    """The alt argument of a show_figure call, or None."""
    if len(call.args) >= 2:
        return call.args[1]
    return next((keyword.value for keyword in call.keywords if keyword.arg == "alt"), None)


def constant_words(node):
    """The words of a string's constant parts (an f-string's computed parts left out)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split()
    if isinstance(node, ast.JoinedStr):
        return " ".join(part.value for part in node.values if isinstance(part, ast.Constant)).split()
    return None


def figure_problems(notebook):
    """Figures shown without alt text, or with one too short to say what they show."""
    problems = []
    for cell_id, tree in code_of(notebook):
        for node in ast.walk(tree):
            name = call_name(node)
            if name.endswith("plt.show") or name == "show":
                problems.append(f"{cell_id}: {name}() shows a figure without alt text: use "
                                f"show_figure(figure, alt)")
            elif name == "show_figure":
                alt = alt_of(node)
                words = constant_words(alt) if alt is not None else []
                if alt is None or (words is not None and len(words) < 4):
                    problems.append(f"{cell_id}: show_figure without an alt text of a sentence "
                                    f"(what the figure shows, in four words or more)")
    return problems


def colour_problems(notebook):
    """Lines told apart by colour alone, colours outside the palette, colour maps that do not read."""
    problems = []
    for cell_id, tree in code_of(notebook):
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            keywords = {keyword.arg: keyword.value for keyword in node.keywords}
            for key in ("color", "c", "facecolor", "edgecolor"):
                value = keywords.get(key)
                if isinstance(value, ast.Constant) and isinstance(value.value, str) \
                        and value.value not in PALETTE:
                    problems.append(f"{cell_id}: {key}={value.value!r} is not one of PALETTE's colours")
            cmap = keywords.get("cmap")
            if isinstance(cmap, ast.Constant) and cmap.value not in COLOUR_MAPS:
                problems.append(f"{cell_id}: cmap={cmap.value!r}: use one of {sorted(COLOUR_MAPS)}")
            if call_name(node).endswith(".plot") and not call_name(node).startswith(("pd.", "df.")):
                styled = ({"marker", "linestyle", "ls"} & set(keywords) or None in keywords
                          or any(isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                                 for arg in node.args))
                if not styled:
                    problems.append(f"{cell_id}: a line drawn by {call_name(node)}() says no line style "
                                    f"or marker (SERIES_STYLES, or marker=/linestyle=)")
    return problems


HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$", re.M)


def heading_problems(notebook):
    """Headings out of order (a level skipped, a second title) or repeated in the notebook."""
    problems, level, seen = [], 0, set()
    fenced = re.compile(r"```.*?```", re.S)
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        for marks, text in HEADING.findall(fenced.sub("", cell.source)):
            if len(marks) == 1 and level:
                problems.append(f"a second title: {text!r}")
            elif len(marks) > level + 1:
                problems.append(f"{'#' * len(marks)} {text!r} after a level-{level} heading: a level skipped")
            if text in seen:
                problems.append(f"the heading {text!r} is there twice")
            seen.add(text)
            level = len(marks)
    return problems


LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)]+)\)")


def link_problems(notebook):
    """Links whose text does not say where they go."""
    return [f"a link whose text is {text!r}: say where it goes ({target})"
            for cell in notebook.cells if cell.cell_type == "markdown"
            for text, target in LINK.findall(cell.source)
            if text.strip().strip("*_`").lower() in VAGUE_LINK_TEXT]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_every_figure_has_its_alt_text(path):
    assert figure_problems(read(path)) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_colour_never_carries_a_difference_alone(path):
    assert colour_problems(read(path)) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_headings_in_order_and_unique(path):
    assert heading_problems(read(path)) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_link_text_says_where_it_goes(path):
    assert link_problems(read(path)) == []


# --- The rules, tried on made-up notebooks --------------------------------------------------------

def made_up(*sources, markdown=()):
    cells = [nbformat.v4.new_markdown_cell(text) for text in markdown]
    cells += [nbformat.v4.new_code_cell(source, id=f"c{index}") for index, source in enumerate(sources)]
    return nbformat.v4.new_notebook(cells=cells)


def test_a_figure_without_alt_text_is_found():
    assert figure_problems(made_up("fig, ax = plt.subplots()\nplt.show()")) == [
        "c0: plt.show() shows a figure without alt text: use show_figure(figure, alt)"]
    assert figure_problems(made_up("show_figure(fig)", "show_figure(fig, 'A chart')")) == [
        "c0: show_figure without an alt text of a sentence (what the figure shows, in four words or more)",
        "c1: show_figure without an alt text of a sentence (what the figure shows, in four words or more)"]
    good = made_up("show_figure(fig, f'Epoch time on {device}, falling with batch size')",
                   "show_figure(fig, alt=description)", "show_figure(fig, 'Loss per epoch, CPU and GPU')")
    assert figure_problems(good) == []


def test_a_line_told_apart_by_colour_alone_and_a_colour_off_the_palette_are_found():
    bad = made_up("ax.plot(x, y, color='red')", "ax.imshow(a, cmap='jet')", "ax.plot(x, y)")
    assert colour_problems(bad) == [
        "c0: color='red' is not one of PALETTE's colours",
        "c0: a line drawn by ax.plot() says no line style or marker (SERIES_STYLES, or marker=/linestyle=)",
        "c1: cmap='jet': use one of ['cividis', 'viridis']",
        "c2: a line drawn by ax.plot() says no line style or marker (SERIES_STYLES, or marker=/linestyle=)"]
    good = made_up("ax.plot(x, y, **SERIES_STYLES[0])", "ax.plot(x, y, 'o--', color='#0072B2')",
                   "ax.plot(x, y, marker='s', color=PALETTE['blue'])", "ax.imshow(a, cmap='cividis')")
    assert colour_problems(good) == []


def test_headings_out_of_order_or_twice_are_found():
    good = made_up(markdown=["# 99 · T", "## Setup", "### A · part", "## Step 1 · One", "### B · part"])
    assert heading_problems(good) == []
    assert heading_problems(made_up(markdown=["# 99 · T", "### Skipped"])) == [
        "### 'Skipped' after a level-1 heading: a level skipped"]
    assert heading_problems(made_up(markdown=["# 99 · T", "## Setup", "## Setup", "# Another"])) == [
        "the heading 'Setup' is there twice", "a second title: 'Another'"]
    assert heading_problems(made_up(markdown=["# 99 · T\n\n```\n# a comment in code\n```"])) == []


def test_vague_link_text_is_found():
    notebook = made_up(markdown=["See [here](https://pytorch.org) and [PyTorch's CUDA notes](https://x)",
                                 "![a figure](x.png) and [**this**](#glossary-tensor)"])
    assert link_problems(notebook) == ["a link whose text is 'here': say where it goes (https://pytorch.org)",
                                       "a link whose text is '**this**': say where it goes (#glossary-tensor)"]
