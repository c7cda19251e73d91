"""The collection's per-notebook facts, read from notebooks/manifest.toml: the one place that lists them.

Every tool and test that needs a fact about one notebook (which shared cells it carries, the calls its
core teaches, its T4 run-minute floor, the stderr its prose explains, ...) reads it here; no other file
holds a per-notebook list. Adding a notebook is the notebook, its test file and its entry in the manifest
(CONTRIBUTING.md, "Adding a notebook"). It needs nothing beyond the standard library (tomllib; tomli on
Python 3.10, which the lock installs there), so a throwaway environment can import it too.

    from manifest import notebooks
    notebooks()["05"].taught_calls
"""
import functools
import re
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "notebooks" / "manifest.toml"
HARDWARE = ("Colab T4", "Kaggle T4 x2")
# Where a verdict must hold (tests/support/verdicts.py says how each is told) and where a promise is searched.
SITUATIONS = ("always", "cpu", "gpu", "offline", "triton", "cpu_compiler")
PLACES = ("title", "core", "notebook")  # what a class is taught on: one T4, or Kaggle's two
EVERY_NOTEBOOK_CARRIES = ("install.py", "shared_setup.py", "run_record.py")  # in every notebook


@dataclass(frozen=True)
class Allowed:
    """A pattern a rule lets through in one notebook, and why."""
    pattern: str
    why: str


@dataclass(frozen=True)
class Verdict:
    """What a cell must print in a situation: a regular expression searched (re.MULTILINE) in what the
    cell printed or showed as text, and what it proves."""
    cell: str
    pattern: str
    when: str
    why: str


@dataclass(frozen=True)
class Promise:
    """Words a learner relies on: a regular expression searched in a place of the notebook (line breaks
    read as spaces); present=False for a corrected claim that must not come back."""
    pattern: str
    where: str
    why: str
    present: bool = True


@dataclass(frozen=True)
class Notebook:
    """One notebook's entry in the manifest (CONTRIBUTING.md, "The manifest", says what each means)."""
    number: str
    file: str
    finds_out: str
    hardware: str
    t4_run_minutes_at_least: float
    t4_floor_reason: str
    test_seconds: dict  # {"notebook": its nbval run, "tests": its test files}, seconds in a test run
    taught_calls: tuple
    shared_cells: tuple = ()
    allowed_stderr: tuple = ()
    allowed_asserts: tuple = ()
    verdicts: tuple = ()
    promises: tuple = ()
    internet: bool = False  # it downloads (notebook 03's photos): Kaggle's metadata asks for Internet on
    objectives: tuple = ()  # two to four "you will be able to ..." (each practised by a Step or exercise)
    builds_on: str = ""  # the number of the notebook a class should have done first ("" for none)
    teaching_minutes: int = 0  # the core by the class rule, rounded up to 5
    exercise_minutes: int = 0  # the exercises, in all
    t4_run_minutes: float = 0  # the core's running time on a T4, an estimate until a GPU record says

    @property
    def path(self):
        return REPO / "notebooks" / self.file

    @property
    def carries(self):
        """Every tools/shared_cells/ file this notebook carries a copy of."""
        return EVERY_NOTEBOOK_CARRIES + tuple(self.shared_cells)


REQUIRED = [f.name for f in fields(Notebook) if f.default is MISSING and f.default_factory is MISSING
            and f.name != "number"]
KNOWN = {f.name for f in fields(Notebook)} - {"number"}


def _regex_problem(pattern):
    try:
        re.compile(pattern)
    except re.error as error:
        return f"{pattern!r} is no regular expression ({error})"
    return None


def entry_problems(number, entry):
    """What is wrong with one entry of the manifest, in words ([] when nothing is)."""
    problems = []
    if not re.fullmatch(r"\d\d", number):
        problems.append(f'[notebooks."{number}"]: a notebook\'s key is its two-digit number')
    missing = [name for name in REQUIRED if name not in entry]
    if missing:
        problems.append(f'[notebooks."{number}"] lacks {", ".join(missing)}')
    unknown = sorted(set(entry) - KNOWN)
    if unknown:
        problems.append(f'[notebooks."{number}"] has fields no tool reads: {", ".join(unknown)} '
                        f"(tools/manifest.py's Notebook lists the fields)")
    if "file" in entry and not re.fullmatch(rf"{re.escape(number)}_[a-z0-9_]+\.ipynb", entry["file"]):
        problems.append(f'[notebooks."{number}"] file = {entry["file"]!r}: expected "{number}_words.ipynb"')
    if entry.get("hardware", HARDWARE[0]) not in HARDWARE:
        problems.append(f'[notebooks."{number}"] hardware = {entry["hardware"]!r}: one of {HARDWARE}')
    if "test_seconds" in entry and set(entry["test_seconds"]) != {"notebook", "tests"}:
        problems.append(f'[notebooks."{number}"] test_seconds = {{notebook = N, tests = M}}')
    where = f'[notebooks."{number}"]'
    problems += [f"{where} taught_calls: {problem}" for problem in map(_regex_problem,
                 entry.get("taught_calls", [])) if problem]
    for verdict in entry.get("verdicts", []):
        if set(verdict) != {"cell", "pattern", "when", "why"}:
            problems.append(f"{where} a verdict needs cell, pattern, when and why: {verdict}")
        elif verdict["when"] not in SITUATIONS:
            problems.append(f"{where} a verdict of {verdict['cell']} holds when = {verdict['when']!r}: "
                            f"one of {SITUATIONS}")
        elif _regex_problem(verdict["pattern"]):
            problems.append(f"{where} a verdict of {verdict['cell']}: {_regex_problem(verdict['pattern'])}")
    for promise in entry.get("promises", []):
        if not {"pattern", "where", "why"} <= set(promise) <= {"pattern", "where", "why", "present"}:
            problems.append(f"{where} a promise needs pattern, where and why (and may say present): "
                            f"{promise}")
        elif promise["where"] not in PLACES:
            problems.append(f"{where} a promise is searched where = {promise['where']!r}: one of {PLACES}")
        elif _regex_problem(promise["pattern"]):
            problems.append(f"{where} a promise: {_regex_problem(promise['pattern'])}")
    return problems


def parse(text):
    """{number: Notebook} from the manifest's text; ValueError naming every problem."""
    data = tomllib.loads(text)
    entries = data.get("notebooks", {})
    problems = [f"a top-level table no tool reads: {name}" for name in data if name != "notebooks"]
    for number, entry in entries.items():
        problems += entry_problems(number, entry)
    if problems:
        raise ValueError("notebooks/manifest.toml: " + "; ".join(problems))
    found = {}
    for number, entry in sorted(entries.items()):
        values = dict(entry)
        values["taught_calls"] = tuple(values["taught_calls"])
        values["shared_cells"] = tuple(values.get("shared_cells", ()))
        values["allowed_stderr"] = tuple(Allowed(item["pattern"], item["why"])
                                         for item in values.get("allowed_stderr", ()))
        values["allowed_asserts"] = tuple(Allowed(item["cell"], item["why"])
                                          for item in values.get("allowed_asserts", ()))
        values["verdicts"] = tuple(Verdict(**item) for item in values.get("verdicts", ()))
        values["promises"] = tuple(Promise(**item) for item in values.get("promises", ()))
        values["objectives"] = tuple(values.get("objectives", ()))
        found[number] = Notebook(number=number, **values)
    return found


@functools.cache
def _read(path):
    return parse(Path(path).read_text(encoding="utf-8"))


def notebooks(path=MANIFEST):
    """{number: Notebook} of every notebook in the manifest, in order."""
    return _read(str(path))


def notebook(number, path=MANIFEST):
    """The manifest's entry for notebook `number` ('05'); KeyError naming the manifest when none."""
    entries = notebooks(path)
    if number not in entries:
        raise KeyError(f"notebook {number} has no entry in notebooks/manifest.toml")
    return entries[number]


def folder_problems(entries, folder):
    """Where the manifest and the notebooks folder disagree: a notebook without an entry, an entry
    without its notebook."""
    files = {path.name for path in Path(folder).glob("[0-9][0-9]_*.ipynb")}
    named = {entry.file for entry in entries.values()}
    return ([f"{name} has no entry in notebooks/manifest.toml" for name in sorted(files - named)]
            + [f"notebooks/manifest.toml names {name}, which is not in notebooks/"
               for name in sorted(named - files)])
