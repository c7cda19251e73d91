#@title Shared setup: helpers, the device and the fast switch (the same cell in every notebook)
import base64
import functools
import hashlib
import html
import inspect
import io
import json
import linecache
import os
import reprlib
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch
from IPython.display import display


def fast_mode():
    """True when the environment variable TUTORIAL_FAST is 1: the notebook runs small and fast."""
    return os.environ.get("TUTORIAL_FAST", "0") == "1"


def pick_device():
    """The accelerator PyTorch finds (NVIDIA or AMD GPU, Apple's MPS, ...), else the CPU."""
    if torch.accelerator.is_available():
        return torch.accelerator.current_accelerator()
    return torch.device("cpu")


def not_the_cpu(device):
    """A device other than the CPU to show device errors with: `device` itself when it is a GPU
    (or another accelerator), else the `meta` device, a stand-in whose tensors have a shape but no
    numbers."""
    return torch.device("meta") if device.type == "cpu" else device


def find_data_dir(start=None):
    """The repository's data/ folder inside the repository, else data/ in the working folder."""
    start = Path.cwd() if start is None else Path(start)
    for folder in (start, *start.parents):
        if (folder / "requirements.txt").is_file() and (folder / "notebooks").is_dir():
            return folder / "data"
    return start / "data"


def synchronize(device):
    """Wait until the work queued on `device` is done: GPU calls return before the GPU finishes."""
    device = torch.device(device)
    if device.type == "cuda":  # NVIDIA GPUs, and AMD GPUs under ROCm (PyTorch calls both "cuda")
        torch.cuda.synchronize(device)
    elif device.type == "mps":  # torch.accelerator.synchronize skips MPS before PyTorch 2.7
        torch.mps.synchronize()
    elif device.type != "cpu":
        torch.accelerator.synchronize(device)


def time_it(fn, device, repeats=3, warmup=1, clock=time.perf_counter):
    """Median seconds of fn(): `warmup` untimed runs, then `repeats` runs, each synchronized."""
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(repeats):
        synchronize(device)
        start = clock()
        fn()
        synchronize(device)
        seconds.append(clock() - start)
    return statistics.median(seconds)


def hosted_service(modules=None, environ=None):
    """'Colab' or 'Kaggle' when the notebook runs on that service, else None. Kaggle first: its
    image is built on Colab's, so google.colab may be there too."""
    modules = sys.modules if modules is None else modules
    environ = os.environ if environ is None else environ
    if "KAGGLE_KERNEL_RUN_TYPE" in environ:
        return "Kaggle"
    if "google.colab" in modules:
        return "Colab"
    return None


GPU_SWITCH = {"Colab": "Runtime > Change runtime type > T4 GPU > Save",
              "Kaggle": "Settings > Accelerator > GPU T4 x2"}


def no_gpu_warning(service, device_type):
    """Lines that cannot be missed when a Colab or Kaggle notebook runs without a GPU, else None."""
    if service is None or device_type != "cpu":
        return None
    bar = "!" * 72
    return (f"{bar}\nNO GPU: this {service} session has none, so every cell below runs on the "
            f"CPU.\nTo use a GPU: {GPU_SWITCH[service]}, then run all cells again.\n{bar}")


# Colours that read for the common colour-vision deficiencies (Okabe and Ito's palette). Two
# series on one chart also differ in line style and marker (SERIES_STYLES), so that colour never
# carries a difference alone; a colour map is "cividis".
PALETTE = {"blue": "#0072B2", "orange": "#E69F00", "green": "#009E73", "vermillion": "#D55E00",
           "sky": "#56B4E9", "purple": "#CC79A7", "yellow": "#F0E442", "grey": "#999999"}
SERIES_STYLES = [{"color": "#0072B2", "linestyle": "-", "marker": "o"},  # blue
                 {"color": "#E69F00", "linestyle": "--", "marker": "s"},  # orange
                 {"color": "#009E73", "linestyle": ":", "marker": "^"},  # green
                 {"color": "#D55E00", "linestyle": "-.", "marker": "D"}]  # vermillion


def figure_bundle(png, alt):
    """(data, metadata) that show a PNG with its alt text: JupyterLab and Colab draw the HTML form,
    whose <img> carries the alt; nbconvert reads the PNG's `alt` from the metadata; text/plain says
    what the figure shows where no picture can be drawn."""
    data = base64.b64encode(png).decode("ascii")
    html_form = f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt, quote=True)}">'
    return ({"image/png": data, "text/html": html_form, "text/plain": f"[figure: {alt}]"},
            {"image/png": {"alt": alt}})


def show_figure(figure, alt):
    """Show a matplotlib figure with its alt text, which a screen reader reads aloud: say what it
    shows, in a sentence. The figure is then closed, so that it is not shown twice."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    plt.close(figure)
    data, metadata = figure_bundle(buffer.getvalue(), alt)
    display(data, metadata=metadata, raw=True)


FIGURES_MIME = "application/vnd.gpu-tutorials.figures+json"


def figures_record(device, fast, fallback, figures):
    """The record report_figures shows: the figures as JSON, the device, the size, the fallback."""
    return {"device": str(device), "device_type": device.type, "fast": fast, "fallback": fallback,
            "figures": json.loads(json.dumps(figures, default=str))}


FIGURES_REPORTED = []  # what report_figures showed, in order: the record cell reads the core's


def report_figures(fallback=None, **figures):
    """Show the figures this notebook measured as one machine-readable output (tools/gpu_run.py
    records them), and keep them for the record cell; `fallback` says what stood in for the real
    thing, if anything did."""
    record = figures_record(device, FAST, fallback, figures)
    FIGURES_REPORTED.append(record)
    display({FIGURES_MIME: record, "text/plain": ""}, raw=True)  # no text: a learner sees nothing


class Feedback(str):
    """An exercise check's verdict, shown as plain text when a cell ends with it: 'PASSED ...',
    'NOT DONE YET ...' or 'NOT YET RIGHT: ' and what is wrong."""

    def __repr__(self):
        return str(self)


def not_done(*values):
    """True while a value the learner is asked to write is still the starter's `...`."""
    return any(value is Ellipsis for value in values)


def learner_code(values):
    """The code objects of the learner's functions and classes among `values`, nested ones too."""
    found = set()

    def add(code):
        found.add(code)
        for constant in code.co_consts:
            if inspect.iscode(constant):
                add(constant)

    for value in values:
        members = vars(value).values() if inspect.isclass(value) else [value]
        for member in members:
            function = getattr(member, "__func__", member)  # a staticmethod's or classmethod's
            if inspect.isfunction(function):
                add(function.__code__)
    return found


def short(value):
    """`value` as a short text with its type: 'None (a NoneType)', "'abc' (a str)", '3 (an int)'."""
    kind = type(value).__name__
    return f"{reprlib.repr(value)} ({'an' if kind[0].lower() in 'aeiou' else 'a'} {kind})"


def what_went_wrong(error, returned, code, answers=()):
    """What to tell a learner when checking their answer raised `error`: where in their own code
    (`code`: its code objects) it was raised; else what their function returned (`returned`:
    [(name, value)], one per call) or the value they gave (`answers`) that the check could not
    use."""
    raised = f"{type(error).__name__}: {error}"
    mine = [(frame.f_code, line) for frame, line in traceback.walk_tb(error.__traceback__)
            if frame.f_code in code]
    if mine:
        names = [where.co_name for where, _ in mine if not where.co_name.startswith("<")]
        where, line = mine[-1]
        text = linecache.getline(where.co_filename, line).strip()
        name = names[-1] if names else where.co_name
        return (f"your {name} raised {raised} at line {line} of its cell"
                + (f": `{text}`." if text else "."))
    if returned:
        name, value = returned[-1]
        return f"your {name} returned {short(value)}, and the check could not use it: {raised}."
    if answers:
        return f"the check could not use your answer {short(answers[0])}: {raised}."
    return f"checking your answer stopped with {raised}."


def exercise_check(check):
    """Make an exercise's check answer whatever the learner wrote: an exception their code raises,
    or one the check meets on what their code returned, becomes a NOT YET RIGHT saying what and
    where."""
    @functools.wraps(check)
    def answered(*args, **kwargs):
        returned, code = [], learner_code([*args, *kwargs.values()])

        def watched(function):
            if not inspect.isfunction(function):
                return function

            @functools.wraps(function)
            def call(*inner_args, **inner_kwargs):
                result = function(*inner_args, **inner_kwargs)
                returned.append((function.__name__, result))
                return result
            return call

        try:
            watched_kwargs = {key: watched(value) for key, value in kwargs.items()}
            return check(*map(watched, args), **watched_kwargs)
        except Exception as error:  # the learner's code, or what it returned: say so, go on
            answers = [] if code else [value for value in [*args, *kwargs.values()]
                                       if not callable(value)]
            return Feedback("NOT YET RIGHT: " + what_went_wrong(error, returned, code, answers))
    return answered


def cell_key(source):
    """A short name for a cell's source: the record cell knows the core's cells by it."""
    return hashlib.sha256(source.strip().encode("utf-8")).hexdigest()[:10]


class CellClock:
    """Times every cell the Jupyter kernel runs from now on (IPython's pre_run_cell and
    post_run_cell events, which Colab's and Kaggle's Jupyter kernels fire too): its key, seconds
    and whether it raised."""

    def __init__(self, clock=time.perf_counter):
        self.clock, self.runs, self.started = clock, [], None

    def pre(self, info):
        self.started = (cell_key(getattr(info, "raw_cell", None) or ""), self.clock())

    def post(self, result):
        if self.started is None:  # this cell started the clock: its start was not seen
            return
        (key, start), self.started = self.started, None
        error = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
        self.runs.append({"key": key, "seconds": self.clock() - start, "failed": error is not None})


def start_cell_clock(shell, old=None):
    """A CellClock listening to `shell` (None outside IPython); a clock from an earlier run of this
    cell stops listening, so that every cell is timed once."""
    if shell is None:
        return CellClock()
    if old is not None:
        for event, callback in (("pre_run_cell", old.pre), ("post_run_cell", old.post)):
            if callback in shell.events.callbacks[event]:
                shell.events.unregister(event, callback)
    clock = CellClock()
    shell.events.register("pre_run_cell", clock.pre)
    shell.events.register("post_run_cell", clock.post)
    return clock


def ipython_shell():
    """The IPython shell running this notebook, or None (a plain Python process)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


NOTEBOOK_VERSION = "this line is written by the collection's sync tool"
CELL_CLOCK = start_cell_clock(ipython_shell(), globals().get("CELL_CLOCK"))
FAST = fast_mode()
device = pick_device()
DATA_DIR = find_data_dir()
DATA_DIR.mkdir(parents=True, exist_ok=True)
print(f"PyTorch {torch.__version__} | device: {device} | fast mode: {FAST} | data: {DATA_DIR}")
if warning := no_gpu_warning(hosted_service(), device.type):
    print(warning)
