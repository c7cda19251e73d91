"""Notebook 07's helpers called with made-up inputs, and run for real on the CPU where PyTorch allows it:
Step 1's script and the reading of its runs, label_problems against what cross_entropy does, Step 2's
tensor made in forward and its fixes, Step 3's planted nan found with forward hooks and fixed, Going
deeper's anomaly mode and gradient-norm alarm, the tensors model.to() leaves behind, the triage table,
and the pictures."""
import math
import sys
import types
import warnings

import matplotlib.pyplot as plt
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from support.notebook_code import helper_file, load_helpers, run_cell
from support.pytorch_messages import cuda_assert_output

nb = load_helpers("07")
CPU = torch.device("cpu")

BUG_LINE = nb.line_number_of(nb.LABEL_SCRIPT_SOURCE, nb.BUG_MARKER)


def test_the_script_marks_the_line_that_reads_the_label():
    assert nb.LABEL_SCRIPT_SOURCE.count(nb.BUG_MARKER) == 1
    assert "cross_entropy" in nb.LABEL_SCRIPT_SOURCE.splitlines()[BUG_LINE - 1]


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """The Step 1 script, written to a file and run for real on the CPU."""
    script = tmp_path_factory.mktemp("nb07_code") / nb.LABEL_SCRIPT_NAME
    script.write_text(nb.LABEL_SCRIPT_SOURCE)
    return nb.run_with_time_limit([sys.executable, script, "cpu"], nb.TIME_LIMIT_S)


def test_on_a_cpu_the_index_error_is_raised_at_the_bug(cpu_run):
    assert cpu_run["returncode"] == 1 and not cpu_run["timed_out"]
    assert nb.error_lines(cpu_run["output"])[0] == "IndexError: Target 3 is out of bounds."
    assert nb.where_reported(cpu_run["output"], nb.LABEL_SCRIPT_NAME) == BUG_LINE
    described = nb.describe_label_run(cpu_run)
    assert described.startswith("IndexError") and f"line {BUG_LINE}, the line that reads" in described
    assert "a new computation on cpu works" in cpu_run["output"] and "restart" not in described


def cuda_output(raised_at_line):
    """Output shaped like the script's on an NVIDIA GPU, raised at `raised_at_line`."""
    return cuda_assert_output(nb.LABEL_SCRIPT_SOURCE, raised_at_line)


def test_a_timed_out_run_and_a_traceback_outside_the_script():
    assert "No result within" in nb.describe_label_run({"timed_out": True, "returncode": -9,
                                                        "output": ""})
    elsewhere = "Traceback (most recent call last):\n  File \"other.py\", line 3\nValueError: x\n"
    described = nb.describe_label_run({"timed_out": False, "returncode": 1, "output": elsewhere})
    assert described.startswith("ValueError: x") and "No line of the script" in described


def test_where_reported_takes_the_last_frame_of_the_script():
    output = ('File "/a/labels_out_of_range.py", line 17, in <module>\n'
              'File "/a/lib.py", line 99, in f\nFile "/a/labels_out_of_range.py", line 19, in g\n')
    assert nb.where_reported(output, "labels_out_of_range.py") == 19
    assert nb.where_reported("nothing", "labels_out_of_range.py") is None


# --- Step 1: label_problems, against what cross_entropy really does -------------------------------

@pytest.mark.parametrize("labels", [
    [0, 1, 2], [0, 2, 2], [0, 1, 3], [-1, 1, 2], [0, -100, 2], [-100, -100, -100], [5, -2, 1]])
def test_label_problems_agree_with_cross_entropy(labels):
    labels = torch.tensor(labels)
    try:
        F.cross_entropy(torch.randn(len(labels), 3), labels)
        raised = False
    except IndexError:
        raised = True
    assert bool(nb.label_problems(labels, num_classes=3)) == raised


def test_label_problems_at_their_edges():
    assert nb.label_problems(torch.tensor([0, 2]), 3) == []
    assert "largest 3" in nb.label_problems(torch.tensor([0, 3]), 3)[0]
    assert "smallest -1" in nb.label_problems(torch.tensor([-1, 2]), 3)[0]
    assert len(nb.label_problems(torch.tensor([-1, 3]), 3)) == 2
    assert nb.label_problems(torch.tensor([7, 1]), 3, ignore_index=7) == []
    assert nb.label_problems(torch.tensor([0, 1], dtype=torch.uint8), 3) == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int16])
def test_label_problems_name_a_number_type_cross_entropy_rejects(dtype):
    labels = torch.tensor([0, 1, 2], dtype=dtype)
    with pytest.raises(RuntimeError):
        F.cross_entropy(torch.randn(3, 3), labels)
    assert "labels.long()" in nb.label_problems(labels, 3)[0]


# --- Step 2: a tensor made in forward, on two devices ---------------------------------------------

def test_the_tensor_made_in_forward_fails_on_another_device_and_both_fixes_work():
    meta_input = torch.zeros(4, 64, device="meta")
    with pytest.raises(RuntimeError, match="device"):
        nb.WeightedInputs(64).to("meta")(meta_input)
    for fixed in (nb.WithBuffer, nb.OnTheInputsDevice):
        assert fixed(64).to("meta")(meta_input).device.type == "meta"
    assert "feature_weights" in nb.WithBuffer(64).state_dict()


def test_the_fixes_compute_what_the_original_computes_on_the_cpu():
    cpu_input = torch.rand(4, 64)
    original = nb.WeightedInputs(64)
    for fixed_class in (nb.WithBuffer, nb.OnTheInputsDevice):
        fixed = fixed_class(64)
        fixed.linear.load_state_dict(original.linear.state_dict())
        assert torch.equal(fixed(cpu_input), original(cpu_input))


# --- Step 3: the planted nan, found and fixed -----------------------------------------------------

@pytest.fixture(scope="module")
def pictures():
    return nb.make_pictures(256)


def broken_after_train(pictures):
    model = nb.make_classifier(nb.NaiveLogSoftmax())
    rows = nb.train_and_record(model, *pictures, lr=0.05, steps=20)
    return model, rows


def test_train_stops_at_the_first_loss_that_is_not_finite(pictures):
    model, rows = broken_after_train(pictures)
    assert math.isfinite(rows[0]["loss"]) and not math.isfinite(rows[-1]["loss"])
    assert all(math.isfinite(row["loss"]) for row in rows[:-1]) and len(rows) < 20
    assert all(torch.isfinite(p).all() for p in model.parameters()), "stopped before the update"
    going_on = nb.train_and_record(nb.make_classifier(nb.NaiveLogSoftmax()), *pictures, lr=0.05, steps=5,
                        stop_early=False)
    assert len(going_on) == 5


def test_the_gradient_norm_is_recorded_before_clipping(pictures):
    rows = nb.train_and_record(nb.make_classifier(nn.LogSoftmax(dim=1)), pictures[0] / 255, pictures[1],
                    lr=0.05, steps=1, max_norm=1e-3)
    assert rows[0]["grad_norm"] > 1e-3


def test_hooks_name_the_hand_made_log_softmax(pictures):
    model, _ = broken_after_train(pictures)
    assert nb.first_non_finite_module(model, pictures[0]) == "3 (NaiveLogSoftmax)"
    assert all(not module._forward_hooks for module in model.modules()), "hooks removed"


def test_hooks_find_nothing_in_a_finite_model_and_blame_a_bad_input(pictures):
    fixed = nb.make_classifier(nn.LogSoftmax(dim=1))
    assert nb.first_non_finite_module(fixed, pictures[0] / 255) is None
    with_nan = pictures[0].clone()
    with_nan[3, 7] = float("nan")
    assert nb.first_non_finite_module(fixed, with_nan) == "(the input itself)"


class Pair(nn.Module):
    """Returns a tuple, as nn.LSTM does; the second part multiplied by `factor`."""

    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x, x * self.factor


class MakesInfItself(nn.Module):
    """Children with finite outputs; its own forward makes inf."""

    def __init__(self, factor):
        super().__init__()
        self.pair = Pair(factor)

    def forward(self, x):
        return self.pair(x)[1] * 1e30


def test_hooks_read_tuple_outputs_and_the_model_itself():
    x = torch.ones(2, 3)
    assert nb.first_non_finite_module(nn.Sequential(Pair(float("inf"))), x) == "0 (Pair)"
    largest = torch.finfo(torch.float32).max
    assert nb.first_non_finite_module(nn.Sequential(Pair(largest)), x) is None, "finite, if huge"
    assert nb.first_non_finite_module(MakesInfItself(1e10), x) == "(the whole model) (MakesInfItself)"
    assert nb.first_non_finite_module(MakesInfItself(1.0), x) is None


class Scale(nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


def test_hooks_name_the_first_of_several_bad_modules():
    model = nn.Sequential(nn.Linear(3, 3), Scale(float("inf")), Scale(2.0))
    assert nb.first_non_finite_module(model, torch.ones(2, 3)) == "1 (Scale)"


def test_hooks_are_removed_when_forward_raises():
    model = nn.Sequential(nn.Linear(3, 2))
    with pytest.raises(RuntimeError):
        nb.first_non_finite_module(model, torch.ones(2, 5))
    assert not model[0]._forward_hooks


def test_the_fix_keeps_the_loss_finite_and_falling(pictures):
    rows = nb.train_and_record(nb.make_classifier(nn.LogSoftmax(dim=1)), pictures[0] / 255, pictures[1],
                    lr=0.05, steps=30)
    assert len(rows) == 30 and nb.loss_finite_verdict(rows).startswith("The loss stayed finite for all 30")
    assert "went down" in nb.loss_finite_verdict(rows)


def test_loss_finite_verdict_for_each_case():
    assert "went down" in nb.loss_finite_verdict([{"step": 0, "loss": 2.0}, {"step": 1, "loss": 1.9}])
    assert "did NOT go down" in nb.loss_finite_verdict([{"step": 0, "loss": 2.0}, {"step": 1, "loss": 2.0}])
    rows = [{"step": 0, "loss": 2.0}, {"step": 1, "loss": math.inf}, {"step": 2, "loss": math.nan}]
    assert nb.loss_finite_verdict(rows) == "The loss was not finite from step 1 on."


def test_the_hooks_cell_keeps_what_it_found_for_the_record(pictures):
    model, _ = broken_after_train(pictures)
    namespace = {**vars(nb), "broken": model, "byte_pictures": pictures[0]}
    printed = run_cell("07", "nan-hooks", namespace)
    assert printed == "First module with a non-finite output: 3 (NaiveLogSoftmax)\n"
    assert namespace["first_bad_module"] == "3 (NaiveLogSoftmax)"


# --- Going deeper B: anomaly mode and the gradient norm -------------------------------------------

def test_anomaly_mode_names_the_log_and_its_forward_line(pictures):
    model, _ = broken_after_train(pictures)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="LogBackward0"):
            with torch.autograd.detect_anomaly():
                F.nll_loss(model(pictures[0]), pictures[1]).backward()
    report = nb.anomaly_report(caught)
    assert report.startswith("Error detected in LogBackward0. The forward call that created it:")
    assert report.splitlines()[1].strip().startswith(f'File "{helper_file("07")}"')
    assert report.splitlines()[1].endswith("in forward"), "the frame of NaiveLogSoftmax.forward"
    assert nb.anomaly_report([]) == "anomaly mode printed no traceback"


def test_anomaly_report_keeps_the_code_line_when_python_has_the_source():
    message = ("Error detected in LogBackward0. Traceback of forward call that caused the error:\n"
               '  File "/tmp/ipykernel_1/2.py", line 9, in <module>\n    loss = model(x)\n'
               '  File "/tmp/ipykernel_1/1.py", line 5, in forward\n'
               "    return torch.softmax(scores, dim=1).log()\n"
               " (Triggered internally at /pytorch/torch/csrc/autograd/python_anomaly_mode.cpp:130.)")
    caught = [types.SimpleNamespace(message=UserWarning("Anomaly Detection has been enabled.")),
              types.SimpleNamespace(message=UserWarning(message))]
    assert nb.anomaly_report(caught).splitlines()[1:] == [
        '  File "/tmp/ipykernel_1/1.py", line 5, in forward',
        "    return torch.softmax(scores, dim=1).log()"]


@pytest.mark.parametrize("anomaly_mode", [False, True])
def test_time_one_step_times_a_real_step_inside_anomaly_mode_only_when_asked(pictures, anomaly_mode):
    seen = []

    def time_it(step, device, repeats):  # stands in for the shared cell's timer: one step, 1 ms
        seen.append((torch.is_anomaly_enabled(), device, repeats))
        step()
        return 0.001

    inputs, labels = pictures[0][:64] / 255, pictures[1][:64]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert nb.time_one_step(inputs, labels, CPU, anomaly_mode, timer=time_it) == 0.001
    assert seen == [(anomaly_mode, CPU, 20)] and not torch.is_anomaly_enabled()
    assert not [w for w in caught if "Anomaly Detection has been enabled" in str(w.message)]


def test_anomaly_cost_verdict_at_its_edge():
    assert "small difference" in nb.anomaly_cost_verdict(1.0, 1.49)
    assert "pay most" in nb.anomaly_cost_verdict(1.0, 1.5)
    assert "(3.0 times as long)" in nb.anomaly_cost_verdict(0.001, 0.003)


def test_grad_norm_alarm_at_its_edges():
    assert nb.grad_norm_alarm([1.0] * 20) is None
    assert nb.grad_norm_alarm([1.0] * 5 + [10.0]) is None, "exactly 10 times: no alarm"
    assert nb.grad_norm_alarm([1.0] * 5 + [10.001]) == 5
    assert nb.grad_norm_alarm([1.0, 50.0, 1.0, 1.0]) is None, "no alarm for growth in the warm-up"
    assert nb.grad_norm_alarm([1.0, math.nan]) == 1, "a nan norm is an alarm even in the warm-up"
    assert nb.grad_norm_alarm([1.0, 1.0, math.inf]) == 2
    assert nb.grad_norm_alarm([1.0] * 5 + [3.0], factor=2.0) == 5
    assert nb.grad_norm_alarm([1.0] * 3 + [20.0], warmup=3) == 3


def test_a_learning_rate_too_high_is_caught_by_the_alarm_before_the_loss_breaks():
    features, targets = nb.make_regression(512)
    too_high = nb.train_and_record(nb.new_linear(CPU), features, targets, lr=1.2, steps=80, loss_fn=F.mse_loss,
                        stop_early=False)
    alarm = nb.grad_norm_alarm([row["grad_norm"] for row in too_high])
    first_bad = next(row["step"] for row in too_high if not math.isfinite(row["loss"]))
    assert alarm is not None and alarm + 20 < first_bad < 80
    # As the prose says: both grow geometrically, the loss (a square) twice as steeply on a log scale
    growth = {key: [later[key] / earlier[key] for earlier, later in zip(too_high[20:40], too_high[21:41])]
              for key in ("loss", "grad_norm")}
    assert all(norm > 1.5 for norm in growth["grad_norm"])
    assert all(loss == pytest.approx(norm**2, rel=0.02) for loss, norm in zip(*growth.values()))
    for settings in (dict(lr=0.1), dict(lr=1.2, max_norm=1.0)):
        rows = nb.train_and_record(nb.new_linear(CPU), features, targets, steps=80, loss_fn=F.mse_loss, **settings)
        assert all(math.isfinite(row["loss"]) for row in rows)
        assert nb.grad_norm_alarm([row["grad_norm"] for row in rows]) is None
    assert rows[-1]["loss"] > 0.1, "clipping keeps it finite, but the loss stalls"


# --- Going deeper F: tensors that model.to() leaves behind ----------------------------------------

def test_tensors_left_behind_lists_plain_tensor_attributes_only():
    assert nb.tensors_left_behind(nb.PlainAttribute(64)) == ["model.feature_weights"]
    assert nb.tensors_left_behind(nb.WithBuffer(64)) == []
    outer = nn.Sequential(nb.PlainAttribute(8))
    outer.note, outer.scale = "text", 2.0
    outer.weight = nn.Parameter(torch.ones(1))
    assert nb.tensors_left_behind(outer) == ["0.feature_weights"]


def test_every_pattern_leads_to_its_own_row():
    for row, (_, patterns, _, _, _) in enumerate(nb.TRIAGE):
        for pattern in patterns:
            assert nb.triage(pattern.upper()) == row, f"{pattern!r} is claimed by an earlier row"


def real_message(action):
    try:
        action()
    except Exception as error:  # the message PyTorch gives
        return f"{type(error).__name__}: {error}"
    raise AssertionError("expected an error")


@pytest.mark.parametrize("message, row", [
    (cuda_output(BUG_LINE), 0),
    ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
     "cuda:0 and cpu!", 4),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
     "capacity of 14.74 GiB", 7),
    ("AttributeError: Can't get attribute 'MyDataset' on <module '__main__' (built-in)>", 6),
    ("AssertionError: Torch not compiled with CUDA enabled", 8),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", 8),
    ("the loss is nan after 300 steps", 2),
    ("what is this", None),
])
def test_triage_of_messages_as_pytorch_words_them(message, row):
    assert nb.triage(message) == row


def test_triage_of_messages_raised_here_for_real():
    index_error = real_message(lambda: F.cross_entropy(torch.randn(2, 3), torch.tensor([0, 3])))
    dtype_error = real_message(lambda: F.cross_entropy(torch.randn(2, 3),
                                                       torch.tensor([0, 1], dtype=torch.int32)))
    meta_error = real_message(lambda: torch.ones(3) + torch.ones(3, device="meta"))

    def nan_backward():
        x = torch.zeros(1, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # anomaly mode's warnings
            with torch.autograd.detect_anomaly():
                torch.sqrt(x * 0 - 1).sum().backward()

    assert nb.triage(index_error) == 0
    assert nb.triage(dtype_error) == 1
    assert nb.triage(meta_error) == 4
    assert nb.triage(real_message(nan_backward)) == 2
    with nb.deterministic_algorithms():
        put_error = real_message(lambda: torch.zeros(2).put_(torch.tensor([0, 0]), torch.ones(2)))
    assert nb.triage(put_error) == 9


def test_out_of_memory_points_to_notebook_08():
    row = nb.TRIAGE[nb.triage("CUDA out of memory")]
    assert row[-1].startswith("08 · Fit a bigger model")


# --- The pictures: drawn from their inputs, with titles and labelled axes -------------------------

@pytest.fixture
def drawn():
    """The figure a drawing function of the notebook made (it draws on a new one), closed after."""
    plt.close("all")
    yield lambda: plt.gcf()
    plt.close("all")


def legend_labels(axis):
    return [text.get_text() for text in axis.get_legend().get_texts()]


def test_the_async_timeline_raises_in_loss_item_as_usual_and_in_cross_entropy_when_blocking(drawn):
    nb.draw_async_timeline()
    usual, blocking = drawn().axes
    assert usual.get_title() == "as usual (asynchronous)" and "BLOCKING=1" in blocking.get_title()
    assert [t.get_text() for t in usual.texts if t.get_text().startswith("error")] == [
        "error raised in loss.item()"]
    assert [t.get_text() for t in blocking.texts if t.get_text().startswith("error")] == [
        "error raised in cross_entropy"]
    assert [t.get_text() for t in usual.get_yticklabels()] == ["GPU", "Python (CPU)"]
    assert blocking.get_xlabel().startswith("time")


@pytest.mark.parametrize("alarm, first_bad", [(2, 4), (None, None)])
def test_draw_divergence_plots_the_rows_and_marks_only_what_happened(drawn, alarm, first_bad):
    rows = [{"step": step, "loss": loss, "grad_norm": norm} for step, loss, norm in
            [(0, 1.0, 2.0), (1, 3.0, 20.0), (2, 9.0, 200.0), (3, 81.0, math.inf), (4, math.nan, math.nan)]]
    nb.draw_divergence(rows, alarm, first_bad)
    (axis,) = drawn().axes
    loss, norm = axis.get_lines()[:2]
    assert list(loss.get_xdata()) == [0, 1, 2, 3, 4]
    assert list(loss.get_ydata())[:4] == [1.0, 3.0, 9.0, 81.0] and math.isnan(loss.get_ydata()[4])
    assert list(norm.get_ydata())[:3] == [2.0, 20.0, 200.0] and math.isnan(norm.get_ydata()[3])
    marks = [label for label in legend_labels(axis) if "step" in label]
    assert marks == ([f"alarm (step {alarm})", f"loss inf or nan (step {first_bad})"] if alarm else [])
    assert axis.get_yscale() == "log" and axis.get_xlabel() == "training step" and axis.get_title()


def test_draw_number_formats_draws_each_formats_range_from_finfo(drawn):
    nb.draw_number_formats()
    (axis,) = drawn().axes
    assert [t.get_text() for t in axis.get_yticklabels()] == ["float16", "bfloat16", "float32"]
    bars = axis.patches  # per format: its subnormal numbers, then its full-precision ones
    assert len(bars) == 6
    for row, dtype in enumerate([torch.float16, torch.bfloat16, torch.float32]):
        info, subnormal, full = torch.finfo(dtype), bars[2 * row], bars[2 * row + 1]
        assert subnormal.get_x() == pytest.approx(math.log10(info.tiny * info.eps))
        assert subnormal.get_x() + subnormal.get_width() == pytest.approx(full.get_x())
        assert full.get_x() == pytest.approx(math.log10(info.tiny))
        assert full.get_x() + full.get_width() == pytest.approx(math.log10(info.max))
    assert axis.get_xlabel().startswith("size of the number, log10") and axis.get_title()


def test_draw_scale_steps_through_the_scales_and_crosses_the_skipped_steps(drawn):
    rows = [{"step": 0, "scale": 2.0**16, "skipped": True}, {"step": 1, "scale": 2.0**15, "skipped": False},
            {"step": 2, "scale": 2.0**15, "skipped": True}, {"step": 3, "scale": 2.0**14, "skipped": False}]
    nb.draw_scale(rows)
    (axis,) = drawn().axes
    (line,) = axis.get_lines()
    assert list(line.get_ydata()) == [row["scale"] for row in rows]
    (crosses,) = axis.collections
    assert crosses.get_offsets().tolist() == [[0, 2.0**16], [2, 2.0**15]]
    assert axis.get_xlabel() == "training step" and axis.get_ylabel().startswith("scale")
