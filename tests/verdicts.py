"""What the notebooks must print on the test machine: their verdicts, checked in the runs the suite makes.

nbval only proves that no cell raised. A notebook that falls back quietly (random weights when the
pretrained ones fail, stand-in pictures when the search fails, a verdict printed where an assertion would
stop) passes nbval whatever it printed. So conftest.py reads the output of every cell nbval runs, and
tests/test_browser.py the output of every cell on the page, and both check it against VERDICTS below:
no notebook runs one more time for this.

VERDICTS maps (notebook number, cell id) to the verdicts that cell's output must contain, each a
Verdict(pattern, when, why):
- pattern: a regular expression searched (re.MULTILINE) in everything the cell printed or showed as text
  (stdout, stderr, and the text form of its results and displays);
- when: the situation it holds in, one of SITUATIONS: "always"; "cpu" (PyTorch sees no GPU or other
  accelerator, as on the build machine and in CI); "gpu"; "offline" (duckduckgo.com does not answer, the
  same probe notebook 03 makes); the tests run in fast mode (TUTORIAL_FAST=1) anyway;
- why: what it proves, and what quiet fallback it catches.
To add one: find the cell's id (`"id"` in the .ipynb, kept by nbstripout --keep-id), write the line the
cell prints on this machine as a pattern, and say why. test_verdicts.py checks that every entry names a
cell that exists and prints something.
"""
import re
import socket
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Verdict:
    pattern: str
    when: str
    why: str


VERDICTS = {
    # --- 01: check your GPU ---------------------------------------------------------------------------
    ("01", "cell-05-device"): [
        Verdict(r"^No GPU: PyTorch runs on the CPU\.", "cpu",
                "the first answer of the notebook names the CPU when there is no GPU"),
        Verdict(r"^PyTorch uses (\d+ GPUs?|the '\w+' accelerator)", "gpu",
                "and names the GPU when there is one"),
    ],
    ("01", "cell-11-run"): [
        Verdict(r"^\[(PROBLEM|NOTE)\] ", "cpu",
                "without a GPU the diagnosis reports a problem or a note, never '[OK] Ready'"),
        Verdict(r"^\[OK\] Ready: ", "gpu", "with a GPU it says the GPU is ready"),
    ],
    ("01", "cell-13"): [
        Verdict(r"^\[PROBLEM\] CPU-only PyTorch is installed$", "always",
                "the made-up Windows machine with a CPU-only wheel gets the CPU-only finding"),
        Verdict(r"^\[PROBLEM\] Tesla P100-PCIE-16GB \(sm_60\) is not in this wheel$[\s\S]*torch==2\.14\.\*",
                "always", "the made-up Kaggle P100 is told to install PyTorch 2.14, the last for its GPU"),
    ],
    ("01", "cell-15"): [
        Verdict(r"\| they agree$", "cpu",
                "torch.accelerator, the classic checks and pick_device() choose the same device"),
    ],
    ("01", "cell-23"): [
        Verdict(r"\| the same kind$", "always",
                "fastai (installed by requirements.txt) picks the notebook's kind of device; a skipped "
                "Step 6 or 'a DIFFERENT kind' would be a quiet failure"),
    ],
    # --- 02: tensors and models on the device ---------------------------------------------------------
    ("02", "cell-05"): [
        Verdict(r"^The same Python object: the tensor already was on cpu", "cpu",
                "on the CPU, .to(device) returns the tensor itself"),
        Verdict(r"^A new tensor in the memory of ", "gpu", "on a GPU it makes a copy there"),
    ],
    ("02", "cell-19"): [
        Verdict(r"\.to\(\) returned the same model object: True$", "always",
                "Module.to moves the model in place and returns it"),
    ],
    ("02", "cell-23"): [
        Verdict(r"^after \.to\('meta'\): weight on meta, the optimizer's on cpu; the same tensor: False$",
                "always", "the pitfall shown: an optimizer made before a real move holds the old tensors"),
    ],
    ("02", "cell-43c"): [
        Verdict(r"^SIMULATION: device is cpu, not a CUDA GPU[\s\S]*the search found that limit, 300\.", "cpu",
                "without a GPU the search runs on a labelled stand-in and finds its made-up limit exactly"),
    ],
    ("02", "cell-45b"): [
        Verdict(r"same weights as the trained model: True$", "always",
                "saving and loading across devices keeps the weights"),
    ],
    # --- 03: is it a bird ----------------------------------------------------------------------------------
    ("03", "plan"): [
        Verdict(r"^Plan: (reuse|stand-in)\. ", "offline",
                "offline the notebook never plans a search that cannot work"),
    ],
    ("03", "check"): [
        Verdict(r"^(STAND-IN DATA: drawn pictures in |Photos in )", "always",
                "the cell says what the model trains on: checked photos, or stand-ins labelled as such"),
    ],
    ("03", "cell-25"): [
        Verdict(r"pretrained weights: True|Warning: the pretrained weights could not be loaded"
                r"(.*\n)+pretrained weights: False", "always",
                "random weights only with the warning that says so, never silently"),
    ],
    # --- 05: find the bottleneck --------------------------------------------------------------------------
    ("05", "cell-65"): [
        Verdict(r"^All \d+ checked variants kept the results within the tolerance", "always",
                "every speed-up keeps loss and accuracy (the correctness verdict of Step 8)"),
    ],
    # --- 06: more than one GPU -----------------------------------------------------------------------------
    ("06", "cell-25"): [
        Verdict(r"^With DDP: all \d+ processes hold bit-for-bit identical weights", "always",
                "DDP keeps every process's weights the same"),
    ],
    ("06", "cell-27"): [
        Verdict(r"^Without DDP: the \d+ processes hold \d+ different sets of weights", "always",
                "without DDP they drift apart: the comparison shows what DDP does"),
    ],
    ("06", "cell-40"): [
        Verdict(r"^Two nodes: all 2 processes hold bit-for-bit identical weights", "always",
                "the two 'machines' met at the rendezvous and trained one model"),
    ],
}


@lru_cache(maxsize=None)
def has_accelerator():
    import torch

    return torch.accelerator.is_available()


@lru_cache(maxsize=None)
def is_offline(host="duckduckgo.com", port=443, timeout=3.0):
    """True when host:port does not answer: the probe notebook 03 makes before it plans a search."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError:
        return True
    return False


SITUATIONS = {"always": lambda: True, "cpu": lambda: not has_accelerator(), "gpu": has_accelerator,
              "offline": is_offline}


def _text(value):
    return value if isinstance(value, str) else "".join(value)


def output_text(outputs):
    """Everything a cell printed or showed as text, from nbval's outputs or a notebook model's."""
    parts = []
    for output in outputs:
        if output.get("output_type") == "stream":
            parts.append(_text(output.get("text", "")))
        elif "text/plain" in output.get("data", {}):
            parts.append(_text(output["data"]["text/plain"]))
    return "\n".join(parts)


def missing_verdicts(notebook, cell_id, outputs, situations=SITUATIONS):
    """The verdicts that cell `cell_id` of notebook `notebook` ("05") should have printed, in the
    situations that hold here, and did not: [] when all is well or the cell has no entry."""
    text = output_text(outputs)
    return [verdict for verdict in VERDICTS.get((notebook, cell_id), [])
            if situations[verdict.when]() and not re.search(verdict.pattern, text, flags=re.MULTILINE)]


def describe_missing(notebook, cell_id, missing, outputs):
    lines = [f"notebook {notebook}, cell {cell_id}: a verdict of tests/verdicts.py is missing from its output"]
    lines += [f"  expected ({verdict.when}): /{verdict.pattern}/ -- {verdict.why}" for verdict in missing]
    lines.append("  the cell printed:\n" + "\n".join("    " + line for line in output_text(outputs).splitlines()[:40]))
    return "\n".join(lines)
