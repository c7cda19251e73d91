#@title Shared compile helpers: the compilers Inductor and Triton would call, and the backend
import importlib.util
import os
import shutil
import sys


def find_cpp_compiler(platform_name=sys.platform, environ=os.environ, which=shutil.which):
    """Path of the C++ compiler Inductor calls on a CPU, or None: $CXX, else MSVC's cl on Windows,
    clang++ on macOS, g++ elsewhere (torch/_inductor/cpp_builder.py, get_cpp_compiler)."""
    default = {"win32": "cl", "darwin": "clang++"}.get(platform_name, "g++")
    return which(environ.get("CXX") or default)


def installed_triton_folder():
    """The folder of the installed triton package, found without importing it; None without one."""
    try:
        spec = importlib.util.find_spec("triton")
    except ValueError:  # a module named triton that is no package (a stand-in)
        return None
    folders = list(spec.submodule_search_locations or []) if spec else []
    return folders[0] if folders else None


def find_c_compiler(platform_name=sys.platform, environ=os.environ, which=shutil.which,
                    triton_folder=installed_triton_folder):
    """Path of the C compiler Triton calls to build its GPU launchers, or None
    (triton/runtime/build.py): $CC; on Windows the TinyCC that triton-windows brings in its
    package (triton_folder() finds it), else MSVC's cl; then gcc, else clang."""
    if environ.get("CC"):
        return which(environ["CC"])
    if platform_name == "win32":
        folder = triton_folder()
        bundled = os.path.join(folder, "runtime", "tcc", "tcc.exe") if folder else None
        found = (bundled and which(bundled)) or which("cl")
        if found:
            return found
    return which("gcc") or which("clang")


def choose_compile_backend(device_type, cpp_compiler, c_compiler, has_triton):
    """(backend, reason) for torch.compile: Inductor where it can run, else aot_eager."""
    if device_type == "cpu" and cpp_compiler:
        return "inductor", f"Inductor writes C++ kernels and compiles them with {cpp_compiler}"
    if device_type == "cpu":
        return "aot_eager", ("no C++ compiler found, so no Inductor. aot_eager traces the model "
                             "but runs the same operations: no fused kernels, no speed-up")
    if device_type == "cuda" and has_triton and c_compiler:
        return "inductor", ("Inductor writes Triton kernels for the GPU; Triton builds their "
                            f"launchers with {c_compiler}")
    if device_type == "cuda":
        missing = [what for what, found in (("Triton", has_triton), ("a C compiler", c_compiler))
                   if not found]
        return "aot_eager", (f"{' and '.join(missing)} missing, so no Inductor (on Windows: "
                             "pip install triton-windows). aot_eager traces but does not fuse")
    return "aot_eager", f"Inductor's support for {device_type} is new; aot_eager runs everywhere"


if (os.cpu_count() or 1) <= 4:
    import torch._inductor.config

    # On few cores a pool of compiler processes only competes for them: compile in this process.
    torch._inductor.config.compile_threads = 1
