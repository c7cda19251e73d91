#@title Shared timing rounds: `interleaved_rounds` times each variant once a round, `spread_pct`
import statistics


def interleaved_rounds(timers, rounds, progress=lambda round_numbers: round_numbers):
    """{name: [seconds of each round]}: each of `rounds` rounds calls every timer once, starting one
    further along the list than the round before, so that no variant always follows the same one.
    `progress` wraps the round numbers (fastprogress's progress_bar shows a bar)."""
    names = list(timers)
    seconds = {name: [] for name in names}
    for round_number in progress(range(rounds)):
        for offset in range(len(names)):
            name = names[(round_number + offset) % len(names)]
            seconds[name].append(timers[name]())
    return seconds


def spread_pct(values):
    """How far the rounds lie apart: (slowest - fastest) / median, in percent."""
    return 100 * (max(values) - min(values)) / statistics.median(values)
