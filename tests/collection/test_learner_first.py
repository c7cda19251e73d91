"""The learner-first rules that a script can check, each once for every notebook: code that fits the
screen, prose that is true on every machine, the plumbing folded so that the lesson stays short, the
calls a core teaches in view, the title table's run times, asserts only where they hold everywhere, and
words the learner meets explained: "kernel" says which, every glossary term linked at its first use in
the core to the notebook's own "Words used here" (made from GLOSSARY.md), one word with one meaning.
The anatomy and the class rule are in test_anatomy.py."""
import ast
import re

import nbformat
import pytest

import manifest

from anatomy import core_cells, is_folded
from support.notebook_code import NOTEBOOKS, REPO, core_markdown, missing_taught_calls, read
from support.shared_checks import MAX_LINE, code_lines_too_long, machine_bound_phrases

NOTEBOOK_IDS = [path.name for path in NOTEBOOKS]

# Visible code (code cells that are not folded #@title cells) is what a learner reads. Two limits, the
# same for every notebook (CONTRIBUTING.md, "Limits", gives each its reason): the lesson's visible code,
# title to Summary (the exercises' starters and Going deeper are not counted, so that a notebook can carry
# four exercises), and one visible cell anywhere. The class rule counts the lesson's lines too.
LESSON_LINES_LIMIT = 150  # non-blank lines in the visible code cells of the core: 15 minutes of reading
VISIBLE_CELL_LIMIT = 25  # non-blank lines in one visible code cell: it fits the screen beside its prose


def visible_code_cells(cells):
    """The non-blank lines of each visible code cell among `cells`."""
    return [[line for line in cell.source.splitlines() if line.strip()] for cell in cells
            if cell.cell_type == "code" and not is_folded(cell)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_code_lines_fit_the_screen(path):
    too_long = [line for cell in read(path).cells if cell.cell_type == "code"
                for line in code_lines_too_long(cell.source)]
    assert too_long == [], (f"{len(too_long)} code lines over {MAX_LINE} characters (CONTRIBUTING.md, "
                            f"'Limits'): wrap the string or the argument list; first: {too_long[0]!r}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_prose_never_says_what_this_machine_printed(path):
    for cell in read(path).cells:
        if cell.cell_type == "markdown":
            found = machine_bound_phrases(cell.source)
            assert not found, f"{found} in: {cell.source[:100]!r}"


def lesson_length_problems(notebook):
    """What makes the lesson too long to read (CONTRIBUTING.md, "Limits"), each saying what to do."""
    problems = []
    lesson = sum(map(len, visible_code_cells(core_cells(notebook))))
    if lesson > LESSON_LINES_LIMIT:
        problems.append(f"the lesson (title to Summary) shows {lesson} lines of code, over "
                        f"{LESSON_LINES_LIMIT}: fold plumbing into #@title cells, or move what the "
                        f"story does not need below the Summary (Going deeper)")
    for cell in notebook.cells:
        lines = visible_code_cells([cell])
        if lines and len(lines[0]) > VISIBLE_CELL_LIMIT:
            problems.append(f"cell {cell.get('id')} shows {len(lines[0])} lines of code, over "
                            f"{VISIBLE_CELL_LIMIT}: split it where the prose can say what each part does, "
                            f"or fold its plumbing into a #@title cell")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_the_lesson_is_short_and_the_plumbing_folded(path):
    assert lesson_length_problems(read(path)) == []


def test_the_lesson_limit_counts_the_core_only_and_the_cell_limit_every_cell():
    def notebook(core_lines, after_lines, cell_lines=1):
        cells = [nbformat.v4.new_markdown_cell("# 99 · T")]
        cells += [nbformat.v4.new_code_cell("\n".join(["x = 1"] * cell_lines), id=f"c{index}")
                  for index in range(core_lines // cell_lines)]
        cells += [nbformat.v4.new_code_cell("#@title Plumbing\n" + "y = 2\n" * 90, id="folded"),
                  nbformat.v4.new_markdown_cell("## Summary")]
        cells += [nbformat.v4.new_code_cell("z = 3", id=f"after{index}") for index in range(after_lines)]
        return nbformat.v4.new_notebook(cells=cells)

    assert lesson_length_problems(notebook(LESSON_LINES_LIMIT, 300)) == []
    over = lesson_length_problems(notebook(LESSON_LINES_LIMIT + 1, 0))
    assert len(over) == 1 and over[0].startswith(f"the lesson (title to Summary) shows {LESSON_LINES_LIMIT + 1}")
    assert lesson_length_problems(notebook(VISIBLE_CELL_LIMIT, 0, VISIBLE_CELL_LIMIT)) == []
    assert lesson_length_problems(notebook(VISIBLE_CELL_LIMIT + 1, 0, VISIBLE_CELL_LIMIT + 1)) == [
        f"cell c0 shows {VISIBLE_CELL_LIMIT + 1} lines of code, over {VISIBLE_CELL_LIMIT}: split it where "
        f"the prose can say what each part does, or fold its plumbing into a #@title cell"]


RUN_TIME = re.compile(r"\b\d+(\.\d+)? ?(s|min|minutes?|seconds?)\b|not measured yet")


def run_time_rows(notebook, part):
    """The title table's rows whose first cell names the run time of `part` ('core' or 'whole'), split
    into their cells."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in notebook.cells[0].source.splitlines() if line.startswith("|")]
    return [row for row in rows if "run time" in row[0].lower() and part in row[0].lower()]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_title_table_gives_the_core_and_the_whole(path):
    for part in ("core", "whole"):
        rows = run_time_rows(read(path), part)
        assert rows, f"a title-table row whose first cell says 'run time' and '{part}' is expected"
        for row in rows:
            for cell in row[1:]:
                assert RUN_TIME.search(cell), f"{row[0]!r}: {cell!r} gives no time and no 'not measured yet'"


def test_a_run_time_row_needs_a_time_or_not_measured_yet():
    table = ("# 09 · T\n| | CPU | GPU |\n|---|---|---|\n| Run time of the core | about 5 s | not measured yet |\n"
             "| Run time, the whole notebook | 1 min 35 s | fast |\n| CPU cores | 2 | |\n")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(table)])
    assert [row[0] for row in run_time_rows(notebook, "core")] == ["Run time of the core"]
    assert all(RUN_TIME.search(cell) for cell in run_time_rows(notebook, "core")[0][1:])
    assert not RUN_TIME.search(run_time_rows(notebook, "whole")[0][2]), "'fast' is not a run time"
    assert RUN_TIME.search("2.5 minutes") and not RUN_TIME.search("5 sizes")


GLOSSARY_LINK = re.compile(r"\[([^\]]+)\]\(#glossary-[a-z0-9-]+\)")  # to the notebook's "Words used here"


def glossary_terms():
    """The bold terms of the glossary (GLOSSARY.md), lower case, what is in brackets left out
    ("launch (of a GPU kernel)" -> "launch", "percentile (p50, p95, p99)" -> "percentile")."""
    glossary = (REPO / "GLOSSARY.md").read_text()
    return {term.lower() for bold in re.findall(r"\*\*(.+?)\*\*", glossary)
            for term in re.sub(r"\s*\(.*?\)", "", bold).split(", ")}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_the_core_links_its_terms_to_words_readmes_glossary_explains(path):
    links = [link.group(1).strip("`*").lower() for link in GLOSSARY_LINK.finditer(core_markdown(read(path)))]
    assert len(links) >= 3, "the core links the first use of its terms to the glossary"
    terms = glossary_terms()
    for word in links:
        assert any(term in word or word in term for term in terms), f"{word!r} is not in GLOSSARY.md"


# A glossary word whose first use in a core means something else there: (notebook, term): why.
OTHER_MEANING = {
    ("01", "backend"): "PyTorch's device backends (CUDA, MPS), not a process group's backend",
}
ACRONYMS = {"cuda": "CUDA", "mps": "MPS", "rocm": "ROCm"}  # matched in their own case only


def masked_prose(text):
    """`text` with headings, code blocks, code spans and link targets blanked (positions kept)."""
    blank = lambda match: " " * len(match.group())  # noqa: E731
    text = re.sub(r"^#.*$", blank, text, flags=re.M)
    text = re.sub(r"```.*?```", blank, text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", blank, text)
    return re.sub(r"\]\([^)]*\)", lambda match: "]" + blank(match)[1:], text)


def first_use(term, prose):
    """The first use of `term` (or its plural) as a word of its own in `prose`, or None."""
    word = ACRONYMS.get(term, term)
    pattern = rf"(?<![-\w]){re.escape(word)}(s|es)?(?![-\w])"
    return re.search(pattern, prose, 0 if term in ACRONYMS else re.IGNORECASE)


def unlinked_first_uses(notebook, number, terms):
    """[(term, the words around it)] for each glossary term whose first use in the core's prose is
    not a link to the glossary (headings and code do not count as uses)."""
    text = core_markdown(notebook)
    prose = masked_prose(text)
    links = [(link.start(), link.end()) for link in GLOSSARY_LINK.finditer(text)]
    found = []
    for term in sorted(terms):
        use = first_use(term, prose)
        if use and (number, term) not in OTHER_MEANING and not any(a <= use.start() < b for a, b in links):
            found.append((term, " ".join(text[max(0, use.start() - 40):use.end() + 20].split())))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_every_glossary_term_is_linked_where_the_core_first_uses_it(path):
    assert unlinked_first_uses(read(path), path.name[:2], glossary_terms()) == []


def test_a_first_use_counts_only_in_prose_and_only_when_it_is_the_link():
    def notebook(*texts):  # a core of these cells, then a Summary
        return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(t) for t in (*texts, "## Summary")])

    terms = {"tensor", "cuda", "launch"}
    linked = "A [tensor](#glossary-tensor) lives on a device; a tensor is PyTorch's array."
    assert unlinked_first_uses(notebook("# Tensors", linked), "02", terms) == []
    later = "Every tensor has a device. A [tensor](#glossary-tensor) again."
    assert unlinked_first_uses(notebook(later), "02", terms)[0][0] == "tensor"
    # in code, in a heading, in a compound word or in a link's address it is no use; plurals are
    assert unlinked_first_uses(notebook("`tensor` and a launch-bound step", "[x](tensor.html)"),
                               "02", terms) == []
    assert [t for t, _ in unlinked_first_uses(notebook("Two tensors."), "02", terms)] == ["tensor"]
    # acronyms only in their own case; a first use that means something else is listed as such
    assert unlinked_first_uses(notebook("a cuda-free CPU, Cuda"), "02", terms) == []
    assert [t for t, _ in unlinked_first_uses(notebook("CUDA"), "02", terms)] == ["cuda"]
    assert unlinked_first_uses(notebook("the MPS backend"), "01", {"backend"}) == []  # OTHER_MEANING
    assert [t for t, _ in unlinked_first_uses(notebook("a launch"), "07", terms)] == ["launch"]
    # a use after the Summary heading is not in the core
    assert unlinked_first_uses(notebook("Intro.", "## Summary\n\nA tensor."), "02", terms) == []


def kernel_uses(notebook):
    """(text around it) for each 'kernel' the learner reads that does not say which: in the markdown and
    in every string the notebook's code holds (what it prints), a Jupyter kernel or a GPU kernel (Triton's
    kernels are GPU kernels too; an image 'kernel' is the operating system's)."""
    texts = [cell.source for cell in notebook.cells if cell.cell_type == "markdown"]
    for cell in notebook.cells:
        if cell.cell_type == "code":
            try:
                tree = ast.parse(cell.source)
            except SyntaxError:  # a cell of shell commands (!pip ...): its text as it is
                texts.append(cell.source)
                continue
            texts += [node.value for node in ast.walk(tree)
                      if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    found = []
    for text in texts:
        text = re.sub(r"\]\([^)]*\)|<[^>]+>|[\[*]", "", text)  # link targets, HTML tags, markup
        text = " ".join(text.replace("Kernel > Restart Kernel", "").split())  # JupyterLab's menu
        for use in re.finditer(r"(?<![\w/])kernels?\b(?![_./-]\w)", text, re.IGNORECASE):
            before, after = text[:use.start()], text[use.end():]
            if not (before.endswith(("Jupyter ", "GPU ", "Triton ")) or after.startswith(" image")):
                found.append(text[max(0, use.start() - 60):use.end() + 20])
    return found


# Where a learner meets both kernels (01-04), every "kernel" says which. From 05 on both are known, and
# the first use says which: 09, about GPU kernels only, would otherwise say "GPU kernel" some 70 times.
EVERY_USE_SAYS_WHICH = {"01", "02", "03", "04"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_kernel_says_which_kernel_and_a_restart_names_jupyters(path):
    uses = kernel_uses(read(path))
    if path.name[:2] in EVERY_USE_SAYS_WHICH:
        assert uses == []
    prose = " ".join(" ".join(cell.source for cell in read(path).cells
                              if cell.cell_type == "markdown").replace("[", "").split())
    first = re.search(r"\bkernels?\b", prose, re.IGNORECASE)
    if first:
        assert prose[:first.start()].endswith(("Jupyter ", "GPU ")), prose[first.start() - 60:first.end()]
    prose = " ".join(cell.source for cell in read(path).cells if cell.cell_type == "markdown")
    restarts = re.findall(r"restart(?:ing)? (?:the|your) (\w+ )?kernel", " ".join(prose.split()), re.I)
    assert all(word.strip().lower() == "jupyter" for word in restarts), restarts


def test_kernel_uses_lists_every_unqualified_kernel_in_prose_and_printed_strings():
    def notebook(markdown, code="x = 1"):
        return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(markdown),
                                               nbformat.v4.new_code_cell(code)])

    assert kernel_uses(notebook("A GPU kernel, a [Jupyter kernel](#glossary-jupyter-kernel), Triton kernels.",
                                "name = 'KAGGLE_KERNEL_RUN_TYPE'\nprint('a kernel image is available')")) == []
    assert len(kernel_uses(notebook("A GPU kernel, then a kernel."))) == 1  # every use, not the first
    assert len(kernel_uses(notebook("Fine.", "print('Restart the kernel')"))) == 1  # printed strings too
    assert len(kernel_uses(notebook("Fine.", "!echo the kernel"))) == 1  # and shell cells


def test_every_link_of_every_notebook_resolves_inside_it():
    """Uploaded alone, a notebook has nothing beside it: each markdown link is a web address or an anchor
    that the notebook itself defines (a glossary entry of its "Words used here" cell, or a heading)."""
    for path in NOTEBOOKS:
        assert unresolved_links(read(path)) == [], path.name


def unresolved_links(notebook):
    markdown = [cell.source for cell in notebook.cells if cell.cell_type == "markdown"]
    anchors = {anchor for text in markdown for anchor in re.findall(r'<a id="([^"]+)"></a>', text)}
    anchors |= {re.sub(r"\s", "-", heading.strip())  # JupyterLab's heading anchors: the text, case kept
                for text in markdown for heading in re.findall(r"^#+ (.*)$", text, re.M)}
    bad = []
    for text in markdown:
        for target in re.findall(r"\]\(([^)\s]+)[^)]*\)", re.sub(r"```.*?```|`[^`\n]*`", "", text, flags=re.S)):
            if target.startswith(("https://", "http://", "mailto:")):
                continue
            if not (target.startswith("#") and target[1:] in anchors):
                bad.append(target)
    return bad


def test_unresolved_links_names_files_beside_and_missing_anchors():
    def notebook(*texts):
        return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(t) for t in texts])

    words = '## Words used here\n\n- <a id="glossary-tensor"></a>**tensor**: ...'
    assert unresolved_links(notebook("A [tensor](#glossary-tensor), [docs](https://pytorch.org).", words)) == []
    assert unresolved_links(notebook("A [tensor](#glossary-tensor).")) == ["#glossary-tensor"]
    assert unresolved_links(notebook("See [01](01_check_your_gpu.ipynb).", words)) == ["01_check_your_gpu.ipynb"]
    assert unresolved_links(notebook("[g](../README.md#glossary)", words)) == ["../README.md#glossary"]
    assert unresolved_links(notebook("## Step 2: Time it\n\nSee [Step 2](#Step-2:-Time-it).")) == []


def allowed_asserts():
    """{(notebook, cell id): why} of the asserts a notebook may make in the learner's path: ones that
    hold on every machine (each notebook's `allowed_asserts` in notebooks/manifest.toml). Everything
    else that can fail on a machine the tests never see prints a verdict and its reason, and the tests
    assert it (tests/verdicts.py checks the printed verdicts in the runs the suite makes)."""
    return {(number, allowed.pattern): allowed.why for number, entry in manifest.notebooks().items()
            for allowed in entry.allowed_asserts}


def top_level_asserts(notebook, number):
    """[(notebook, cell id)] for every code cell with an `assert` outside a function."""
    found = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        lines = [line for line in cell.source.splitlines() if not line.lstrip().startswith(("!", "%"))]
        tree = ast.parse("\n".join(lines))
        functions = [node for node in ast.walk(tree)
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        inside = {id(inner) for function in functions for inner in ast.walk(function)}
        if any(isinstance(node, ast.Assert) and id(node) not in inside for node in ast.walk(tree)):
            found.append((number, cell.get("id")))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_the_learners_path_prints_verdicts_instead_of_asserting(path):
    number = path.name[:2]
    found = top_level_asserts(read(path), number)
    allowed = allowed_asserts()
    assert [cell for cell in found if cell not in allowed] == []
    assert all(cell in found for cell in allowed if cell[0] == number), "a stale allowance"


def test_top_level_asserts_are_found_in_blocks_but_not_in_functions():
    def notebook(*sources):
        return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source, id=f"c{index}")
                                               for index, source in enumerate(sources)])

    assert top_level_asserts(notebook("x = 1", "if x:\n    assert x"), "06") == [("06", "c1")]
    assert top_level_asserts(notebook("def f(x):\n    assert x", "!pip list"), "06") == []


# One word, one meaning, as GLOSSARY.md defines them: a GPU kernel is *launched*,
# processes are *started*; a *training step* is not a *Step* (a heading, or "Step 3" naming one); *block*
# is Triton's block of a kernel's work (notebook 09) and nothing else; the *device* is the `device`
# variable, which may be the CPU, so a copy between CPU and GPU memory is not a "host-to-device" copy.
# Each entry: (name, pattern of a use, allowed(sentence, use) -> True when the use keeps the meaning).
LAUNCH_WORDS = ("kernel", "gpu", "overhead", "launch-bound", "launch_blocking", "launches of kernels")


def launch_keeps_its_meaning(sentence, use):
    return any(word in sentence.lower() for word in LAUNCH_WORDS)


def step_keeps_its_meaning(sentence, use):
    before = re.findall(r"[\w-]+", sentence[:use.start()].lower())
    after = re.findall(r"[\w-]+", sentence[use.end():].lower())
    return (use.group()[0] == "S"  # "Step 3", "Steps 4-6": a heading named
            or (before and before[-1] in ("training", "optimizer"))
            or after[:2] == ["by", "step"] or (before[-2:] == ["step", "by"]))


def block_keeps_its_meaning(sentence, use):
    return False  # checked only outside notebook 09, where a block is Triton's


ONE_MEANING = [
    ("launch", re.compile(r"\blaunch(?:es|ed|ing)?\b", re.I), launch_keeps_its_meaning, None),
    ("step", re.compile(r"\bsteps?\b", re.I), step_keeps_its_meaning, None),
    ("block", re.compile(r"\bblocks?\b", re.I), block_keeps_its_meaning, {"09"}),
    ("host-to-device", re.compile(r"\b(host[- ]to[- ]device|device[- ]to[- ]host)\b", re.I),
     lambda sentence, use: False, None),
]


def retired_uses(notebook, number):
    """[(word, the sentence)] for every use of a word in a meaning GLOSSARY.md retired."""
    prose = " ".join(masked_prose(cell.source) for cell in notebook.cells if cell.cell_type == "markdown")
    found = []
    for sentence in re.split(r"(?<=[.;:!?])\s+|\n\s*\n", prose):
        sentence = " ".join(sentence.split())
        for word, pattern, keeps, exempt in ONE_MEANING:
            if exempt and number in exempt:
                continue
            found += [(word, sentence) for use in pattern.finditer(sentence) if not keeps(sentence, use)]
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_one_word_one_meaning(path):
    number = path.name[:2]
    found = retired_uses(read(path), number)
    assert found == [], f"{len(found)} retired uses, first: {found[0]}"


def test_retired_uses_are_found_on_both_sides_of_each_rule():
    def notebook(text):
        return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])

    kept = ("Each kernel launch costs time. A launch-bound step. In Step 3 a training step ran; "
            "Steps 4-6 follow step by step. The optimizer step. The copy from CPU to GPU.")
    assert [word for word, _ in retired_uses(notebook(kept), "05")] == ["step"], "'launch-bound step'"
    assert retired_uses(notebook("Each kernel launch costs time. A training step."), "05") == []
    retired = "The launch starts two processes. Each step takes 1 s. A transformer block. A host-to-device copy."
    assert [word for word, _ in retired_uses(notebook(retired), "06")] == ["launch", "step", "block",
                                                                             "host-to-device"]
    assert [word for word, _ in retired_uses(notebook("A block of 128 elements."), "09")] == []
    assert retired_uses(notebook("`torch.cuda.synchronize()` and `for step in range(3)`"), "05") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_the_calls_a_notebook_teaches_are_in_view_in_its_core(path):
    taught = manifest.notebook(path.name[:2]).taught_calls
    assert len(taught) >= 3, f"notebooks/manifest.toml lists at least three taught_calls of {path.name}"
    assert missing_taught_calls(read(path), taught) == []


def test_a_taught_call_in_a_folded_cell_or_after_the_summary_is_not_in_view():
    cells = [nbformat.v4.new_markdown_cell("# 99 · T"),
             nbformat.v4.new_code_cell("opt = torch.optim.Adam(model.parameters(),\n    fused=True)"),
             nbformat.v4.new_code_cell("#@title Plumbing\nscaler = torch.amp.GradScaler()"),
             nbformat.v4.new_markdown_cell("## Summary"), nbformat.v4.new_code_cell("torch.compile(model)")]
    notebook = nbformat.v4.new_notebook(cells=cells)
    taught = [r"torch\.optim\.Adam\(.*fused=True", r"GradScaler\(", r"torch\.compile\("]
    assert missing_taught_calls(notebook, taught) == taught[1:]


def bf16_calls_counting_emulation(notebook):
    """The code lines calling torch.cuda.is_bf16_supported() without including_emulation=False: by
    default it counts emulation and says True on a T4, where bfloat16 has no Tensor Cores
    (torch/cuda/__init__.py: is_bf16_supported(including_emulation=True)), so no dtype choice may
    rest on it."""
    return [line.strip() for cell in notebook.cells if cell.cell_type == "code"
            for line in cell.source.splitlines()
            for call in re.findall(r"is_bf16_supported\(([^)]*)\)", line)
            if "including_emulation=False" not in call]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_no_notebook_asks_is_bf16_supported_counting_emulation(path):
    assert bf16_calls_counting_emulation(read(path)) == []


def test_bf16_calls_counting_emulation_are_found():
    def notebook(source):
        return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])

    assert bf16_calls_counting_emulation(notebook("ok = torch.cuda.is_bf16_supported()")) != []
    assert bf16_calls_counting_emulation(notebook("torch.cuda.is_bf16_supported(including_emulation=False)")) == []
