"""What several of notebook 04's test files need: the article's parameter count, computed from its
widths, and a fresh namespace of the notebook's helpers for run_cell."""
import torch

from support.notebook_code import load_helpers

CPU, GPU = torch.device("cpu"), torch.device("cuda")


def expected_parameters(depth):
    """Parameters of the article's network, computed here from its widths 2, 4, 8, ..., 2**depth, 2."""
    widths = [2] + [2**k for k in range(2, depth + 1)] + [2]
    return sum(w_in * w_out + w_out for w_in, w_out in zip(widths[:-1], widths[1:]))


def helpers_and(**values):
    """A fresh namespace for run_cell: the notebook's helpers, plus what earlier cells would have set."""
    return {**vars(load_helpers("04")), **values}
