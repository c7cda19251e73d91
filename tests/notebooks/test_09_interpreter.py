"""Notebook 09's kernels run for real under Triton's interpreter, in a fresh Python that sets
TRITON_INTERPRET=1 before it imports triton (support/notebook_09.py says why), at the sizes where their
masks matter: inside one block, exactly full blocks, one past a block; each result checked against
PyTorch's. The exercises' checks run there too: test_09_exercises.py."""

import pytest

from support.notebook_09 import under_the_interpreter


@pytest.fixture(scope="module")
def interpreted(request, tmp_path_factory):
    """What the kernels' part of the interpreter run reports: the checks that failed."""
    return under_the_interpreter("kernels", request.config, tmp_path_factory.mktemp("interpreter"))


def test_the_kernels_match_pytorch_under_the_interpreter_at_their_block_boundaries(interpreted):
    assert interpreted["failures"] == []
