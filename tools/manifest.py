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
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "notebooks" / "manifest.toml"
HARDWARE = ("Colab T4", "Kaggle T4 x2")  # what a class is taught on: one T4, or Kaggle's two
EVERY_NOTEBOOK_CARRIES = ("install.py", "shared_setup.py")  # tools/shared_cells/ files in every notebook


@dataclass(frozen=True)
class Allowed:
    """A pattern a rule lets through in one notebook, and why."""
    pattern: str
    why: str


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
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def path(self):
        return REPO / "notebooks" / self.file

    @property
    def carries(self):
        """Every tools/shared_cells/ file this notebook carries a copy of."""
        return EVERY_NOTEBOOK_CARRIES + tuple(self.shared_cells)


REQUIRED = [f.name for f in fields(Notebook) if f.default is MISSING and f.default_factory is MISSING
            and f.name != "number"]
KNOWN = {f.name for f in fields(Notebook)} - {"number", "extra"}


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
    for pattern in entry.get("taught_calls", []):
        try:
            re.compile(pattern)
        except re.error as error:
            problems.append(f'[notebooks."{number}"] taught_calls: {pattern!r} is no regular expression '
                            f"({error})")
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
