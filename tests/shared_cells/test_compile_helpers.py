"""The shared compile helpers (tools/shared_cells/compile_helpers.py), tested once.

Notebooks 05, 09 and 10 carry the same cell (tools/sync_cells.py writes it), so testing notebook 10's copy
tests them all. `find_cpp_compiler` and `find_c_compiler` look for the compilers where Inductor and Triton
look on Linux, macOS and Windows, asked with a stand-in for shutil.which that knows the programs of a
made-up machine; `choose_compile_backend` is called on both sides of each condition (its GPU branches are
listed once, under "shared": tests/collection/test_gpu_branches.py); and the backend it falls back to
really compiles and trains on the CPU.
"""
import importlib.util
import os
import types

import pytest
import torch
from torch import nn

from support.notebook_code import load_helpers, run_cell

nb = load_helpers("10")


def fake_which(found):
    """A shutil.which stand-in that knows only the programs (or paths) in `found`."""
    return lambda name: f"/usr/bin/{name}" if name in found else None


# --- the compilers: where Inductor and Triton look ---------------------------------------------------

@pytest.mark.parametrize("platform_name, compiler", [("linux", "g++"), ("win32", "cl"), ("darwin", "clang++")])
def test_find_cpp_compiler_looks_for_what_inductor_calls_on_each_system(platform_name, compiler):
    assert nb.find_cpp_compiler(platform_name, {}, fake_which({compiler})) == f"/usr/bin/{compiler}"
    assert nb.find_cpp_compiler(platform_name, {}, fake_which(set())) is None


def test_the_cxx_environment_variable_names_the_compiler():
    assert nb.find_cpp_compiler("linux", {"CXX": "clang++"}, fake_which({"clang++"})) == "/usr/bin/clang++"
    assert nb.find_cpp_compiler("linux", {"CXX": "clang++"}, fake_which({"g++"})) is None


@pytest.mark.parametrize("platform_name", ["linux", "darwin"])
def test_find_c_compiler_looks_where_triton_looks(platform_name):
    # triton/runtime/build.py: $CC, else gcc, else clang
    def found(environ, programs):
        return nb.find_c_compiler(platform_name, environ, fake_which(programs), lambda: "/site/triton")

    assert found({}, {"gcc", "clang"}) == "/usr/bin/gcc"
    assert found({}, {"clang"}) == "/usr/bin/clang"
    assert found({}, {"g++", "clang++"}) is None  # C++ alone is not it
    assert found({"CC": "cc"}, {"cc", "gcc"}) == "/usr/bin/cc"
    assert found({"CC": "missing-cc"}, {"gcc"}) is None
    assert found({}, {"cl", "/site/triton/runtime/tcc/tcc.exe"}) is None  # Windows' compilers: not here


def test_on_windows_find_c_compiler_takes_the_tinycc_triton_windows_brings_then_cl():
    # triton-windows' triton/runtime/build.py: $CC, MSVC, the TinyCC in its own package, cl, gcc, clang
    tcc = "/site/triton/runtime/tcc/tcc.exe"

    def found(environ, programs, folder="/site/triton"):
        return nb.find_c_compiler("win32", environ, fake_which(programs), lambda: folder)

    assert found({}, {tcc, "cl", "gcc"}) == f"/usr/bin/{tcc}"
    assert found({}, {"cl", "gcc"}) == "/usr/bin/cl"  # a wheel without TinyCC, in a developer prompt
    assert found({}, {tcc, "gcc"}, folder=None) == "/usr/bin/gcc"  # no triton installed
    assert found({}, {"clang"}) == "/usr/bin/clang"
    assert found({}, set()) is None
    assert found({"CC": "clang-cl"}, {tcc, "clang-cl"}) == "/usr/bin/clang-cl"


def test_the_triton_folder_is_found_without_importing_triton(monkeypatch):
    asked = []

    def find_spec(name):
        asked.append(name)
        return types.SimpleNamespace(submodule_search_locations=["/site/triton"])

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert nb.installed_triton_folder() == "/site/triton" and asked == ["triton"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # not installed
    assert nb.installed_triton_folder() is None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: types.SimpleNamespace(
        submodule_search_locations=None))  # a module, not a package
    assert nb.installed_triton_folder() is None

    def not_a_package(name):  # what find_spec raises for a module in sys.modules without a spec
        raise ValueError("triton.__spec__ is None")

    monkeypatch.setattr(importlib.util, "find_spec", not_a_package)
    assert nb.installed_triton_folder() is None
    monkeypatch.undo()
    if importlib.util.find_spec("triton") is not None:  # this environment's own triton
        assert os.path.isfile(os.path.join(nb.installed_triton_folder(), "__init__.py"))


# --- the backend ------------------------------------------------------------------------------------

@pytest.mark.gpu_branch("shared", "choose_compile_backend: device_type == 'cuda'")
@pytest.mark.gpu_branch("shared", "choose_compile_backend: device_type == 'cuda' and has_triton and c_compiler")
@pytest.mark.parametrize("has_triton", [False, True])
@pytest.mark.parametrize("c_compiler", [None, "/usr/bin/gcc"])
@pytest.mark.parametrize("cpp_compiler", [None, "/usr/bin/g++"])
def test_a_cuda_gpu_gets_inductor_exactly_with_triton_and_a_c_compiler(has_triton, c_compiler, cpp_compiler):
    backend, why = nb.choose_compile_backend("cuda", cpp_compiler, c_compiler, has_triton)
    assert backend == ("inductor" if has_triton and c_compiler else "aot_eager")
    if not has_triton:
        assert "Triton" in why and "triton-windows" in why
    if not c_compiler:
        assert "C compiler" in why


def test_cuda_with_triton_but_without_a_compiler_falls_back():
    # On such a machine torch.compile with Inductor fails at its first call
    backend, why = nb.choose_compile_backend("cuda", None, None, has_triton=True)
    assert backend == "aot_eager" and "C compiler" in why and "Triton" not in why.split("missing")[0]


@pytest.mark.gpu_branch("shared", "choose_compile_backend: device_type == 'cpu'")
@pytest.mark.gpu_branch("shared", "choose_compile_backend: device_type == 'cpu' and cpp_compiler")
@pytest.mark.parametrize("has_triton", [False, True])
@pytest.mark.parametrize("c_compiler", [None, "/usr/bin/gcc"])
def test_a_cpu_gets_inductor_exactly_with_a_cpp_compiler(has_triton, c_compiler):
    backend, why = nb.choose_compile_backend("cpu", "/usr/bin/g++", c_compiler, has_triton)
    assert backend == "inductor" and "g++" in why
    backend, why = nb.choose_compile_backend("cpu", None, c_compiler, has_triton)
    assert backend == "aot_eager" and "compiler" in why and "speed-up" in why


@pytest.mark.parametrize("device_type", ["mps", "xpu"])
def test_other_accelerators_use_the_backend_that_runs_everywhere(device_type):
    assert nb.choose_compile_backend(device_type, "/usr/bin/clang++", "/usr/bin/clang", True)[0] == "aot_eager"


def test_without_a_compiler_the_fallback_backend_really_compiles_and_trains(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-anywhere")
    compiler = nb.find_cpp_compiler()
    assert compiler is None
    backend, _ = nb.choose_compile_backend("cpu", compiler, None, has_triton=False)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = torch.compile(model, backend=backend)
    inputs = torch.randn(5, 4)
    loss = nn.functional.cross_entropy(compiled(inputs), torch.tensor([0, 1, 0, 1, 1]))
    loss.backward()
    assert torch.allclose(compiled(inputs), model(inputs))
    assert all(parameter.grad is not None for parameter in model.parameters())


# --- compiling on few cores -------------------------------------------------------------------------

@pytest.mark.parametrize("cores, threads", [(1, 1), (None, 1), (4, 1), (5, "unchanged"), (64, "unchanged")])
def test_on_four_cores_or_fewer_inductor_compiles_in_this_process(monkeypatch, cores, threads):
    import torch._inductor.config

    monkeypatch.setattr(os, "cpu_count", lambda: cores)  # the cell imports os itself
    with torch._inductor.config.patch(compile_threads=7):  # restored after the block
        run_cell("10", "compile-helpers", {})
        assert torch._inductor.config.compile_threads == (7 if threads == "unchanged" else threads)
