"""No byte stream from a server can raise out of the transport, and each request gets exactly one record.

Two levels, both through the real code: (1) ``ModelExchange`` fed a generated response (a mix of valid
HTTP/SSE structure and arbitrary bytes, split anywhere, then maybe the socket lost and the deadlines
passed, on virtual time); (2) ``HttpTransport.send`` against a loopback socket that writes generated
bytes and closes.
"""

from __future__ import annotations

import asyncio
import contextlib

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from servelab.clock import VirtualClock, WallClock
from servelab.config.models import TargetConfig
from servelab.records.schema import STATUSES, RequestRecord
from servelab.transport._exchange import ModelExchange
from servelab.transport.base import ModelRequest
from servelab.transport.http import HttpTransport


class _NoInbox:
    def flush(self) -> None:
        pass


class _Pool:
    inbox = _NoInbox()


class _Conn:
    pool = _Pool()

    def __init__(self) -> None:
        self.exchange = None
        self.released: list[bool] = []
        self.closed = 0

    def done(self, keep_alive: bool) -> None:
        self.exchange = None
        self.released.append(keep_alive)

    def close(self) -> None:
        self.closed += 1


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def _event(draw) -> bytes:
    kind = draw(
        st.sampled_from(["token", "token", "usage", "finish", "done", "json", "raw", "comment", "error"])
    )
    if kind == "token":
        obj: object = {"choices": [{"index": 0, "delta": {"content": draw(st.text(max_size=5))},
                                    "finish_reason": None}]}
    elif kind == "usage":
        obj = {"choices": [], "usage": draw(st.dictionaries(
            st.sampled_from(["prompt_tokens", "completion_tokens", "prompt_tokens_details"]), _json_values)
            | _json_values)}
    elif kind == "finish":
        obj = {"choices": [{"index": 0, "delta": {}, "finish_reason": draw(_json_values)}]}
    elif kind == "json":
        obj = draw(_json_values)
    elif kind == "error":
        obj = {"error": {"message": draw(st.text(max_size=10))}}
    elif kind == "done":
        return b"data: [DONE]\n\n"
    elif kind == "comment":
        return b": ping\n\n"
    else:
        return draw(st.binary(max_size=40))
    try:
        data = orjson.dumps(obj)
    except TypeError:  # an int beyond 64 bits: write it by hand
        data = str(obj).encode()
    return b"data: " + data + b"\n\n"


@st.composite
def _response(draw) -> bytes:
    """One HTTP response: sometimes well formed, sometimes not at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=300))
    head = b""
    if draw(st.booleans()):
        head += draw(
            st.sampled_from(
                [b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 Early Hints\r\nLink: <a>\r\n\r\n"]
            )
        )
    status = draw(
        st.sampled_from([b"200 OK", b"200 OK", b"200 OK", b"404 Not Found", b"500 Oops", b"101 Up"])
    )
    ctype = draw(st.sampled_from([b"text/event-stream", b"application/json", b"text/html", b""]))
    body = b"".join(draw(st.lists(_event(), max_size=8)))
    if draw(st.booleans()):
        body = b"\xef\xbb\xbf" + body
    framing = draw(st.sampled_from(["chunked", "length", "short", "long", "close"]))
    headers = b"Content-Type: %s\r\n" % ctype if ctype else b""
    if draw(st.booleans()):
        headers += b"Content-Encoding: gzip\r\n"
    if framing == "chunked":
        cut = draw(st.integers(0, len(body)))
        pieces = [p for p in (body[:cut], body[cut:]) if p]
        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
        if draw(st.booleans()):
            payload += b"0\r\n\r\n"
        headers += b"Transfer-Encoding: chunked\r\n"
    elif framing in ("length", "short", "long"):
        n = len(body) + {"length": 0, "short": -min(len(body), 3), "long": 5}[framing]
        headers += b"Content-Length: %d\r\n" % n
        payload = body
    else:
        headers += b"Connection: close\r\n"
        payload = body
    out = head + b"HTTP/1.1 " + status + b"\r\n" + headers + b"\r\n" + payload
    if draw(st.integers(0, 4)) == 0:
        out += draw(st.binary(max_size=40))  # stray bytes after the message
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=_response(), cuts=st.lists(st.integers(0, 400), max_size=6), lose=st.booleans(),
       stream=st.booleans(), cap=st.sampled_from([10**9, 64]))
def test_any_response_bytes_end_in_exactly_one_record(raw, cuts, lose, stream, cap):
    clock = VirtualClock()
    bounds = sorted({min(c, len(raw)) for c in cuts} | {0, len(raw)})
    pieces = [raw[a:b] for a, b in zip(bounds, bounds[1:], strict=False)] + [b"late bytes"]
    ended: list[int] = []

    async def main() -> tuple[RequestRecord, _Conn]:
        conn = _Conn()
        rec = RequestRecord(request_id=7, sent_ns=0)
        ex = ModelExchange(rec, clock.now, conn, stream, 30.0, 5.0, cap)  # type: ignore[arg-type]
        ex.fut.add_done_callback(lambda f: ended.append(1))
        conn.exchange = ex
        ex.arm(10.0)
        for piece in pieces:
            await clock.sleep(0.001)
            ex.data(piece, clock.now())  # must never raise
        if lose:
            conn.exchange = None
            ex.lost(ConnectionResetError("reset"))
        await ex.fut  # resolved by the data, the close, or a deadline (virtual time)
        return rec, conn

    rec, conn = clock.run(main)
    assert ended == [1]
    assert rec.status in STATUSES and rec.status != "cancelled"
    assert (rec.error is None) == (rec.status == "ok")
    assert rec.error is None or not any(c in rec.error for c in "\x1b\x07\r\n\x00")
    for v in (rec.usage_prompt_tokens, rec.usage_completion_tokens, rec.usage_cached_tokens):
        assert v is None or (v.__class__ is int and 0 <= v < 2**63)
    assert rec.finish_reason is None or rec.finish_reason.__class__ is str
    assert rec.http_status is None or 200 <= rec.http_status < 600 or rec.http_status == 101
    assert rec.est_completion_tokens == len(rec.token_times_ns)
    assert len(conn.released) <= 1
    if conn.released == [True]:  # handed back for reuse: the bytes that came later closed it again
        assert conn.closed >= 1


async def _serve_bytes(raw: bytes) -> tuple[RequestRecord, int, list[dict]]:
    leaked: list[dict] = []  # exceptions that escaped into the event loop (a callback raised)
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: leaked.append(ctx))

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(raw)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    target = TargetConfig.model_validate({"url": f"http://127.0.0.1:{port}/v1", "model": "m",
                                          "timeouts": {"first_token_s": 2, "total_s": 3, "idle_s": 1}})
    t = HttpTransport(target, WallClock(), 2)
    try:
        async with asyncio.timeout(10):
            rec = await t.send(ModelRequest(request_id=3, messages=[{"role": "user", "content": "x"}]))
    finally:
        await t.aclose()
        server.close()
    return rec, t.connections_opened, leaked


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=_response())
@example(raw=b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
         b'{"choices":[{"message":{"content":"x"}}],"usage":[1]}')
def test_any_bytes_over_a_real_socket_give_one_record(raw):
    rec, opened, leaked = WallClock().run(lambda: _serve_bytes(raw))
    assert leaked == []
    assert rec.request_id == 3 and rec.status in STATUSES and rec.status != "cancelled"
    assert opened == 1
