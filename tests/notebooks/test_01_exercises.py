"""Notebook 01's exercises: each check given a likely wrong answer, and the message meant for it."""
import time

import pytest
import torch

from support.notebook_code import load_helpers, run_cell

nb = load_helpers("01")


def exercise_namespace(name):
    """The notebook's helpers, `device`, and what exercise `name`'s check cell defines (run as it is)."""
    namespace = {**vars(nb), "device": torch.device("cpu")}
    run_cell("01", f"exercise-{name}-check", namespace)
    return namespace


# The GPUs and wheels of exercise 1's check that its messages name
L4_ON_CUDA13 = ("for the NVIDIA L4 (8, 9) and the CUDA 13.0 wheel (sm_75 sm_80 sm_86 sm_90 sm_100 "
                "sm_120)")
RTX5090_ON_CUDA126 = ("for the NVIDIA GeForce RTX 5090 (12, 0) and the CUDA 12.6 wheel (sm_50 sm_60 "
                      "sm_70 sm_75 sm_80 sm_86 sm_90)")


@pytest.mark.exercise("01", "has-code-for")
def test_exercise_1_the_exact_name_misses_the_l4_and_the_message_teaches_the_rule():
    check = exercise_namespace("has-code-for")["check_has_code_for"]
    exact_name = check(lambda capability, arch_list: f"sm_{capability[0]}{capability[1]}" in arch_list)
    assert exact_name == (
        f"NOT YET RIGHT: has_code_for says False {L4_ON_CUDA13}, yet the GPU runs its sm_86 code: "
        "sm_89 is missing, but a GPU also runs code built for a smaller minor number of its own major "
        "number.")


def test_exercise_1_the_true_rule_runs_the_l4_on_sm_86_and_nothing_of_cuda_12_6_on_an_rtx_5090():
    namespace = exercise_namespace("has-code-for")
    code_it_runs, answer = namespace["code_it_runs"], nb.has_code_for_answer
    cuda13, cuda126 = namespace["CUDA13_ARCHES"], namespace["CUDA126_ARCHES"]
    assert code_it_runs((8, 9), cuda13) == ["sm_80", "sm_86"] and answer((8, 9), cuda13) is True
    assert code_it_runs((12, 0), cuda126) == [] and answer((12, 0), cuda126) is False
    assert code_it_runs((12, 0), cuda13) == ["sm_120"] and answer((12, 0), cuda13) is True
    assert code_it_runs((7, 0), cuda13) == [] and answer((7, 0), cuda13) is False  # sm_75 needs 7.5
    assert namespace["sm_numbers"]("sm_120") == (12, 0) and namespace["sm_numbers"]("sm_86") == (8, 6)
    assert namespace["check_has_code_for"](answer).startswith("PASSED: the reference's answer for all 7 ")


def test_exercise_1_has_one_meaning_with_the_diagnosis_arch_supported():
    """The exercise's reference and Going deeper A's arch_supported say the same for every pair."""
    namespace = exercise_namespace("has-code-for")
    for gpu, (major, minor), wheel, arch_list in namespace["GPUS_AND_WHEELS"]:
        runs = bool(namespace["code_it_runs"]((major, minor), arch_list))
        assert nb.arch_supported(f"{major}.{minor}", arch_list) is runs, (gpu, wheel)


def test_exercise_1_agrees_with_pytorchs_own_table_of_which_gpu_runs_which_code():
    """PyTorch's start-up check (torch/cuda/__init__.py) reads the same rule from its own table."""
    compatible = getattr(torch.cuda, "_code_compatible_with_device", None)
    if compatible is None or torch.version.cuda is None:  # the table is a CUDA build's
        pytest.skip("this PyTorch has no table of torch.cuda._code_compatible_with_device to compare with")
    namespace = exercise_namespace("has-code-for")
    for gpu, (major, minor), wheel, arch_list in namespace["GPUS_AND_WHEELS"]:
        pytorch = any(compatible(10 * major + minor, 10 * arch_major + arch_minor)
                      for arch_major, arch_minor in map(namespace["sm_numbers"], arch_list))
        assert pytorch is bool(namespace["code_it_runs"]((major, minor), arch_list)), (gpu, wheel)


@pytest.mark.exercise("01", "has-code-for")
def test_exercise_1_each_misread_rule_gets_the_message_that_names_it():
    check = exercise_namespace("has-code-for")["check_has_code_for"]
    with_a_dot = check(lambda capability, arch_list: f"sm_{capability[0]}.{capability[1]}" in arch_list)
    assert with_a_dot == (
        "NOT YET RIGHT: has_code_for says False for the Tesla T4 (7, 5) and the CUDA 13.0 wheel (sm_75 "
        "sm_80 sm_86 sm_90 sm_100 sm_120), which lists sm_75, the GPU's own code: sm_, the major "
        "number, then the minor number, no dot (sm_120 is 12.0).")

    def reads_two_digits(capability, arch_list):  # 'sm_120' read as 1 and 2
        return any(int(arch[3]) == capability[0] and int(arch[4]) <= capability[1] for arch in arch_list)

    assert check(reads_two_digits) == (
        "NOT YET RIGHT: has_code_for says False for the NVIDIA GeForce RTX 5090 (12, 0) and the CUDA "
        "13.0 wheel (sm_75 sm_80 sm_86 sm_90 sm_100 sm_120), which lists sm_120, the GPU's own code: "
        "sm_, the major number, then the minor number, no dot (sm_120 is 12.0).")

    def major_only(capability, arch_list):  # forgets that the minor number counts too
        return any(int(arch[3:-1]) == capability[0] for arch in arch_list)

    assert check(major_only) == (
        "NOT YET RIGHT: has_code_for says True for the Tesla V100 (7, 0) and the CUDA 13.0 wheel (sm_75 "
        "sm_80 sm_86 sm_90 sm_100 sm_120), yet the GPU runs none of it: sm_75 needs a minor number of 5 "
        "or more, and the GPU's is 0.")
    assert check(lambda capability, arch_list: True) == (
        "NOT YET RIGHT: has_code_for says True for the Tesla P100 (6, 0) and the CUDA 13.0 wheel (sm_75 "
        "sm_80 sm_86 sm_90 sm_100 sm_120), yet the GPU runs none of it: a GPU runs only code of its own "
        "major number, 6, and the list has none.")

    def any_older_number(capability, arch_list):  # as if newer GPUs ran every older sm_ code
        return any(int(arch[3:]) <= 10 * capability[0] + capability[1] for arch in arch_list)

    assert check(any_older_number) == (
        f"NOT YET RIGHT: has_code_for says True {RTX5090_ON_CUDA126}, yet the GPU runs none of it: a "
        "GPU runs only code of its own major number, 12, and the list has none.")


@pytest.mark.exercise("01", "has-code-for")
def test_exercise_1_an_answer_that_is_not_true_or_false_or_that_raises_is_told_so():
    check = exercise_namespace("has-code-for")["check_has_code_for"]
    assert check(lambda capability, arch_list: "sm_75") == (
        "NOT YET RIGHT: for the Tesla T4, has_code_for returned 'sm_75' (a str), not True or False.")
    assert check(lambda capability, arch_list: None) == (
        "NOT YET RIGHT: for the Tesla T4, has_code_for returned None (a NoneType), not True or False.")

    def splits_on_the_dot(capability, arch_list):
        return any(arch.split(".")[1] for arch in arch_list)

    said = check(splits_on_the_dot)
    assert said.startswith("NOT YET RIGHT: your splits_on_the_dot raised IndexError: list index out of "
                           "range at line "), said


def measured_ms(said):
    """The milliseconds a check's message says were measured ('... you measured 0.012 ms: ...')."""
    return said.split("you measured ")[1].split(" ms")[0]


@pytest.mark.exercise("01", "until-done")
def test_exercise_2_a_clock_read_before_the_device_is_done():
    check = exercise_namespace("until-done")["check_seconds_until_done"]

    def launch_only(work, wait):
        start = time.perf_counter()
        work()
        return time.perf_counter() - start

    def waits_first(work, wait):  # waits for earlier work, not for this one
        wait()
        start = time.perf_counter()
        work()
        return time.perf_counter() - start

    for wrong in (launch_only, waits_first):
        said = check(wrong, torch.device("cpu"))
        assert said == (f"NOT YET RIGHT: the made-up GPU has done its work 50 ms after work() returns, "
                        f"and you measured {measured_ms(said)} ms: the launch only. Call wait() after "
                        "work(), then read the clock."), said
        assert float(measured_ms(said)) < 45
    twice = check(lambda work, wait: (work(), work(), wait()) and 0.05, torch.device("cpu"))
    assert twice == "NOT YET RIGHT: seconds_until_done called work() 2 times; call it once."


@pytest.mark.exercise("01", "until-done")
def test_exercise_2_a_time_in_the_wrong_unit_sign_or_type_is_told_so():
    check = exercise_namespace("until-done")["check_seconds_until_done"]

    def in_milliseconds(work, wait):
        start = time.perf_counter()
        work()
        wait()
        return 1000 * (time.perf_counter() - start)

    said = check(in_milliseconds, torch.device("cpu"))
    shown = said.split("you measured ")[1].split(" for")[0]
    assert 45 < float(shown) < 1000
    assert said == (f"NOT YET RIGHT: you measured {shown} for 50 ms of work, more than a second: return "
                    "seconds, not milliseconds, and the reading after wait() minus the one before "
                    "work(), not a reading alone.")

    def start_minus_end(work, wait):
        start = time.perf_counter()
        work()
        wait()
        return start - time.perf_counter()

    said = check(start_minus_end, torch.device("cpu"))
    shown = said.split("a negative time, ")[1].split(" s:")[0]
    assert float(shown) < 0
    assert said == (f"NOT YET RIGHT: a negative time, {shown} s: subtract the start from the later "
                    "reading.")

    def prints_instead(work, wait):
        start = time.perf_counter()
        work()
        wait()
        print(time.perf_counter() - start)

    assert check(prints_instead, torch.device("cpu")) == (
        "NOT YET RIGHT: seconds_until_done returned None (a NoneType), not seconds (the difference of "
        "two time.perf_counter() readings).")


@pytest.mark.exercise("01", "gflops")
def test_exercise_3_a_product_counted_without_its_additions():
    check = exercise_namespace("gflops")["check_gflops"]
    without_additions = check(lambda size, seconds: size**3 / seconds / 1e9, torch.device("cpu"))
    assert without_additions == ("NOT YET RIGHT: for 1024×1024 matrices in 0.01 s, gflops says 107.374, the "
                                 "reference 214.748 (0.5 times it). Half: count the additions too, 2·n³ in "
                                 "all.")
    in_flops = check(lambda size, seconds: 2 * size**3 / seconds, torch.device("cpu"))
    assert in_flops.endswith("(1e+09 times it). That is FLOP/s: divide by 1e9 for GFLOP/s.")
    assert check(lambda size, seconds: torch.tensor(1.0), torch.device("cpu")) == (
        "NOT YET RIGHT: gflops returned tensor(1.) (a Tensor), not a number.")
    assert check(lambda size, seconds: None, torch.device("cpu")) == (
        "NOT YET RIGHT: gflops returned None (a NoneType), not a number.")
