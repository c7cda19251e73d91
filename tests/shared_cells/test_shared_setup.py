"""The helpers of the shared setup cell, tested once.

The cell is the same in every notebook (tools/sync_cells.py writes it from
tools/shared_cells/shared_setup.py), so testing the copy in notebook 01 tests them all. Nothing here needs
a GPU: CUDA synchronization is checked with a monkeypatched torch.cuda.synchronize, the device choice with
torch.accelerator monkeypatched, the second device of notebooks 02 and 07 (not_the_cpu) on each kind of
device, and the timing function with a fake clock.
"""
import base64

import pytest
import torch

from support.notebook_code import load_helpers

nb = load_helpers("01")


def test_fast_mode_follows_the_environment(monkeypatch):
    monkeypatch.setenv("TUTORIAL_FAST", "1")
    assert nb.fast_mode() is True
    monkeypatch.setenv("TUTORIAL_FAST", "0")
    assert nb.fast_mode() is False
    monkeypatch.delenv("TUTORIAL_FAST")
    assert nb.fast_mode() is False


def test_pick_device_falls_back_to_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    assert nb.pick_device() == torch.device("cpu")


@pytest.mark.gpu_branch("shared", "pick_device: torch.accelerator.is_available()")
@pytest.mark.parametrize("accelerator", [torch.device("cuda"), torch.device("mps"), torch.device("xpu")])
def test_pick_device_returns_the_accelerator_pytorch_finds(monkeypatch, accelerator):
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: accelerator)
    assert nb.pick_device() == accelerator


@pytest.mark.gpu_branch("shared", "not_the_cpu: device.type == 'cpu'")
@pytest.mark.parametrize("device, other", [("cpu", "meta"), ("cuda", "cuda"), ("cuda:1", "cuda:1"),
                                           ("mps", "mps"), ("xpu", "xpu")])
def test_not_the_cpu_is_the_gpu_itself_and_meta_only_without_one(device, other):
    assert nb.not_the_cpu(torch.device(device)) == torch.device(other)


def test_find_data_dir_inside_and_outside_a_repository(tmp_path):
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    (repo / "requirements.txt").write_text("torch\n")
    assert nb.find_data_dir(repo / "notebooks") == repo / "data"
    alone = tmp_path / "uploaded"
    alone.mkdir()
    assert nb.find_data_dir(alone) == alone / "data"


@pytest.mark.gpu_branch("shared", "synchronize: device.type == 'cuda'")
def test_time_it_synchronizes_around_every_timed_run_on_cuda(monkeypatch):
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append(("sync", device)))
    nb.time_it(lambda: events.append("fn"), torch.device("cuda"), repeats=2, warmup=1)
    cuda = torch.device("cuda")
    assert events == ["fn", ("sync", cuda), "fn", ("sync", cuda), ("sync", cuda), "fn", ("sync", cuda)]


def test_time_it_does_not_call_cuda_on_the_cpu(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    nb.time_it(lambda: None, torch.device("cpu"), repeats=3, warmup=1)
    assert calls == []


class FakeClock:
    """A clock that only moves when fn says so: fn() advances it by the next scripted duration."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = list(durations)

    def perf_counter(self):
        return self.now

    def fn(self):
        self.now += self.durations.pop(0)


@pytest.mark.parametrize("warmup, durations, median", [
    (1, [100.0, 5.0, 1.0, 3.0], 3.0),        # the slow warm-up run is not timed
    (0, [5.0, 1.0, 2.0], 2.0),               # the median, not the mean (2.67) nor the first run (5)
    (2, [50.0, 40.0, 1.0, 2.0, 3.0, 10.0], 2.5),  # even count: mean of the two middle runs
])
def test_time_it_returns_the_median_of_the_timed_runs(warmup, durations, median):
    clock = FakeClock(durations)
    result = nb.time_it(clock.fn, torch.device("cpu"), repeats=len(durations) - warmup, warmup=warmup,
                        clock=clock.perf_counter)
    assert result == pytest.approx(median)
    assert clock.durations == []  # fn ran exactly warmup + repeats times


@pytest.mark.gpu_branch("shared", "synchronize: device.type == 'mps'")
def test_synchronize_waits_for_apples_gpu_on_every_supported_pytorch(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append("mps"))
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda device=None: calls.append("accelerator"))
    nb.synchronize(torch.device("mps"))
    assert calls == ["mps"]  # torch.accelerator.synchronize does nothing for MPS before PyTorch 2.7


@pytest.mark.gpu_branch("shared", "synchronize: device.type != 'cpu'")
@pytest.mark.parametrize("device, calls", [
    (torch.device("cuda", 1), [("cuda", torch.device("cuda", 1))]),
    (torch.device("mps"), ["mps"]),
    (torch.device("xpu", 0), [("accelerator", torch.device("xpu", 0))]),  # any other accelerator
    ("cpu", []),  # a name works too; the CPU has nothing to wait for
])
def test_synchronize_waits_for_each_kind_of_device_with_its_own_call(monkeypatch, device, calls):
    done = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: done.append(("cuda", device)))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: done.append("mps"))
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda device=None: done.append(("accelerator", device)))
    nb.synchronize(device)
    assert done == calls


def test_the_benchmark_clock_synchronizes_before_every_reading(monkeypatch):
    nb01 = load_helpers("01")
    calls = []
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append("mps"))
    clock = nb01.synchronized_clock(torch.device("mps"))
    first, second = clock(), clock()
    assert calls == ["mps", "mps"] and second >= first


def test_every_benchmark_timer_in_the_notebooks_synchronizes_itself():
    import ast
    from support.notebook_code import NOTEBOOKS, code_cells, read
    for path in NOTEBOOKS:
        for source in code_cells(read(path)):
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("benchmark.Timer"):
                    keywords = {kw.arg: ast.unparse(kw.value) for kw in node.keywords}
                    synchronized = "timer" in keywords or "synchronize(" in keywords.get("stmt", "")
                    assert synchronized, f"{path.name}: Timer that may not wait for MPS: {ast.unparse(node)}"


def test_hosted_service_is_read_from_colabs_module_and_kaggles_environment():
    assert nb.hosted_service(modules={"google.colab": object()}, environ={}) == "Colab"
    assert nb.hosted_service(modules={}, environ={"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}) == "Kaggle"
    assert nb.hosted_service(modules={"google": object()}, environ={"KAGGLE_URL_BASE": "x"}) is None


@pytest.mark.gpu_branch("shared", "no_gpu_warning: service is None or device_type != 'cpu'")
@pytest.mark.parametrize("service, menu", [("Colab", "Runtime > Change runtime type > T4 GPU > Save"),
                                           ("Kaggle", "Settings > Accelerator > GPU T4 x2")])
def test_a_hosted_notebook_without_a_gpu_says_how_to_switch_one_on_there(service, menu):
    warning = nb.no_gpu_warning(service, "cpu")
    lines = warning.splitlines()
    assert lines[0] == lines[-1] == "!" * 72, "set off by a bar above and below"
    assert lines[1] == f"NO GPU: this {service} session has none, so every cell below runs on the CPU."
    assert lines[2] == f"To use a GPU: {menu}, then run all cells again."
    assert all(len(line) <= 100 for line in lines)
    # with a GPU, or on a machine of one's own, nothing is printed
    assert nb.no_gpu_warning(service, "cuda") is None
    assert nb.no_gpu_warning(None, "cpu") is None


def test_the_shared_cell_prints_the_warning_only_on_a_hosted_service_without_a_gpu(monkeypatch):
    from support.notebook_code import run_cell, SHARED_CELL_FIRST_LINE, read, notebook_path

    cell_id = next(cell.id for cell in read(notebook_path("01")).cells
                   if cell.source.startswith(SHARED_CELL_FIRST_LINE))
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    printed = run_cell("01", cell_id, {"__name__": "notebook_01"})
    assert "NO GPU: this Kaggle session has none" in printed
    monkeypatch.delenv("KAGGLE_KERNEL_RUN_TYPE")
    assert "NO GPU" not in run_cell("01", cell_id, {"__name__": "notebook_01"})


def test_the_figures_record_is_machine_readable_and_says_what_stood_in():
    record = nb.figures_record(torch.device("cuda", 0), False, None,
                               {"gflops": 4321.5, "sizes": [1, 2], "dtype": torch.float16})
    assert record == {"device": "cuda:0", "device_type": "cuda", "fast": False, "fallback": None,
                      "figures": {"gflops": 4321.5, "sizes": [1, 2], "dtype": "torch.float16"}}
    assert nb.figures_record(torch.device("cpu"), True, "stand-in pictures", {})["fallback"] == (
        "stand-in pictures")


def test_feedback_shows_as_plain_text_and_not_done_spots_the_starters_ellipsis():
    verdict = nb.Feedback("PASSED: 3 of 3")
    assert verdict == "PASSED: 3 of 3" and repr(verdict) == "PASSED: 3 of 3", "no quotes when a cell ends with it"
    assert nb.not_done(1, ...) and nb.not_done(...)
    assert not nb.not_done(1, None, 0, "...", [...]), "only the ... object itself is the placeholder"


# ---- exercise_check: a check answers whatever the learner wrote ----------------------------------

@nb.exercise_check
def check_double(double):
    """A made-up check: double(x) must give 2 * x for 1 and 3."""
    for x in (1, 3):
        if double(x) != 2 * x:
            return nb.Feedback(f"NOT YET RIGHT: for {x}, {double(x) + 0} is not {2 * x}.")
    return nb.Feedback("PASSED")


@nb.exercise_check
def check_number(answer):
    """A made-up check of a value the learner gives: it must be 4."""
    return nb.Feedback("PASSED" if answer + 0 == 4 else f"NOT YET RIGHT: {answer} is not 4.")


def test_exercise_check_passes_through_what_the_check_says():
    assert check_double(lambda x: x + x) == "PASSED"
    assert check_double(lambda x: 3 * x) == "NOT YET RIGHT: for 1, 3 is not 2."
    assert check_number(4) == "PASSED"
    assert isinstance(check_double(lambda x: x + x), nb.Feedback)


def test_exercise_check_names_the_line_of_the_learners_code_that_raised():
    def double(x):
        half = x / 0
        return half

    said = check_double(double)
    assert said == ("NOT YET RIGHT: your double raised ZeroDivisionError: division by zero at line "
                    f"{double.__code__.co_firstlineno + 1} of its cell: `half = x / 0`.")


def test_exercise_check_says_what_the_learners_function_returned_that_the_check_could_not_use():
    def double(x):
        return None

    assert check_double(double) == (
        "NOT YET RIGHT: your double returned None (a NoneType), and the check could not use it: "
        "TypeError: unsupported operand type(s) for +: 'NoneType' and 'int'.")
    assert check_double(lambda x: "x" * 2 * x).startswith(
        "NOT YET RIGHT: your <lambda> returned 'xx' (a str), and the check could not use it: TypeError")


def test_exercise_check_says_which_value_it_could_not_use():
    assert check_number(None) == ("NOT YET RIGHT: the check could not use your answer None (a NoneType): "
                                  "TypeError: unsupported operand type(s) for +: 'NoneType' and 'int'.")
    assert check_number("four").startswith("NOT YET RIGHT: the check could not use your answer 'four' (a str)")
    assert nb.short(3) == "3 (an int)" and nb.short([1]) == "[1] (a list)"


def test_exercise_check_finds_the_learners_line_in_a_class_they_wrote():
    class Doubler:
        def __init__(self):
            self.factor = undefined_name  # noqa: F821

    @nb.exercise_check
    def check_class(model_class):
        return nb.Feedback(f"PASSED {model_class()}")

    said = check_class(Doubler)
    assert said.startswith("NOT YET RIGHT: your __init__ raised NameError: name 'undefined_name' is not "
                           "defined at line ")
    assert said.endswith("`self.factor = undefined_name  # noqa: F821`.")


def test_exercise_check_with_nothing_of_the_learners_to_blame_says_what_stopped_it():
    @nb.exercise_check
    def check_broken(function, device):
        return nb.Feedback(str(1 / 0))

    assert check_broken(lambda: 1, "cpu") == (
        "NOT YET RIGHT: checking your answer stopped with ZeroDivisionError: division by zero.")


def test_exercise_check_lets_an_interrupt_through():
    def interrupted(x):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check_double(interrupted)


def test_a_checked_function_keeps_its_name_and_source():
    import inspect

    seen = []

    @nb.exercise_check
    def check_source(function):
        seen.append((function.__name__, inspect.getsource(function).split("\n")[0].strip()))
        return nb.Feedback("PASSED")

    def my_answer(x):
        return x

    check_source(my_answer)
    assert seen == [("my_answer", "def my_answer(x):")]


# ---- Figures everyone can read ------------------------------------------------------------------

def test_a_figure_is_shown_with_its_alt_text_for_each_renderer():
    data, metadata = nb.figure_bundle(b"\x89PNG made up", 'Epoch time, "CPU" against <GPU>')
    assert metadata == {"image/png": {"alt": 'Epoch time, "CPU" against <GPU>'}}, "nbconvert reads it"
    assert data["text/html"].endswith('alt="Epoch time, &quot;CPU&quot; against &lt;GPU&gt;">'), \
        "JupyterLab and Colab draw the HTML form; the alt is escaped"
    assert data["text/html"].startswith(f'<img src="data:image/png;base64,{data["image/png"]}"')
    assert data["text/plain"] == '[figure: Epoch time, "CPU" against <GPU>]'


def test_show_figure_displays_the_png_and_closes_the_figure(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = []
    monkeypatch.setitem(nb.show_figure.__globals__, "display",
                        lambda data, metadata, raw: shown.append((data, metadata)))
    figure, axes = plt.subplots()
    axes.plot([1, 2], [3, 4], **nb.SERIES_STYLES[0])
    nb.show_figure(figure, "A rising line")
    [(data, metadata)] = shown
    assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG")
    assert metadata["image/png"]["alt"] == "A rising line"
    assert not plt.fignum_exists(figure.number), "closed: the inline backend does not show it again"


def test_the_series_styles_differ_in_more_than_colour():
    styles = nb.SERIES_STYLES
    for key in ("color", "linestyle", "marker"):
        assert len({style[key] for style in styles}) == len(styles), key
    assert {style["color"] for style in styles} <= set(nb.PALETTE.values())
