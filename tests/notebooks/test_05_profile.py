"""Notebook 05's profile (Step 2): the table of its operations, the timeline of one training step on the
CPU and on the GPU and the GPU's share of it, the operations counted in their part of the step, the
launch overhead and throughput measured on the device, the FLOPs of a step against a count by hand, and
the chart of the parts. A GPU's profile is stand-in events made into the profiler's own FunctionEvent and
EventList (support/notebook_05.py); the CPU's profiles are real."""
import types

import pytest
from torch.profiler import ProfilerActivity, profile

from support.notebook_05 import CPU, down, profiled_on_a_gpu, tiny_run, two_steps_on_a_gpu
from support.notebook_05 import one_thread  # noqa: F401 (pytest fixtures, used by name)
from support.notebook_code import load_helpers

nb = load_helpers("05")


# --- The profile's table --------------------------------------------------------------------------

def average(key, self_cpu_us, cpu_us, self_gpu_us=0.0, count=3):
    """A stand-in for one entry of the profiler's key_averages()."""
    return types.SimpleNamespace(key=key, count=count, self_cpu_time_total=self_cpu_us,
                                 cpu_time_total=cpu_us, self_device_time_total=self_gpu_us)


def test_the_data_bound_view_sorts_by_cpu_time_so_the_dataloader_leads_on_a_gpu_too():
    # On a T4 the DataLoader decodes on the CPU and launches nothing: no GPU time at all
    averages = [average("aten::cudnn_convolution", 900.0, 1500.0, self_gpu_us=4200.0),
                average("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 91234.5, 95000.0),
                average("aten::addcdiv_", 300.0, 300.0, self_gpu_us=80.0)]
    by_cpu = nb.top_operations(averages, sort_by="self_cpu_ms", with_gpu=True)
    assert by_cpu.index[0].startswith("enumerate(DataLoader)")
    assert list(by_cpu.columns) == ["calls", "self_cpu_ms", "cpu_total_ms", "self_gpu_ms"]
    assert by_cpu.loc[by_cpu.index[0], "self_cpu_ms"] == 91.23  # ms, rounded
    by_gpu = nb.top_operations(averages, sort_by="self_gpu_ms", rows=1, with_gpu=True)
    assert list(by_gpu.index) == ["aten::cudnn_convolution"]  # the view that hides the limit
    assert "self_gpu_ms" not in nb.top_operations(averages).columns


# --- The timeline of one step, and the GPU's share ------------------------------------------------

def test_the_stand_in_gpu_events_are_what_pytorchs_own_classes_make_of_them():
    stand_ins, events = two_steps_on_a_gpu(), profiled_on_a_gpu(two_steps_on_a_gpu())
    parents = [(e.name, e.cpu_parent and e.cpu_parent.name) for e in stand_ins]
    assert [(e.name, e.cpu_parent and e.cpu_parent.name) for e in events] == parents
    assert nb.step_timeline(events) == nb.step_timeline(stand_ins)
    convolution = next(a for a in events.key_averages() if a.key == "aten::cudnn_convolution")
    assert convolution.self_device_time_total == 2 * 500.0  # its kernel, in both steps (microseconds)


@pytest.mark.parametrize("old_api", [False, True])
def test_the_timeline_shows_one_step_on_the_cpu_and_the_gpu_work_of_each_part(old_api):
    bars = nb.step_timeline(two_steps_on_a_gpu(old_api))
    cpu = [(part, round(start, 6), round(length, 6)) for row, part, start, length in bars if row == "CPU"]
    gpu = [(part, round(start, 6), round(length, 6)) for row, part, start, length in bars if row == "GPU"]
    assert cpu == [("data", 0.0, 6.0), ("forward", 6.0, 1.0), ("backward", 7.0, 2.0), ("optimizer", 9.0, 0.5)]
    # the copy, the convolution, its backward (launched from autograd's thread) and Adam's kernel;
    # not the GPU's copy of the 'forward' label, and nothing of the second step
    assert gpu == [("data", 5.95, 0.1), ("forward", 6.2, 0.5), ("backward", 7.8, 1.0), ("optimizer", 9.2, 0.1)]
    second = nb.step_timeline(two_steps_on_a_gpu(old_api), step=1)
    assert [bar[1] for bar in second if bar[0] == "GPU"] == ["data", "forward", "backward", "optimizer"]
    assert min(bar[2] for bar in second) == 0.0  # measured from the second step's own start


def test_the_timeline_figure_has_a_gpu_row_only_when_the_gpu_worked():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    on_gpu = nb.draw_timeline(nb.step_timeline(two_steps_on_a_gpu()), "one step")
    axis = on_gpu.axes[0]
    assert [label.get_text() for label in axis.get_yticklabels()] == ["CPU (training process)",
                                                                     "GPU (its work, by part)"]
    assert [text.get_text() for text in axis.get_legend().get_texts()] == list(nb.PARTS)
    assert axis.get_xlabel() == "time since the step began (ms)" and axis.get_title() == "one step"
    cpu_only = nb.draw_timeline([bar for bar in nb.step_timeline(two_steps_on_a_gpu()) if bar[0] == "CPU"], "")
    assert [label.get_text() for label in cpu_only.axes[0].get_yticklabels()] == ["CPU (training process)"]
    plt.close("all")


def test_the_gpu_share_of_a_data_bound_step_says_the_gpu_waits():
    share = nb.busy_share(nb.step_timeline(two_steps_on_a_gpu()))
    assert share == pytest.approx(1.7 / 9.5)  # GPU work 0.1 + 0.5 + 1.0 + 0.1 ms of a 9.5 ms step
    assert "waited" in nb.gpu_share_in_words(share, "heavy data")


def test_busy_share_counts_overlapping_work_once():
    bars = [("CPU", "data", 0.0, 10.0), ("GPU", "forward", 1.0, 4.0), ("GPU", "backward", 2.0, 2.0),
            ("GPU", "optimizer", 4.0, 2.0)]
    assert nb.busy_share(bars) == pytest.approx(0.5)  # 1..6 of 0..10
    assert nb.busy_share([("CPU", "data", 0.0, 10.0)]) == 0.0
    assert nb.busy_share([]) == 0.0


def test_the_gpu_share_words_turn_at_one_half():
    assert "sorted by GPU time" in nb.gpu_share_in_words(0.5, "big model")
    assert "waited" in nb.gpu_share_in_words(down(0.5), "big model")


def test_a_real_profile_on_the_cpu_gives_the_four_parts_in_order():
    run = tiny_run(nb, {})
    nb.train_step(run)  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        nb.train_step(run)
        nb.train_step(run)
    bars = nb.step_timeline(prof.events())
    assert [part for row, part, _, _ in bars] == list(nb.PARTS)
    assert all(row == "CPU" for row, _, _, _ in bars)
    ends = [start + length for _, _, start, length in bars]
    assert all(end <= next_start + 1e-6 for end, (_, _, next_start, _) in zip(ends, bars[1:]))
    table = nb.top_operations(prof.key_averages(), rows=50)
    assert {"forward", "backward"} <= set(table.index) and (table.self_cpu_ms >= 0).all()


# --- Counting operations and FLOPs ----------------------------------------------------------------

def event(name, parent=None):
    """A made-up profiler event with a name and a parent."""
    return types.SimpleNamespace(name=name, cpu_parent=parent)


def test_operations_are_counted_in_their_part_and_only_once():
    forward = event("forward")
    convolution = event("aten::conv2d", forward)
    assert nb.operation_part(convolution) == "forward"
    assert nb.operation_part(event("aten::mkldnn_convolution", convolution)) is None  # nested: not again
    assert nb.operation_part(event("aten::to", event("data"))) == "data"
    assert nb.operation_part(forward) is None  # a label, not an operation
    adam = event("Optimizer.step#Adam.step", event("optimizer"))
    assert nb.operation_part(event("aten::addcdiv_", adam)) == "optimizer"
    assert nb.operation_part(event("aten::detach")) == "other"


def test_backward_operations_count_as_backward_on_the_autograd_thread_too():
    engine = event("autograd::engine::evaluate_function: ConvolutionBackward0")
    assert nb.operation_part(event("aten::convolution_backward", engine)) == "backward"  # no label above
    on_cpu = event("autograd::engine::evaluate_function: ReluBackward0", event("backward"))
    assert nb.operation_part(event("aten::threshold_backward", on_cpu)) == "backward"
    assert nb.enclosing_part(event("aten::mm", event("aten::linear", event("forward")))) == "forward"
    assert nb.enclosing_part(event("aten::mm")) is None and nb.enclosing_part(None) is None


def test_operations_per_step_counts_each_part_but_not_the_data():
    run = tiny_run(nb, {})
    parts = nb.operations_per_step(lambda: nb.train_step(run), CPU, [ProfilerActivity.CPU])
    assert {"forward", "backward", "optimizer"} <= set(parts) and "data" not in parts
    assert all(count > 0 for count in parts.values())
    assert parts["backward"] > parts["forward"] / 2  # every layer's backward is an operation too


def test_launch_overhead_and_throughput_are_measured_on_the_device():
    assert 0 < nb.launch_overhead_seconds(CPU, [ProfilerActivity.CPU], repeats=3) < 0.01  # per operation
    assert nb.matmul_flop_per_second(64, CPU) > 1e6


def cnn_flops_by_hand(width, batch, size, classes=4):
    """FLOPs of the notebook's CNN, forward and backward, counted by hand: a convolution or linear
    layer does 2 FLOPs per multiply-add forward and as many again for each gradient it computes (the
    first convolution computes no gradient of the input pictures)."""
    conv = lambda c_in, c_out, side: 2 * batch * c_out * side * side * c_in * 9  # noqa: E731
    first = conv(3, width, size)
    others = conv(width, 2 * width, size // 2) + conv(2 * width, 4 * width, size // 4)
    linear = 2 * batch * 4 * width * classes
    return 2 * first + 3 * others + 3 * linear


def test_flops_per_step_matches_a_count_by_hand():
    assert nb.flops_per_step(4, 8, 16, CPU) == cnn_flops_by_hand(4, 8, 16)
    assert nb.flops_per_step(8, 2, 32, CPU) == cnn_flops_by_hand(8, 2, 32)


def test_the_parts_chart_stacks_each_training_steps_parts_in_milliseconds_in_their_styles():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    times = {"data": [0.030, 0.040], "forward": [0.004, 0.005], "backward": [0.005, 0.006],
             "optimizer": [0.001, 0.001]}  # Step 1's: part: [seconds of each training step]
    rows = nb.each_step(times)
    assert rows == {"training step 1": {"data": 0.030, "forward": 0.004, "backward": 0.005, "optimizer": 0.001},
                    "training step 2": {"data": 0.040, "forward": 0.005, "backward": 0.006, "optimizer": 0.001}}
    axis = nb.draw_parts(rows, "two steps").axes[0]
    assert [label.get_text() for label in axis.get_yticklabels()] == ["training step 1", "training step 2"]
    assert [text.get_text() for text in axis.get_legend().get_texts()] == list(nb.PARTS)
    data, forward = axis.patches[0], axis.patches[2]  # bars in order: each part, then each step
    assert data.get_width() == pytest.approx(30.0) and forward.get_x() == pytest.approx(30.0)  # ms, stacked
    hatches = [bar.get_hatch() or "" for bar in axis.patches[::2]]
    assert hatches == [style["hatch"] for style in nb.PART_STYLES.values()] and len(set(hatches)) == 4
    assert axis.get_xlabel() == "time (ms)" and axis.get_title() == "two steps"
    plt.close("all")


def test_the_parts_chart_of_the_settings_shows_each_ones_shares():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    medians = {"heavy data": {"data": 0.030, "forward": 0.004, "backward": 0.005, "optimizer": 0.001},
               "big model": {"data": 0.001, "forward": 0.020, "backward": 0.028, "optimizer": 0.001}}
    axis = nb.draw_parts(medians, "on cpu", shares=True).axes[0]
    assert [label.get_text() for label in axis.get_yticklabels()] == ["heavy data", "big model"]
    assert axis.patches[0].get_width() == pytest.approx(75.0)  # heavy data's data part: 30 of 40 ms
    assert "(%)" in axis.get_xlabel()
    plt.close("all")
