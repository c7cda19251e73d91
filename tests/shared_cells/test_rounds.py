"""The shared timing rounds (tools/shared_cells/rounds.py), tested once.

Notebooks 05 and 10 carry the same cell (tools/sync_cells.py writes it), so testing notebook 10's copy tests
both: the timers are stand-ins that return the position of their call, and the spread is computed on
made-up rounds.
"""
from support.notebook_code import load_helpers

nb = load_helpers("10")


def test_every_round_times_every_variant_once_starting_one_further_along():
    calls = []
    timers = {name: (lambda name=name: calls.append(name) or len(calls)) for name in "abc"}
    seconds = nb.interleaved_rounds(timers, 4)
    assert calls == list("abc" "bca" "cab" "abc")  # no variant always runs right after another
    assert seconds == {"a": [1, 6, 8, 10], "b": [2, 4, 9, 11], "c": [3, 5, 7, 12]}  # each where it ran


def test_the_rounds_pass_through_the_progress_wrapper_they_are_given():
    wrapped = []

    def progress(round_numbers):  # fastprogress's progress_bar, as notebook 05 passes it
        wrapped.append(list(round_numbers))
        return round_numbers

    seconds = nb.interleaved_rounds({"a": lambda: 1.0, "b": lambda: 2.0}, 3, progress)
    assert wrapped == [[0, 1, 2]] and seconds == {"a": [1.0] * 3, "b": [2.0] * 3}


def test_the_spread_of_the_rounds_is_relative_to_the_median():
    assert nb.spread_pct([1.0, 1.0, 1.0]) == 0
    assert nb.spread_pct([1.0, 2.0, 3.0]) == 100.0
    assert nb.spread_pct([1.0, 1.0, 4.0]) == 300.0, "relative to the median, not the mean"
