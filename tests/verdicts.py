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
  same probe notebook 03 makes); "triton" (Triton is installed, as with PyTorch's Linux wheels; without
  it notebook 09 shows its kernels instead of running them); "cpu_compiler" ("cpu", and a C++
  compiler that Inductor can call, found as notebook 09 finds it); the tests run in fast mode
  (TUTORIAL_FAST=1) anyway;
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
    ("01", "gpu-answer"): [
        Verdict(r"^No GPU: PyTorch runs on the CPU\.", "cpu",
                "the first answer of the notebook names the CPU when there is no GPU"),
        Verdict(r"^PyTorch uses (\d+ GPUs?|the '\w+' accelerator)", "gpu",
                "and names the GPU when there is one"),
    ],
    ("01", "device-choice"): [
        Verdict(r"\| they agree$", "cpu",
                "torch.accelerator, the classic checks and pick_device() choose the same device"),
    ],
    ("01", "sync-demo"): [
        Verdict(r"^a @ b returned after \d+\.\d{3} ms and was done after \d+\.\d{3} ms: on the CPU the call "
                r"does the work", "cpu",
                "Step 4 timed one product by hand and read the CPU's two times as the same work"),
        Verdict(r"^a @ b returned after \d+\.\d{3} ms and was done after \d+\.\d{3} ms: (a clock read "
                r"without waiting|this time the call itself waited)", "gpu",
                "on a GPU the cell says how much too fast a clock read before synchronize() would be"),
    ],
    ("01", "fastai-device"): [
        Verdict(r"\| the same kind$", "always",
                "fastai (installed by requirements.txt) picks the notebook's kind of device; a skipped "
                "Step 6 or 'a DIFFERENT kind' would be a quiet failure"),
    ],
    ("01", "diagnosis"): [
        Verdict(r"^\[(PROBLEM|NOTE)\] ", "cpu",
                "without a GPU the diagnosis (Going deeper A) reports a problem or a note, never "
                "'[OK] Ready'"),
        Verdict(r"^\[OK\] Ready: ", "gpu", "with a GPU it says the GPU is ready"),
    ],
    ("01", "made-up-machines"): [
        Verdict(r"^\[PROBLEM\] CPU-only PyTorch is installed$", "always",
                "the made-up Windows machine with a CPU-only wheel gets the CPU-only finding"),
        Verdict(r"^\[PROBLEM\] Tesla P100-PCIE-16GB \(sm_60\) is not in this wheel$[\s\S]*torch==2\.14\.\*",
                "always", "the made-up Kaggle P100 is told to install PyTorch 2.14, the last for its GPU"),
    ],
    # --- 02: tensors and models on the device ---------------------------------------------------------
    ("02", "tensor-to-device"): [
        Verdict(r"^The same Python object: the tensor already was on cpu", "cpu",
                "on the CPU, .to(device) returns the tensor itself"),
        Verdict(r"^A new tensor in the memory of ", "gpu", "on a GPU it makes a copy there"),
    ],
    ("02", "model-to-device"): [
        Verdict(r"\.to\(\) returned the same model object: True$", "always",
                "Module.to moves the model in place and returns it"),
    ],
    ("02", "train-runs"): [
        Verdict(r"^Every run's loss went down, to ", "always",
                "the one training loop trained the CNN with both ways of feeding ('did NOT go down' "
                "is printed, not raised)"),
    ],
    ("02", "mismatch-error"): [
        Verdict(r"^RuntimeError: .*\bmeta\b", "cpu",
                "adding a CPU tensor to one on the meta stand-in raised (a cell that printed no error "
                "would show nothing)"),
        Verdict(r"^RuntimeError: ", "gpu", "and on a GPU the real mismatch error is shown"),
    ],
    ("02", "numpy-error"): [
        Verdict(r"^TypeError: can't convert \S+ device type tensor to numpy", "always",
                ".numpy() on a tensor off the CPU raised, naming its device"),
    ],
    ("02", "lost-move"): [
        Verdict(r"^after \.to\(\) without assignment: shape \(4, 10\), torch\.float32, on cpu$", "always",
                "the bug shown: a .to() whose result is thrown away changes nothing"),
        Verdict(r"^after inputs = inputs\.to\(\.\.\.\): +shape \(4, 10\), torch\.float16, on (?!cpu)",
                "always", "and keeping the result moves and converts the tensor"),
    ],
    ("02", "feeding-ways"): [
        Verdict(r"^Moved per batch / data on device: \d+\.\d\dx; device is the CPU: nothing is copied", "cpu",
                "all three ways of feeding reported a time per epoch, and on the CPU the copies are not "
                "read as a cost (issue 28: the line follows the device and the measured ratio)"),
        Verdict(r"^Moved per batch / data on device: \d+\.\d\dx; (on \S+, the copies|no clear|faster)", "gpu",
                "on a GPU the line names the copies' cost only as far as the ratio shows one"),
    ],
    ("02", "batch-search"): [
        Verdict(r"^SIMULATION: device is cpu, not a CUDA GPU[\s\S]*the search found that limit, 300\.", "cpu",
                "without a GPU the search runs on a labelled stand-in and finds its made-up limit exactly"),
    ],
    ("02", "reload"): [
        Verdict(r"same weights as the trained model: True$", "always",
                "saving and loading across devices keeps the weights"),
    ],
    ("02", "weights-only"): [
        Verdict(r"^weights_only=True refused the file\. ", "always",
                "torch.load(weights_only=True) refuses a file holding an arbitrary object ('Loaded: "
                "this PyTorch accepted the object' is printed, not raised)"),
    ],
    ("02", "optimizer-after-move"): [
        Verdict(r"^after \.to\('meta'\): weight on meta, the optimizer's on cpu; the same tensor: False$",
                "always", "the pitfall shown: an optimizer made before a real move holds the old tensors"),
    ],
    # --- 03: is it a bird ----------------------------------------------------------------------------------
    ("03", "plan"): [
        Verdict(r"^Plan: (reuse|stand-in)\. ", "offline",
                "offline the notebook never plans a search that cannot work"),
    ],
    ("03", "check"): [
        Verdict(r"^(STAND-IN DATA: drawings in |Photos in )", "always",
                "the cell says what the model trains on: checked photos, or stand-ins labelled as such"),
    ],
    ("03", "weights"): [
        Verdict(r"pretrained weights: True|Warning: the pretrained weights could not be loaded"
                r"(.*\n)+pretrained weights: False", "always",
                "random weights only with the warning that says so, never silently"),
    ],
    ("03", "first-look"): [
        Verdict(r"^bird: STAND-IN DRAWING \(no search\)\.$", "offline",
                "offline the first look shows a drawing labelled as one, not a photo it cannot have"),
    ],
    # --- 04: when does the GPU win ------------------------------------------------------------------------
    ("04", "sync-demo"): [
        Verdict(r"^cpu: naive [\d.e+-]+ ms, synchronized [\d.e+-]+ ms\. The two timings (agree|differ)", "cpu",
                "the synchronize demo times the CPU both ways and reads its own two numbers"),
        Verdict(r"^(cuda|mps|xpu): naive [\d.e+-]+ ms, synchronized [\d.e+-]+ ms\. The naive timing is "
                r"[\d,]+ times too small", "gpu", "on a GPU the naive clock stops before the product is done"),
    ],
    ("04", "break-even"): [
        Verdict(r"^Only the CPU was measured\. Its operations carry [\d,]+ \(\d+ layers\) to", "cpu",
                "without a GPU the cell says what the CPU's numbers mean for a GPU, and invents no GPU numbers"),
        Verdict(r"^(cuda|mps|xpu): (break-even at [\d,]+ FLOPs per operation|its fixed cost per operation is "
                r"below).* Your sweep: ", "gpu", "with a GPU the cost model's prediction stands beside the sweep"),
    ],
    # --- 05: find the bottleneck --------------------------------------------------------------------------
    # A timing verdict of 05 may say "inconclusive on this machine: run again" where the rounds disagree, as
    # on a busy machine (issue 43); never a conclusive verdict that contradicts the settings' design.
    ("05", "verdicts-say"): [
        Verdict(r"^heavy data: data-bound \(as built\)$", "cpu",
                "the heavy-data setting waits for its pictures (data against compute is read from the "
                "medians of the training steps, several times apart on a CPU)"),
        Verdict(r"^tiny batches: (launch-bound \(as built\)$|inconclusive on this machine: run again \()",
                "cpu", "the tiny batches are launch-bound in every round of the cost measurement, or the "
                "rounds disagree and the verdict says so; a conclusive compute-bound would be wrong"),
        Verdict(r"^big model: (compute-bound \(as built\)$|inconclusive on this machine: run again \()",
                "cpu", "the big model is compute-bound on a CPU in every round, or the rounds disagree and "
                "the verdict says so, never 'launch-bound (built to be compute-bound)'"),
    ],
    ("05", "workers-say"): [
        Verdict(r"^num_workers=[1-9]\d*: (\d+\.\d\d× (faster|slower) \(every round: |about the same \(|"
                r"inconclusive on this machine: run again \()", "always",
                "Step 3's worker variant ran and its rounds were judged ('No worker variant could run' "
                "would mean the dataset class never reached the workers); the speed-up depends on the "
                "machine and is not checked"),
    ],
    ("05", "results-check"): [
        Verdict(r"^Adam\(fused=True\): (\d+\.\d\d× (faster|slower) \(every round: |about the same \(|"
                r"inconclusive on this machine: run again \()", "always",
                "Step 4's fused Adam ran beside the baseline (PyTorch has one for a CPU too); a 'not run' "
                "would leave the launch-bound fix untried"),
        Verdict(r"^All \d+ checked variants kept the results within the tolerance", "always",
                "the core's fixes (workers, fused Adam) keep loss and accuracy: the correctness verdict "
                "after Step 4"),
    ],
    ("05", "cpu-bf16"): [
        Verdict(r"^CPU: .*; bfloat16 hardware: (AMX|AVX512-BF16|ARM|none|unknown)", "cpu",
                "with the CPU as the device, Going deeper A reads its bfloat16 instructions (with a GPU "
                "it must not: tests/test_05_faster.py)"),
    ],
    # --- 06: more than one GPU -----------------------------------------------------------------------------
    ("06", "ddp-results"): [
        Verdict(r"^After training with DDP: all \d+ processes hold bit-for-bit identical weights", "always",
                "DDP keeps every process's weights the same"),
        Verdict(r"^After the training steps under no_sync: the \d+ processes hold \d+ different sets of "
                r"weights\.$", "always",
                "under no_sync each process steps with its own gradients and the copies drift apart: "
                "the comparison shows what DDP's averaging does (it replaced a second run without DDP)"),
    ],
    ("06", "speed"): [
        Verdict(r"^\d+ processes with DDP trained \d+\.\d\d times as many samples per second as 1 "
                r"process computing alone; the averaging took -?\d+ % of each", "always",
                "the timed run reported step_ms and compute_ms (not 'The timed run did not report its "
                "speed'); the ratio itself depends on the machine and is not checked"),
    ],
    ("06", "spawn-demo"): [
        Verdict(r"^  each new process: AttributeError: Can't get attribute 'train'", "always",
                "mp.spawn from a notebook fails as the prose says (the new processes cannot find a "
                "function defined in __main__); a run that printed no error would teach nothing"),
    ],
    ("06", "checkpoint"): [
        Verdict(r"bit for bit the trained weights that rank 0 reported\.$", "always",
                "the checkpoint rank 0 saved holds exactly the weights DDP trained"),
    ],
    ("06", "two-nodes-results"): [
        Verdict(r"^Two nodes: all 2 processes hold bit-for-bit identical weights", "always",
                "the two 'machines' met at the rendezvous and trained one model"),
        # "after N s" only when the notebook saw the end itself (a launcher may end between two polls)
        Verdict(r"^node0's launcher succeeded\b[\s\S]*^node1's launcher succeeded\b[\s\S]*^Both "
                r"launchers ended by themselves", "always",
                "both launchers succeeded by themselves, none stopped at the time limit or the "
                "patience: a rendezvous that ends cleanly (once checked by a test of its own)"),
    ],
    ("06", "failure"): [
        Verdict(r"^The first process to fail: local rank 0, line \d+, in main: torch\.save\(", "always",
                "first_failure finds the error file of the planted failure and the script's line; "
                "'No process wrote an error file' would mean it read none"),
        Verdict(r"^node0's launcher failed with exit code 1\b[\s\S]*^node1's launcher failed "
                r"with exit code 1\b[\s\S]*^Both launchers ended by themselves", "always",
                "describe_ending: with the final barrier both launchers fail at once and none waits "
                "in torchrun's exit barrier (the second ends well under a second after the first on a "
                "quiet machine, 6 s after it at a load of 15 on 2 cores; the notebook's patience is "
                "10 s in fast mode): the reason the script ends with a barrier"),
    ],
    ("06", "no-barrier"): [
        Verdict(r"^node\d's launcher failed with exit code 1 after \d+\.\d+ s\.$", "always",
                "describe_ending: the planted failure (a checkpoint into a missing folder) happened, "
                "without the final barrier; which node waits depends on the rendezvous order, so "
                "only the failure is checked"),
    ],
    ("06", "leftovers"): [
        Verdict(r"^No process the notebook started is still running\.$", "always",
                "every launch of the notebook (Step 4, and Going deeper's spawn, two nodes and "
                "failures) ended, checked by is_alive; the notebook prints this where it once "
                "asserted it"),
        Verdict(r"^C's rendezvous endpoint \S+: nothing listens there any more\.$", "always",
                "the two nodes' rendezvous store closed with its launcher: no port is left taken "
                "(once checked by a test that started its own two nodes)"),
    ],
    # --- 07: when it breaks --------------------------------------------------------------------------------
    ("07", "cublas-workspace"): [
        Verdict(r"^CUBLAS_WORKSPACE_CONFIG = :(4096|16):8$", "always",
                "the variable Going deeper E needs on a GPU is set before any GPU work, to a value "
                "cuBLAS accepts"),
    ],
    ("07", "label-runs"): [
        Verdict(r"^-> IndexError: Target 3 is out of bounds\. Raised at line \d+, the line that reads "
                r"the bad label\.$", "cpu",
                "on the CPU the planted label raises at once, at the line that reads it; 'No error "
                "at all' or another line would mean the demo no longer shows the bug"),
    ],
    ("07", "device-mismatch"): [
        Verdict(r"^On meta: RuntimeError: .*\bcpu\b", "cpu",
                "without a GPU the named meta stand-in shows the mismatch (a GPU shows its own)"),
    ],
    ("07", "device-fixes"): [
        Verdict(r"^WithBuffer: output of shape \(4, 3\) on meta$", "cpu",
                "the buffer moves with the model, to the same device that failed above"),
        Verdict(r"^OnTheInputsDevice: output of shape \(4, 3\) on meta$", "cpu",
                "and device=x.device makes the tensor where the inputs are"),
    ],
    ("07", "nan-hooks"): [
        Verdict(r"^First module with a non-finite output: \S+ \(NaiveLogSoftmax\)$", "always",
                "the hooks name the planted module, not None or another module"),
    ],
    ("07", "nan-fixed"): [
        Verdict(r"^The loss stayed finite for all \d+ steps and went down: ", "always",
                "the fixed model trains: finite_verdict's other answers would mean the fix failed"),
    ],
    ("07", "anomaly-mode"): [
        Verdict(r"^RuntimeError: Function '\w+Backward\d*' returned nan values", "always",
                "anomaly mode stops at the backward function that made the nan ('no error' would "
                "mean it caught nothing)"),
    ],
    ("07", "grad-norm-alarm"): [
        Verdict(r"^Gradient-norm alarm at step \d+; first loss that is not finite at step \d+\.$",
                "always", "the alarm rings and the planted learning rate does blow up ('step None' "
                "would mean either failed quietly)"),
    ],
    ("07", "float16-table"): [
        Verdict(r"^\d+\s+2\.9e-08\s+0\s.*rounds to 0$", "always",
                "just below 2**-25, the limit the prose states, float16 gives 0 ..."),
        Verdict(r"^\d+\s+3e-08\s+5\.96046e-08\s.*rounded, to fewer digits$", "always",
                "... and just above it the smallest float16, 2**-24: the prose's 'about 3e-8' holds"),
    ],
    ("07", "scaler-steps"): [
        Verdict(r"^On (cpu|cuda), skipped steps: \[\d+[\d, ]*\]; the weights stayed unchanged on "
                r"exactly those steps: True$", "always",
                "the GradScaler of run_on skips some steps and updates the weights on all others"),
        Verdict(r"^On cpu, ", "cpu", "without a CUDA GPU part C runs on the CPU, as the prose says"),
    ],
    ("07", "worker-fix"): [
        Verdict(r"^Broken samples: \{37: ", "always", "broken_samples finds the planted broken file"),
        Verdict(r"^Without them, with workers: every batch loads$", "always",
                "and without it every batch loads, with worker processes"),
    ],
    ("07", "seeded-runs"): [
        Verdict(r"^seed 0 twice\s+True\s+0\.0+$", "cpu", "two seeded runs on the CPU agree to the bit"),
        Verdict(r"^seed 0 against seed 1\s+False\s", "always",
                "and another seed gives other weights: the comparison can tell them apart"),
    ],
    ("07", "deterministic-error"): [
        Verdict(r"^RuntimeError: put_ does not have a deterministic implementation", "always",
                "deterministic algorithms raise where none exists, on every device"),
    ],
    ("07", "deterministic-cnn"): [
        Verdict(r"^Deterministic algorithms on cpu: identical to the bit; no operation warned\.$", "cpu",
                "with warn_only=True the CNN repeats to the bit on the CPU, and nothing there warns"),
    ],
    ("07", "index-add-runs"): [
        Verdict(r"^(Every run was identical on cpu, with and without deterministic algorithms|By "
                r"default \d+ of 4 runs differed in the last bits on cpu; with deterministic "
                r"algorithms none did)\.$", "cpu",
                "never 'Deterministic algorithms still differed' (printed, not raised)"),
    ],
    ("07", "left-behind"): [
        Verdict(r"^PlainAttribute: \['model\.feature_weights'\]$", "always",
                "tensors_left_behind finds the tensor that model.to(device) would leave behind"),
        Verdict(r"^WithBuffer: +nothing left behind$", "always", "and nothing in the fixed model"),
    ],
    # --- 08: fit a bigger model ----------------------------------------------------------------------------
    ("08", "count-run"): [
        Verdict(r"^[\d,]+ weights\. Adam: \d+\.\d+ bytes per weight: the rule of about 16 holds\.$", "always",
                "the counted bytes of weights, gradients and Adam's state match the rule of thumb (a verdict "
                "printed, not asserted)"),
    ],
    ("08", "step-2-size"): [
        Verdict(r"^No CUDA GPU, so no real out-of-memory error: a declared budget of \d+\.\d+ MB stands in",
                "cpu", "without CUDA, Step 2 says plainly that its budget is declared and nothing real is raised"),
    ],
    ("08", "step-2-baseline"): [
        Verdict(r"^baseline \(float32\): \d+\.\d+ MB, over the \d+\.\d+ MB budget\.$", "cpu",
                "Step 2's baseline needs more than the declared budget: the problem the remedies then solve"),
    ],
    ("08", "step-3-tries"): [
        Verdict(r"^\+ checkpointing: \d+\.\d+ MB, within the \d+\.\d+ MB budget\.$", "cpu",
                "the remedies together fit the declared budget (each try before it is over it)"),
        Verdict(r"^The training step fits the declared budget \(nothing real was raised\) with: autocast "
                r"\(bfloat16\), 4 micro-batches, checkpointing\.$", "cpu",
                "the combination that fits is named, and the CPU run says no real error was raised"),
    ],
    ("08", "allocator-peak"): [
        Verdict(r"^No CUDA GPU \(cpu\): the counted \d+\.\d+ MB stand\.", "cpu",
                "without CUDA the allocator's peak is announced as missing, not made up"),
    ],
    ("08", "remedies-alone-run"): [
        Verdict(r"^activation checkpointing: saves \d+\.\d+ MB, ", "always",
                "checkpointing keeps fewer activations ('saves nothing' would mean it did not "
                "work); its time cost depends on the machine and is not checked"),
        Verdict(r"^16-bit weights \((bfloat16|float16)\): saves \d+\.\d+ MB, ", "always",
                "16-bit weights and Adam state take less memory"),
        Verdict(r"^16-bit weights: every weight is still finite after \d+ optimizer steps\.$", "always",
                "Adam's eps=1e-4 keeps 16-bit weights finite (with eps=1e-8 float16 weights turn inf/NaN; "
                "printed, not raised)"),
    ],
    ("08", "fsdp-plan"): [
        Verdict(r"^PyTorch \S+ runs FSDP2 over (gloo|nccl)\.$", "always",
                "the FSDP gate lets Going deeper C run: requirements.txt installs a PyTorch that runs FSDP2 "
                "over gloo (2.7 or newer), so a skipped part C would leave it untested"),
    ],
    ("08", "fsdp-results"): [
        Verdict(r"^\d+ processes: the weight shards add up to the whole model: True; each process "
                r"holds about 1/\d+ of the weights and of Adam's state: True\.$", "always",
                "FSDP2 sharded the weights and Adam's state evenly (shards_verdict, printed)"),
        Verdict(r"^The losses agree with one process's within \S+ \(relative; tolerance \S+\): "
                r"FSDP trained the same model\.$", "cpu",
                "on the CPU the sharded run reaches one process's losses (on GPUs they may differ)"),
    ],
    ("08", "fsdp-leftovers"): [
        Verdict(r"^No process or port of part C's torchrun runs is left over\.$", "always",
                "the FSDP2 runs started (torch >= 2.7 here) and left neither a process nor a port; "
                "'Part C started no torchrun' would mean Going deeper C was skipped"),
    ],
    # --- 09: what a GPU kernel is --------------------------------------------------------------------------
    ("09", "add-check"): [
        Verdict(r"^vector add: matches PyTorch (under Triton's interpreter|on the GPU)$", "triton",
                "the kernel ran and matched; 'FAILED' (a broken interpreter) or 'not run' is printed, "
                "not raised"),
    ],
    ("09", "softmax-launch"): [
        Verdict(r"^row softmax: matches PyTorch (under Triton's interpreter|on the GPU)$", "triton",
                "the fused softmax kernel ran and matched PyTorch"),
    ],
    ("09", "matmul-check"): [
        Verdict(r"^matrix product: matches PyTorch (under Triton's interpreter|on the GPU)$", "triton",
                "the tiled matrix product ran and matched PyTorch"),
    ],
    ("09", "show-code"): [
        Verdict(r"^Inductor wrote [1-9]\d* kernel\(s\) for the three operations: \w", "cpu_compiler",
                "torch.compile's logged code was found and parsed into at least one kernel; 'wrote 0 "
                "kernel(s)' would mean Step 4 shows nothing to set beside add_kernel"),
    ],
    ("09", "knobs"): [
        Verdict(r"\A(?![\s\S]*\b(failed|not run)\b)[\s\S]*\bpassed\b", "triton",
                "every block size's check passed: no row says 'failed' or 'not run'"),
    ],
    # --- 10: serve it fast ---------------------------------------------------------------------------------
    ("10", "eval-mode"): [
        Verdict(r"^eval mode: the same answer every time, alone or in a batch\.$", "always",
                "model.eval() fixes dropout and batch norm: 'still differ' would mean a layer stayed "
                "in train mode"),
    ],
    ("10", "inference-tensors"): [
        Verdict(r"^RuntimeError: Inference tensors cannot be saved for backward$", "always",
                "the error an inference tensor gives when autograd needs it is shown, caught"),
        Verdict(r"^Inference mode in the main thread: True; in a new thread: False$", "always",
                "inference mode is thread-local, the reason Step 4's serving thread enters it itself"),
    ],
    ("10", "pinned"): [
        Verdict(r"^No CUDA GPU \(cpu\): no copy from CPU to GPU memory to time\.$", "cpu",
                "without a GPU no copy speed is made up"),
        Verdict(r"^CPU to GPU: pageable \d+\.\d GB/s, pinned \d+\.\d GB/s$", "gpu",
                "on a GPU both copies are timed"),
    ],
    ("10", "load"): [
        Verdict(r"^Every request of all 6 runs answered exactly once, as if alone\.$", "always",
                "the batcher answered every request once, each with its answer alone (answers_verdict); "
                "any problem is printed instead"),
    ],
    ("10", "faster"): [
        Verdict(r"^torch\.compile \(aot_eager\): within float32's tolerance \(rtol 0\.0001, atol 1e-05\); "
                r"top-1 agrees on 32 of 32 pictures\.$", "cpu",
                "fast mode compiles with aot_eager, whose answers match eager float32; 'OUTSIDE' is "
                "printed, not raised"),
        Verdict(r"^eager float16: within float16's tolerance", "gpu", "float16 on a GPU stays within 1e-2"),
    ],
    ("10", "export"): [
        Verdict(r"^AOTInductor: not built, fast mode skips its compiling", "always",
                "the tests run in fast mode, which announces the skipped package instead of hiding it"),
    ],
    ("10", "round-trip"): [
        Verdict(r"^torch\.export file, fresh process: within float32's tolerance", "cpu",
                "the exported file, loaded in a fresh Python, answers a batch of 32 (not the example's "
                "8: the batch dimension is dynamic) as the original model does; 'FAILED' is printed"),
        Verdict(r"^Every fresh process ended, its folder deleted: True$", "always",
                "nothing is left behind by the fresh processes"),
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


@lru_cache(maxsize=None)
def has_triton():
    """True when Triton is installed (PyTorch's Linux wheels bring it; macOS and Windows have none),
    found as notebook 09 finds it, by its distribution's metadata."""
    import importlib.metadata

    try:
        importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@lru_cache(maxsize=None)
def has_cpp_compiler():
    """True when a C++ compiler is found the way notebook 09 looks for the one Inductor calls: $CXX,
    else cl on Windows, clang++ on macOS, g++ elsewhere."""
    import os
    import shutil
    import sys

    default = {"win32": "cl", "darwin": "clang++"}.get(sys.platform, "g++")
    return shutil.which(os.environ.get("CXX") or default) is not None


SITUATIONS = {"always": lambda: True, "cpu": lambda: not has_accelerator(), "gpu": has_accelerator,
              "offline": is_offline, "triton": has_triton,
              "cpu_compiler": lambda: not has_accelerator() and has_cpp_compiler()}


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


# Every exercise's cells (tests/test_exercises.py): in the run, the untouched starter's check says NOT DONE
# YET and the answer's check PASSED, whatever the notebook.
def starter_and_answer_verdicts(cell_id, text):
    """What is wrong with an exercise cell's output in the nbval run (None when nothing is): an untouched
    starter's check must say NOT DONE YET, an answer's PASSED; other cells are not judged."""
    if not re.fullmatch(r"exercise-[\w-]+-(starter|answer)", cell_id or ""):
        return None
    wanted = "NOT DONE YET" if cell_id.endswith("-starter") else "PASSED"
    if not re.search(rf"^{wanted}\b", text, re.M):
        return f"{cell_id} must print a check's verdict starting with {wanted!r}; it printed: {text[-500:]!r}"
    return None


SHOWS_NOTHING = "(shows nothing)"  # in a folded cell's title: the cell has no output a learner sees


def shows_something(source, outputs):
    """What a cell whose #@title says SHOWS_NOTHING shows after all (None when it shows nothing or its
    title promises nothing): any stream, error or result, or a display with text, a table or a figure
    (report_figures' record for the GPU-run tool is a display with no text, which shows nothing)."""
    if not (source.startswith("#@title ") and SHOWS_NOTHING in source.split("\n", 1)[0]):
        return None
    for output in outputs:
        kind = output.get("output_type")
        if kind in ("stream", "error", "execute_result"):
            return f"a {kind} output: {str(output)[:300]}"
        data = {mime: value for mime, value in output.get("data", {}).items()
                if not mime.startswith("application/vnd.gpu-tutorials.")}
        if any("".join(value) if isinstance(value, list) else value for value in data.values()):
            return f"a display of {sorted(data)}"
    return None
