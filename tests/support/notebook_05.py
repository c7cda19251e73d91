"""What several of notebook 05's test files need: the fixtures (one PyTorch thread, the notebook's dataset
module), a small job and a small run made by the notebook's own helpers, the variants the notebook
measures on each kind of machine (the core's workers, Going deeper's other fixes), stand-in profiler
events of a GPU run, rows of a made-up measurement, stand-ins for the calls only a GPU answers
(torch.optim.Adam, torch.autocast, torch.amp.GradScaler), and the namespace of the fastai cells.

Each function takes `nb`, the notebook's helpers as the calling test module loaded them
(load_helpers("05")), so that what it makes is of the same namespace as what the test compares it
with; the fixtures read the test module's own `nb`.
"""
import math
import types
import warnings

import pytest
import torch
from torch import nn
from torch.autograd import DeviceType

from support.notebook_code import run_cell

CPU = torch.device("cpu")
# the next float above and below x: each side of a boundary that a decision compares with
up, down = (lambda x: math.nextafter(x, math.inf)), (lambda x: math.nextafter(x, -math.inf))


# --- Fixtures -------------------------------------------------------------------------------------

@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One PyTorch thread: these tests check results, not speed, and on a shared machine PyTorch's
    threads wait for each other at every small operation (notebook 04 showed by how much)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def shapes_module(request, tmp_path_factory):
    """The notebook's dataset module, written to a temporary folder and imported from there (by the
    load_dataset_module of the test module's `nb`)."""
    return request.module.nb.load_dataset_module(tmp_path_factory.mktemp("nb05_code"))


# --- A small job and a small run, made by the notebook's own helpers on the CPU -------------------

TINY = dict(feed="decoded, on the device", batch_size=8, width=4, image_size=16, source_size=32,
            count=64, steps=41)  # 41 steps: 3 rounds of 2 warm-up steps leave one to finish a run


def tiny_job(nb, shapes_module, **changes):
    """The notebook's Job for a small setting of its own, on the CPU, made by the notebook's make_job."""
    return nb.make_job("tiny", {**TINY, **changes}, shapes_module, CPU, rounds=3, test_count=32)


def tiny_run(nb, variant, steps=20, batch_size=8, seed=0, device=CPU):
    """A Run of the notebook's CNN (width 4) on fixed random pictures, changed by `variant`."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(32, 3, 16, 16, generator=generator)
    labels = torch.arange(32) % 4
    batches = nb.on_device_batches(images, labels, batch_size, seed=seed)
    return nb.new_run(4, batches, batch_size, steps, variant, device)


def weights(run):
    return [parameter.detach().clone() for parameter in run.model.parameters()]


def mixed(nb, dtype, scaler):
    """Going deeper B's mixed-precision variant for `dtype`, with or without a GradScaler, as the
    notebook builds it (compute_variants) for the CPU."""
    return nb.compute_variants(dtype, scaler, "cpu")[1]


# --- Made-up measurements -------------------------------------------------------------------------

def steps_of(parts, factors=(0.5, 1.0, 1.5)):
    """A `times` dict of the timing loop (part: [seconds of each step]) whose medians are `parts`."""
    return {part: [factor * seconds for factor in factors] for part, seconds in parts.items()}


# --- Every variant of the notebook: what its own decisions give on each kind of machine -----------

VARIANT_KEYS = {"name", "workers", "threads", "optimizer", "compile", "mode", "changes",
                "recipe_change", "step", "dtype", "scaler", "precision", "channels_last", "tf32",
                "cudnn_benchmark", "needs"}


MACHINES = {  # what the notebook's own decisions give on each kind of machine
    "2-core CPU": dict(device="cpu", cores=2, workers=2, capability=None, backend="aot_eager",
                       torch_version="2.14.1"),
    "CPU with g++": dict(device="cpu", cores=8, workers=4, capability=None, backend="inductor",
                         torch_version="2.14.1"),
    "1-core CPU": dict(device="cpu", cores=1, workers=1, capability=None, backend="aot_eager",
                       torch_version="2.14.1"),
    "Colab T4": dict(device="cuda", cores=2, workers=2, capability=(7, 5), backend="inductor",
                     torch_version="2.8.0"),
    "A100": dict(device="cuda", cores=12, workers=4, capability=(8, 0), backend="inductor",
                 torch_version="2.14.1"),
    "Mac, torch 2.7": dict(device="mps", cores=8, workers=4, capability=None, backend="aot_eager",
                           torch_version="2.7.1"),
    "Mac, torch 2.8": dict(device="mps", cores=8, workers=4, capability=None, backend="aot_eager",
                           torch_version="2.8.0"),
}


def fused_variants(nb, device_type, calls=None):
    """The variants Going deeper A's fused-optimizer cell measures on `device_type`: the cell run
    whole, with a measure_setting that records what it is given, and torch.optim.Adam recording its
    calls."""
    measured = []
    namespace = {**vars(nb), "device": torch.device(device_type),
                 "jobs": {"tiny batches": "the tiny-batches job"}, "compare": lambda rows, setting: None,
                 "measure_setting": lambda job, variants: measured.append((job, variants)) or []}
    if calls is not None:
        namespace["torch"] = StandInTorch(calls)
    run_cell("05", "fused-fix", namespace)
    [(job, variants)] = measured
    assert job == "the tiny-batches job"
    return variants


def notebook_variants(nb, machine):
    """{setting: [variants of the core or of Going deeper A or B, variants of Going deeper C]}."""
    m = MACHINES[machine]
    dtype, scaler, _ = nb.autocast_plan(m["device"], m["capability"], torch_version=m["torch_version"])
    fused_need = nb.fused_adam_need(m["device"])
    on_gpu = m["device"] == "cuda"
    return {
        "heavy data": [nb.data_variants(m["workers"]), nb.more_data_variants(m["workers"], m["cores"])],
        "tiny batches": [fused_variants(nb, m["device"]), nb.more_launch_variants(
            m["backend"], fused_need, nb.cuda_graphs_need(m["device"], m["backend"]))],
        "big model": [nb.compute_variants(dtype, scaler, m["device"]),
                      nb.more_compute_variants(on_gpu, m["capability"])],
    }


# --- The calls whose effect a CPU cannot show: stand-ins that record them -------------------------

class StandInTorch:
    """The torch module in a cell's namespace, but torch.optim.Adam, torch.autocast and
    torch.amp.GradScaler record their calls in `calls`; Adam is then made for real (a CPU runs every
    form of it), autocast and the scaler are stand-ins (StandInAutocast, StandInScaler)."""

    def __init__(self, calls):
        def adam(parameters, **options):
            calls.append(("Adam", options))
            return torch.optim.Adam(parameters, **options)

        self.optim = types.SimpleNamespace(Adam=adam)
        self.autocast = lambda *args, **kwargs: StandInAutocast(calls, *args, **kwargs)
        self.amp = types.SimpleNamespace(GradScaler=lambda *args, **kwargs: StandInScaler(calls, *args, **kwargs))

    def __getattr__(self, name):
        return getattr(torch, name)


class StandInAutocast:
    """torch.autocast's stand-in: records its arguments, and when its block opens and closes."""

    def __init__(self, calls, *args, **kwargs):
        self.calls = calls
        calls.append(("autocast", args, kwargs))

    def __enter__(self):
        self.calls.append("autocast opens")

    def __exit__(self, *exception):
        self.calls.append("autocast closes")


class StandInScaler:
    """torch.amp.GradScaler's stand-in: records its arguments and each scale, step and update; like a
    real scaler, step() steps the optimizer (here scale() leaves the loss as it is)."""

    def __init__(self, calls, *args, **kwargs):
        self.calls = calls
        calls.append(("GradScaler", args, kwargs))

    def scale(self, loss):
        self.calls.append("scaler.scale")
        return loss

    def step(self, optimizer):
        self.calls.append(("scaler.step", optimizer))
        optimizer.step()

    def update(self):
        self.calls.append("scaler.update")


# --- A profile of two training steps on a CUDA GPU, as PyTorch's profiler hands it over -----------

def cpu_event(name, start, end, parent=None, event_id=0, linked=0, old_api=False):
    event = types.SimpleNamespace(name=name, device_type=DeviceType.CPU, cpu_parent=parent, id=event_id,
                                  time_range=types.SimpleNamespace(start=start, end=end))
    if not old_api:
        event.linked_correlation_id = linked
    return event


def gpu_event(name, start, end, correlation, launched_by, old_api=False):
    event = types.SimpleNamespace(name=name, device_type=DeviceType.CUDA, cpu_parent=None, id=correlation,
                                  time_range=types.SimpleNamespace(start=start, end=end))
    if not old_api:
        event.linked_correlation_id = launched_by
    return event


def two_steps_on_a_gpu(old_api=False):
    """Stand-in profiler events of two steps on a CUDA GPU, shaped like profile().events(): each piece
    of GPU work shares its id with the runtime call that launched it, and (from PyTorch 2.9 on, not in
    2.6 to 2.8: `old_api`) names its CPU operation in linked_correlation_id. Times in microseconds."""
    events = []
    for step, t in enumerate((1000.0, 11000.0)):
        def cpu(name, start, end, parent=None, event_id=0, linked=0):
            return cpu_event(name, t + start, t + end, parent, event_id, linked, old_api)

        data, forward = cpu("data", 0, 6000), cpu("forward", 6000, 7000)
        backward, optimizer = cpu("backward", 7000, 9000), cpu("optimizer", 9000, 9500)
        copy = cpu("aten::copy_", 5900, 5960, data, event_id=30 + step)
        conv = cpu("aten::cudnn_convolution", 6100, 6200, forward, event_id=10 + step)
        engine = cpu("autograd::engine::evaluate_function: ConvolutionBackward0", 7100, 7900)
        conv_back = cpu("aten::convolution_backward", 7100, 7800, engine, event_id=20 + step)
        adam = cpu("aten::_fused_adam_", 9100, 9200, optimizer, event_id=40 + step)
        # the runtime calls: ids in CUPTI's own numbering (they may equal an operation's id)
        runtime = [cpu("cudaMemcpyAsync", 5910, 5950, copy, 10 + step, linked=30 + step),
                   cpu("cudaLaunchKernel", 6110, 6120, conv, 500 + step, linked=10 + step),
                   cpu("cudaLaunchKernel", 7110, 7120, conv_back, 600 + step, linked=20 + step),
                   cpu("cudaLaunchKernel", 9110, 9120, adam, 700 + step, linked=40 + step)]
        gpu = [gpu_event("Memcpy HtoD (Pinned -> Device)", t + 5950, t + 6050, 10 + step, 30 + step, old_api),
               gpu_event("forward", t + 6000, t + 7000, 900 + step, 0, old_api),  # the GPU's copy of the label
               gpu_event("sm75_xmma_fprop", t + 6200, t + 6700, 500 + step, 10 + step, old_api),
               gpu_event("sm75_xmma_dgrad", t + 7800, t + 8800, 600 + step, 20 + step, old_api),
               gpu_event("multi_tensor_apply_kernel", t + 9200, t + 9300, 700 + step, 40 + step, old_api)]
        events += [data, forward, backward, optimizer, copy, conv, engine, conv_back, adam] + runtime + gpu
    return events


def profiled_on_a_gpu(stand_ins):
    """The stand-in events as the profiler itself hands them over after a run with
    ProfilerActivity.CUDA: an EventList of FunctionEvents (torch/autograd/profiler_util.py) built as
    torch/autograd/profiler.py's _parse_kineto_results builds it: every event with use_device="cuda",
    each piece of GPU work added as a kernel of the CPU operation its linked_correlation_id names, and
    the CPU parents found by _build_tree from the times on each thread (autograd's engine runs the
    backward pass on a thread of its own). So prof.key_averages() and its .table() are PyTorch's own."""
    from torch.autograd.profiler_util import EventList, FunctionEvent

    def thread(event):
        while event.cpu_parent is not None:
            event = event.cpu_parent
        return 2 if event.name.startswith("autograd::engine") else 1

    made = [FunctionEvent(id=e.id, name=e.name, overload_name="", trace_name=e.name, start_us=e.time_range.start,
                          end_us=e.time_range.end, thread=thread(e) if e.device_type == DeviceType.CPU else 7,
                          input_shapes=[], stack=[], concrete_inputs=[], kwinputs={}, use_device="cuda",
                          device_type=e.device_type, linked_correlation_id=e.linked_correlation_id)
            for e in stand_ins]
    operations = {e.id: e for e in made if e.device_type == DeviceType.CPU and e.linked_correlation_id == 0}
    for event in made:
        if event.device_type == DeviceType.CUDA and event.linked_correlation_id in operations:
            duration = event.time_range.end - event.time_range.start
            operations[event.linked_correlation_id].append_kernel(event.name, event.device_index, duration)
    events = EventList(made, use_device="cuda")
    events._build_tree()  # what torch.autograd.profiler.profile does before handing them over
    return events


# --- Going deeper B's measurement, and CPUs' flags ------------------------------------------------

def measured_autocast(kind, variant="autocast bfloat16"):
    """Rows of Going deeper B's measurement (measure_setting's keys) whose autocast row's rounds were
    `kind`."""
    rounds = {"faster": (2.0, 1.6, 2.4), "about the same": (1.0, 0.97, 1.03), "slower": (0.5, 0.4, 0.6),
              "inconclusive": (1.2, 0.6, 1.4)}[kind]
    row = dict(setting="big model", loss=0.5, accuracy_pct=90.0, spread_pct=5.0, baseline=False,
               precision="bfloat16", recipe_change=False, baseline_loss=0.5, baseline_accuracy_pct=90.0)
    return [{**row, "variant": "baseline: float32", "baseline": True, "speedup_x": 1.0, "slowest_x": 1.0,
             "fastest_x": 1.0},
            {**row, "variant": variant, **dict(zip(("speedup_x", "slowest_x", "fastest_x"), rounds))},
            {**row, "variant": "channels_last", "speedup_x": 2.0, "slowest_x": 1.6, "fastest_x": 2.4},
            {**row, "setting": "tiny batches", "variant": "autocast bfloat16", "speedup_x": 0.5,
             "slowest_x": 0.4, "fastest_x": 0.6}]


NO_BF16 = {"sse4_2", "avx2", "fma"}
AMX = {"avx512f", "amx_tile", "amx_bf16", "avx512_bf16"}
ARM = {"fp", "asimd", "bf16"}


# --- fastai's cells (Going deeper F) --------------------------------------------------------------

@pytest.fixture
def fastai_cells(request):
    """The namespace after the notebook's cells that import fastai and define the DeviceAutocast
    callback, run for real; and a tiny Learner on the CPU in place of shapes_learner (the notebook's
    needs the settings' made-up pictures). The test module's `nb` gives the helpers."""
    pytest.importorskip("fastai")
    nb = request.module.nb
    namespace = {**vars(nb), "UNAVAILABLE": set(), "progress_bar": lambda items: items,
                 "jobs": {"big model": "the big-model job"}}
    with warnings.catch_warnings():
        # fastai's tabular module sets a pandas option that pandas 3 deprecates: nothing to act on here
        warnings.filterwarnings("ignore", message="The 'mode.chained_assignment' option is deprecated")
        run_cell("05", "fastai-import", namespace)
    run_cell("05", "fastai-callback", namespace)
    assert namespace["FASTAI"] and "DeviceAutocast" in namespace

    def shapes_learner(job, train_count=256):
        assert job == "the big-model job"
        generator = torch.Generator().manual_seed(0)
        items = [(torch.randn(3, 16, 16, generator=generator), index % 4) for index in range(8)]
        dls = namespace["DataLoaders"].from_dsets(items, items, bs=4, num_workers=0, device=CPU)
        return namespace["Learner"](dls, nb.make_cnn(4), loss_func=nn.CrossEntropyLoss())

    namespace["shapes_learner"] = shapes_learner
    return namespace
