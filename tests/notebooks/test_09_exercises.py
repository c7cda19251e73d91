"""Notebook 09's exercises: each check given the answers a learner is likely to write, and what it says to
each. Under Triton's interpreter with real kernels (the notebook's answers and likely wrong ones, in a
fresh Python: support/notebook_09.py), and in this process as on a GPU, with stand-ins for compiled
kernels. The nbval run checks that each untouched starter says NOT DONE YET and each answer PASSED
(conftest.py)."""
import math
import re
import types

import pytest
import torch

from support.notebook_09 import STAND_IN_LAUNCH, stand_in_triton, under_the_interpreter
from support.notebook_code import load_helpers, run_cell


@pytest.fixture(scope="module")
def nb():
    """The notebook's helpers, its kernels loaded as plain functions (support/notebook_09.py)."""
    with stand_in_triton():
        return load_helpers("09")


@pytest.fixture(scope="module")
def interpreted(request, tmp_path_factory):
    """What the exercises' part of the interpreter run reports: each check's verdict on each kernel."""
    return under_the_interpreter("exercises", request.config, tmp_path_factory.mktemp("interpreter"))


# --- Under Triton's interpreter, with real kernels ------------------------------------------------

@pytest.mark.exercise("09", "fused-kernel")
def test_exercise_1_tells_a_kernel_without_its_double_and_a_store_without_its_mask(interpreted):
    said = interpreted["exercises"]
    assert said["fused-kernel answer"] == ("PASSED: your kernel matches relu(x + y) * 2 under Triton's "
                                           "interpreter on 1000, 256 and 1 numbers, in one launch each.")
    assert said["fused-kernel starter"] == "NOT DONE YET: replace the ... in add_relu_double_kernel."
    assert re.fullmatch(r"NOT YET RIGHT: on 1000 numbers, \d+ results differ\. At position \d+, "
                        r"x = -?\d\.\d{3} and y = -?\d\.\d{3} give (\d+\.\d{3}), but relu\(x \+ y\) \* 2 is "
                        r"\d+\.\d{3}\.", said["forgot the * 2"])
    assert said["store without its mask"] == ("NOT YET RIGHT: on 1000 numbers your kernel wrote past the end "
                                              "of out: give tl.store the mask too (mask=mask).")


@pytest.mark.exercise("09", "row-max")
def test_exercise_2_tells_masked_positions_read_as_zero_and_rows_n_cols_apart(interpreted):
    said = interpreted["exercises"]
    assert said["row-max answer"].startswith("PASSED: your kernel finds the maximum of every row")
    assert said["row-max starter"] == "NOT DONE YET: replace the ... in row_max_kernel."
    assert re.fullmatch(r"NOT YET RIGHT: on 3 rows of 100 negative numbers, row 0: your kernel gives "
                        r"0\.000, its maximum is -0\.\d{3}; the masked positions count as 0 unless the "
                        r"load fills them with -inf\.", said["masked positions as 0"])
    assert re.fullmatch(r"NOT YET RIGHT: on the first 64 columns of a 4 x 80 matrix, row [123]: your kernel "
                        r"gives -?\d\.\d{3}, its maximum is -?\d\.\d{3}; a row starts row_stride \(80\) "
                        r"elements after the one before\.", said["rows n_cols apart"])


# --- In this process, with kernels of the test's own ----------------------------------------------

def exercise(nb, name, **names):
    """The namespace of exercise `name`'s check cell, run on the CPU as on a GPU (TRITON_MODE
    'compiled'), with `names` beside the notebook's helpers; kernels are the test's stand-ins."""
    namespace = {**vars(nb), "device": torch.device("cpu"), "TRITON_MODE": "compiled",
                 "known_problem": None, "triton": STAND_IN_LAUNCH, **names}
    run_cell("09", f"exercise-{name}-check", namespace)
    return namespace


class ElementwiseStandIn:
    """Stands in for a compiled add_relu_double_kernel: kernel[grid](x, y, out, n, BLOCK=...) runs the
    grid's programs one by one, each on its block; masked=False stores whole blocks, past the end too."""

    def __init__(self, formula, masked=True, error=None):
        self.formula, self.masked, self.error = formula, masked, error
        self.launched = []  # (x, y) of each launch, the first n numbers of each

    def __getitem__(self, grid):
        def launch(x, y, out, n, BLOCK):
            self.launched.append((x[:n].clone(), y[:n].clone()))
            if self.error:
                raise self.error
            for program in range(grid[0]):
                start = program * BLOCK
                stop = min(start + BLOCK, n) if self.masked else start + BLOCK
                out[start:stop] = self.formula(x[start:stop], y[start:stop])
        return launch


def relu_double(x, y):
    return torch.relu(x + y) * 2


def unfinished_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK):
    offsets = ...  # the starter's `...`, not yet replaced
    return offsets


def test_a_kernel_is_unfinished_while_its_source_holds_the_starters_ellipsis(nb):
    assert nb.still_has_ellipsis(unfinished_kernel)
    assert nb.still_has_ellipsis(types.SimpleNamespace(fn=unfinished_kernel))  # what @triton.jit makes
    assert not nb.still_has_ellipsis(nb.add_kernel)
    assert not nb.still_has_ellipsis(ElementwiseStandIn(relu_double))  # no source: judged by its results


@pytest.mark.exercise("09", "fused-kernel")
def test_exercise_1s_check_on_a_gpu_passes_a_right_kernel_and_names_each_wrong_one(nb):
    check = exercise(nb, "fused-kernel")["check_fused_kernel"]
    assert check(ElementwiseStandIn(relu_double)).startswith(
        "PASSED: your kernel matches relu(x + y) * 2 on the GPU on 1000, 256 and 1 numbers")
    assert check(ElementwiseStandIn(relu_double, masked=False)) == (
        "NOT YET RIGHT: on 1000 numbers your kernel wrote past the end of out: give tl.store the mask "
        "too (mask=mask).")
    assert check(ElementwiseStandIn(relu_double), block=1024).endswith("on 1000, 1024 and 1 numbers, in "
                                                                        "one launch each.")
    only_the_full_blocks = ElementwiseStandIn(lambda x, y: relu_double(x, y) * (x.numel() > 1))
    assert check(only_the_full_blocks).startswith("NOT YET RIGHT: on 1 numbers, 1 results differ.")
    forgot_the_double = ElementwiseStandIn(lambda x, y: torch.relu(x + y))
    said = check(forgot_the_double)
    x, y = forgot_the_double.launched[0]  # the first launch, on 1000 numbers, is the one judged
    differ = (x + y > 0).nonzero().flatten()  # where relu(x + y) is not twice itself
    i = int(differ[0])
    assert said == (f"NOT YET RIGHT: on 1000 numbers, {len(differ)} results differ. At position {i}, "
                    f"x = {x[i]:.3f} and y = {y[i]:.3f} give {torch.relu(x + y)[i]:.3f}, but relu(x + y) * 2 "
                    f"is {relu_double(x, y)[i]:.3f}.")
    assert 0 < len(differ) < 1000 and len(forgot_the_double.launched) == 1
    error = RuntimeError("at 4:8:\n    x = tl.load(x_pt + offsets)\nNameError: x_pt is not defined")
    assert check(ElementwiseStandIn(relu_double, error=error)) == (
        "NOT YET RIGHT: on 1000 numbers, launching your kernel raised RuntimeError: NameError: x_pt is "
        "not defined")
    known = exercise(nb, "fused-kernel", known_problem="triton 3.1.0 computes wrong numbers")
    assert known["check_fused_kernel"](ElementwiseStandIn(relu_double, error=error)).endswith(
        "not defined (known problem: triton 3.1.0 computes wrong numbers)")
    shown = exercise(nb, "fused-kernel", TRITON_MODE="shown")["check_fused_kernel"]
    assert shown(ElementwiseStandIn(relu_double)) == ("your fused kernel: not run (no Triton), so the "
                                                      "check cannot launch it.")
    assert shown(unfinished_kernel).startswith("NOT DONE YET")


class RowMaxStandIn:
    """Stands in for a compiled row_max_kernel: each program reads its row (a strided view here), the
    positions past n_cols as `fill`, and stores the maximum at out[row], or `spread` numbers from it."""

    def __init__(self, fill=-math.inf, spread=1, error=None):
        self.fill, self.spread, self.error = fill, spread, error

    def __getitem__(self, grid):
        def launch(out, x, n_cols, row_stride, BLOCK):
            if self.error:
                raise self.error
            for row in range(grid[0]):
                block = torch.full((BLOCK,), self.fill)
                block[:n_cols] = x[row, :n_cols]
                out[row:row + self.spread] = block.max()
        return launch


@pytest.mark.exercise("09", "row-max")
def test_exercise_2s_check_on_a_gpu_passes_a_right_kernel_and_names_each_wrong_one(nb):
    check = exercise(nb, "row-max")["check_row_max"]
    assert check(RowMaxStandIn()) == ("PASSED: your kernel finds the maximum of every row, in rows of "
                                      "negative numbers and in rows row_stride apart.")
    assert check(RowMaxStandIn(fill=0.0)).endswith("the masked positions count as 0 unless the load "
                                                   "fills them with -inf.")
    assert check(RowMaxStandIn(spread=128)) == (
        "NOT YET RIGHT: on 3 rows of 100 negative numbers your kernel wrote past the last row's place "
        "in out: store one number per program, at out_ptr + row.")
    assert check(RowMaxStandIn(error=ValueError("boom"))) == (
        "NOT YET RIGHT: on 3 rows of 100 negative numbers, launching your kernel raised ValueError: boom")
    shown = exercise(nb, "row-max", TRITON_MODE="shown")["check_row_max"]
    assert shown(RowMaxStandIn()).startswith("your row maximum: not run (no Triton)")
    assert check(unfinished_kernel) == "NOT DONE YET: replace the ... in row_max_kernel."


def test_exercise_2s_matrices_hold_negative_rows_and_rows_a_stride_apart(nb):
    namespace = exercise(nb, "row-max")
    (_, negative, cols), (_, wide, used) = namespace["row_max_cases"](torch.Generator().manual_seed(1))
    assert (negative < 0).all() and cols == negative.shape[1] and cols & (cols - 1)
    assert wide.shape[1] > used and used & (used - 1) == 0


@pytest.mark.exercise("09", "bytes-moved")
def test_exercise_3_tells_a_count_of_the_reads_alone(nb):
    namespace = exercise(nb, "bytes-moved")
    run_cell("09", "exercise-bytes-moved-answer", namespace)
    check = namespace["check_bytes_moved"]
    assert check(namespace["bytes_moved_answer"]) == ("PASSED: 28,000 bytes in three kernels, 12,000 in "
                                                      "one, for 1000 numbers: 2.3 times fewer.")

    def reads_only(n, fused):  # what the kernels read, not what they write
        return (2 if fused else 2 + 1 + 1) * n * 4

    assert check(reads_only) == (
        "NOT YET RIGHT: bytes_moved(1000, fused=False) says 16,000, but the three PyTorch kernels move "
        "28,000 bytes (-12,000): count what each kernel reads and what it writes, 4 bytes a number.")
    assert check(lambda n, fused: 28 * n if not fused else 3 * n).startswith(
        "NOT YET RIGHT: bytes_moved(1000, fused=True) says 3,000, but your one kernel moves 12,000")
    assert check(lambda n, fused: ...).startswith("NOT DONE YET")
    assert check(lambda n, fused: "28000") == ("NOT YET RIGHT: bytes_moved(1000, fused=False) returned "
                                               "'28000': return a number of bytes.")

    def a_name_not_defined(n, fused):  # an error of the learner's own
        return n * BYTES_PER_NUMBER * (3 if fused else 7)  # noqa: F821

    assert check(a_name_not_defined) == ("NOT YET RIGHT: bytes_moved(1000, fused=False) raised NameError: "
                                         "name 'BYTES_PER_NUMBER' is not defined")


def test_the_byte_counter_agrees_with_steps_2_count_of_the_softmax(nb):
    # The counter of exercise 3 and softmax_traffic of Step 2 count the same way, independently.
    namespace = exercise(nb, "bytes-moved")
    counted = namespace["ByteCounter"](torch.fx.symbolic_trace(nb.softmax_in_steps)).run(torch.ones(3, 7))
    assert counted == sum(read + written for _, read, written in nb.softmax_traffic(3, 7, fused=False))
    assert namespace["counted_bytes"](10, False) == 280 and namespace["counted_bytes"](10, True) == 120
