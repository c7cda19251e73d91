"""Every branch a learner's GPU, Mac or AMD machine takes is executed by a test.

The test machine has no GPU, so nbval and the browser test only ever run the CPU side of a notebook. This
file lists, by scanning the notebooks' code with `ast`, every condition that a GPU, Mac or AMD machine
(or Windows) decides differently: conditions on `device.type == "cuda"` / `"mps"` / `"xpu"` / `"cpu"`,
`torch.cuda.is_available()` and the like, `torch.version.cuda` / `hip`, `torch.backends.mps`, the compute
capability, the operating system (`"Darwin"`, `"Windows"`, `os.name`), the process-group backend
(`"nccl"`, `"gloo"`), and the notebooks' own names for such facts (`ON_GPU`, `use_gpu`, `gpu_count`, the
facts of notebook 01's diagnosis, ...): see GPU_WORDS and GPU_NAMES below, and add to them when a
notebook names such a fact in a new way. It scans `if`, `elif`, `while` and `x if condition else y`,
in every code cell and in every script a cell holds as a string constant (notebook 06's training script).

Each such condition is a branch with a stable KEY, "<where>: <condition>":
- <where> is the function it is in, with its classes and enclosing functions (`Run.step`, `outer.inner`),
  or `cell <cell id>` for a cell's top-level code (cell ids are kept when notebooks are stripped), with
  the name of the string constant in front for a script (`SCRIPT_GROUP.start_process_group`);
- <condition> is the condition as `ast.unparse` writes it: quotes, spacing and line breaks do not matter;
- a second identical condition in the same place gets " (2)", and so on.
So a key survives edits elsewhere in the notebook, moving the function to another cell, and reformatting;
it changes when the condition or the function's name changes, and then the test names the new key.
The install cell, the shared setup cell and the shared cells in COUNTED_ONCE are the same in every notebook
that carries them (tools/sync_cells.py writes them): their branches are listed once, under the notebook name
"shared", and claimed by the tests of their file in tests/shared_cells/.

A test CLAIMS a branch when it executes the side that a GPU, Mac, AMD or Windows machine takes, for real
on the CPU where PyTorch allows it or with stand-ins shaped like the real API:
    @pytest.mark.gpu_branch("05", "train_step: run.cuda_graphs")
on the test function (one marker per branch; markers are read from the test files' source, so this file
finds them however pytest is started). A branch that no test claims fails test_every_gpu_branch_is_executed_by_a_test, naming it; KNOWN_UNTESTED lists the ones
that are waiting for a test, each with a comment, and a stale entry there (claimed meanwhile, or gone
from the notebook) fails too.
"""
import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path


import sync_cells
from support.notebook_code import NOTEBOOKS, REPO, read

# A condition is a GPU branch when it compares something with one of these words ...
GPU_WORDS = {"cuda", "mps", "xpu", "cpu",  # device types (ROCm's AMD GPUs are "cuda" too)
             "nccl", "gloo",  # process-group backends: NCCL between NVIDIA GPUs, gloo on CPUs
             "Darwin", "Windows", "Linux", "posix", "nt"}  # platform.system(), os.name
# ... or when its text matches one of these (names the notebooks give GPU facts, and PyTorch's own).
GPU_NAMES = [
    r"\b(cuda|mps|xpu|accelerator)\.(is_available|device_count|is_bf16_supported|get_device_capability|"
    r"is_built)\(",
    r"\btorch\.version\.(cuda|hip)\b",
    r"\bbackends\.(mps|cudnn|cuda)\b",
    r"\b(ON_GPU|CAPABILITY|capability|use_gpu|gpu_count|gpu_fit|DEVICES|cuda_graphs|gloo|nccl)\b",
    # notebook 01's facts about the machine (gather_facts), which its diagnosis rules decide on
    r"\b(cuda_available|cuda_build|hip_build|mps_available|mps_built|gpus)\b",
]


@dataclass(frozen=True)
class Branch:
    notebook: str  # "01".."10", or "shared" for the install and shared setup cells
    key: str  # "<where>: <condition>", see the module docstring
    cell: int  # index of the cell in the notebook
    cell_id: str
    line: int  # line of the condition in the cell

    def where(self):
        return f"notebook {self.notebook}, cell {self.cell} (id {self.cell_id}) line {self.line}"


def is_gpu_condition(test):
    """True when the condition `test` (an ast expression) depends on the kind of machine."""
    for node in ast.walk(test):
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                values = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
                if any(isinstance(v, ast.Constant) and v.value in GPU_WORDS for v in values):
                    return True
    text = ast.unparse(test)
    return any(re.search(pattern, text) for pattern in GPU_NAMES)


def conditions(tree, scope=()):
    """(scope, condition node) for every if/elif/while/if-expression test in `tree`, in source order."""
    found = []

    def visit(node, scope):
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = (*scope, child.name)
            if isinstance(child, (ast.If, ast.IfExp, ast.While)):
                found.append((scope, child.test))
            visit(child, inner)

    visit(tree, scope)
    return sorted(found, key=lambda item: (item[1].lineno, item[1].col_offset))


def embedded_scripts(source, tree):
    """(constant name, line offset, parsed script) for every top-level NAME = "<python source>" of a
    cell whose text is a program (it defines or imports something), such as notebook 06's script."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            try:
                script = ast.parse(node.value.value)
            except SyntaxError:
                continue
            if any(isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)) for n in script.body):
                # A string opened with a backslash at the end of the line starts on the next line.
                continued = re.match(r"[rRuU]?('''|\"\"\")\\\n", ast.get_source_segment(source, node.value))
                yield node.targets[0].id, node.value.lineno - 1 + bool(continued), script


def cell_branches(notebook, index, cell):
    """The GPU branches of one code cell, without their " (2)" numbering."""
    tree = ast.parse(cell.source)
    places = [(f"cell {cell.get('id')}", 0, conditions(tree))]
    places += [(name, offset, conditions(script, (name,))) for name, offset, script in embedded_scripts(cell.source, tree)]
    branches = []
    for top, offset, found in places:
        for scope, test in found:
            if is_gpu_condition(test):
                where = ".".join(scope) if scope else top
                branches.append(Branch(notebook, f"{where}: {ast.unparse(test)}", index, cell.get("id"),
                                       offset + test.lineno))
    return branches


def number_repeats(branches):
    """Give the second and later identical keys of a notebook the suffixes " (2)", " (3)", ..."""
    seen, numbered = {}, []
    for branch in branches:
        count = seen[(branch.notebook, branch.key)] = seen.get((branch.notebook, branch.key), 0) + 1
        key = branch.key if count == 1 else f"{branch.key} ({count})"
        numbered.append(Branch(branch.notebook, key, branch.cell, branch.cell_id, branch.line))
    return numbered


# The tools/shared_cells/ files whose branches are listed once, under "shared". The other shared cells
# (datasheet.py, process_plumbing.py, torchrun_helpers.py) are still listed under each notebook that
# carries them, where tests/notebooks/test_06_ddp.py and test_08_memory.py claim them.
COUNTED_ONCE = ("install.py", "shared_setup.py", "compile_helpers.py", "rounds.py", "run_record.py")


def counted_once_titles():
    """The first lines (their start) of the copies of the shared cells in COUNTED_ONCE."""
    return tuple(title for file, (title, _) in sync_cells.TITLES.items() if file in COUNTED_ONCE)


def gpu_branches(paths=NOTEBOOKS):
    """{(notebook, key): Branch} for every GPU, Mac, AMD or Windows branch of the notebooks at `paths`."""
    branches, seen = [], set()
    titles = counted_once_titles()
    for path in paths:
        for index, cell in enumerate(read(path).cells):
            if cell.cell_type != "code":
                continue
            title = next((title for title in titles if cell.source.startswith(title)), None)
            if title is not None and title in seen:
                continue  # the same cell as in an earlier notebook (tools/sync_cells.py --check says so)
            if title is not None:
                seen.add(title)
            branches += cell_branches("shared" if title else path.name[:2], index, cell)
    return {(branch.notebook, branch.key): branch for branch in number_repeats(branches)}


# --- Who executes each branch ----------------------------------------------------------------------------

# Branches no test executes yet, each with why (or who will add the test). The list may only shrink,
# and it is empty: every branch has its test, and a new one comes with its test. An entry that a test
# now claims, or that is no longer in the notebooks, fails the test below.
# A top-level cell is best tested by running it with stand-ins for `device` and torch.cuda through
# notebook_code.run_cell (as tests/notebooks/test_08_gpu_branches.py's test of cell remedies-alone-run
# does), or by moving its decision into a small function that a test calls.
KNOWN_UNTESTED = {}


def marker_claims(test_dir=REPO / "tests"):
    """{(notebook, key): ["tests/file.py::test_name", ...]} from @pytest.mark.gpu_branch(...) markers,
    read from the source of every test file (so that they count however pytest was started)."""
    claims = {}
    test_dir = Path(test_dir)
    for path in sorted(test_dir.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for decorator in node.decorator_list:
                if (isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == "pytest.mark.gpu_branch"
                        and len(decorator.args) == 2):
                    notebook, key = (ast.literal_eval(arg) for arg in decorator.args)
                    claims.setdefault((notebook, key), []).append(
                        f"tests/{path.relative_to(test_dir).as_posix()}::{node.name}")
    return claims


def all_claims():
    return marker_claims()


def test_exists(node_id):
    """True when "tests/file.py::test_name" (a parametrized id's [...] left out) names a test function."""
    file_name, _, name = node_id.partition("::")
    return name.split("[")[0] in function_names(REPO / file_name)


@functools.cache
def function_names(path):
    """The names of the functions a Python file defines (none for a file that is not there); read once
    per file, as hundreds of claims name a few files."""
    if not path.is_file():
        return frozenset()
    return frozenset(node.name for node in ast.walk(ast.parse(path.read_text()))
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))


test_exists.__test__ = False  # a helper, not a test


def describe(branches):
    return "\n".join(f"  ({notebook!r}, {key!r}),  # {branch.where()}"
                     for (notebook, key), branch in sorted(branches.items()))


def unclaimed(branches, claims, known):
    """The branches that no test claims and that are not known to be untested."""
    return {name: branch for name, branch in branches.items() if name not in claims and name not in known}


def stale(known, branches, claims):
    """(entries of `known` that are no longer branches, entries that a test now claims)."""
    return [name for name in known if name not in branches], [name for name in known if name in claims]


def bad_claims(claims, branches, exists=test_exists):
    """Claims of a key that is no branch, or by a test that does not exist: (key, test) pairs."""
    return [(name, node_id) for name, tests in claims.items() for node_id in tests
            if name not in branches or not exists(node_id)]


def test_every_gpu_branch_is_executed_by_a_test():
    missing = unclaimed(gpu_branches(), all_claims(), KNOWN_UNTESTED)
    assert not missing, (
        f"{len(missing)} GPU, Mac, AMD or Windows branch(es) that no test executes. Add a test that runs "
        "the side such a machine takes, marked @pytest.mark.gpu_branch(notebook, key) (see this file's "
        "docstring):\n" + describe(missing))


def test_the_known_untested_list_is_not_stale():
    gone, claimed = stale(KNOWN_UNTESTED, gpu_branches(), all_claims())
    assert not gone, f"KNOWN_UNTESTED names branches the notebooks no longer have: {gone}"
    assert not claimed, f"KNOWN_UNTESTED names branches a test now executes (take them out): {claimed}"


def test_every_claim_names_a_branch_and_a_test_that_exist():
    wrong = bad_claims(all_claims(), gpu_branches())
    assert not wrong, f"claims of a key that is not a GPU branch, or by a test that does not exist: {wrong}"


# --- The scanner, on made-up cells ------------------------------------------------------------------------

def fake_notebook(*sources):
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source, id=f"c{index}") for index, source in enumerate(sources)]
    return notebook


def keys(*sources, monkeypatch=None):
    notebook = fake_notebook(*sources)
    found = []
    for index, cell in enumerate(notebook.cells):
        found += cell_branches("09", index, cell)
    return [branch.key for branch in number_repeats(found)]


def test_the_scanner_finds_device_platform_and_backend_conditions_with_stable_keys():
    cell = '''
def synchronize(device):
    if device.type == "cuda":
        pass
    elif device.type != 'cpu':
        pass
    if device.type == "cuda":
        pass

class Run:
    def step(self, on):
        return 1 if on in ("cpu", "mps") else 2

if platform.system() == "Darwin" and FAST:
    print("mac")
if size > 3:  # not a GPU branch
    print(size)
'''
    assert keys(cell) == ["synchronize: device.type == 'cuda'", "synchronize: device.type != 'cpu'",
                          "synchronize: device.type == 'cuda' (2)", "Run.step: on in ('cpu', 'mps')",
                          "cell c0: platform.system() == 'Darwin' and FAST"]


def test_the_scanner_reads_names_and_pytorch_calls_and_embedded_scripts():
    cell = '''
SCRIPT = """
import torch

def start(cpu_only):
    use_gpu = torch.cuda.is_available() and not cpu_only
    return torch.device("cuda") if use_gpu else torch.device("cpu")
"""
NOT_A_SCRIPT = "if the GPU is there"
while torch.backends.mps.is_available():
    break
label = "ROCm" if facts["hip_build"] else "CUDA"
'''
    assert keys(cell) == ["cell c0: torch.backends.mps.is_available()", "cell c0: facts['hip_build']",
                          "SCRIPT.start: use_gpu"]
    branches = cell_branches("09", 0, fake_notebook(cell).cells[0])
    script_branch = next(branch for branch in branches if branch.key.startswith("SCRIPT"))
    assert cell.splitlines()[script_branch.line - 1].strip().startswith("return torch.device(\"cuda\")")


def test_a_key_survives_reformatting_and_moving_but_not_a_changed_condition():
    first = keys("x = 1\n\n\ndef pick(device):\n    return 1 if device.type=='mps' else 0\n")
    moved = keys("y = 2\n", "def pick(device):\n    return (1 if device.type == \"mps\"\n            else 0)\n")
    changed = keys("def pick(device):\n    return 1 if device.type == 'xpu' else 0\n")
    assert first == moved == ["pick: device.type == 'mps'"]
    assert changed != first


def test_markers_are_read_from_the_test_files(tmp_path):
    (tmp_path / "test_x.py").write_text(
        'import pytest\n\n@pytest.mark.gpu_branch("05", "train_step: run.cuda_graphs")\n'
        '@pytest.mark.gpu_branch("shared", "synchronize: device.type == \'mps\'")\ndef test_a():\n    pass\n'
        '@pytest.mark.parametrize("x", [1])\ndef test_b(x):\n    pass\n')
    assert marker_claims(tmp_path) == {
        ("05", "train_step: run.cuda_graphs"): ["tests/test_x.py::test_a"],
        ("shared", "synchronize: device.type == 'mps'"): ["tests/test_x.py::test_a"]}


def test_a_claim_must_name_a_test_function_that_exists():
    assert test_exists("tests/collection/test_gpu_branches.py::test_markers_are_read_from_the_test_files")
    assert test_exists("tests/collection/test_gpu_branches.py::test_markers_are_read_from_the_test_files[x]")
    assert not test_exists("tests/collection/test_gpu_branches.py::test_no_such_test")
    assert not test_exists("tests/test_no_such_file.py::test_a")


def test_the_shared_cells_are_listed_once():
    branches = gpu_branches()
    assert ("shared", "synchronize: device.type == 'mps'") in branches
    assert not any(key.startswith("synchronize:") for notebook, key in branches if notebook != "shared")
    # a shared cell that only some notebooks carry (05, 09, 10) is listed once too
    assert ("shared", "choose_compile_backend: device_type == 'cuda'") in branches
    assert not any(key.startswith("choose_compile_backend:") for notebook, key in branches
                   if notebook != "shared")


def test_unclaimed_stale_and_wrong_entries_are_found():
    branch = Branch("05", "f: x", 1, "c1", 2)
    branches = {("05", "f: x"): branch, ("05", "g: y"): branch, ("05", "h: z"): branch}
    claims = {("05", "f: x"): ["tests/test_a.py::test_f"], ("05", "gone: w"): ["tests/test_a.py::test_w"]}
    known = {("05", "g: y"): "waiting", ("05", "f: x"): "claimed meanwhile", ("05", "old: v"): "gone"}
    assert list(unclaimed(branches, claims, known)) == [("05", "h: z")]
    assert stale(known, branches, claims) == ([("05", "old: v")], [("05", "f: x")])
    assert bad_claims(claims, branches, exists=lambda node_id: node_id.endswith("test_f")) == [
        (("05", "gone: w"), "tests/test_a.py::test_w")]
    assert bad_claims(claims, branches, exists=lambda node_id: False) == [
        (("05", "f: x"), "tests/test_a.py::test_f"), (("05", "gone: w"), "tests/test_a.py::test_w")]
