"""Notebook 06's helpers called with made-up inputs: the launch plan in DDP's words, the options this
torchrun has, reading the RESULT lines and torchrun's error files, the checksums, the cost model and its
predictions for two T4s, the speed table and its reading, the failing two-node commands, how launchers
ended, the rendezvous endpoint, and the pictures. The plumbing and torchrun helpers 06 shares with 08 are
tested in tests/shared_cells/."""
import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed.run

from support.ddp_runs import result_line, timed_results, write_error_file
from support.notebook_code import code_cells, load_helpers, notebook_path, read

nb = load_helpers("06")


def test_supports_option_reads_a_help_text():
    help_text = "options:\n  --log-dir LOG_DIR, --log_dir LOG_DIR\n  --tee TEE\n  --standalone\n"
    assert nb.supports_option(help_text, "--log-dir") and nb.supports_option(help_text, "--standalone")
    assert not nb.supports_option(help_text, "--log")  # a prefix of another option is not the option
    assert not nb.supports_option(help_text, "--exit-barrier-timeout")
    real_help = torch.distributed.run.get_args_parser().format_help()
    assert nb.supports_option(real_help, "--standalone") and nb.supports_option(real_help, "--tee")


def test_ddp_launch_plan_says_what_runs_on_0_1_and_2_gpus_and_why():
    none, one, two = (nb.ddp_launch_plan(gpus, 8)["why"] for gpus in (0, 1, 2))
    assert none.startswith("No CUDA GPU") and "gloo" in none
    # One GPU (Colab's T4): what runs (the CPU over gloo), and how to get two GPUs on Kaggle.
    assert "on the CPU over gloo" in one and "Settings > Accelerator > GPU T4 x2" in one
    assert two.startswith("2 CUDA GPUs: one process per GPU") and "NCCL" in two
    assert "MPS" in nb.ddp_launch_plan(0, 8, "mps")["why"] and "MPS" not in none
    assert "MPS" not in nb.ddp_launch_plan(1, 8, "mps")["why"]  # a CUDA GPU comes first


def test_ddp_launch_plan_is_the_shared_plan_in_its_own_words():
    # one decision (tools/shared_cells/torchrun_helpers.py's torchrun_plan, tested there); 06's words
    for gpus, accelerator in [(0, "cpu"), (0, "mps"), (1, "cuda"), (2, "cuda")]:
        plan = nb.ddp_launch_plan(gpus, 8, accelerator, os_name="posix")
        shared = nb.torchrun_plan(gpus, 8, accelerator, "posix", one_gpu_why="", mps_why="")
        assert {k: v for k, v in plan.items() if k != "why"} == {k: v for k, v in shared.items() if k != "why"}
    assert "DDP needs a GPU per process" in nb.ddp_launch_plan(1, 8)["why"]
    assert nb.ddp_launch_plan(0, 8, "mps")["why"].startswith("Apple's MPS has no DDP backend")


def test_processes_that_report_one_checksum_hold_identical_weights():
    # the RESULT lines themselves are read by parse_results (tests/shared_cells/test_torchrun_helpers.py)
    results = nb.parse_results([(1, result_line(1, "abc")), (0, result_line(0, "abc"))])
    assert nb.checksums_agree(results)
    assert "identical" in nb.describe_checksums(results, "With DDP")


def test_different_or_missing_checksums_do_not_agree():
    results = nb.parse_results([(0, result_line(0, "abc")), (0, result_line(1, "abd"))])
    assert not nb.checksums_agree(results) and "2 different" in nb.describe_checksums(results, "x")
    assert not nb.checksums_agree([]) and "no process" in nb.describe_checksums([], "x")


def test_the_checksums_after_no_sync_are_read_and_a_run_without_them_reported_none():
    timed = nb.parse_results([(0, result_line(0, "abc", checksum_after_no_sync="d0")),
                              (0, result_line(1, "abc", checksum_after_no_sync="d1"))])
    assert nb.checksums_agree(timed) and not nb.checksums_agree(timed, "checksum_after_no_sync")
    assert nb.describe_checksums(timed, "After no_sync", "checksum_after_no_sync") == (
        "After no_sync: the 2 processes hold 2 different sets of weights.")
    untimed = nb.parse_results([(0, result_line(0, "abc")), (0, result_line(1, "abc"))])
    # no key in either result: not "identical", which a set of two missing values would make it
    assert not nb.checksums_agree(untimed, "checksum_after_no_sync")
    assert "no process reported" in nb.describe_checksums(untimed, "x", "checksum_after_no_sync")
    half = [timed[0], untimed[1]]
    assert not nb.checksums_agree(half, "checksum_after_no_sync")


def test_the_notebook_loads_the_checkpoint_onto_the_cpu_with_map_location():
    # a checkpoint saved on cuda:0 fails to load without that GPU unless map_location says where
    loads = [source for source in code_cells(read(notebook_path("06"))) if "torch.load(" in source]
    assert loads and all('map_location="cpu"' in source and "weights_only=True" in source
                         for source in loads)


def test_first_failure_is_the_earliest_error_file(tmp_path):
    write_error_file(tmp_path, 0, "RuntimeError: Connection closed by peer", 1000)
    write_error_file(tmp_path, 1, "RuntimeError: Parent directory x does not exist.", 999)
    failure = nb.first_failure(tmp_path)
    assert failure["local_rank"] == "1" and "Parent directory" in failure["error"]
    assert failure["where"] == "line 176, in main: torch.save(weights.state_dict(), args.checkpoint)"


def test_first_failure_breaks_ties_by_file_time_and_finds_nothing_in_an_empty_folder(tmp_path):
    first = write_error_file(tmp_path, 0, "ValueError: first", 5)
    second = write_error_file(tmp_path, 1, "ValueError: second", 5)
    os.utime(first, (100, 100))
    os.utime(second, (50, 50))
    assert nb.first_failure(tmp_path)["error"] == "ValueError: second"
    assert nb.first_failure(tmp_path / "nothing") is None


def test_first_failure_skips_an_error_file_cut_off_by_a_stopped_process(tmp_path):
    write_error_file(tmp_path, 0, "RuntimeError: Parent directory x does not exist.", 1000)
    cut = write_error_file(tmp_path, 1, "RuntimeError: Connection closed by peer", 999)
    cut.write_text('{"message": {"mess')  # the process was stopped while it wrote the file
    (tmp_path / "run_x" / "attempt_0" / "2").mkdir()
    (tmp_path / "run_x" / "attempt_0" / "2" / "error.json").write_text("")
    assert "Parent directory" in nb.first_failure(tmp_path)["error"]


def test_first_failure_reads_a_message_written_as_plain_text(tmp_path):
    path = tmp_path / "attempt_0" / "3" / "error.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"message": "Signal 15 (SIGTERM) received by PID 42"}))
    failure = nb.first_failure(tmp_path)
    assert failure["local_rank"] == "3" and failure["error"].startswith("Signal 15")
    assert failure["where"] is None  # no traceback through the script


def test_script_frame_takes_the_last_frame_in_the_script():
    traceback_text = ('  File "/d/06_train_ddp.py", line 200, in <module>\n    main()\n'
                      '  File "/x/other.py", line 3, in run\n    go()\n'
                      '  File "/d/06_train_ddp.py", line 176, in main')  # the last line of the text
    assert nb.script_frame(traceback_text, "06_train_ddp.py") == "line 176, in main: "
    assert nb.script_frame(traceback_text, "other_script.py") is None


def test_key_error_lines_finds_each_exception_once():
    lines = ["Traceback (most recent call last):", '  File "<string>", line 1, in <module>',
             "AttributeError: Can't get attribute 'train' on <module '__main__' (built-in)>",
             "AttributeError: Can't get attribute 'train' on <module '__main__' (built-in)>",
             "W1122 torch/multiprocessing/spawn.py:165] Terminating process 20201 via signal SIGTERM",
             "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 1"]
    assert nb.key_error_lines(lines) == [
        "AttributeError: Can't get attribute 'train' on <module '__main__' (built-in)>",
        "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with exit code 1"]


# The cost model


def test_ring_allreduce_sends_twice_n_minus_one_over_n_of_the_data():
    assert nb.ring_allreduce_bytes(100, 1) == 0
    assert nb.ring_allreduce_bytes(100, 2) == 100
    assert nb.ring_allreduce_bytes(100, 4) == 150


def test_predicted_samples_per_s_with_and_without_overlap():
    assert nb.predicted_samples_per_s(2, 128, 0.010, 0.002, overlap=False) == pytest.approx(256 / 0.012)
    assert nb.predicted_samples_per_s(2, 128, 0.010, 0.002, overlap=True) == pytest.approx(256 / 0.010)
    assert nb.predicted_samples_per_s(2, 128, 0.001, 0.004, overlap=True) == pytest.approx(256 / 0.004)


def t4_prediction(name, weights, forward_flop, batch):
    link, float32 = nb.PCIE3_X16_BYTES_PER_S / 2, nb.T4_FLOAT32_FLOP_PER_S / 2
    return nb.two_gpu_prediction(name, weights, forward_flop, batch, float32, link)


def disc_prediction(depth, batch):
    """The notebook's prediction for its disc network: 2 forward FLOPs per weight and sample."""
    return t4_prediction(f"disc {depth}", nb.disc_weights(depth), 2 * nb.disc_weights(depth), batch)


def test_a_deeper_disc_network_gets_the_same_prediction():
    # Computation (6 FLOPs per weight and sample) and gradients (4 bytes per weight) both
    # grow with the weights, so depth 12 cannot get "closer to 2" than depth 10.
    depth10, depth12 = disc_prediction(10, 128), disc_prediction(12, 128)
    assert nb.disc_weights(12) > 15 * nb.disc_weights(10)  # 16 times the weights ...
    assert depth12["allreduce_ms"] > 15 * depth10["allreduce_ms"]
    for key in ("flop_per_gradient_byte", "speedup_no_overlap", "speedup_full_overlap"):
        assert depth12[key] == pytest.approx(depth10[key], rel=1e-9)  # ... and the same speed-up
    assert depth10["speedup_full_overlap"] < 1  # slower on two GPUs than on one, at any depth
    assert depth10["flop_per_gradient_byte"] == pytest.approx(1.5 * 128)  # 6 FLOPs / 4 bytes


def test_a_bigger_batch_moves_the_prediction():
    small, large = disc_prediction(10, 128), disc_prediction(10, 2048)
    assert large["flop_per_gradient_byte"] == pytest.approx(16 * small["flop_per_gradient_byte"])
    assert large["allreduce_ms"] == pytest.approx(small["allreduce_ms"])  # the same gradients
    assert large["speedup_no_overlap"] > 1.5 > 1 > small["speedup_full_overlap"]


def test_resnet18_computes_about_150_times_more_per_weight_and_sample_and_gains():
    per_weight = nb.RESNET18_FORWARD_FLOP / nb.RESNET18_WEIGHTS
    assert 140 < per_weight / 2 < 170  # the disc network: 2 forward FLOPs per weight and sample
    resnet = t4_prediction("resnet", nb.RESNET18_WEIGHTS, nb.RESNET18_FORWARD_FLOP, 64)
    assert 1.8 < resnet["speedup_no_overlap"] <= resnet["speedup_full_overlap"] <= 2.0
    assert resnet["allreduce_ms"] == pytest.approx(4 * nb.RESNET18_WEIGHTS / (nb.PCIE3_X16_BYTES_PER_S / 2) * 1000)


def test_ddp_speed_table_puts_one_process_computing_alone_beside_all_with_ddp():
    table = nb.ddp_speed_table(timed_results(8.0, 10.0), batch_size=128)
    assert table.to_dict("index") == {
        "1 process computing alone": {"processes": 1, "compute_ms": 8.0, "communication_ms": 0.0,
                                      "step_ms": 8.0, "samples_per_s": 16000.0},
        "2 processes with DDP": {"processes": 2, "compute_ms": 8.0, "communication_ms": 2.0,
                                 "step_ms": 10.0, "samples_per_s": 25600.0}}
    # measured apart, the computation can come out longer than the whole training step: no negative
    assert nb.ddp_speed_table(timed_results(10.5, 10.0), 128).communication_ms.tolist() == [0.0, 0.0]


def test_a_run_without_timing_gives_a_table_of_nan_and_says_so():
    for results in ([], [{"rank": 0, "world_size": 2, "checksum": "a"}]):
        table = nb.ddp_speed_table(results, 128)
        assert table.samples_per_s.isna().all()
        assert nb.explain_speed(table, "gloo") == ("The timed run did not report its speed; see its "
                                                   "output above.")


def test_explain_speed_gives_the_averagings_share_of_a_training_step():
    text = nb.explain_speed(nb.ddp_speed_table(timed_results(6.0, 10.0), 128), "gloo")
    assert "trained 1.20 times" in text and "the averaging took 40 % of each" in text


# Going deeper's runs: the failing two nodes, how launchers ended, the rendezvous endpoint


@pytest.mark.parametrize("exit_barrier_timeout_s", [30, None])  # a torchrun with the option, and without
def test_the_failing_two_node_runs_host_the_store_on_node_1_and_fail_rank_0s_save(
        tmp_path, exit_barrier_timeout_s):
    (tmp_path / "logs" / "node1").mkdir(parents=True)
    (tmp_path / "logs" / "node1" / "old.log").write_text("a previous run")
    commands = nb.failing_two_node_commands(tmp_path / "06_train_ddp.py", tmp_path / "logs",
                                            tmp_path / "no_such_folder" / "weights.pt",
                                            "127.0.0.1:29517", exit_barrier_timeout_s,
                                            extra_args=["--skip-final-barrier"])
    # This PyTorch's torchrun may lack --exit-barrier-timeout (EXIT_BARRIER_TIMEOUT_S is then None).
    parsed = [torch.distributed.run.parse_args([part for part in command[3:]
                                                if not part.startswith("--exit-barrier-timeout=")])
              for command in commands]
    assert [args.rdzv_conf for args in parsed] == ["is_host=0", "is_host=1"]
    for node, args in enumerate(parsed):
        assert (args.nnodes, args.nproc_per_node, args.rdzv_endpoint, args.rdzv_id) == (
            "2", "1", "127.0.0.1:29517", "nb06-failing")  # both meet at one endpoint, in one run
        assert args.log_dir == str(tmp_path / "logs" / f"node{node}")
        assert not any(Path(args.log_dir).iterdir()), "each node starts with an empty log folder"
        assert args.training_script == str(tmp_path / "06_train_ddp.py")
        assert args.training_script_args[-3:] == [
            "--checkpoint", str(tmp_path / "no_such_folder" / "weights.pt"), "--skip-final-barrier"]
        assert "--cpu" in args.training_script_args
    passes_barrier = [f"--exit-barrier-timeout={exit_barrier_timeout_s}" in c for c in commands]
    assert passes_barrier == [exit_barrier_timeout_s is not None] * 2


def test_nothing_listens_at_an_endpoint_once_its_server_is_gone():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    endpoint = f"127.0.0.1:{server.getsockname()[1]}"
    assert not nb.nothing_listens(endpoint)
    server.close()
    assert nb.nothing_listens(endpoint)


def test_describe_ending_says_who_was_stopped():
    stopped = {"returncodes": [1, -15], "ended_s": [20.0, 31.0], "seconds": 31.0,
               "stopped": "one was still running 10 s after another had ended"}
    text = nb.describe_ending(stopped)
    assert "node0's launcher failed with exit code 1 after 20.0 s" in text
    assert "node1's launcher stopped by the notebook" in text and "exit barrier" in text
    ended = {"returncodes": [1, 1], "ended_s": [20.0, 21.0], "seconds": 21.0, "stopped": None}
    assert "none waited" in nb.describe_ending(ended)
    ok = {"returncodes": [0, -1], "ended_s": [3.0, None], "seconds": 9.0, "stopped": None}
    lines = nb.describe_ending(ok).splitlines()
    assert lines[0] == "node0's launcher succeeded after 3.0 s."
    assert lines[1] == "node1's launcher stopped by the notebook."  # exit code -1, no end time


# The pictures


@pytest.mark.parametrize("processes", [1, 2, 3, 4, 8])
def test_ring_allreduce_steps_end_with_every_chunk_summed_everywhere(processes):
    moments = nb.ring_allreduce_steps(processes)
    assert len(moments) == 1 + 2 * (processes - 1)
    assert moments[0] == [[1] * processes] * processes
    assert moments[-1] == [[processes] * processes] * processes
    if processes > 1:  # after reduce-scatter, each process holds one finished chunk, each a different one
        middle = moments[processes - 1]
        finished = [[chunk for chunk, count in enumerate(row) if count == processes] for row in middle]
        assert sorted(chunks[0] for chunks in finished) == list(range(processes))
        assert all(len(chunks) == 1 for chunks in finished)
    # every step, every process sends one chunk of 1/N of its gradients: 2 (N - 1) / N in all
    sent = (len(moments) - 1) * 1 / processes
    assert sent == pytest.approx(nb.ring_allreduce_bytes(1, processes))


def test_the_pictures_draw_with_titles_and_labels():
    import matplotlib

    matplotlib.use("Agg")
    plt = nb.plt
    figure = nb.draw_dataparallel_and_ddp()
    titles = [axis.get_title() for axis in figure.axes]
    assert any("DataParallel" in title for title in titles) and any("1 process per GPU" in t for t in titles)
    texts = " ".join(text.get_text() for axis in figure.axes for text in axis.texts)
    assert "all-reduce" in texts and "gradients" in texts
    plt.close(figure)
    figure = nb.draw_ring_allreduce(4)
    axis = figure.axes[0]
    assert "Ring all-reduce of 4 processes" in axis.get_title() and "1.5 times" in axis.get_title()
    assert axis.get_xlabel() and axis.get_ylabel()
    plt.close(figure)
