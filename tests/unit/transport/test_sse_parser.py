"""SSEParser: line endings, comments, multi-line data, event names, ids, [DONE], end()."""

from __future__ import annotations

from servelab.transport.sse import DONE, SSEEvent, SSEParser


def _all(*pieces: bytes, end: bool = True) -> list[SSEEvent]:
    p = SSEParser()
    out: list[SSEEvent] = []
    for piece in pieces:
        out.extend(p.feed(piece))
    if end:
        out.extend(p.end())
    return out


def test_one_event_per_blank_line_and_done():
    evs = _all(b'data: {"a":1}\n\ndata: [DONE]\n\n')
    assert [e.data for e in evs] == [b'{"a":1}', DONE]
    assert evs[0].event == b""


def test_crlf_and_lone_cr_line_endings():
    assert [e.data for e in _all(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n")] == [b"a", b"b", b"c"]


def test_crlf_split_between_reads_is_one_line_ending():
    # "data: a\r" then "\n\r\n": the LF belongs to the CR; then CRLF is the blank line. One event.
    assert [e.data for e in _all(b"data: a\r", b"\n\r\n", end=False)] == [b"a"]
    # A CR followed by a CR is two line endings: the event is dispatched by the second.
    assert [e.data for e in _all(b"data: a\r", b"\rdata: b\n\n", end=False)] == [b"a", b"b"]


def test_comments_and_keepalives_are_ignored():
    assert [e.data for e in _all(b": ping\n\n:\n\ndata: x\n: between\n\n")] == [b"x"]


def test_multi_line_data_is_joined_with_lf():
    assert _all(b"data: a\ndata:b\ndata\n\n")[0].data == b"a\nb\n"


def test_event_name_and_persistent_id():
    evs = _all(b"event: error\nid: 7\ndata: boom\n\ndata: next\n\n")
    assert evs[0] == SSEEvent(b"boom", b"error", b"7")
    assert evs[1] == SSEEvent(b"next", b"", b"7")  # the name resets, the last id persists


def test_event_without_data_is_not_dispatched():
    assert _all(b"event: ping\n\nretry: 10\n\n") == []


def test_only_one_leading_space_is_dropped():
    assert _all(b"data:  two\n\n")[0].data == b" two"


def test_end_flushes_an_event_without_blank_line():
    p = SSEParser()
    assert p.feed(b"data: last") == []
    assert p.end() == [SSEEvent(b"last")]
    assert p.end() == []


def test_utf8_split_mid_character_survives():
    raw = 'data: {"t":"héllo ✓"}\n\n'.encode()
    cut = raw.index("✓".encode()) + 1
    evs = _all(raw[:cut], raw[cut:])
    assert evs[0].data.decode() == '{"t":"héllo ✓"}'


def test_feed_returns_nothing_until_the_blank_line():
    p = SSEParser()
    assert p.feed(b"data: a\n") == []
    assert p.feed(b"\n") == [SSEEvent(b"a")]
    assert p.feed(b"") == []
