"""Judging a response against an expected answer: ``exact``, ``regex`` or ``number``.

Every matcher also returns the response's *answer* in a canonical form, so two targets can be compared
item by item (agreement: the same answer on the same item, right or wrong).

* ``exact``: the response, normalized (reasoning blocks dropped, markdown emphasis, surrounding quotes and
  trailing punctuation stripped, whitespace collapsed, case folded), equals the normalized expected text.
* ``regex``: the expected text is a Python regular expression searched in the response; the answer is the
  first group that matched, else the whole match (else the normalized response).
* ``number``: the response's final number (in ``\\boxed{}``, after "answer is" / "answer:", else the last
  one; thousands separators allowed) equals the expected number (exactly, or within 1e-6 relative).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

MATCHERS = ("exact", "regex", "number")

_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.S | re.I)
_EMPHASIS = re.compile(r"[*_`]+")
_SPACE = re.compile(r"\s+")
_EDGE = " \t\n\"'“”‘’.,;:!?。"
_NUM = r"[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?"
_NUMBER = re.compile(rf"(?<![\w.]){_NUM}")
_BOXED = re.compile(r"\\boxed\{\s*([^{}]*)\}")
_ANSWER = re.compile(r"answer\s*(?:is|:|=)\s*\**\s*([^\n]*)", re.I)
_REL_TOL = Decimal("1e-6")
_TEXT_ANSWER_CHARS = 200  # a non-answer is kept (for agreement) up to this length


@dataclass(frozen=True, slots=True)
class Match:
    """Whether the response is right, and its answer in canonical form (for agreement)."""

    correct: bool
    answer: str


def strip_reasoning(text: str) -> str:
    """The response without ``<think>...</think>`` blocks (an unterminated one runs to the end)."""
    return _THINK.sub(" ", text) if "<think>" in text.lower() else text


def normalize(text: str) -> str:
    """Case-folded text without reasoning, markdown emphasis, edge quotes/punctuation or extra spaces."""
    t = _EMPHASIS.sub("", strip_reasoning(text))
    return _SPACE.sub(" ", t).strip(_EDGE).casefold()


def _text_answer(response: str) -> str:
    return "text:" + normalize(response)[:_TEXT_ANSWER_CHARS]


def parse_number(text: str) -> Decimal | None:
    """``text`` as one number (``1,234``, ``-5``, ``2.50``, ``1e3``), or None."""
    s = text.strip().replace(",", "").replace("−", "-")
    if not s:
        return None
    try:
        d = Decimal(s)
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def _canonical(d: Decimal) -> str:
    if d == d.to_integral_value():
        return str(int(d))
    return format(d.normalize(), "f")


def final_number(text: str) -> Decimal | None:
    """The number a response gives as its answer: boxed, else after "answer is", else the last one."""
    t = strip_reasoning(text)
    for pattern in (_BOXED, _ANSWER):
        found = pattern.findall(t)
        if found:
            nums = _NUMBER.findall(found[-1])
            if nums:
                return parse_number(nums[0])
    nums = _NUMBER.findall(t)
    return parse_number(nums[-1]) if nums else None


def _number_match(response: str, expected: str) -> Match:
    want = parse_number(expected)
    got = final_number(response)
    if got is None:
        return Match(False, _text_answer(response))
    if want is None:
        return Match(False, _canonical(got))
    close = got == want or abs(got - want) <= _REL_TOL * max(abs(want), abs(got))
    return Match(bool(close), _canonical(got))


def _regex_match(response: str, expected: str) -> Match:
    t = strip_reasoning(response)
    m = re.search(expected, t)
    if m is None:
        return Match(False, _text_answer(response))
    groups = [g for g in m.groups() if g is not None]
    return Match(True, normalize(groups[0] if groups else m.group(0)))


def match(matcher: str, response: str, expected: str) -> Match:
    """Judge ``response`` against ``expected`` with ``matcher`` (one of :data:`MATCHERS`)."""
    if matcher == "number":
        return _number_match(response, expected)
    if matcher == "regex":
        return _regex_match(response, expected)
    if matcher == "exact":
        got = normalize(response)
        return Match(got == normalize(expected), got)
    raise ValueError(f"unknown matcher {matcher!r}; expected one of {MATCHERS}")
