"""SSEParser yields the same events for every split of the same bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.transport.sse import SSEParser

_values = st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
                  max_size=12)
_eol = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def _streams(draw) -> bytes:
    """An event stream mixing fields, comments, blank lines and all three line endings."""
    parts: list[str] = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["data", "data", "event", "id", "comment", "blank", "bare", "retry"]))
        value = draw(_values)
        line = {"data": f"data: {value}", "event": f"event:{value}", "id": f"id: {value}",
                "comment": f":{value}", "blank": "", "bare": "data", "retry": "retry: 5"}[kind]
        parts.append(line + draw(_eol))
    if draw(st.booleans()):
        parts.append("data: [DONE]")  # possibly unterminated
    return "".join(parts).encode()


def _parse(data: bytes, cuts: list[int]) -> list:
    p = SSEParser()
    out = []
    prev = 0
    for c in sorted(set(cuts)) + [len(data)]:
        out.extend(p.feed(data[prev:c]))
        prev = c
    out.extend(p.end())
    return out


@settings(max_examples=300, deadline=None)
@given(data=_streams(), cuts=st.lists(st.integers(0, 400), max_size=10))
def test_same_events_for_every_split(data: bytes, cuts: list[int]):
    whole = _parse(data, [])
    cuts = [c for c in cuts if c <= len(data)]
    assert _parse(data, cuts) == whole


@settings(max_examples=100, deadline=None)
@given(data=_streams())
def test_byte_by_byte_equals_whole(data: bytes):
    assert _parse(data, list(range(len(data)))) == _parse(data, [])


@given(values=st.lists(_values, min_size=1, max_size=5), eol=_eol)
def test_data_lines_are_joined_with_lf(values: list[str], eol: str):
    raw = "".join(f"data: {v}{eol}" for v in values) + eol
    (ev,) = _parse(raw.encode(), [])
    assert ev.data.decode() == "\n".join(values)
