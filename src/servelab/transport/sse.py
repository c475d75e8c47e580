"""An incremental Server-Sent Events parser that works on bytes.

:meth:`SSEParser.feed` accepts the response body in whatever pieces the network delivers (split anywhere:
mid-line, mid-UTF-8 sequence, between the CR and LF of a CRLF) and returns the events completed so far.
Decoding is left to the caller: an event's ``data`` is the raw UTF-8 bytes, ready for ``orjson.loads``,
so a multi-byte character split across two reads never matters.

Follows the WHATWG event-stream rules: lines end with CRLF, LF or CR; a blank line dispatches the event;
lines starting with ``:`` are comments (keep-alives); ``data`` lines accumulate, joined by LF; ``event``
names the event; one leading space after the colon is dropped; an event without data is not dispatched;
one UTF-8 byte order mark at the very start of the stream is skipped.
One deliberate leniency: :meth:`SSEParser.end` dispatches a last event whose blank line never came
(some servers close the stream right after ``data: [DONE]``).
"""

from __future__ import annotations

from typing import NamedTuple

DONE = b"[DONE]"
BOM = b"\xef\xbb\xbf"
_new_event = tuple.__new__  # builds an SSEEvent without NamedTuple's Python-level __new__


class SSEEvent(NamedTuple):
    """One dispatched event: ``data`` as raw bytes, ``event`` the name (b"" means the default "message"),
    ``id`` the last event ID seen so far in the stream (it persists across events, per the standard)."""

    data: bytes
    event: bytes = b""
    id: bytes | None = None


def single_data(data: bytes) -> bytes | None:
    """X when ``data`` is exactly one whole single-line event ``data: X\\n\\n`` (the shape servers send
    nearly always), else None. Valid only when the parser has nothing pending."""
    end = len(data) - 2
    if data.find(b"\n") == end and data[-1] == 10 and data[:6] == b"data: " and 13 not in data:
        return data[6:end]
    return None


class SSEParser:
    """Incremental SSE parser: ``feed(bytes) -> list[SSEEvent]``, then ``end()`` at end of stream."""

    __slots__ = ("_buf", "_skip_lf", "_data", "_event", "_last_id", "pending", "_start")

    def __init__(self) -> None:
        self._buf = b""  # an incomplete trailing line
        self._skip_lf = False  # the previous piece ended with CR: a leading LF belongs to it
        self._data: list[bytes] = []
        self._event = b""
        self._last_id: bytes | None = None
        # False while nothing is half-parsed: a caller may then take a lone "data: X\n\n" read itself
        # (see :func:`single_data`) and skip building an event. True at the start: a BOM may come first.
        self.pending = True
        self._start = True

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Consume ``data``; return the events it completed (often empty, often one)."""
        if not data:
            return []
        if self._start:
            head = self._buf + data
            if len(head) < 3 and BOM.startswith(head):
                self._buf = head  # maybe a BOM split across reads: wait for more
                return []
            self._start = False
            self._buf = b""
            data = head[3:] if head.startswith(BOM) else head
            if not data:
                self.pending = False
                return []
        if not self.pending:
            payload = single_data(data)
            if payload is not None:
                return [_new_event(SSEEvent, (payload, b"", self._last_id))]
        if self._skip_lf:
            self._skip_lf = False
            if data[0] == 10:  # b"\n"
                data = data[1:]
                if not data:
                    return []
        if self._buf:
            data = self._buf + data
        if 13 in data:  # b"\r": normalise CRLF and lone CR to LF (rare: most servers send LF)
            if data[-1] == 13:
                self._skip_lf = True
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        self._buf = lines.pop()
        out: list[SSEEvent] = []
        for line in lines:
            self._line(line, out)
        self.pending = bool(self._buf or self._data or self._event or self._skip_lf)
        return out

    def end(self) -> list[SSEEvent]:
        """The stream ended: process a last unterminated line and dispatch a pending event."""
        out: list[SSEEvent] = []
        if self._start and BOM.startswith(self._buf):
            self._buf = b""  # only (part of) a BOM came
        self._start = False
        if self._buf:
            line, self._buf = self._buf, b""
            self._line(line, out)
        self._skip_lf = False
        self._line(b"", out)
        self.pending = False
        return out

    def _line(self, line: bytes, out: list[SSEEvent]) -> None:
        if not line:  # blank line: dispatch
            if self._data:
                data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                out.append(SSEEvent(data, self._event, self._last_id))
                self._data = []
            self._event = b""
            return
        if line.startswith(b"data:"):  # the hot case
            value = line[5:]
            if value[:1] == b" ":
                value = value[1:]
            self._data.append(value)
            return
        if line[0] == 58:  # b":" comment / keep-alive
            return
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value
        elif name == b"id":
            if b"\x00" not in value:
                self._last_id = value
        # "retry" and unknown fields are ignored, as the standard says.
