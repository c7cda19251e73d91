"""Notebook 10's GPU branches, each executed on the CPU (tests/collection/test_gpu_branches.py lists them):
its helpers called as a GPU machine calls them, and its cells run whole (notebook_code.run_cell) with
stand-ins shaped like PyTorch's API where only a GPU answers: torch.cuda's capability, streams and graphs,
pinned memory, torch.compile's and torch.export's arguments, AOTInductor's build, ONNX Runtime's
providers."""
import types

import pytest
import torch
from torch import nn

from support.notebook_code import load_helpers, run_cell


@pytest.fixture(scope="module")
def nb():
    return load_helpers("10")


# --- Helpers, as a GPU machine calls them ---------------------------------------------------------

@pytest.mark.gpu_branch("10", "request_counts: device_type != 'cpu'")
def test_on_a_gpu_p99_rests_on_at_least_20_requests_in_both_steps(nb):
    for device_type in ("cuda", "mps"):
        single, load = nb.request_counts(False, device_type)
        assert nb.tail_size(single, 99) >= 20 and nb.tail_size(load, 99) >= 20
        assert (single, load) == (2000, 2000), "about 2,000: p99 on 20, not many more minutes"
    assert nb.request_counts(False, "cpu") == (400, 300)  # each takes longer on a CPU: it says so
    assert nb.request_counts(True, "cuda") == nb.request_counts(True, "cpu") == (100, 100)


@pytest.mark.gpu_branch("10", "float32_kind: device.type != 'cuda'")
@pytest.mark.gpu_branch("10", "float32_kind: major >= 8 and torch.backends.cudnn.allow_tf32")
@pytest.mark.parametrize("capability, allow_tf32, kind", [
    ((7, 5), True, "float32"),  # a T4: no TF32
    ((8, 0), True, "tf32"),  # an A100 with cuDNN's default
    ((8, 0), False, "float32"),
])
def test_float32_kind_is_tf32_only_on_compute_capability_8_with_cudnn_allowing_it(
        nb, monkeypatch, capability, allow_tf32, kind):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: asked.append(device)
                        or capability)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", allow_tf32)
    assert nb.float32_kind(torch.device("cuda")) == kind
    assert asked == [torch.device("cuda")]
    assert nb.float32_kind(torch.device("cpu")) == "float32" and len(asked) == 1


@pytest.mark.gpu_branch("10", "aoti_plan: device_type == 'cuda' and (not has_triton)")
@pytest.mark.gpu_branch("10", "aoti_plan: device_type == 'cuda' and (not toolkit)")
@pytest.mark.gpu_branch("10", "aoti_plan: device_type not in ('cpu', 'cuda')")
def test_aoti_plan_builds_only_where_it_can_and_says_why_not(nb):
    assert nb.aoti_plan(False, "cpu", "/usr/bin/g++", False, "2.6.0") == (True, "")
    assert nb.aoti_plan(False, "cuda", "g++", True, "2.14.1+cu130", toolkit="/usr/local/cuda") == (True, "")
    # a pip-only GPU machine: the wheels bring the CUDA runtime, not the toolkit whose headers
    # AOTInductor compiles with (torch.utils.cpp_extension.CUDA_HOME is None there)
    plan = nb.aoti_plan(False, "cuda", "g++", True, "2.14.1+cu130", toolkit=None)
    assert plan[0] is False and plan[1].startswith("no CUDA toolkit found") and "CUDA_HOME" in plan[1]
    assert nb.aoti_plan(False, "cpu", "g++", True, "2.14.1", toolkit=None)[0], "a CPU needs no toolkit"
    assert "fast mode" in nb.aoti_plan(True, "cpu", "g++", True, "2.14.1")[1]
    assert nb.aoti_plan(False, "cpu", "g++", True, "2.5.1")[1] == "PyTorch 2.5.1 is older than 2.6"
    assert "no C++ compiler" in nb.aoti_plan(False, "cpu", None, True, "2.14.1")[1]
    assert "Triton is missing" in nb.aoti_plan(False, "cuda", "g++", False, "2.14.1")[1]
    assert nb.aoti_plan(False, "cpu", "g++", False, "2.14.1")[0], "Triton matters only on a GPU"
    assert "for mps" in nb.aoti_plan(False, "mps", "g++", True, "2.14.1")[1]
    assert "for mps" in nb.aoti_plan(False, "mps", "g++", False, "2.14.1")[1], "Triton: only for CUDA"


@pytest.mark.gpu_branch("10", "fallbacks: device_type == 'cuda'")
def test_fallbacks_name_each_stand_in_and_nothing_when_none_ran(nb):
    assert nb.fallbacks("inductor", True, "cuda") is None
    assert nb.fallbacks("aot_eager", True, "cuda") == "torch.compile with aot_eager instead of Inductor"
    assert nb.fallbacks("inductor", False, "cuda") == "no AOTInductor package"
    assert nb.fallbacks("inductor", True, "cpu") == "no float16 and no pinned copy (no CUDA GPU)"
    assert nb.fallbacks("inductor", True, "mps") == "no float16 and no pinned copy (no CUDA GPU)"


# --- The cells, run whole with stand-ins shaped like PyTorch's API --------------------------------

class StandInRequests:
    """Slicing gives a batch whose .to(device) moves nothing (the cell's batch for the compiled model)."""

    def __getitem__(self, index):
        return types.SimpleNamespace(to=lambda device: ("on", device))


@pytest.mark.parametrize("toolkit, build_raises, printed, built", [
    ("/usr/local/cuda", False, "AOTInductor package built in 0 s.", True),
    (None, False, "AOTInductor: not built, no CUDA toolkit found", False),  # asked before building
    ("/usr/local/cuda", True, "AOTInductor: not built, the build failed (InductorError: OSError: "
                              "CUDA_HOME environment variable is not set.", False),
])
def test_the_export_cell_on_a_cuda_gpu_checks_the_toolkit_and_catches_a_failed_build(
        nb, monkeypatch, tmp_path, toolkit, build_raises, printed, built):
    # Stand-ins shaped like torch.export.export / save and torch._inductor.aoti_compile_and_package,
    # which raises torch._inductor.exc.InductorError around cpp_extension's OSError where the toolkit
    # that CUDA_HOME names lacks its headers.
    class InductorError(RuntimeError):
        pass

    built_with = []

    def aoti_compile_and_package(exported, package_path):
        built_with.append(package_path)
        if build_raises:
            raise InductorError("OSError: CUDA_HOME environment variable is not set.")

    monkeypatch.setattr(torch.export, "export", lambda model, args, dynamic_shapes: "exported program")
    monkeypatch.setattr(torch.export, "save", lambda exported, path: None)
    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", aoti_compile_and_package,
                        raising=False)
    namespace = {**vars(nb), "FAST": False, "device": torch.device("cuda"), "model": None,
                 "requests": StandInRequests(), "DATA_DIR": tmp_path, "GPU_TOOLKIT": toolkit,
                 "find_cpp_compiler": lambda: "/usr/bin/g++",
                 "importlib": types.SimpleNamespace(util=types.SimpleNamespace(find_spec=lambda n: n))}
    assert run_cell("10", "export", namespace).startswith(printed)
    assert namespace["build"] is built and len(built_with) == (toolkit is not None)


class StandInBatch:
    """A CPU tensor's stand-in that records .to(device, non_blocking=...) and .pin_memory()."""

    def __init__(self, log, pinned=False):
        self.log, self.pinned, self.nbytes = log, pinned, 25_165_824

    def to(self, device, non_blocking=False):
        self.log.append(("to", self.pinned, device, non_blocking))
        return self

    def pin_memory(self):
        self.log.append(("pin_memory",))
        return StandInBatch(self.log, pinned=True)


@pytest.mark.gpu_branch("10", "cell pinned: device.type == 'cuda'")
@pytest.mark.parametrize("device_type", ["cuda", "cpu"])
def test_the_pinned_copy_pins_the_batch_and_copies_both_without_blocking(nb, device_type):
    log = []
    stand_in_torch = types.SimpleNamespace(randn=lambda *shape: StandInBatch(log))
    namespace = {**vars(nb), "torch": stand_in_torch, "device": torch.device(device_type),
                 "time_it": lambda fn, device, repeats: (fn(), 0.01)[1]}
    printed = run_cell("10", "pinned", namespace)
    if device_type == "cpu":
        assert log == [] and printed.startswith("No CUDA GPU (cpu)")
        return
    cuda = torch.device("cuda")
    assert log == [("to", False, cuda, True), ("pin_memory",), ("to", True, cuda, True)]
    assert printed == "CPU to GPU: pageable 2.5 GB/s, pinned 2.5 GB/s\n"


def stand_in_compile(calls):
    def compile(model, **kwargs):
        calls.append(kwargs)
        return model
    return compile


@pytest.mark.gpu_branch("10", "cell compile: device.type == 'cuda' and backend == 'inductor'")
@pytest.mark.parametrize("device_type, fast, chosen, expected", [
    ("cuda", False, "inductor", {"mode": "reduce-overhead"}),  # CUDA graphs on a GPU
    ("cuda", True, "inductor", {"backend": "aot_eager"}),  # the tests' fast mode
    ("cpu", False, "inductor", {"backend": "inductor"}),
    ("cuda", False, "aot_eager", {"backend": "aot_eager"}),
])
def test_torch_compile_gets_reduce_overhead_on_a_cuda_gpu_with_inductor(nb, device_type, fast, chosen,
                                                                         expected):
    calls = []
    stand_in_torch = types.SimpleNamespace(compile=stand_in_compile(calls),
                                           inference_mode=torch.inference_mode)
    namespace = {**vars(nb), "torch": stand_in_torch, "device": torch.device(device_type), "FAST": fast,
                 "BACKEND": chosen, "model": lambda batch: batch, "MAX_BATCH": 2,
                 "requests": StandInRequests(), "time_it": lambda fn, device, repeats, warmup: 1.5}
    printed = run_cell("10", "compile", namespace)
    assert calls == [expected]
    assert printed.startswith(f"torch.compile ({expected.get('backend', 'inductor')}): first call 1.5 s")


def tiny_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)).eval()


@pytest.mark.gpu_branch("10", "cell faster: device.type == 'cuda'")
def test_a_cuda_gpu_adds_a_float16_variant_checked_at_float16s_tolerance(nb, monkeypatch):
    # torch.cuda.get_device_capability(device) -> (major, minor); torch.cuda.synchronize(device) -> None.
    # The variants run on the CPU: the cell decides with `device` and moves nothing to it.
    synchronized = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synchronized.append(device))
    model = tiny_model()
    namespace = {**vars(nb), "device": torch.device("cuda"), "model": model, "compiled": model,
                 "backend": "inductor", "batch": torch.randn(6, 3, 8, 8), "ROUNDS": 2, "FAST": True}
    printed = run_cell("10", "faster", namespace)
    variants = namespace["variants"]
    assert list(variants) == ["eager float32", "torch.compile (inductor)", "eager float16"]
    assert {p.dtype for p in variants["eager float16"].parameters()} == {torch.float16}
    assert {p.dtype for p in model.parameters()} == {torch.float32}, "the original stays float32"
    lines = printed.splitlines()
    assert lines[2].startswith("eager float16: within float16's tolerance (rtol 0.01, atol 0.01)")
    assert set(namespace["seconds"]) == set(variants) and synchronized


class StandInCuda:
    """torch.cuda's stream and graph API as notebook 10 uses it, recording each call."""

    def __init__(self):
        self.log, self.capturing = [], False
        outer = self

        class Stream:
            def __init__(self, name="side"):
                self.name = name
                outer.log.append(("Stream", name))

            def wait_stream(self, other):
                outer.log.append(("wait_stream", self.name, other.name))

        class CUDAGraph:
            def replay(self):
                outer.log.append(("replay",))

        self.Stream, self.CUDAGraph = Stream, CUDAGraph
        self.current = Stream("current")

    def current_stream(self):
        return self.current

    @staticmethod
    def _context(log, entry):
        import contextlib

        @contextlib.contextmanager
        def context():
            log.append(("enter",) + entry)
            yield
            log.append(("exit",) + entry)
        return context()

    def stream(self, stream):
        return self._context(self.log, ("stream", stream.name))

    def graph(self, graph):
        return self._context(self.log, ("graph", type(graph).__name__))


def test_record_graph_warms_up_on_a_side_stream_then_records_one_call(nb):
    cuda, calls = StandInCuda(), []
    model = lambda x: calls.append(len(cuda.log)) or x + 1  # noqa: E731
    graph, output = nb.record_graph(model, torch.zeros(2), cuda=cuda)
    names = [entry[:2] for entry in cuda.log]
    assert names == [("Stream", "current"), ("Stream", "side"), ("wait_stream", "side"),
                     ("enter", "stream"), ("exit", "stream"), ("wait_stream", "current"),
                     ("enter", "graph"), ("exit", "graph")]
    assert len(calls) == 4, "three warm-up calls, then the recorded one"
    assert isinstance(graph, cuda.CUDAGraph) and torch.equal(output, torch.ones(2))


@pytest.mark.gpu_branch("10", "cell cuda-graphs: device.type == 'cuda'")
def test_the_cuda_graphs_cell_copies_new_pictures_into_the_recorded_input_and_replays(nb, monkeypatch):
    cuda = StandInCuda()  # the cell defines record_graph again, with torch.cuda as its default
    for name in ("Stream", "current_stream", "stream", "CUDAGraph", "graph"):
        monkeypatch.setattr(torch.cuda, name, getattr(cuda, name))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    model = tiny_model()
    batch = torch.randn(2, 3, 8, 8)
    requests = torch.randn(5, 3, 8, 8)
    namespace = {**vars(nb), "device": torch.device("cuda"), "model": model, "batch": batch,
                 "requests": requests,
                 "time_it": lambda fn, device, repeats: (fn(), 0.002)[1]}
    printed = run_cell("10", "cuda-graphs", namespace)
    assert torch.equal(namespace["static_input"], requests[-2:]), "new pictures in the recorded memory"
    assert cuda.log.count(("replay",)) == 2  # once for the new pictures, once timed
    assert printed == "One batch: 2.000 ms eager, 2.000 ms replayed as a CUDA graph.\n"
    namespace["device"] = torch.device("cpu")
    assert run_cell("10", "cuda-graphs", namespace) == "CUDA graphs need a CUDA GPU; this run uses cpu.\n"


@pytest.mark.gpu_branch("10", "onnx_providers: device_type == 'cuda'")
def test_onnx_asks_for_the_gpu_provider_first_and_notices_a_quiet_fallback(nb):
    assert nb.onnx_providers("cuda") == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert nb.onnx_providers("cpu") == ["CPUExecutionProvider"]
    wanted = nb.onnx_providers("cuda")
    assert nb.provider_verdict(wanted, wanted) == "ONNX Runtime runs on CUDAExecutionProvider, as asked."
    assert nb.provider_verdict(wanted, ["CPUExecutionProvider"]).startswith(
        "ONNX Runtime fell back to CPUExecutionProvider: CUDAExecutionProvider did not load")
    assert "fell back to nothing" in nb.provider_verdict(wanted, [])
