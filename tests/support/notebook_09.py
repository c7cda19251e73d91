"""What several of notebook 09's test files need: a stand-in for triton to load its helpers with, the
stand-in for triton's launch helpers, and its kernels and its exercises' checks run under Triton's
interpreter in a fresh Python.

The notebook defines its kernels with `@triton.jit` and `tl.constexpr` at the top level, while it imports
triton only when it is installed (inside an `if`, which load_helpers skips). So the helpers are loaded
with a stand-in `triton`/`tl` put into builtins for the moment of loading: the kernels become plain
functions, and the pure helpers are what the tests call. The kernels themselves run in a subprocess that
sets TRITON_INTERPRET=1 before it imports triton, as the notebook does: in a test process another test may
already have imported triton (torch.compile does), and then Triton's own functions (tl.max, tl.sum) would
not run in the interpreter; that subprocess also gives the exercises' checks real kernels, the
notebook's answers and likely wrong ones. Coverage.py is started there too, so the report counts the
kernels' lines.
"""
import builtins
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import types
from unittest import mock

import pytest

from support.notebook_code import write_helper_file

STAND_IN_TRITON = types.SimpleNamespace(jit=lambda function: function, constexpr=int)


@contextlib.contextmanager
def stand_in_triton():
    """The stand-in triton and tl in builtins, for the moment of load_helpers("09"): its kernels become
    plain functions."""
    with mock.patch.object(builtins, "triton", STAND_IN_TRITON, create=True), \
            mock.patch.object(builtins, "tl", STAND_IN_TRITON, create=True):
        yield


# triton/__init__.py's cdiv and next_power_of_2, for the launch functions run with stand-in kernels
STAND_IN_LAUNCH = types.SimpleNamespace(cdiv=lambda x, y: (x + y - 1) // y,
                                        next_power_of_2=lambda n: 1 << (n - 1).bit_length())


# A file, not `python -c`: @triton.jit reads each kernel's source, so the wrong kernels below need one.
# Its third argument says which part to run: "kernels" or "exercises".
RUNNER = r'''
import builtins, json, os, sys
os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported, as the notebook does
import torch
import triton
import triton.language as tl

# The notebook's definitions from load_helpers' file, as tests/notebook_code.py runs them, with the real
# triton and tl (the notebook imports them in its plan cell, whose work load_helpers leaves out).
# Triton's interpreter recompiles each kernel from that file, so coverage.py, started here when the
# test run measures the helpers, counts the kernels' lines in the report.
helpers, data_file, part = sys.argv[1], sys.argv[2], sys.argv[3]
builtins.triton, builtins.tl = triton, tl
if data_file:
    import coverage
    measurement = coverage.Coverage(data_file=data_file, data_suffix=True, branch=True,
                                    include=[helpers], config_file=False)
    measurement.start()
with open(helpers) as source:
    exec(compile(source.read(), helpers, "exec"), globals())
TRITON_MODE, device, known_problem = "interpreter", torch.device("cpu"), None  # the plan cell's work

failures = []
def expect(name, status, verdict):
    if status != "passed":
        failures.append(verdict)

if part == "kernels":  # the notebook's kernels at their block boundaries
    for n in (1, 255, 256, 257, 1000):  # inside one block, exactly full blocks, one past a block
        x, y = torch.randn(n), torch.randn(n)
        expect(n, *check_kernel(f"add n={n}", lambda: add(x, y), x + y, "interpreter")[:2])
    for rows, cols in ((3, 1), (3, 64), (3, 65), (2, 1000)):
        m = torch.randn(rows, cols)
        expect(cols, *check_kernel(f"softmax {rows}x{cols}", lambda: softmax(m), torch.softmax(m, 1),
                                   "interpreter")[:2])
        expect(cols, *check_kernel(f"in steps {rows}x{cols}", lambda: softmax_in_steps(m),
                                   torch.softmax(m, 1), "interpreter")[:2])
    for (M, N, K), blocks in (((32, 32, 32), (32, 32, 32)), ((33, 31, 17), (32, 32, 32)),
                              ((1, 1, 1), (16, 16, 16)), ((48, 40, 56), (16, 16, 16)),
                              ((20, 70, 40), (16, 64, 32))):
        a, b = torch.randn(M, K), torch.randn(K, N)
        expect(M, *check_kernel(f"matmul {M}x{N}x{K} {blocks}", lambda: matmul(a, b, blocks), a @ b,
                                "interpreter", **matmul_tolerance("interpreter", None))[:2])


# Kernels a learner is likely to write for the exercises
@triton.jit
def forgot_the_double_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x + y, 0.0), mask=mask)


@triton.jit
def store_without_mask_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x + y, 0.0) * 2)


@triton.jit
def masked_positions_as_zero_kernel(out_ptr, x_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * row_stride + cols, mask=cols < n_cols)
    tl.store(out_ptr + row, tl.max(x, axis=0))


@triton.jit
def rows_n_cols_apart_kernel(out_ptr, x_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    tl.store(out_ptr + row, tl.max(x, axis=0))


exercises = {}
if part == "exercises":  # the exercises' checks, given those kernels
    exercises = {"fused-kernel answer": check_fused_kernel(add_relu_double_kernel_answer),
                 "fused-kernel starter": check_fused_kernel(add_relu_double_kernel),
                 "forgot the * 2": check_fused_kernel(forgot_the_double_kernel),
                 "store without its mask": check_fused_kernel(store_without_mask_kernel),
                 "row-max answer": check_row_max(row_max_kernel_answer),
                 "row-max starter": check_row_max(row_max_kernel),
                 "masked positions as 0": check_row_max(masked_positions_as_zero_kernel),
                 "rows n_cols apart": check_row_max(rows_n_cols_apart_kernel)}
if data_file:
    measurement.stop()
    measurement.save()
print(json.dumps({"failures": failures, "exercises": exercises}))
'''


def under_the_interpreter(part, config, folder):
    """What RUNNER reports for `part` ("kernels": the kernels' failed checks; "exercises": the exercises'
    checks' verdicts), run in a fresh Python in `folder`; skips the test without triton. `config`:
    pytest's, whose helper_coverage (None when the run does not measure the helpers) names the data file."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("needs triton installed")
    measurement = config.helper_coverage
    data_file = measurement.coverage.config.data_file if measurement is not None else ""
    runner = folder / "run_kernels.py"
    runner.write_text(RUNNER)
    result = subprocess.run([sys.executable, str(runner), str(write_helper_file("09")), data_file, part],
                            env={**os.environ, "TRITON_INTERPRET": "1"},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
