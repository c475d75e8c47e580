"""A misbehaving OpenAI-compatible server on raw asyncio sockets (127.0.0.1, a free port), for fault tests.

Each chat request names its fault and its id in the first message: ``"<mode> <rid>"``. Every answer that
carries text carries the rid (``"<rid>|ab"`` for a good stream), so a test can tell whose answer a record
got. :data:`MODES` maps each mode to (the coroutine that answers, the status the client must record, a
fragment its error must hold). The server keeps HTTP/1.1 keep-alive like a real one, writes with
backpressure, and stops an endless stream at a hard limit, so a test ends by itself whatever the client
does.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import orjson

ENDLESS_LIMIT = 96 * 1024 * 1024  # bytes the server writes at most for an endless stream
STALL_LIMIT_S = 20.0  # the server gives up on a stalled request after this long


def chunk(
    text: str | None = None, finish: object = None, usage: object = None, raw_usage: bytes = b""
) -> bytes:
    choices = [] if text is None and finish is None else [
        {"index": 0, "delta": {"content": text or ""}, "finish_reason": finish}]
    obj: dict = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": choices}
    if usage is not None:
        obj["usage"] = usage
    data = orjson.dumps(obj)
    if raw_usage:  # a usage block orjson cannot write (an int beyond 64 bits)
        data = data[:-1] + b',"usage":' + raw_usage + b"}"
    return b"data: " + data + b"\n\n"


DONE = b"data: [DONE]\n\n"
USAGE = chunk(usage={"prompt_tokens": 3, "completion_tokens": 3})
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p) + b"0\r\n\r\n"


def stream(rid: str, *extra: bytes, usage: bytes = USAGE, finish: object = "stop") -> bytes:
    """A whole good streamed answer ``"<rid>|ab"`` (chunked), with ``extra`` events before [DONE]."""
    return SSE_HEAD + chunked(chunk(f"{rid}|"), chunk("a"), chunk("b", finish), usage, *extra, DONE)


def response(status: str, body: bytes, ctype: bytes = b"application/json", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n%s" % (
        status.encode(), ctype, len(body), extra, body)


@dataclass
class Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    served: int = 0
    drop_next: bool = False


Handler = Callable[[Conn, str], Awaitable[bool]]  # True: keep the connection open for the next request


def _reset(c: Conn) -> None:
    """Close with a TCP RST (SO_LINGER 0), as a crashed server or a proxy does."""
    sock = c.writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.writer.transport.abort()


async def _send(c: Conn, data: bytes, keep: bool = True) -> bool:
    c.writer.write(data)
    await c.writer.drain()
    return keep


async def ok(c: Conn, rid: str) -> bool:
    return await _send(c, stream(rid))


async def usage_str(c: Conn, rid: str) -> bool:
    return await _send(c, stream(rid, usage=chunk(usage={"prompt_tokens": "10", "completion_tokens": 3})))


async def usage_big(c: Conn, rid: str) -> bool:
    return await _send(c, stream(rid, usage=chunk(raw_usage=b'{"prompt_tokens":18446744073709551616}')))


async def cached_str(c: Conn, rid: str) -> bool:
    u = {"prompt_tokens": 3, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": "1"}}
    return await _send(c, stream(rid, usage=chunk(usage=u)))


async def finish_int(c: Conn, rid: str) -> bool:
    return await _send(c, stream(rid, finish=7))


async def trailing(c: Conn, rid: str) -> bool:
    """A good answer, then (same write) a whole second answer for somebody else."""
    return await _send(c, stream(rid) + stream("999999"))


async def duplicate(c: Conn, rid: str) -> bool:
    """The same answer written twice (two writes, back to back)."""
    c.writer.write(stream(rid))
    c.writer.write(stream(rid))
    await c.writer.drain()
    return True


async def interim(c: Conn, rid: str) -> bool:
    return await _send(
        c,
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
        + stream(rid),
    )


async def cl_short(c: Conn, rid: str) -> bool:
    body = orjson.dumps({"choices": [{"message": {"content": f"{rid}|ab"}, "finish_reason": "stop"}]})
    return await _send(c, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                       % (len(body) - 9, body))


async def endless(c: Conn, rid: str) -> bool:
    """Tokens as fast as the socket takes them, until the client goes or ENDLESS_LIMIT is written."""
    c.writer.write(SSE_HEAD)
    piece = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in [chunk(f"{rid}|" + "x" * 40)] * 256)
    sent = 0
    try:
        while sent < ENDLESS_LIMIT:
            c.writer.write(piece)
            sent += len(piece)
            await c.writer.drain()
    except (ConnectionError, OSError):
        pass
    SERVER_STATS.setdefault("endless_bytes", []).append(sent)
    return False


async def stall(c: Conn, rid: str) -> bool:
    """One token, then silence until the client hangs up."""
    c.writer.write(SSE_HEAD + b"%x\r\n%s\r\n" % (len(chunk(f"{rid}|")), chunk(f"{rid}|")))
    await c.writer.drain()
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(STALL_LIMIT_S):
            await c.reader.read()
    return False


async def reset_early(c: Conn, rid: str) -> bool:
    _reset(c)
    return False


async def reset_mid(c: Conn, rid: str) -> bool:
    c.writer.write(SSE_HEAD + b"%x\r\n%s\r\n" % (len(chunk(f"{rid}|")), chunk(f"{rid}|")))
    await c.writer.drain()
    await asyncio.sleep(0.01)
    _reset(c)
    return False


async def garbage(c: Conn, rid: str) -> bool:
    return await _send(c, b"SPDY/9 whatever " + rid.encode() + b"\r\n\x00\xff\r\n\r\n", keep=False)


async def html(c: Conn, rid: str) -> bool:
    page = b"<html><head><title>502 Bad Gateway</title></head><body>%s</body></html>" % rid.encode()
    return await _send(c, response("200 OK", page, b"text/html"))


async def gzipped(c: Conn, rid: str) -> bool:
    body = gzip.compress(stream(rid)[len(SSE_HEAD):])
    return await _send(c, response("200 OK", body, b"text/event-stream", b"Content-Encoding: gzip\r\n"))


async def empty(c: Conn, rid: str) -> bool:
    return await _send(c, response("200 OK", b"", b"text/event-stream"))


async def after_done(c: Conn, rid: str) -> bool:
    return await _send(c, SSE_HEAD + chunked(chunk(f"{rid}|"), chunk("a"), chunk("b", "stop"), USAGE, DONE,
                                             chunk("LATE"), chunk("LATER")))


async def bom(c: Conn, rid: str) -> bool:
    return await _send(
        c, SSE_HEAD + chunked(b"\xef\xbb\xbf" + chunk(f"{rid}|"), chunk("a"), chunk("b", "stop"), USAGE, DONE)
    )


async def escapes(c: Conn, rid: str) -> bool:
    body = b'{"error":{"message":"\\u001b[31m%s overloaded\\u001b[0m\\u0007\\r\\nretry"}}' % rid.encode()
    return await _send(c, response("500 Internal Server Error", body))


async def usage_list_close(c: Conn, rid: str) -> bool:
    body = orjson.dumps({"choices": [{"message": {"content": f"{rid}|ab"}, "finish_reason": "stop"}],
                         "usage": [1, 2]})
    return await _send(
        c,
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + body,
        keep=False,
    )


async def rate_limited(c: Conn, rid: str) -> bool:
    return await _send(
        c, response("429 Too Many Requests", b'{"error":{"message":"slow down %s"}}' % rid.encode())
    )


async def drop_next(c: Conn, rid: str) -> bool:
    """A good answer; then this connection is reset when the next request arrives on it (a server that
    dropped an idle keep-alive socket): the client must resend that request once, on a fresh socket."""
    c.drop_next = True
    return await _send(c, stream(rid))


# mode -> (handler, status the client must record, fragment of its error (None: no error))
MODES: dict[str, tuple[Handler, str, str | None]] = {
    "ok": (ok, "ok", None),
    "usage_str": (usage_str, "malformed", "usage.prompt_tokens is '10'"),
    "usage_big": (usage_big, "malformed", "usage.prompt_tokens is 1.8446744073709552e+19 (float)"),
    "cached_str": (cached_str, "malformed", "cached_tokens is '1'"),
    "finish_int": (finish_int, "malformed", "finish_reason is 7"),
    "trailing": (trailing, "ok", None),
    "duplicate": (duplicate, "ok", None),
    "interim": (interim, "ok", None),
    "cl_short": (cl_short, "malformed", "unparseable JSON body"),
    "endless": (endless, "malformed", "larger than the cap"),
    "stall": (stall, "timeout", "idle timeout"),
    "reset_early": (reset_early, "disconnected", "before the response"),
    "reset_mid": (reset_mid, "disconnected", "mid-response"),
    "garbage": (garbage, "malformed", "invalid HTTP response"),
    "html": (html, "malformed", "502 Bad Gateway"),
    "gzip": (gzipped, "malformed", "Content-Encoding gzip"),
    "empty": (empty, "malformed", "empty body"),
    "after_done": (after_done, "ok", None),
    "bom": (bom, "ok", None),
    "escapes": (escapes, "http_error", "overloaded retry"),
    "usage_list_close": (usage_list_close, "malformed", "usage is [1, 2]"),
    "rate_limited": (rate_limited, "http_error", "slow down"),
    "drop_next": (drop_next, "ok", None),
}
SERVER_STATS: dict[str, list[int]] = {}


@dataclass
class FaultServer:
    url: str
    requests: list[tuple[str, str]] = field(default_factory=list)  # (mode, rid) in arrival order
    connections: int = 0


async def _request(c: Conn) -> bytes | None:
    """One request's body, or None when the client closed the connection."""
    try:
        head = await c.reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    try:
        return await c.reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


@contextlib.asynccontextmanager
async def serve_faults() -> AsyncIterator[FaultServer]:
    """Run the fault server for the length of the block; yields it (``.url`` ends with /v1)."""
    srv = FaultServer("")
    SERVER_STATS.clear()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        srv.connections += 1
        c = Conn(reader, writer)
        try:
            while True:
                body = await _request(c)
                if body is None:
                    return
                if c.drop_next:
                    _reset(c)
                    return
                c.served += 1
                content = orjson.loads(body)["messages"][0]["content"]
                mode, rid = content.split()
                srv.requests.append((mode, rid))
                if not await MODES[mode][0](c, rid):
                    return
        except (ConnectionError, OSError):
            return
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    srv.url = f"http://127.0.0.1:{port}/v1"
    try:
        yield srv
    finally:
        server.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await server.wait_closed()
