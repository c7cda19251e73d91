"""Made-up output of notebook 06's runs, for its tests (tests/notebooks/test_06_*.py): a RESULT line as a
training process prints it, the results parse_results gives for a timed run, and the error file torchrun
writes for a process that failed."""
import json


def result_line(rank, checksum, **extra):
    """A line a training process prints, as torchrun prefixes it: RESULT and its JSON."""
    return "[default0]:RESULT " + json.dumps({"rank": rank, "world_size": 2, "device": "cpu",
                                              "accuracy": 0.9, "checksum": checksum, **extra})


def timed_results(compute_ms=8.0, step_ms=10.0, world_size=2, after=("b", "c")):
    """RESULT lines of a timed run, as parse_results returns them."""
    return [{"node": 0, "rank": rank, "world_size": world_size, "device": "cpu", "accuracy": 0.9,
             "checksum": "a", "step_ms": step_ms, "compute_ms": compute_ms,
             "checksum_after_no_sync": after[rank]} for rank in range(2)]


def write_error_file(folder, local_rank, message, timestamp):
    """The error.json torchrun's @record writes for a process that failed in the script's main()."""
    path = folder / "run_x" / "attempt_0" / str(local_rank) / "error.json"
    path.parent.mkdir(parents=True)
    callstack = ('Traceback (most recent call last):\n  File "/d/06_train_ddp.py", line 176, in main\n'
                 "    torch.save(weights.state_dict(), args.checkpoint)\n" + message)
    path.write_text(json.dumps({"message": {"message": message, "extraInfo": {
        "py_callstack": callstack, "timestamp": str(timestamp)}}}))
    return path
