"""The few wording promises a learner relies on, in one table, checked by one test (test_promises.py).

Tests do not pin sentences: a one-sentence edit must not fail the suite. But a handful of words are
promises that a learner acts on, such as the menu path to Kaggle's two GPUs, and losing them would send
a learner the wrong way while every behaviour test still passed. Each entry says what must be said, not
how: a regular expression searched, case-sensitively and with line breaks read as spaces, in
- "title": the notebook's first cell (what you will find out, the title table);
- "core": the markdown before the Summary;
- "notebook": every markdown cell.
A promise with `present=False` is a corrected error that must not come back (a claim that was wrong).
What a cell prints is not here: tests/verdicts.py holds the verdicts.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Promise:
    pattern: str
    where: str
    why: str
    present: bool = True


WHERE = ("title", "core", "notebook")

PROMISES = {
    "02": [
        Promise(r"much safer, not safe", "notebook",
                "weights_only=True as PyTorch's own documentation describes it: a learner must still "
                "load only checkpoints from sources they trust"),
        Promise(r"Never load data from an untrusted source", "notebook",
                "the quote of torch.load's own warning (test_02_device.py checks PyTorch still says it)"),
    ],
    "07": [
        Promise(r"`CUDA_LAUNCH_BLOCKING=1`", "core",
                "the setting a learner copies, before the process starts, to find the line a "
                "device-side assert comes from"),
        Promise(r"Expected all tensors to be on the same device", "core",
                "the message a learner searches for, found in Step 2 with its cause"),
    ],
    "01": [
        Promise(r"Runtime > Change runtime type > T4 GPU > Save", "core",
                "the menu path a Colab learner whose session has no GPU follows ('If it says no GPU')"),
        Promise(r"Settings > Accelerator > GPU T4 x2", "core",
                "the menu path a Kaggle learner whose session has no GPU follows"),
        Promise(r"only the driver is installed separately \(one exception: notebook 10's AOTInductor "
                r"package compiles against NVIDIA's CUDA toolkit", "notebook",
                "the Summary names the one exception to 'install only the driver': AOTInductor on a GPU "
                "compiles against the CUDA toolkit's headers (issue 37)"),
        Promise(r"cannot run the wheel's code|runs only on the (GPU )?generations it was compiled for",
                "notebook",
                "a GPU runs wheel code built for its own major number and a smaller or equal minor one (an "
                "L4, 8.9, runs sm_86): a learner told otherwise reinstalls a wheel that works (issue 43)",
                present=False),
    ],
    "05": [
        Promise(r"\(\[`torch/cuda/__init__.py`\]\(https://github.com/pytorch/pytorch/blob/main/torch/cuda/"
                r"__init__.py\)\)", "notebook",
                "why is_bf16_supported() says True on a T4 is cited from PyTorch's source "
                "(including_emulation=True by default) (issue 37)"),
        Promise(r"pytorch/pull/148322", "notebook",
                "a pull request that was never merged is no source for how PyTorch behaves", present=False),
    ],
    "06": [
        Promise(r"Settings > Accelerator > GPU T4 x2", "title",
                "the menu path that gives a Kaggle learner two real GPUs for the processes of Step 4"),
    ],
    "10": [
        Promise(r"needs no compiling.*first call still pays", "core",
                "an AOTInductor package needs no compiling in a fresh process, but its first call still pays "
                "the start-up of Step 1, so a server warms it up (issue 37)"),
        Promise(r"compiled speed from (its|the) first (call|request)", "notebook",
                "the first call of a package is not at compiled speed: its first_call_s shows the start-up",
                present=False),
        Promise(r"the CUDA toolkit", "core",
                "AOTInductor on a GPU needs the CUDA toolkit, which a pip-only machine lacks"),
        Promise(r"on a GPU one architecture", "notebook",
                "a package built on a T4 does not run on an A100: its kernels are for one GPU architecture"),
        Promise(r"plus the larger batch's longer compute", "notebook",
                "the batcher's cost is its delay plus the larger batch's compute, not the delay alone"),
        Promise(r"memory the system cannot page out", "notebook", "what pinned memory is"),
        Promise(r"99 requests in 100 finish within it", "core", "what p99 means"),
        Promise(r"99 requests in 100 finish within the p99", "notebook",
                "the glossary's percentile, as the notebook's Words used here copies it: not 'the slowest "
                "1 in 100' (issue 37)"),
        Promise(r"effective rate", "core",
                "the knee's GFLOP/s is an effective rate, not comparable with a datasheet peak"),
        Promise(r"silently runs on the CPU", "notebook",
                "ONNX Runtime's fallback to the CPU is logged: it is quiet, not silent", present=False),
        Promise(r"CUDA graphs are kept per thread.*pad each batch to one of a few fixed sizes", "notebook",
                "the hint for serving a reduce-overhead model: each new batch size records its own graph"),
        Promise(r"compiles again and records a CUDA graph for it", "notebook",
                "with automatic_dynamic_shapes (on by default) Dynamo compiles once more, with a symbolic "
                "batch size; it is the CUDA graphs that are recorded once per size (issue 43)", present=False),
        Promise(r"pip wheels bring none", "notebook",
                "the Linux wheels bring CUDA's runtime libraries and headers, only no toolkit that "
                "torch.utils.cpp_extension finds (issue 43; the imports cell's comment said it, and the "
                "prose must not)", present=False),
    ],
    "08": [
        Promise(r"Settings > Accelerator > GPU T4 x2", "title",
                "the menu path that gives a Kaggle learner two real GPUs for Going deeper C's sharding"),
    ],
}
