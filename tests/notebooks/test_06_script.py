"""The DDP training script notebook 06 writes: valid Python whose functions are the cells' own, in the
cells' order, written in UTF-8 and shown as it is on disk; its options; and its functions run for real on
the CPU, in a process group of one (the timing under no_sync, the accuracy), against a checkpoint (the
checksum of rank 0's weights) and against the cost model's count of weights."""
import ast
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from support.notebook_code import cell_source, load_helpers, run_cell

nb = load_helpers("06")


def write_the_script(folder):
    """Run Step 3's cell that writes the script, into `folder`; returns the cell's namespace."""
    namespace = {**vars(nb), "SCRIPT_PATH": Path(folder) / "06_train_ddp.py"}
    run_cell("06", "write-script", namespace)
    return namespace


with tempfile.TemporaryDirectory() as _folder:
    SCRIPT_TEXT = write_the_script(_folder)["script_text"]  # the script as the notebook writes it


def function_source(name):
    """The source of one function of the training script."""
    tree = ast.parse(SCRIPT_TEXT)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.get_source_segment(SCRIPT_TEXT, node)


# The training script


def test_the_script_is_valid_python_that_runs_main_under_record_and_leaves_last():
    compile(SCRIPT_TEXT, "06_train_ddp.py", "exec")
    assert "@record" in SCRIPT_TEXT.split("def main")[0].splitlines()[-1]  # torchrun's report
    last_statement = ast.parse(function_source("main")).body[0].body[-1]
    assert ast.unparse(last_statement) == "leave_process_group(args.skip_final_barrier)"
    assert SCRIPT_TEXT.endswith('\n\n\nif __name__ == "__main__":\n    main()\n')


# The cells that define the script's functions, and the function names each defines.
SCRIPT_CELLS = {"script-plain": ["parse_args", "choose_device", "make_disc_data", "make_disc_model",
                                 "train_on_batch", "accuracy_of", "checksum"],
                "script-ddp": ["start_process_group", "wrap_in_ddp", "leave_process_group"],
                "script-main": ["main"], "script-speed": ["time_steps", "measure_speed"]}


def test_the_script_holds_each_function_as_its_cell_defines_it_in_the_cells_order():
    names = [node.name for node in ast.parse(SCRIPT_TEXT).body if isinstance(node, ast.FunctionDef)]
    assert names == [name for defined in SCRIPT_CELLS.values() for name in defined]
    for cell_id, defined in SCRIPT_CELLS.items():
        for name in defined:
            assert function_source(name) in cell_source("06", cell_id), f"{name} differs from its cell"
    assert SCRIPT_TEXT.startswith(nb.SCRIPT_HEADER)  # the docstring and the imports come first


def test_script_parts_joins_a_header_and_functions_with_two_blank_lines(tmp_path):
    module = tmp_path / "defs.py"
    module.write_text("def first():\n    return 1\n\n\ndef main():  # the entry point\n    pass\n")
    namespace = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    parts = nb.script_parts('"""Doc."""\nimport os\n\n', [namespace["first"], namespace["main"]])
    assert "".join(parts) == ('"""Doc."""\nimport os\n\n\ndef first():\n    return 1\n\n\n'
                              'def main():  # the entry point\n    pass\n\n\n'
                              'if __name__ == "__main__":\n    main()\n')


def test_the_written_script_parses_its_options(tmp_path):
    script = nb.write_script(tmp_path / "06_train_ddp.py", [SCRIPT_TEXT])
    help_text = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                               timeout=300, check=True).stdout
    for option in ("--epochs", "--depth", "--points", "--batch-size", "--checkpoint", "--cpu",
                   "--timing-steps", "--skip-final-barrier", "--timeout-s"):
        assert option in help_text


def test_step_3_writes_shows_and_reads_back_the_script_in_utf_8(tmp_path):
    namespace = write_the_script(tmp_path)
    on_disk = (tmp_path / "06_train_ddp.py").read_bytes().decode("utf-8")
    assert namespace["script_text"] == on_disk and "x² + y² = 2/π" in on_disk


def test_a_loaded_checkpoint_is_compared_with_rank_0s_checksum(tmp_path):
    namespace = {}
    exec("import hashlib\nfrom torch import nn\n" + function_source("make_disc_model") + "\n"
         + function_source("checksum"), namespace)
    torch.manual_seed(0)
    model = namespace["make_disc_model"](4)
    reported = [{"rank": 0, "checksum": namespace["checksum"](model)}, {"rank": 1, "checksum": "x"}]
    torch.save(model.state_dict(), tmp_path / "weights.pt")  # what the script's rank 0 does
    state = torch.load(tmp_path / "weights.pt", map_location="cpu", weights_only=True)
    assert nb.weights_checksum(state.values()) == reported[0]["checksum"]  # the script's fingerprint
    assert "bit for bit the trained weights" in nb.describe_checkpoint(state, reported)
    with torch.no_grad():
        next(iter(state.values()))[0, 0] += 1.0  # one weight changed
    assert "differs from rank 0's" in nb.describe_checkpoint(state, reported)
    assert "no process reported" in nb.describe_checkpoint(state, [])


def test_disc_weights_counts_the_weights_of_the_script_network():
    namespace = {}
    exec("import math\nfrom torch import nn\nfrom torch.utils.data import TensorDataset\n"
         + function_source("make_disc_model"), namespace)
    for depth in (2, 8, 10):
        model = namespace["make_disc_model"](depth)
        assert nb.disc_weights(depth) == sum(p.numel() for p in model.parameters())
    assert (nb.disc_weights(8), nb.disc_weights(10)) == (44_710, 703_142)  # the comment on DEPTH


# Step 3's timing and Step 5's reading of it


class NoSyncModel:
    """Shaped like DDP's model.no_sync(): a context manager that switches the averaging off."""

    def __init__(self):
        self.averaging = True

    def no_sync(self):
        model = self

        class NoSync:
            def __enter__(self):
                model.averaging = False

            def __exit__(self, *error):
                model.averaging = True
        return NoSync()


def test_measure_speed_times_with_ddp_then_inside_no_sync_and_keeps_the_medians():
    model, averaging = NoSyncModel(), []
    times = iter([100.0, 90.0, 10.0, 8.0, 12.0, 7.0, 11.0, 9.0])  # a warm-up round, then 3 rounds

    def time_steps(timed_model, optimizer, points, labels, steps):
        averaging.append(timed_model.averaging)
        return next(times)

    namespace = {"statistics": __import__("statistics")}
    assert run_cell("06", "script-speed", namespace) == ""  # it only defines the two functions
    namespace["time_steps"] = time_steps  # measure_speed calls this stand-in instead
    result = namespace["measure_speed"](model, "optimizer", "points", "labels", 5, rounds=3)
    assert averaging == [True, False] * 4  # step_ms with DDP, compute_ms under no_sync, each round
    assert result == {"step_ms": 11.0, "compute_ms": 8.0}  # the medians, the warm-up left out


def test_the_scripts_timing_and_accuracy_run_on_a_real_ddp_model_in_a_group_of_one():
    script = {"__name__": "the_training_script"}  # not "__main__": main() does not run
    exec(compile(SCRIPT_TEXT, "06_train_ddp.py", "exec"), script)
    torch.distributed.init_process_group("gloo", store=torch.distributed.HashStore(), rank=0,
                                         world_size=1)
    try:
        model = DistributedDataParallel(script["make_disc_model"](3))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        points, labels = script["make_disc_data"](16, seed=0).tensors
        result = script["measure_speed"](model, optimizer, points, labels, steps=2, rounds=1)
        assert set(result) == {"step_ms", "compute_ms"} and min(result.values()) > 0
        assert 0 <= script["accuracy_of"](model, torch.device("cpu"), count=64) <= 1
    finally:
        torch.distributed.destroy_process_group()
