"""Matchers: what counts as right, and the canonical answer used for agreement."""

from __future__ import annotations

import pytest

from servelab.accuracy.matchers import final_number, match, normalize


@pytest.mark.parametrize(("response", "expected", "correct", "answer"), [
    ("15217", "15217", True, "15217"),
    ("The answer is 15,217.", "15217", True, "15217"),
    ("8022 + 7195 = 15217", "15217", True, "15217"),
    ("Answer: -2765", "-2765", True, "-2765"),
    ("−2765", "-2765", True, "-2765"),
    ("**42**", "42", True, "42"),
    ("42.0", "42", True, "42"),
    ("0.5", "0.50", True, "0.5"),
    ("1e3", "1000", True, "1000"),
    ("We get \\boxed{7178}. Check: 74*97 is 7178, not 7000", "7178", True, "7178"),
    ("The answer is 12, since 3 * 4 = 12 and not 13", "12", True, "12"),
    ("<think>maybe 10, or 11</think>It is 12", "12", True, "12"),
    ("15216", "15217", False, "15216"),
    ("I cannot compute that.", "15217", False, "text:i cannot compute that"),
])
def test_number(response, expected, correct, answer):
    m = match("number", response, expected)
    assert (m.correct, m.answer) == (correct, answer)


def test_number_unterminated_reasoning_gives_no_answer():
    # A response cut off inside its reasoning block has not answered yet.
    assert final_number("<think>first 3 then 4 then") is None


@pytest.mark.parametrize(("response", "expected", "correct"), [
    ("hozimi", "hozimi", True),
    ("  Hozimi.\n", "hozimi", True),
    ("**hozimi**", "hozimi", True),
    ('"hozimi"', "hozimi", True),
    ("<think>is it nerute?</think>\nhozimi", "hozimi", True),
    ("The name is hozimi.", "hozimi", False),
    ("hozim", "hozimi", False),
])
def test_exact(response, expected, correct):
    assert match("exact", response, expected).correct is correct


def test_exact_answers_agree_across_formatting():
    assert match("exact", "**Hozimi**", "x").answer == match("exact", "hozimi.", "x").answer == "hozimi"


def test_regex_group_is_the_answer():
    m = match("regex", "I think it is Paris, France.", r"(?i)\b(paris)\b")
    assert m.correct and m.answer == "paris"
    m = match("regex", "Lyon", r"(?i)\bparis\b")
    assert not m.correct and m.answer == "text:lyon"
    assert match("regex", "PARIS", r"(?i)paris").answer == "paris"


def test_long_non_answers_are_bounded():
    assert len(match("number", "word " * 1000, "1").answer) <= 205


def test_normalize_collapses_space_and_case():
    assert normalize("  Hello\n\tWORLD!  ") == "hello world"


def test_unknown_matcher():
    with pytest.raises(ValueError, match="unknown matcher"):
        match("fuzzy", "a", "a")
