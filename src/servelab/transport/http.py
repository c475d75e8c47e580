"""The HTTP transport: any OpenAI-compatible endpoint, streamed (SSE) or not.

Built for measurement: an asyncio Protocol per keep-alive connection on the running loop (uvloop in
production), httptools for the response, bytes-level SSE splitting and one ``orjson.loads`` per event.
Every time is an integer ``clock.now()``; every fault is a record with a status, never an exception.

Usage::

    t = HttpTransport(target, WallClock(), concurrency=64)
    rec = await t.send(ModelRequest(request_id=1, messages=[{"role": "user", "content": "hi"}]))
    await t.aclose()
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servelab.clock import Clock, WallClock
from servelab.errors import TargetError
from servelab.records.schema import CANCELLED, DISCONNECTED, TIMEOUT, RequestRecord
from servelab.transport import _wire
from servelab.transport._exchange import IDLE_S, MAX_RESPONSE_BYTES, ModelExchange
from servelab.transport._pool import Pool
from servelab.transport.base import ModelRequest, new_record
from servelab.transport.probe import HttpProbe, ProbeOptions


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """What the HTTP transport needs, and nothing of the user's config models (DESIGN: transports take
    their own options object). :meth:`of` reads them from any object shaped like ``TargetConfig``."""

    url: str
    model: str | None = None
    stream: bool = True
    headers: Mapping[str, str] = field(default_factory=dict)
    api_key_env: str | None = None
    verify_tls: bool = True
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    connect_s: float = 10.0
    first_token_s: float = 120.0
    total_s: float = 600.0
    idle_s: float = IDLE_S
    max_response_bytes: int = MAX_RESPONSE_BYTES

    @classmethod
    def of(cls, target: Any) -> HttpOptions:
        """Options from a ``TargetConfig`` (or anything with its attribute names); an ``HttpOptions`` as
        is."""
        if isinstance(target, HttpOptions):
            return target
        if getattr(target, "is_sim", False):
            raise TargetError(f"HttpTransport needs an http(s) URL, got the simulator target '{target.url}'",
                              hint="use the simulator transport for sim targets")
        t = target.timeouts
        return cls(url=target.url, model=target.model, stream=target.stream, headers=dict(target.headers),
                   api_key_env=target.api_key_env, verify_tls=target.verify_tls,
                   extra_body=dict(target.extra_body), connect_s=t.connect_s, first_token_s=t.first_token_s,
                   total_s=t.total_s, idle_s=getattr(t, "idle_s", IDLE_S),
                   max_response_bytes=getattr(target, "max_response_bytes", MAX_RESPONSE_BYTES))


class HttpTransport:
    """:class:`~servelab.transport.base.Transport` over HTTP/1.1 keep-alive connections.

    ``concurrency`` sizes the pool of idle connections kept open; busy connections are never capped.
    The bearer key is read once here from ``target.api_key_env`` and lives only in the request header
    bytes: it is never put in a record. Facts and token counts are the probe's
    (:class:`~servelab.transport.probe.HttpProbe`), on its own connection.
    """

    def __init__(self, target: HttpOptions | Any, clock: Clock, concurrency: int) -> None:
        self.target = target  # as given (an HttpOptions, or the user's TargetConfig)
        self.options = target = HttpOptions.of(target)
        self.clock = clock
        # WallClock.now is time.monotonic_ns: call the C function directly on the hot path.
        self._now = time.monotonic_ns if type(clock) is WallClock else clock.now
        self.endpoint = _wire.parse_endpoint(target.url)
        bearer = _wire.bearer_from_env(target.api_key_env)
        self._stream_headers = _wire.header_block(self.endpoint, target.headers, bearer, "text/event-stream")
        self._json_headers = _wire.header_block(self.endpoint, target.headers, bearer, "application/json")
        self._pool = Pool(self.endpoint, _wire.ssl_context(self.endpoint, target.verify_tls),
                          target.connect_s, concurrency, self._now)
        self._model = target.model
        self._resolve_lock = asyncio.Lock()
        self._paths = {"chat": self.endpoint.path("/chat/completions"),
                       "completions": self.endpoint.path("/completions")}
        self._extra = dict(target.extra_body)
        self._idle_s = target.idle_s
        self._max_bytes = target.max_response_bytes

    # -- model requests -------------------------------------------------------------------------------

    async def send(self, req: ModelRequest) -> RequestRecord:
        """Send ``req`` and return its timed record. Never raises for server faults; re-raises
        ``CancelledError`` after closing the connection (the caller owns cancellation)."""
        rec = new_record(req)
        model = self._model if self._model is not None else await self.resolve_model()
        stream = req.stream and self.options.stream
        body = _wire.build_body(req, model, stream, self._extra)
        path = self._paths.get(req.api)
        if path is None:
            raise TargetError(f"ModelRequest.api must be 'chat' or 'completions', got {req.api!r}")
        head = _wire.request_head("POST", path, self._stream_headers if stream else self._json_headers,
                                  len(body))
        payload = (head, body)  # written as two buffers: the body is never copied
        opts = self.options
        now = self._now
        for attempt in (0, 1):
            try:
                conn = await self._pool.acquire() if attempt == 0 else await self._pool.connect()
            except TimeoutError:
                return _failed(rec, now(), TIMEOUT, f"connect timed out after {opts.connect_s:g} s")
            except OSError as err:
                return _failed(rec, now(), DISCONNECTED, f"connect to {opts.url} failed: {err}")
            reused = conn.reused > 0
            ex = ModelExchange(rec, now, conn, stream, opts.total_s, self._idle_s, self._max_bytes)
            conn.exchange = ex
            rec.sent_ns = now()
            conn.writelines(payload)
            ex.arm(opts.first_token_s)
            try:
                await ex.fut
            except asyncio.CancelledError:
                ex.abort(CANCELLED, "cancelled by the caller")
                raise
            # A keep-alive socket the server had already closed: nothing was answered; resend once on a
            # fresh connection, in the same record (sent = ok + failed + cancelled still holds), and say so.
            if rec.status == DISCONNECTED and reused and rec.first_byte_ns is None and attempt == 0:
                _reset(rec)
                rec.conn_retries = 1
                continue
            break
        # The exchange and its parser hold each other (the parser calls back into it): a cycle only the
        # cyclic collector freed, so each answered request's token times and text stayed in memory until a
        # collection (a 10,000 x 256-token run held ~700 of them at the end of its load window).
        ex.release()
        return rec

    async def resolve_model(self) -> str:
        """``target.model``, or the model the target's probe resolves (the first the server lists), cached.
        Resolution is the probe's (:class:`~servelab.transport.probe.HttpProbe`): this transport only
        sends."""
        if self._model is None:
            self._model = await self._resolver()
        return self._model

    async def _resolver(self) -> str:
        async with self._resolve_lock:
            if self._model is not None:
                return self._model
            probe = HttpProbe(probe_options(self.options), self.clock)
            try:
                return await probe.resolve_model()
            finally:
                await probe.aclose()

    def use_model(self, model: str) -> None:
        """Ask for ``model`` from now on (a caller that resolved it through its probe)."""
        self._model = model

    async def aclose(self) -> None:
        await self._pool.aclose()

    @property
    def connections_opened(self) -> int:
        """Connections opened so far (near the concurrency when keep-alive works)."""
        return self._pool.opened


def probe_options(target: HttpOptions | Any) -> ProbeOptions:
    """The probe's options for the same target (an :class:`HttpOptions` or the user's ``TargetConfig``)."""
    o = HttpOptions.of(target)
    return ProbeOptions(url=o.url, model=o.model, headers=dict(o.headers), api_key_env=o.api_key_env,
                        verify_tls=o.verify_tls, connect_s=o.connect_s, timeout_s=min(30.0, o.total_s))


def _failed(rec: RequestRecord, t: int, status: str, error: str) -> RequestRecord:
    rec.status = status
    rec.error = error
    rec.end_ns = t
    return rec


def _reset(rec: RequestRecord) -> None:
    rec.status = CANCELLED
    rec.error = rec.sent_ns = rec.end_ns = rec.http_status = None
