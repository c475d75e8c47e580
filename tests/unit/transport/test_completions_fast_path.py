"""Streamed /v1/completions chunks (``choices[0].text``) take the same fast path as chat content."""

from __future__ import annotations

import orjson

from servelab.clock import VirtualClock
from servelab.records.schema import RequestRecord
from servelab.transport import _exchange
from servelab.transport._exchange import ModelExchange
from servelab.transport._shape import learn_shape

SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class _Inbox:
    def flush(self) -> None:
        pass


class _Conn:
    pool = type("P", (), {"inbox": _Inbox()})()

    def __init__(self) -> None:
        self.exchange = None

    def done(self, keep_alive: bool) -> None:
        self.exchange = None

    def close(self) -> None:
        pass


def _text(t: str, finish: str | None = None) -> bytes:
    obj = {"id": "cmpl-1", "object": "text_completion", "model": "m",
           "choices": [{"index": 0, "text": t, "logprobs": None, "finish_reason": finish}]}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _run(events: list[bytes]) -> tuple[RequestRecord, int]:
    """Feed one event per read; count whole-chunk JSON decodes (orjson.loads of a whole event)."""
    whole = 0
    real = _exchange._loads

    def counting(data: bytes):  # type: ignore[no-untyped-def]
        nonlocal whole
        if data[:1] == b"{":
            whole += 1
        return real(data)

    clock = VirtualClock()

    async def main() -> RequestRecord:
        conn = _Conn()
        rec = RequestRecord(request_id=1, sent_ns=0)
        ex = ModelExchange(rec, clock.now, conn, True, 60.0)  # type: ignore[arg-type]
        conn.exchange = ex
        ex.arm(30.0)
        ex.data(SSE_HEAD, clock.now())
        for e in events:
            await clock.sleep(0.001)
            ex.data(b"%x\r\n%s\r\n" % (len(e), e), clock.now())
        ex.data(b"0\r\n\r\n", clock.now())
        await ex.fut
        return rec

    _exchange._loads = counting
    try:
        rec = clock.run(main)
    finally:
        _exchange._loads = real
    return rec, whole


def test_completions_text_chunks_are_decoded_once_each():
    texts = ["Once", ' upon "a"', " time\\", " \u00e9\u2713", "\U0001f600", " end"]
    events = [_text(t) for t in texts[:-1]] + [_text(texts[-1], "length"), b"data: [DONE]\n\n"]
    rec, whole = _run(events)
    assert rec.status == "ok" and rec.output_text == "".join(texts) and rec.est_completion_tokens == 6
    assert rec.finish_reason == "length"
    # the first chunk is parsed whole and its layout learned; the 4 plain chunks after it decode only
    # their text; the last one (a finish_reason) does not match the layout and is parsed whole again
    assert whole == 2, whole


def test_learn_shape_for_text_does_not_take_a_content_key():
    data = _text("hi")[6:-2]
    pre, suf = learn_shape(data, "hi", text=True)  # type: ignore[misc]
    assert pre.endswith(b'"text":"') and suf.startswith(b'","logprobs"')
    assert learn_shape(data, "hi") is None  # no "content" key in a completions chunk
