"""PyTorch's own wording of what notebook 07 reads, as a GPU gives it, for its tests
(tests/notebooks/test_07_*.py): the output of a script whose CUDA kernel assert fires, and the warnings
deterministic algorithms give with warn_only=True on a T4."""
import textwrap


def cuda_assert_output(script_source, raised_at_line):
    """Output shaped like a script's on an NVIDIA GPU when nll_loss's kernel assert fires, the traceback
    blaming line `raised_at_line` of `script_source` (PyTorch 2.14's wording, from c10/cuda)."""
    return textwrap.dedent(f"""\
        /pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.
        Traceback (most recent call last):
          File "/content/data/nb07_code/labels_out_of_range.py", line {raised_at_line}, in <module>
            {script_source.splitlines()[raised_at_line - 1].strip()}
        torch.AcceleratorError: CUDA error: device-side assert triggered
        Search for `cudaErrorAssert' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.
        CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
        For debugging consider passing CUDA_LAUNCH_BLOCKING=1
        Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.

        After the error, even a new computation on cuda fails: CUDA error: device-side assert triggered
        """)


# PyTorch's own warnings with warn_only=True (aten/src/ATen/Context.cpp, alertNotDeterministic and, in
# PyTorch 2.9 and older, alertCuBLASConfigNotDeterministic), as a T4 gives them in part E.
ADAPTIVE_POOL_WARNING = (
    "adaptive_avg_pool2d_backward_cuda does not have a deterministic implementation, but you set "
    "'torch.use_deterministic_algorithms(True, warn_only=True)'. You can file an issue at "
    "https://github.com/pytorch/pytorch/issues to help us prioritize adding deterministic support for "
    "this operation.")

CUBLAS_WARNING = (
    "Deterministic behavior was enabled with either `torch.use_deterministic_algorithms(True)` or "
    "`at::Context::setDeterministicAlgorithms(true)`, but this operation is not deterministic because it "
    "uses CuBLAS and you have CUDA >= 10.2. To enable deterministic behavior in this case, you must set "
    "an environment variable before running your PyTorch application: CUBLAS_WORKSPACE_CONFIG=:4096:8 or "
    "CUBLAS_WORKSPACE_CONFIG=:16:8. For more information, go to "
    "https://docs.nvidia.com/cuda/cublas/index.html#results-reproducibility")
