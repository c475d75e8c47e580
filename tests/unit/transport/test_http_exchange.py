"""ModelExchange without sockets: raw HTTP bytes in, record out; timeouts on virtual time."""

from __future__ import annotations

import asyncio

import orjson

from servelab.clock import VirtualClock
from servelab.records.schema import RequestRecord
from servelab.transport._exchange import ModelExchange, PlainExchange

MS = 1_000_000


class _NoInbox:
    def flush(self) -> None:
        pass


class _FakePool:
    inbox = _NoInbox()


class FakeConn:
    """Stands in for a pooled connection: records how the exchange released it."""

    pool = _FakePool()

    def __init__(self) -> None:
        self.exchange = None
        self.released: list[bool] = []

    def done(self, keep_alive: bool) -> None:
        self.exchange = None
        self.released.append(keep_alive)


def _chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def _tok(text: str, finish: str | None = None) -> bytes:
    obj = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'


def _drive(
    raw_pieces: list[bytes], *, stream: bool = True, lose: bool = False
) -> tuple[RequestRecord, FakeConn]:
    """Feed pieces at t = 1 ms, 2 ms, ... of virtual time; optionally lose the connection after."""
    clock = VirtualClock()

    async def main() -> tuple[RequestRecord, FakeConn]:
        conn = FakeConn()
        rec = RequestRecord(request_id=1)
        ex = ModelExchange(rec, clock.now, conn, stream, total_s=60.0)  # type: ignore[arg-type]
        conn.exchange = ex
        rec.sent_ns = clock.now()
        ex.arm(30.0)
        for piece in raw_pieces:
            await clock.sleep(0.001)
            ex.data(piece, clock.now())
        if lose:
            await clock.sleep(0.001)
            ex.lost(ConnectionResetError("reset"))
        await asyncio.wait_for(ex.fut, 1000)
        return rec, conn

    return clock.run(main)


def test_sse_split_across_chunk_and_read_boundaries():
    body = _chunked(_tok("a")[:10], _tok("a")[10:] + _tok("b", "stop")[:5], _tok("b", "stop")[5:] + USAGE,
                    b"data: [DONE]\n\n")
    raw = SSE_HEAD + body
    pieces = [raw[i:i + 37] for i in range(0, len(raw), 37)]
    rec, conn = _drive(pieces)
    assert rec.status == "ok", rec.error
    assert rec.output_text == "ab" and rec.finish_reason == "stop"
    assert rec.usage_completion_tokens == 2 and rec.est_completion_tokens == 2
    assert rec.first_byte_ns == 1 * MS and rec.token_times_ns == sorted(rec.token_times_ns)
    assert conn.released == [True]  # keep-alive: the message ended cleanly


def test_close_delimited_stream_ends_at_socket_close():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    rec, conn = _drive([head, _tok("x", "length") + USAGE], lose=True)
    assert rec.status == "ok", rec.error
    assert rec.end_ns == 3 * MS  # the close that ended the body


def test_reset_after_finish_reason_keeps_the_data_but_not_the_socket():
    rec, conn = _drive([SSE_HEAD, _chunked(_tok("x", "length"), USAGE)[:-5]], lose=True)
    assert rec.status == "ok" and rec.usage_completion_tokens == 2
    rec, conn = _drive([SSE_HEAD, _chunked(_tok("x"))[:-5]], lose=True)
    assert rec.status == "disconnected" and rec.est_completion_tokens == 1


def test_error_status_keeps_the_connection_and_the_body():
    body = b'{"error":{"message":"max_tokens too large"}}'
    raw = b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    rec, conn = _drive([raw])
    assert rec.status == "http_error" and rec.http_status == 400 and "max_tokens too large" in rec.error
    assert conn.released == [True]


def test_invalid_http_is_malformed_and_closes():
    rec, conn = _drive([b"HTTP/1.1 2x0 what\r\n\r\n"])
    assert rec.status == "malformed" and conn.released == [False]


def test_streamed_request_answered_with_json_is_read_whole():
    body = orjson.dumps({"choices": [{"message": {"content": "hey"}, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    rec, _ = _drive([raw[:50], raw[50:]])
    assert rec.status == "ok" and rec.output_text == "hey"
    assert rec.first_token_ns == rec.end_ns == 2 * MS


def test_first_token_timeout_on_virtual_time():
    clock = VirtualClock()

    async def main() -> RequestRecord:
        conn = FakeConn()
        rec = RequestRecord(request_id=1, sent_ns=0)
        ex = ModelExchange(rec, clock.now, conn, True, total_s=60.0)  # type: ignore[arg-type]
        conn.exchange = ex
        ex.arm(2.5)
        ex.data(SSE_HEAD, clock.now())  # headers but no token
        await ex.fut
        return rec

    rec = clock.run(main)
    assert rec.status == "timeout" and rec.end_ns == 2_500 * MS and rec.first_byte_ns == 0


def test_total_timeout_after_tokens_and_done_without_message_end():
    clock = VirtualClock()

    async def run(done: bool) -> tuple[RequestRecord, FakeConn]:
        conn = FakeConn()
        rec = RequestRecord(request_id=1, sent_ns=0)
        ex = ModelExchange(rec, clock.now, conn, True, total_s=10.0)  # type: ignore[arg-type]
        conn.exchange = ex
        ex.arm(1.0)
        await clock.sleep(0.5)
        ex.data(SSE_HEAD + b"%x\r\n%s\r\n" % (len(_tok("a")), _tok("a")), clock.now())
        if done:
            ex.data(b"e\r\ndata: [DONE]\n\n\r\n", clock.now())  # [DONE] but the terminating chunk never comes
        await ex.fut
        return rec, conn

    stalled, conn = clock.run(lambda: run(False))
    assert stalled.status == "timeout" and "total" in stalled.error and conn.released == [False]
    finished, conn = clock.run(lambda: run(True))
    assert finished.status == "ok" and finished.end_ns - finished.first_token_ns == 0
    assert conn.released == [False]


def test_plain_exchange_reads_headers_and_body():
    async def main() -> PlainExchange:
        conn = FakeConn()
        ex = PlainExchange(conn)  # type: ignore[arg-type]
        conn.exchange = ex
        ex.data(b"HTTP/1.1 200 OK\r\nServer: llama.cpp\r\nContent-Length: 2\r\n\r\n{}")
        await ex.fut
        return ex

    ex = VirtualClock().run(main)
    assert ex.status == 200 and ex.headers["server"] == "llama.cpp" and ex.body == b"{}"


def test_inbox_stamps_on_arrival_and_parses_later_in_order():
    from servelab.transport._pool import Inbox

    clock = VirtualClock()
    seen: list[tuple[bytes, int]] = []

    class Sink:
        def data(self, data: bytes, t: int) -> None:
            seen.append((data, t))

    async def main() -> None:
        inbox = Inbox(clock.now)
        inbox.put(Sink(), b"a")
        clock._advance(5)  # time passes between two reads of the same loop iteration
        inbox.put(Sink(), b"b")
        assert seen == []  # nothing parsed yet
        await asyncio.sleep(0)

    clock.run(main)
    assert seen == [(b"a", 0), (b"b", 5)]


def test_a_token_queued_before_the_deadline_is_not_a_timeout():
    from servelab.transport._pool import Inbox

    clock = VirtualClock()

    async def main() -> RequestRecord:
        inbox = Inbox(clock.now)
        conn = FakeConn()
        conn.pool = type("P", (), {"inbox": inbox})()  # type: ignore[misc]
        rec = RequestRecord(request_id=1, sent_ns=0)
        ex = ModelExchange(rec, clock.now, conn, True, total_s=60.0)  # type: ignore[arg-type]
        conn.exchange = ex
        inbox.put(ex, SSE_HEAD + b"%x\r\n%s\r\n" % (len(_tok("a")), _tok("a")))  # arrived, not parsed
        ex._on_first_token_deadline(1.0)  # the deadline fires in the same iteration
        assert rec.status != "timeout" and rec.first_token_ns == 0
        ex.abort("cancelled", "test over")
        return rec

    clock.run(main)


def test_learned_layout_gives_the_same_text_as_whole_parsing():
    texts = ["He", 'said "hi"', "\\", "\u00e9\u2713", "\U0001f600", "a\nb", ' "x":"y', "end"]
    events = [_tok(x) for x in texts[:4]]
    events.append(
        b'data: {"choices":[{"index":0,"delta":{"content":"mid"},"extra":1,"finish_reason":null}]}\n\n'
    )
    events += [_tok(x) for x in texts[4:-1]]
    events.append(_tok(texts[-1], "stop"))
    rec, _ = _drive([SSE_HEAD, _chunked(*events, USAGE, b"data: [DONE]\n\n")])
    assert rec.status == "ok", rec.error
    assert rec.output_text == "".join(texts[:4]) + "mid" + "".join(texts[4:])
    assert rec.est_completion_tokens == len(texts) + 1 and rec.finish_reason == "stop"


def test_whole_json_answer_to_a_streamed_request_waits_for_the_total_timeout_only():
    clock = VirtualClock()
    body = orjson.dumps({"choices": [{"message": {"content": "slow"}, "finish_reason": "stop"}]})
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)

    async def main() -> RequestRecord:
        conn = FakeConn()
        rec = RequestRecord(request_id=1, sent_ns=0)
        ex = ModelExchange(rec, clock.now, conn, True, total_s=10.0)  # type: ignore[arg-type]
        conn.exchange = ex
        ex.arm(1.0)
        await clock.sleep(0.5)
        ex.data(head, clock.now())
        await clock.sleep(2.5)  # past the first-token timeout: not a stream, so it does not apply
        ex.data(body, clock.now())
        await ex.fut
        return rec

    rec = clock.run(main)
    assert rec.status == "ok" and rec.end_ns == 3_000 * MS and rec.output_text == "slow"


class _SendConn(FakeConn):
    """A pooled connection that takes the request as written and answers it at once."""

    reused = 0

    def __init__(self, answer: bytes) -> None:
        super().__init__()
        self.answer = answer
        self.writes: list[tuple[bytes, ...]] = []

    def writelines(self, parts: tuple[bytes, ...]) -> None:
        self.writes.append(tuple(parts))
        asyncio.get_running_loop().call_soon(self.exchange.data, self.answer, 1)

    def close(self) -> None:
        pass


def test_send_writes_head_and_body_as_separate_buffers():
    """A long prompt's body is handed to the socket as built: not copied behind the request head."""
    from servelab.clock import WallClock
    from servelab.transport.base import ModelRequest
    from servelab.transport.http import HttpOptions, HttpTransport

    conn = _SendConn(SSE_HEAD + _chunked(_tok("a"), _tok("b", "stop"), USAGE, b"data: [DONE]\n\n"))

    class Pool:
        async def acquire(self) -> _SendConn:
            return conn

        async def aclose(self) -> None:
            pass

    async def main() -> RequestRecord:
        t = HttpTransport(HttpOptions(url="http://127.0.0.1:9/v1", model="m"), WallClock(), concurrency=1)
        t._pool = Pool()  # type: ignore[assignment]
        return await t.send(ModelRequest(request_id=1, messages=[{"role": "user", "content": "x " * 50_000}],
                                         max_tokens=2))

    rec = asyncio.run(main())
    assert rec.status == "ok" and rec.completion_tokens == 2
    [(head, body)] = conn.writes
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") and head.endswith(b"\r\n\r\n")
    assert b"Content-Length: %d\r\n" % len(body) in head
    assert orjson.loads(body)["messages"] == [{"role": "user", "content": "x " * 50_000}]


def test_an_answered_request_leaves_no_cycle_for_the_collector():
    """The exchange and its parser held each other: every answered request (its token times, its text)
    waited for a cyclic collection. With the collector off, none may stay behind."""
    import gc

    from servelab.clock import WallClock
    from servelab.transport.base import ModelRequest
    from servelab.transport.http import HttpOptions, HttpTransport

    answer = SSE_HEAD + _chunked(_tok("a"), _tok("b", "stop"), USAGE, b"data: [DONE]\n\n")

    class Pool:
        async def acquire(self) -> _SendConn:
            return _SendConn(answer)

        async def aclose(self) -> None:
            pass

    async def main() -> list[RequestRecord]:
        t = HttpTransport(HttpOptions(url="http://127.0.0.1:9/v1", model="m"), WallClock(), concurrency=1)
        t._pool = Pool()  # type: ignore[assignment]
        return [await t.send(ModelRequest(request_id=i, messages=[{"role": "user", "content": "x"}],
                                          max_tokens=2)) for i in range(5)]

    gc.collect()
    gc.disable()
    try:
        recs = asyncio.run(main())
        left = sum(isinstance(o, ModelExchange) for o in gc.get_objects())
    finally:
        gc.enable()
    assert [r.status for r in recs] == ["ok"] * 5
    assert left == 0
