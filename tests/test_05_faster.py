"""Unit tests for notebook 05's helpers (Find the bottleneck, then make training faster).

They call the notebook's decisions with made-up inputs: the bottleneck verdict, the number of
DataLoader workers per start method, the C++ compiler detection and the torch.compile backend it
leads to, the autocast type per device (made-up capabilities: T4 7.5, A100 8.0, CPU, MPS), the
CPU's bfloat16 hardware, and the tolerance of the correctness check. Two tests really run what the
notebook relies on: DataLoader workers started with the `spawn` start method importing the dataset
module the notebook writes, and torch.compile with the fallback backend on a machine "without" a
C++ compiler. Nothing here needs a GPU.
"""
import types

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from notebook_code import load_helpers

nb = load_helpers("05")

CPU_AT_04 = {"launch_s": 25e-6, "flop_per_s": 100e9}  # about what notebook 04 measured on 2 cores
T4_LIKE = {"launch_s": 10e-6, "flop_per_s": 8e12}


# --- the verdict: data-bound, launch-bound or compute-bound -----------------------------------------

def test_waiting_for_data_as_long_as_computing_is_data_bound_whatever_the_rest():
    assert nb.classify_step(0.020, 0.020, 150, 1e12, **CPU_AT_04) == "data-bound"
    assert nb.classify_step(0.050, 0.004, 150, 1e6, **CPU_AT_04) == "data-bound"
    assert nb.classify_step(0.019, 0.020, 150, 1e12, **CPU_AT_04) != "data-bound"


def test_many_operations_with_little_arithmetic_are_launch_bound():
    # 150 operations x 25 us = 3.75 ms of fixed cost, against 18 MFLOP / 100 GFLOP/s = 0.18 ms
    assert nb.classify_step(0.0001, 0.004, 150, 18e6, **CPU_AT_04) == "launch-bound"


def test_much_arithmetic_is_compute_bound():
    # 150 x 25 us = 3.75 ms, against 4.6 GFLOP / 100 GFLOP/s = 46 ms
    assert nb.classify_step(0.0001, 0.050, 150, 4.6e9, **CPU_AT_04) == "compute-bound"


def test_the_same_step_can_be_compute_bound_on_a_cpu_and_launch_bound_on_a_gpu():
    step = dict(data_s=0.0001, compute_s=0.050, operations=150, flops=1.1e9)
    assert nb.classify_step(**step, **CPU_AT_04) == "compute-bound"
    assert nb.classify_step(**step, **T4_LIKE) == "launch-bound"



# --- DataLoader workers and the start method ---------------------------------------------------------

def test_fork_workers_inherit_the_class_so_any_dataset_works():
    workers, why = nb.choose_num_workers(2, "fork", dataset_importable=False)
    assert workers == 2 and "fork" in why


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_fresh_workers_need_an_importable_dataset_class(start_method):
    assert nb.choose_num_workers(4, start_method, dataset_importable=True)[0] == 4
    workers, why = nb.choose_num_workers(4, start_method, dataset_importable=False)
    assert workers == 0
    assert start_method in why and "import" in why


def test_no_workers_asked_for_means_none():
    assert nb.choose_num_workers(0, "spawn", dataset_importable=True)[0] == 0


@pytest.fixture(scope="module")
def shapes_module(tmp_path_factory):
    """The notebook's dataset module, written to a temporary folder and imported from there."""
    return nb.load_dataset_module(tmp_path_factory.mktemp("nb05_code"))


def test_the_dataset_module_is_written_imported_and_deterministic(shapes_module):
    assert shapes_module.__name__ == nb.DATASET_MODULE
    assert shapes_module.__file__.endswith(f"{nb.DATASET_MODULE}.py")
    data = shapes_module.MadeUpShapes(8, source_size=48, image_size=16, seed=3)
    image, label = data[5]
    assert image.shape == (3, 16, 16) and image.dtype == torch.float32
    assert label == 5 % len(shapes_module.SHAPES)
    assert torch.equal(data[5][0], image)  # the same augmentation every time, in every process


def loader_batches(loader):
    """Every batch of one epoch, as a list of (images, labels)."""
    return [(images.clone(), labels.clone()) for images, labels in loader]


def test_spawned_workers_import_the_dataset_module_and_give_the_same_batches(shapes_module, monkeypatch):
    monkeypatch.setitem(nb.image_loader.__globals__, "device", torch.device("cpu"))
    data = shapes_module.MadeUpShapes(12, source_size=48, image_size=16, seed=4)
    in_process = loader_batches(nb.image_loader(data, batch_size=4, workers=0))
    loader = nb.image_loader(data, batch_size=4, workers=1)
    loader.multiprocessing_context = "spawn"  # a fresh Python, as on Windows and macOS
    with_workers = loader_batches(loader)
    assert len(with_workers) == len(in_process) == 3
    for (images_a, labels_a), (images_b, labels_b) in zip(in_process, with_workers):
        assert torch.equal(images_a, images_b) and torch.equal(labels_a, labels_b)


def test_a_class_that_lives_only_in_this_process_cannot_go_to_spawned_workers():
    # the notebook's fallback when the module file cannot be written: a module no other process can import
    module = nb.module_from_source(name="nb05_shapes_in_this_process_only")
    data = module.MadeUpShapes(4, source_size=32, image_size=8)
    loader = DataLoader(data, batch_size=2, num_workers=1, multiprocessing_context="spawn")
    # PyTorch warns about the pickling error, then it is raised
    with pytest.warns(UserWarning, match="pickle"), pytest.raises(Exception, match="(?i)pickl|import"):
        next(iter(loader))


def test_on_device_batches_cover_every_picture_once_per_epoch_in_a_fixed_order():
    images, labels = torch.arange(10.0).reshape(10, 1), torch.arange(10)
    first = nb.on_device_batches(images, labels, batch_size=3, seed=1)
    again = nb.on_device_batches(images, labels, batch_size=3, seed=1)
    epoch = [next(first) for _ in range(3)]  # 3 batches of 3; the 10th picture waits for the next epoch
    assert all(len(batch_labels) == 3 for _, batch_labels in epoch)
    assert len(set(torch.cat([batch_labels for _, batch_labels in epoch]).tolist())) == 9
    assert all(torch.equal(a[1], next(again)[1]) for a in epoch)


# --- torch.compile: the C++ compiler and the backend --------------------------------------------------

def fake_which(found):
    """A shutil.which stand-in that knows only the programs in `found`."""
    return lambda name: f"/usr/bin/{name}" if name in found else None


@pytest.mark.parametrize("platform_name, compiler", [("linux", "g++"), ("win32", "cl"), ("darwin", "clang++")])
def test_find_cpp_compiler_looks_for_what_inductor_calls_on_each_system(platform_name, compiler):
    assert nb.find_cpp_compiler(platform_name, {}, fake_which({compiler})) == f"/usr/bin/{compiler}"
    assert nb.find_cpp_compiler(platform_name, {}, fake_which(set())) is None


def test_the_cxx_environment_variable_names_the_compiler():
    assert nb.find_cpp_compiler("linux", {"CXX": "clang++"}, fake_which({"clang++"})) == "/usr/bin/clang++"
    assert nb.find_cpp_compiler("linux", {"CXX": "clang++"}, fake_which({"g++"})) is None


def test_a_cpu_with_a_compiler_gets_inductor():
    backend, why = nb.choose_compile_backend("cpu", "/usr/bin/g++", has_triton=False)
    assert backend == "inductor" and "g++" in why


def test_a_cpu_without_a_compiler_falls_back_to_aot_eager_and_says_what_is_missed():
    backend, why = nb.choose_compile_backend("cpu", None, has_triton=True)
    assert backend == "aot_eager"
    assert "compiler" in why and "speed-up" in why


def test_a_cuda_gpu_needs_triton_for_inductor():
    assert nb.choose_compile_backend("cuda", "/usr/bin/g++", has_triton=True)[0] == "inductor"
    backend, why = nb.choose_compile_backend("cuda", "/usr/bin/g++", has_triton=False)
    assert backend == "aot_eager" and "Triton" in why and "triton-windows" in why


def test_other_accelerators_use_the_backend_that_runs_everywhere():
    assert nb.choose_compile_backend("mps", "/usr/bin/clang++", has_triton=False)[0] == "aot_eager"


def test_without_a_compiler_the_fallback_backend_really_compiles_and_trains(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-anywhere")
    compiler = nb.find_cpp_compiler()
    assert compiler is None
    backend, _ = nb.choose_compile_backend("cpu", compiler, has_triton=False)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = torch.compile(model, backend=backend)
    inputs = torch.randn(5, 4)
    loss = nn.functional.cross_entropy(compiled(inputs), torch.tensor([0, 1, 0, 1, 1]))
    loss.backward()
    assert torch.allclose(compiled(inputs), model(inputs))
    assert all(parameter.grad is not None for parameter in model.parameters())


# --- mixed precision: which 16-bit type on which device -----------------------------------------------

@pytest.mark.parametrize("device_type, capability, dtype, scaler", [
    ("cuda", (7, 5), torch.float16, True),    # T4: no fast bfloat16
    ("cuda", (7, 0), torch.float16, True),    # V100
    ("cuda", (8, 0), torch.bfloat16, False),  # A100
    ("cuda", (9, 0), torch.bfloat16, False),  # H100
    ("cpu", None, torch.bfloat16, False),
    ("mps", None, torch.float16, True),
])
def test_autocast_plan_per_device(device_type, capability, dtype, scaler):
    chosen, needs_scaler, why = nb.autocast_plan(device_type, capability)
    assert (chosen, needs_scaler) == (dtype, scaler)
    assert why


def test_the_t4_reason_names_the_missing_fast_bfloat16():
    assert "7.5" in nb.autocast_plan("cuda", (7, 5))[2] and "GradScaler" in nb.autocast_plan("cuda", (7, 5))[2]


@pytest.mark.parametrize("flags, starts_with", [
    ({"avx2", "avx512f", "amx_tile", "amx_bf16", "avx512_bf16"}, "AMX"),
    ({"avx2", "avx512f", "avx512_bf16"}, "AVX512-BF16"),
    ({"fp", "asimd", "bf16"}, "ARM"),
    ({"sse4_2", "avx2", "fma"}, "none"),
    (set(), "unknown"),
])
def test_bf16_hardware_from_the_cpu_flags(flags, starts_with):
    assert nb.bf16_hardware(flags).startswith(starts_with)


def test_cpu_flags_reads_x86_and_arm_cpuinfo_and_tolerates_no_file(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu avx2\n")
    assert nb.cpu_flags(x86) == {"fpu", "avx2", "avx512_bf16"}
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n")
    assert "bf16" in nb.cpu_flags(arm)
    assert nb.cpu_flags(tmp_path / "missing") == set()


def tf32_switch():
    """The TF32 setting for matrix products: the new API from PyTorch 2.9, the old one before."""
    matmul = torch.backends.cuda.matmul
    return matmul.fp32_precision if hasattr(matmul, "fp32_precision") else matmul.allow_tf32


def test_run_conditions_switch_tf32_the_autotuner_and_threads_for_one_run_only():
    before = (torch.get_num_threads(), torch.backends.cudnn.benchmark, tf32_switch())
    with nb.run_conditions(threads=1, tf32=True, cudnn_benchmark=True):
        assert torch.get_num_threads() == 1
        assert torch.backends.cudnn.benchmark is True
        assert tf32_switch() in ("tf32", True)
    assert (torch.get_num_threads(), torch.backends.cudnn.benchmark, tf32_switch()) == before


# --- the correctness check ---------------------------------------------------------------------------

def test_float32_variants_are_held_to_the_tight_tolerance():
    loss_tolerance, accuracy_tolerance = nb.TOLERANCE["float32"]
    assert nb.keeps_results(0.50, 95.0, 0.50 * (1 + 0.9 * loss_tolerance), 95.0 - accuracy_tolerance, "float32")
    assert not nb.keeps_results(0.50, 95.0, 0.50 * (1 + 1.1 * loss_tolerance), 95.0, "float32")
    assert not nb.keeps_results(0.50, 95.0, 0.50, 95.0 - accuracy_tolerance - 0.5, "float32")


def test_16_bit_variants_get_a_looser_tolerance_than_float32():
    for precision in ("bfloat16", "float16", "tf32"):
        assert nb.TOLERANCE[precision][0] > nb.TOLERANCE["float32"][0]
        assert nb.TOLERANCE[precision][1] > nb.TOLERANCE["float32"][1]
    # a 10 % higher loss: too much for float32, acceptable for bfloat16
    assert not nb.keeps_results(0.40, 90.0, 0.44, 90.0, "float32")
    assert nb.keeps_results(0.40, 90.0, 0.44, 90.0, "bfloat16")


def test_the_tolerance_works_both_ways():
    assert not nb.keeps_results(0.50, 90.0, 0.30, 90.0, "float32")  # a much lower loss is a change too
    assert not nb.keeps_results(0.50, 90.0, 0.50, 99.0, "float32")


def test_change_in_words_leaves_a_margin_for_timing_noise():
    assert "faster" in nb.change_in_words(1.5)
    assert "slower" in nb.change_in_words(0.5)
    assert "about the same" in nb.change_in_words(1.05)
    assert "about the same" in nb.change_in_words(0.95)


# --- counting operations and the timed parts ----------------------------------------------------------

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


def test_a_variant_switches_the_fused_optimizer_and_the_memory_format(monkeypatch):
    monkeypatch.setitem(nb.new_run.__globals__, "device", torch.device("cpu"))
    monkeypatch.setitem(nb.new_run.__globals__, "LEARNING_RATE", 1e-3)
    plain = nb.new_run(4, iter([]), batch_size=2, steps=10, variant={})
    assert not plain.optimizer.defaults["fused"]
    fused = nb.new_run(4, iter([]), batch_size=2, steps=10,
                       variant={"fused_optimizer": True, "channels_last": True})
    assert fused.optimizer.defaults["fused"] is True
    assert fused.memory_format == torch.channels_last
    weight = fused.model[0].weight
    assert weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()


def test_part_times_only_when_asked(monkeypatch):
    monkeypatch.setitem(nb.time_parts.__globals__, "device", torch.device("cpu"))  # the notebook's namespace
    times = {}
    with nb.part("forward", times):
        pass
    with nb.part("forward", times):
        pass
    with nb.part("backward"):
        pass
    assert list(times) == ["forward"] and len(times["forward"]) == 2


def test_every_variant_of_the_notebook_has_a_gpu_note():
    names = ["num_workers=2", "num_workers=1, torch.set_num_threads(1)", "Adam(fused=True)",
             "torch.compile, backend=inductor", "torch.compile, backend=aot_eager",
             "torch.compile (inductor) + fused Adam",
             "torch.compile, mode=reduce-overhead (CUDA graphs)", "batch 8 times larger",
             "autocast bfloat16", "autocast float16 + GradScaler", "channels_last",
             "TF32 matrix products", "cudnn.benchmark"]
    for name in names:
        on_gpu, when = nb.gpu_note(name)
        assert on_gpu and when, name
    assert nb.gpu_note("baseline: float32") == ("", "")

