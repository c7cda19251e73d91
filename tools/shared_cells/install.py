#@title Setup, part 1: install what Colab or Kaggle lack (elsewhere this only checks)
# Each package: (oldest version that works, what is lost without it; None: cannot run without)
PACKAGES = {"torch": ("2.6", None)}  # each copy keeps its own PACKAGES: this line stands for it
import importlib
import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import warnings

ON_COLAB_OR_KAGGLE = "google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ
NEVER_INSTALL = {"torch", "torchvision"}  # a hosted service's own build matches its GPU driver
# The module whose import proves that a package works beside the packages it needs, where it is not
# the package's own name; None: the notebook imports it itself, later (Triton reads TRITON_INTERPRET
# when it is imported, so a notebook sets that first).
IMPORT_CHECK = {"fastai": "fastai.vision.all", "plum-dispatch": "plum", "triton": None}
# fastai works only beside matching releases of these; they are upgraded together with it.
FASTAI_HELPERS = ("fastcore", "fasttransform", "plum-dispatch")


class SetupStopped(Exception):
    """Stops "Run All" with a plain message instead of a traceback."""

    def _render_traceback_(self):
        return [str(self)]


def version_tuple(text, length=4):
    """'2.14.1+cu130' -> (2, 14, 1, 0): the leading number of each dotted part, zero-padded."""
    numbers = []
    for part in text.split("+")[0].split("."):
        digits = re.match(r"\d*", part).group()
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers + [0] * (length - len(numbers)))[:length]


# Measured by running notebook 03 with each set: from 2.8.12 on, fastai works with what pip installs
# beside it today; older releases only beside the helpers they came out with (Colab's 2.8.8,
# Kaggle's 2.8.7). These sets decide what to install; importing a package decides whether it works.
FASTAI_FIX = "2.8.12"


def fastai_breakage(version_of):
    """(what breaks, why) for a fastai set measured to fail, or None: 'fastai' when training fails,
    'fastai export' when only saving the trained model does."""
    fastai = version_of("fastai")
    if fastai is None or version_tuple(fastai) >= version_tuple(FASTAI_FIX):
        return None
    helper = {name: version_of(name) for name in FASTAI_HELPERS}

    def newer(name, version):
        return helper[name] is not None and version_tuple(helper[name]) >= version_tuple(version)

    if version_tuple(fastai) >= version_tuple("2.8.11"):
        return "fastai", f"fastai {fastai} lacks an import that resizing pictures needs"
    if version_tuple(fastai) >= version_tuple("2.8.8") and newer("fasttransform", "0.0.3"):
        return "fastai", f"fastai {fastai} fails beside fasttransform {helper['fasttransform']}"
    if version_tuple(fastai) < version_tuple("2.8.8") and newer("fastcore", "2"):
        return "fastai", f"fastai {fastai} fails beside fastcore {helper['fastcore']}"
    if newer("plum-dispatch", "2.10"):
        return "fastai export", (f"fastai {fastai} cannot export a trained model beside "
                                 f"plum-dispatch {helper['plum-dispatch']}")
    return None


def module_of(name):
    """The module that `import` loads to check package `name`."""
    return IMPORT_CHECK.get(name, name.replace("-", "_"))


def package_problems(packages, installed_version=importlib.metadata.version):
    """({package: what is wrong}, {feature: why it is lost}) for what is missing, too old or broken;
    the second dict holds the measured breakages that cost only part of a package."""
    def version_of(name):
        try:
            return installed_version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    problems, limits = {}, {}
    for name, (oldest, _) in packages.items():
        version = version_of(name)
        if version is None:
            problems[name] = "not installed"
        elif version_tuple(version) < version_tuple(oldest):
            problems[name] = f"version {version} is installed, {oldest} or newer is needed"
        elif name == "fastai" and fastai_breakage(version_of):
            feature, why = fastai_breakage(version_of)
            (problems if feature == name else limits)[feature] = why
    return problems, limits


def import_problem(name, import_module=importlib.import_module):
    """None when package `name` imports, else the last line of the error its import raises."""
    if module_of(name) is None:
        return None
    try:
        with warnings.catch_warnings():  # warnings about a package's own code are for its authors
            warnings.simplefilter("ignore")
            import_module(module_of(name))
    except Exception as error:  # ImportError, but a broken set also raises NameError, TypeError
        lines = [line.strip() for line in str(error).splitlines() if line.strip()] or ["no message"]
        return f"importing it fails ({type(error).__name__}: {lines[-1]})"
    return None


def check_packages(packages, installed_version=importlib.metadata.version,
                   import_module=importlib.import_module):
    """package_problems, then an import of each package that looks installed: a release pair nobody
    measured shows up here, as a package that cannot be imported."""
    problems, limits = package_problems(packages, installed_version)
    for name in packages:
        if name not in problems and (problem := import_problem(name, import_module)):
            problems[name] = problem
    return problems, limits


def install_specs(name, packages):
    """What pip installs to fix `name`: fastai with its helper packages, else its minimum."""
    if name.startswith("fastai"):
        return [f"fastai>={FASTAI_FIX}", *FASTAI_HELPERS]
    return [f"{name}>={packages[name][0]}"]


def pip_failure(returncode, stdout, stderr):
    """Why pip failed, in one line: the last non-empty line it wrote, else its exit code."""
    for text in (stderr, stdout):
        text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text or "")  # colours: Jupyter sets FORCE_COLOR
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            return lines[-1]
    return f"pip exited with code {returncode} and printed nothing"


def held_back(installed_version=importlib.metadata.version):
    """Constraints that keep the installed PyTorch packages exactly as they are while pip works."""
    pins = []
    for name in sorted(NEVER_INSTALL):
        try:
            pins.append(f"{name}=={installed_version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return pins


def pip_command(specs, constraints_file):
    """pip upgrades `specs`, and only what they need (its default strategy), within constraints."""
    return [sys.executable, "-m", "pip", "install", "--quiet", "--no-color", "--upgrade",
            "--constraint", constraints_file, *specs]


def setup_report(problems, packages, hosted, install_error=None, limits=None):
    """One plain paragraph: what is missing or broken, what to do about it, and what still works.
    On Colab and Kaggle the cell has already tried pip; `install_error` says why that failed."""
    limits = limits or {}
    if not problems and not limits:
        return "Packages ready: " + ", ".join(packages)
    commands = []  # each on a line of its own, so that it can be copied whole
    words = [f"{name}: {problem}." for name, problem in problems.items()]
    words += [f"{why}: what needs {feature} is skipped." for feature, why in limits.items()]
    fixable = [name for name in {**problems, **limits} if not (hosted and name in NEVER_INSTALL)]
    if install_error:
        words.append(f"Installing failed ({install_error}).")
    if hosted and fixable and install_error:
        words.append("On Kaggle, switch on Settings > Internet (it is off by default); on Colab, "
                     "check the connection. Then run this cell again.")
    elif hosted and fixable:
        words.append("pip finished without an error, yet this remains: restart the session (Colab: "
                     "Runtime > Restart session) and run all cells again.")
    elif fixable:
        specs = " ".join(f'"{spec}"' for name in fixable for spec in install_specs(name, packages))
        words.append("Install them with the first command below (see README.md).")
        commands.append(f"{sys.executable} -m pip install --upgrade {specs}")
    unimportable = [name for name, problem in problems.items()
                    if problem.startswith("importing") and name not in NEVER_INSTALL]
    if unimportable and fixable:
        words.append("If importing still fails after that, reinstall the package itself with the "
                     "last command below, then restart the Jupyter kernel.")
        commands.append(f"{sys.executable} -m pip install --force-reinstall --no-deps "
                        + " ".join(unimportable))
    if hosted and set(problems) & NEVER_INSTALL:
        words.append("For PyTorch on Colab or Kaggle, pick a newer runtime or environment image.")
    stops = [name for name in problems if packages[name][1] is None]
    if stops:
        words.append(f"This notebook cannot run without {' and '.join(stops)}, so it stops here.")
    elif problems:
        losses = "; ".join(f"without {name}, {packages[name][1]}" for name in problems)
        words.append(f"Everything else still works: {losses}.")
    else:
        words.append("Everything else works.")
    paragraph = textwrap.fill(" ".join(words), width=100, break_on_hyphens=False)
    return "\n".join([paragraph, *("    " + command for command in commands)])


problems, limits = check_packages(PACKAGES)
install_error = None
to_install = [name for name in {**problems, **limits} if name not in NEVER_INSTALL]
if ON_COLAB_OR_KAGGLE and to_install:
    specs = sorted({spec for name in to_install for spec in install_specs(name, PACKAGES)})
    with tempfile.TemporaryDirectory() as folder:
        constraints_file = os.path.join(folder, "constraints.txt")
        with open(constraints_file, "w") as file:
            file.write("\n".join(held_back()) + "\n")
        try:
            subprocess.run(pip_command(specs, constraints_file),
                           check=True, capture_output=True, text=True, timeout=900)
        except subprocess.CalledProcessError as error:
            install_error = pip_failure(error.returncode, error.stdout, error.stderr)
        except subprocess.TimeoutExpired:
            install_error = "pip did not finish within 15 minutes"
    importlib.invalidate_caches()
    names = {re.split(r"[<>=]", spec)[0] for spec in specs}
    changed = {(module_of(name) or name).split(".")[0] for name in names}
    for module in [module for module in sys.modules if module.split(".")[0] in changed]:
        del sys.modules[module]  # forget what a failed import left behind, and the old releases
    problems, limits = check_packages(PACKAGES)
UNAVAILABLE_WHY = {**problems, **limits}  # what later cells skip, and why
UNAVAILABLE = set(UNAVAILABLE_WHY)
print(setup_report(problems, PACKAGES, ON_COLAB_OR_KAGGLE, install_error, limits))
if any(PACKAGES[name][1] is None for name in problems):
    raise SetupStopped("Setup stopped: this notebook needs the package(s) named above.")
