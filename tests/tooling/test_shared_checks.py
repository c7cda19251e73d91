"""The checks several test files share (tests/shared_checks.py), each tested on both sides of its edge."""
import pytest

from support.shared_checks import MAX_LINE, code_lines_too_long, machine_bound_phrases, running_in_ci, skip_or_fail


@pytest.mark.parametrize("value, ci", [("true", True), ("TRUE", True), (" true\n", True), ("1", True),
                                       ("yes", True), ("false", False), ("0", False), ("", False),
                                       ("no", False), (None, False)])
def test_what_counts_as_a_ci_run(value, ci):
    environ = {} if value is None else {"CI": value}
    assert running_in_ci(environ) is ci


def test_in_ci_a_test_that_cannot_run_fails_with_its_message():
    with pytest.raises(pytest.fail.Exception, match="no browser .*CI is set"):
        skip_or_fail("no browser", {"CI": "true"})


@pytest.mark.parametrize("environ", [{}, {"CI": "false"}])
def test_outside_ci_it_is_skipped_with_its_message(environ):
    with pytest.raises(pytest.skip.Exception, match="^no browser$"):
        skip_or_fail("no browser", environ)


def test_code_lines_longer_than_the_screen_are_found():
    fits, too_long = "x" * MAX_LINE, "y" * (MAX_LINE + 1)
    assert MAX_LINE == 100
    assert code_lines_too_long(f"{fits}\n{too_long}\n\n{fits}") == [too_long]
    assert code_lines_too_long(fits) == []


def test_prose_about_the_authors_machine_is_found_across_line_breaks_and_case():
    assert machine_bound_phrases("The loss, measured\nhere, fell.") == ["measured here"]
    assert machine_bound_phrases("On This Machine it took 5 s") == ["on this machine"]
    assert machine_bound_phrases("On a T4, the same cell prints a table; on a CPU, a sentence.") == []
