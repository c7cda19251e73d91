"""Notebook 05's fastai part (Going deeper F): the workers fastai's DataLoader really starts on Linux,
macOS and Windows against the notebook's prediction, fastai's mixed precision and the notebook's own
autocast callback trained for real on the CPU, and what the fastai runs say on a GPU and elsewhere.
Skipped where fastai is not installed."""
import sys

import pytest
import torch

from support.notebook_05 import CPU
from support.notebook_05 import fastai_cells, one_thread  # noqa: F401 (pytest fixtures, used by name)
from support.notebook_code import load_helpers, run_cell

nb = load_helpers("05")


@pytest.mark.parametrize("platform_name", ["linux", "darwin", "win32"])
@pytest.mark.parametrize("in_notebook", [False, True])
@pytest.mark.parametrize("asked", [0, 3])
def test_the_notebook_predicts_the_workers_fastai_really_starts(monkeypatch, platform_name, in_notebook,
                                                                asked):
    load = pytest.importorskip("fastai.data.load")
    monkeypatch.setattr(sys, "platform", platform_name)  # read by fastai's DataLoader.__init__
    monkeypatch.setattr(load, "IN_NOTEBOOK", in_notebook)
    loader = load.DataLoader(list(range(16)), bs=4, num_workers=asked)
    predicted, why = nb.fastai_num_workers(asked, platform_name, in_notebook)
    assert loader.fake_l.num_workers == predicted  # what fastai hands on to PyTorch's DataLoader
    assert why


def test_fastai_on_linux_keeps_workers_and_on_a_mac_drops_them_even_outside_a_notebook():
    assert nb.fastai_num_workers(4, "linux", in_notebook=True)[0] == 4
    assert nb.fastai_num_workers(4, "darwin", in_notebook=False) == (0, "fastai uses no workers on macOS")
    assert nb.fastai_num_workers(4, "win32", in_notebook=False)[0] == 4
    assert nb.fastai_num_workers(4, "win32", in_notebook=True)[0] == 0


def test_on_a_cpu_fastais_mixed_precision_leaves_float32_and_the_notebooks_callback_computes_in_bfloat16(
        fastai_cells):
    # what the notebook's fastai cells say, trained for real (one epoch of 8 pictures)
    shown = []
    namespace = fastai_cells  # itself: DeviceAutocast reads AMP_DTYPE there
    namespace.update(device=CPU, AMP_DTYPE=torch.bfloat16, display=shown.append)
    run_cell("05", "fastai-run", namespace)
    dtypes = {label: row["first_conv_dtype"] for label, row in namespace["fastai_rows"].items()}
    assert dtypes == {"plain float32": "float32", "learn.to_bf16()": "float32",
                      "DeviceAutocast callback": "bfloat16"}
    printed = " ".join(run_cell("05", "fastai-say", namespace).split())
    assert printed == ("On cpu, learn.to_bf16() left the convolutions in float32: fastai's callback opens CUDA "
                       "autocast only. The DeviceAutocast callback ran them in bfloat16.")


@pytest.mark.parametrize("device_type, mixed, dtypes, expected", [
    # a T4: fastai's to_fp16 opens CUDA autocast, so the convolutions run in float16
    ("cuda", "to_fp16", {"learn.to_fp16()": "float16"}, "fastai's mixed precision works"),
    # a CPU or a Mac: fastai's callback opens CUDA autocast only; the notebook's own callback works
    ("cpu", "to_bf16", {"learn.to_bf16()": "float32", "DeviceAutocast callback": "bfloat16"},
     "left the convolutions in float32: fastai's callback opens CUDA autocast only. The "
     "DeviceAutocast callback ran them in bfloat16."),
    ("cpu", "to_bf16", {}, ""),  # fastai not installed: the part is skipped
])
def test_what_the_fastai_runs_say_on_a_gpu_and_elsewhere(device_type, mixed, dtypes, expected):
    rows = {label: {"first_conv_dtype": dtype} for label, dtype in dtypes.items()}
    namespace = {"FASTAI": bool(dtypes), "FASTAI_MIXED": mixed, "fastai_rows": rows,
                 "device": torch.device(device_type)}
    printed = run_cell("05", "fastai-say", namespace)
    assert (expected in printed) if expected else printed == ""
    assert printed.startswith(f"On {device_type}, learn.{mixed}()") or not dtypes
