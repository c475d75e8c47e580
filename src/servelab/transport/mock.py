"""The in-memory transport twin: scripted HTTP answers, measured by the HTTP path's own exchange.

:class:`MockTransport` takes a ``handler`` (a :class:`~servelab.transport.base.ModelRequest` in, a
:class:`Reply` out, sync or async) and a clock. Each send plays the reply's bytes on that clock into the
same :class:`~servelab.transport._exchange.ModelExchange` the HTTP transport feeds from its sockets: the
same HTTP parsing, SSE parsing, timeouts, statuses and token times, with no socket. On a
``VirtualClock`` a test scripts exact instants (a token at 50 ms, gaps of 10 ms) and gets exact records.

Replies are built with :func:`chat_stream`, :func:`chat_json`, :func:`sse`, :func:`error`,
:func:`reset` and :func:`hang`; :func:`play` feeds already-timed bytes into an exchange synchronously
(the in-process simulator uses it to turn an engine failure into the record its HTTP front would give).

Usage::

    t = MockTransport(lambda req: chat_stream(["a", "b"], ttft_s=0.05, gap_s=0.01), VirtualClock())
    rec = await t.send(ModelRequest(request_id=1, messages=[{"role": "user", "content": "hi"}]))
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from servelab.clock import Clock
from servelab.records.schema import CANCELLED, RequestRecord
from servelab.transport._exchange import ModelExchange
from servelab.transport._pool import Inbox
from servelab.transport.base import ModelRequest, new_record

EOF, RESET, HANG = "eof", "reset", "hang"
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests",
            500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted HTTP response.

    ``head_s``: seconds from the send to the status line and headers. ``parts``: ``(delay_s, body bytes)``,
    each delay counted from the previous write. ``end``: ``"eof"`` (the message ends in-band),
    ``"reset"`` (the connection closes after the parts, unframed) or ``"hang"`` (nothing more is sent;
    the client's timeouts decide). ``framed``: chunked transfer encoding (else the body runs until the
    socket closes, as with ``Connection: close``).
    """

    status: int = 200
    content_type: str = "text/event-stream"
    head_s: float = 0.0
    parts: tuple[tuple[float, bytes], ...] = ()
    end: str = EOF
    framed: bool = True
    headers: tuple[tuple[str, str], ...] = ()

    def head(self) -> bytes:
        lines = [f"HTTP/1.1 {self.status} {_REASONS.get(self.status, 'Status')}",
                 f"Content-Type: {self.content_type}"]
        if self.framed:
            lines.append("Transfer-Encoding: chunked")
        else:
            lines.append("Connection: close")
        lines += [f"{k}: {v}" for k, v in self.headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def wire(self, data: bytes) -> bytes:
        """``data`` as it travels in the body (one HTTP chunk when framed)."""
        if not self.framed or not data:
            return data
        return b"%x\r\n%b\r\n" % (len(data), data)

    def tail(self) -> bytes:
        return b"0\r\n\r\n" if self.framed and self.end == EOF else b""


Handler = Callable[[ModelRequest], "Reply | Awaitable[Reply]"]


# -- reply builders -----------------------------------------------------------------------------------------

def _event(obj: dict[str, Any] | bytes) -> bytes:
    data = obj if isinstance(obj, bytes) else orjson.dumps(obj)
    return b"data: " + data + b"\n\n"


def chunk(content: str | None = None, *, finish: str | None = None, reasoning: str | None = None,
          usage: dict[str, Any] | None = None, role: str | None = None) -> dict[str, Any]:
    """One OpenAI ``chat.completion.chunk`` (no choices when it carries only ``usage``)."""
    delta: dict[str, Any] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    only_usage = usage is not None and not delta and finish is None
    obj: dict[str, Any] = {
        "id": "mock-1",
        "object": "chat.completion.chunk",
        "model": "mock",
        "choices": [] if only_usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        obj["usage"] = usage
    return obj


def usage_block(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    u: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                         "total_tokens": prompt + completion}
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    return u


def sse(events: Iterable[tuple[float, dict[str, Any] | bytes]], *, head_s: float = 0.0, end: str = EOF,
        framed: bool = True) -> Reply:
    """An SSE stream: ``(delay_s, event)`` pairs; an event is a JSON object or raw ``data`` bytes
    (``b"[DONE]"``)."""
    return Reply(head_s=head_s, parts=tuple((d, _event(e)) for d, e in events), end=end, framed=framed)


def chat_stream(tokens: Sequence[str], *, ttft_s: float = 0.0, gap_s: float | Sequence[float] = 0.0,
                finish: str | None = "stop", usage: dict[str, Any] | None = None, usage_delay_s: float = 0.0,
                reasoning: int = 0, done: bool = True, role_chunk: bool = True) -> Reply:
    """A streamed chat answer: a role chunk at once, token ``i`` at ``ttft_s`` + the gaps before it, the
    finish reason on the last token, then ``usage`` (after ``usage_delay_s``) and ``[DONE]``. The first
    ``reasoning`` tokens are sent as ``reasoning_content``."""
    gaps = [gap_s] * len(tokens) if isinstance(gap_s, int | float) else list(gap_s)
    events: list[tuple[float, dict[str, Any] | bytes]] = []
    if role_chunk:
        events.append((0.0, chunk("", role="assistant")))
    for i, tok in enumerate(tokens):
        fin = finish if i == len(tokens) - 1 else None
        c = chunk(reasoning=tok, finish=fin) if i < reasoning else chunk(tok, finish=fin)
        events.append((ttft_s if i == 0 else gaps[i], c))
    if usage is not None:
        events.append((usage_delay_s, chunk(usage=usage)))
    if done:
        events.append((0.0, b"[DONE]"))
    return sse(events)


def chat_json(content: str | None, *, delay_s: float = 0.0, finish: str | None = "stop",
              usage: dict[str, Any] | None = None, tool_calls: list[dict[str, Any]] | None = None) -> Reply:
    """A whole (non-streamed) chat completion, sent ``delay_s`` after the request."""
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        msg["tool_calls"] = tool_calls
    obj: dict[str, Any] = {"id": "mock-1", "object": "chat.completion", "model": "mock",
                           "choices": [{"index": 0, "message": msg, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return Reply(content_type="application/json", head_s=delay_s, parts=((0.0, orjson.dumps(obj)),))


def error(status: int, message: str, *, delay_s: float = 0.0, kind: str = "InternalServerError") -> Reply:
    """An HTTP error with an OpenAI error body."""
    body = orjson.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}})
    return Reply(status=status, content_type="application/json", head_s=delay_s, parts=((0.0, body),))


def reset(after: Reply | None = None, *, delay_s: float = 0.0) -> Reply:
    """The connection closes: before any byte (``after`` None, ``delay_s`` after the send), or after
    ``after``'s parts instead of its proper end."""
    if after is None:
        return Reply(head_s=-1.0, parts=((delay_s, b""),), end=RESET)
    return Reply(status=after.status, content_type=after.content_type, head_s=after.head_s,
                 parts=after.parts, end=RESET, framed=after.framed, headers=after.headers)


def hang(after: Reply | None = None) -> Reply:
    """Nothing (more) is ever sent: the exchange's first-token or total timeout ends it."""
    if after is None:
        return Reply(head_s=-1.0, end=HANG)
    return Reply(status=after.status, content_type=after.content_type, head_s=after.head_s,
                 parts=after.parts, end=HANG, framed=after.framed, headers=after.headers)


# -- the connection the exchange talks to ------------------------------------------------------------------

class _Pool:
    __slots__ = ("inbox",)

    def __init__(self, now: Callable[[], int]) -> None:
        self.inbox = Inbox(now)


class MockConn:
    """What :class:`ModelExchange` needs of a connection: an inbox that stamps reads, and ``done``."""

    def __init__(self, now: Callable[[], int]) -> None:
        self.pool = _Pool(now)
        self.exchange: ModelExchange | None = None
        self.closed = False
        self.kept_alive: bool | None = None  # what the exchange decided at its end

    def done(self, keep_alive: bool) -> None:
        self.exchange = None
        self.kept_alive = keep_alive
        self.closed = self.closed or not keep_alive

    def close(self) -> None:
        self.closed = True

    def receive(self, data: bytes) -> None:
        """Bytes arrive now (stamped by the inbox, parsed at the end of this loop iteration)."""
        if self.exchange is not None and data:
            self.pool.inbox.put(self.exchange, data)

    def lost(self, exc: Exception | None) -> None:
        """The connection closes: what arrived before is parsed first, as on a socket."""
        self.pool.inbox.flush()
        self.closed = True
        ex, self.exchange = self.exchange, None
        if ex is not None:
            ex.lost(exc)


def play(rec: RequestRecord, reply: Reply, at_ns: Sequence[int], *, stream: bool) -> RequestRecord:
    """Feed ``reply`` into a fresh exchange for ``rec`` with explicit arrival times and return the record.

    ``at_ns``: the arrival time of the head, then of each part (one more than ``len(reply.parts)``); the
    end (eof or reset) arrives with the last part, and the record ends then. Synchronous (no timers are
    armed): for a reply whose timing is already known, such as an engine failure in the in-process simulator.
    Needs a running loop.
    """
    def now() -> int:
        return at_ns[-1]

    conn = MockConn(now)
    ex = ModelExchange(rec, now, conn, stream, float("inf"))
    conn.exchange = ex
    if reply.head_s >= 0:
        ex.data(reply.head(), at_ns[0])
    for (_, data), t in zip(reply.parts, at_ns[1:], strict=True):
        if conn.exchange is ex and data:
            ex.data(reply.wire(data), t)
    if conn.exchange is ex and reply.end == EOF:
        ex.data(reply.tail(), at_ns[-1])
    if conn.exchange is ex:  # the close is seen with the last bytes
        conn.exchange = None
        ex.lost(None if reply.end == EOF else ConnectionResetError("connection reset by peer"))
    return rec


# -- the transport -----------------------------------------------------------------------------------------

class MockTransport:
    """:class:`~servelab.transport.base.Transport` answered by ``handler`` on ``clock``, no sockets.

    ``first_token_s`` / ``total_s`` / ``idle_s`` are the client timeouts (as in the HTTP transport's
    options; ``idle_s`` None keeps the exchange's default).
    ``tokens`` counts tokens for :meth:`count_tokens` (None: the target cannot say). ``calls`` keeps
    ``(sent_ns, request)`` for every send; ``max_in_flight`` the most sends open at once.
    """

    def __init__(
        self,
        handler: Handler,
        clock: Clock,
        *,
        first_token_s: float = 600.0,
        total_s: float = 3600.0,
        idle_s: float | None = None,
        tokens: Callable[[str], int | None] | None = None,
        facts: dict[str, Any] | None = None,
    ) -> None:
        self.handler = handler
        self.clock = clock
        self.first_token_s = first_token_s
        self.total_s = total_s
        self._limits: dict[str, Any] = {} if idle_s is None else {"idle_s": idle_s}
        self._tokens = tokens
        self._facts = facts if facts is not None else {"engine": "mock", "version": None, "models": ["mock"]}
        self.calls: list[tuple[int, ModelRequest]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._players: set[asyncio.Task[None]] = set()

    @property
    def requests(self) -> list[ModelRequest]:
        return [r for _, r in self.calls]

    async def send(self, req: ModelRequest) -> RequestRecord:
        rec = new_record(req)
        now = self.clock.now
        conn = MockConn(now)
        ex = ModelExchange(rec, now, conn, req.stream, self.total_s, **self._limits)
        conn.exchange = ex
        rec.sent_ns = now()
        self.calls.append((rec.sent_ns, req))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        ex.arm(self.first_token_s)
        player = asyncio.get_running_loop().create_task(self._play(req, conn))
        self._players.add(player)
        player.add_done_callback(self._players.discard)
        try:
            await ex.fut
        except asyncio.CancelledError:
            ex.abort(CANCELLED, "cancelled by the caller")
            raise
        finally:
            self.in_flight -= 1
            player.cancel()
        return rec

    async def _play(self, req: ModelRequest, conn: MockConn) -> None:
        out = self.handler(req)
        reply: Reply = await out if inspect.isawaitable(out) else out  # type: ignore[assignment]
        sleep = self.clock.sleep
        if reply.head_s >= 0:
            if reply.head_s > 0:
                await sleep(reply.head_s)
            conn.receive(reply.head())
        for delay, data in reply.parts:
            if delay > 0:
                await sleep(delay)
            conn.receive(reply.wire(data))
        if reply.end == HANG:
            return
        if reply.end == EOF:
            conn.receive(reply.tail())
            if reply.framed:
                return
        await asyncio.sleep(0)  # the bytes above are parsed before the close is judged (as on a socket)
        conn.lost(None if reply.end == EOF else ConnectionResetError("connection reset by peer"))

    async def count_tokens(self, text: str) -> int | None:
        return self._tokens(text) if self._tokens is not None else None

    async def describe(self) -> dict[str, Any]:
        return dict(self._facts)

    async def aclose(self) -> None:
        for p in list(self._players):
            p.cancel()


def words(n: int, word: str = "w") -> list[str]:
    """``n`` token strings (``"w0"``, ``" w1"``, ``" w2"``...: joined, ``n`` words) for scripted streams."""
    return [f"{word}{i}" if i == 0 else f" {word}{i}" for i in range(n)]


__all__ = [
    "MockTransport",
    "Reply",
    "chat_json",
    "chat_stream",
    "chunk",
    "error",
    "hang",
    "play",
    "reset",
    "sse",
    "usage_block",
    "words",
]
