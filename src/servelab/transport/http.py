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
from typing import Any

import orjson

from servelab.clock import Clock, WallClock
from servelab.config.models import TargetConfig
from servelab.errors import TargetError
from servelab.records.schema import CANCELLED, DISCONNECTED, TIMEOUT, RequestRecord
from servelab.transport import _wire
from servelab.transport._exchange import IDLE_S, MAX_RESPONSE_BYTES, ModelExchange
from servelab.transport._plain import PlainExchange
from servelab.transport._pool import Pool
from servelab.transport.base import ModelRequest, new_record

_KNOWN_ENGINES = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llama.cpp", "llama.cpp": "llama.cpp",
                  "tensorrt_llm": "tensorrt-llm", "trtllm": "tensorrt-llm", "tgi": "tgi", "servelab": "servelab"}
_SMALL_CALL_TIMEOUT_S = 30.0


class HttpTransport:
    """:class:`~servelab.transport.base.Transport` over HTTP/1.1 keep-alive connections.

    ``concurrency`` sizes the pool of idle connections kept open; busy connections are never capped.
    The bearer key is read once here from ``target.api_key_env`` and lives only in the request header
    bytes: it is never put in a record or in :meth:`describe`'s answer.
    """

    def __init__(self, target: TargetConfig, clock: Clock, concurrency: int) -> None:
        if target.is_sim:
            raise TargetError(f"HttpTransport needs an http(s) URL, got the simulator target '{target.url}'",
                              hint="use the simulator transport for sim targets")
        self.target = target
        self.clock = clock
        # WallClock.now is time.monotonic_ns: call the C function directly on the hot path.
        self._now = time.monotonic_ns if type(clock) is WallClock else clock.now
        self.endpoint = _wire.parse_endpoint(target.url)
        bearer = _wire.bearer_from_env(target.api_key_env)
        self._stream_headers = _wire.header_block(self.endpoint, target.headers, bearer, "text/event-stream")
        self._json_headers = _wire.header_block(self.endpoint, target.headers, bearer, "application/json")
        self._pool = Pool(self.endpoint, _wire.ssl_context(self.endpoint, target.verify_tls),
                          target.timeouts.connect_s, concurrency, self._now)
        self._model = target.model
        self._model_lock = asyncio.Lock()
        self._paths = {"chat": self.endpoint.path("/chat/completions"),
                       "completions": self.endpoint.path("/completions")}
        self._tokenize_style: str | None = None  # "vllm" | "llamacpp" | "none", once known
        self._extra = dict(target.extra_body)
        self._idle_s = getattr(target.timeouts, "idle_s", IDLE_S)
        self._max_bytes = getattr(target, "max_response_bytes", MAX_RESPONSE_BYTES)

    # -- model requests -------------------------------------------------------------------------------

    async def send(self, req: ModelRequest) -> RequestRecord:
        """Send ``req`` and return its timed record. Never raises for server faults; re-raises
        ``CancelledError`` after closing the connection (the caller owns cancellation)."""
        rec = new_record(req)
        model = self._model if self._model is not None else await self.resolve_model()
        stream = req.stream and self.target.stream
        body = _wire.build_body(req, model, stream, self._extra)
        path = self._paths.get(req.api)
        if path is None:
            raise TargetError(f"ModelRequest.api must be 'chat' or 'completions', got {req.api!r}")
        head = _wire.request_head("POST", path, self._stream_headers if stream else self._json_headers,
                                  len(body))
        payload = head + body
        timeouts = self.target.timeouts
        now = self._now
        for attempt in (0, 1):
            try:
                conn = await self._pool.acquire() if attempt == 0 else await self._pool.connect()
            except TimeoutError:
                return _failed(rec, now(), TIMEOUT, f"connect timed out after {timeouts.connect_s:g} s")
            except OSError as err:
                return _failed(rec, now(), DISCONNECTED, f"connect to {self.target.url} failed: {err}")
            reused = conn.reused > 0
            ex = ModelExchange(rec, now, conn, stream, timeouts.total_s, self._idle_s, self._max_bytes)
            conn.exchange = ex
            rec.sent_ns = now()
            conn.write(payload)
            ex.arm(timeouts.first_token_s)
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
        return rec

    async def resolve_model(self) -> str:
        """``target.model``, or the first model the server lists at ``/v1/models`` (cached)."""
        if self._model is not None:
            return self._model
        async with self._model_lock:
            if self._model is None:
                models = await self._list_models()
                if not models:
                    raise TargetError(f"{self.target.url}/models lists no model, and target.model is not set",
                                      hint="set target.model to the name the server serves")
                self._model = models[0]
        return self._model

    # -- small calls ----------------------------------------------------------------------------------

    async def count_tokens(self, text: str) -> int | None:
        """Tokens in ``text`` per the server's ``/tokenize`` (vLLM/SGLang or llama.cpp form), else None."""
        if self._tokenize_style == "none":
            return None
        path = self.endpoint.root("/tokenize")
        styles = [self._tokenize_style] if self._tokenize_style else ["vllm", "llamacpp"]
        refused = 0
        for style in styles:
            if style == "vllm":
                try:
                    model = await self.resolve_model()
                except TargetError:
                    model = None
                body: dict[str, Any] = {"prompt": text} if model is None else {"model": model, "prompt": text}
            else:
                body = {"content": text}
            try:
                status, _, raw = await self._call("POST", path, orjson.dumps(body))
            except (OSError, TimeoutError, TargetError):
                return None  # unreachable now: do not conclude the endpoint is missing
            count = _token_count(raw) if 200 <= status < 300 else None
            # llama.cpp answers a vLLM-style body (no "content") with no tokens: not this style.
            if count == 0 and text.strip() and self._tokenize_style is None:
                count = None
            if count is not None:
                self._tokenize_style = style
                return count
            refused += 1
        if refused == 2:
            self._tokenize_style = "none"
        return None

    async def describe(self) -> dict[str, Any]:
        """Engine guess, version, served models and the Server header (never the API key)."""
        try:
            status, headers, raw = await self._call("GET", self.endpoint.path("/models"), None)
        except (OSError, TimeoutError) as err:
            raise TargetError(f"cannot reach {self.target.url}: {err}",
                              hint="check that the server is up and target.url is right") from err
        entries = _model_entries(raw) if 200 <= status < 300 else []
        models = [e["id"] for e in entries]
        owners = {str(e.get("owned_by", "")).lower() for e in entries}
        server = headers.get("server")
        version = None
        # vLLM: /version {"version"}; llama.cpp: /props {"build_info"}; SGLang: /get_server_info {"version"}.
        for where in ("/version", "/props", "/get_server_info"):
            try:
                vstatus, vheaders, vraw = await self._call("GET", self.endpoint.root(where), None)
            except (OSError, TimeoutError):
                break
            server = server or vheaders.get("server")
            if 200 <= vstatus < 300:
                version = _version_of(vraw)
                if version is not None:
                    break
        engine = next((_KNOWN_ENGINES[o] for o in owners if o in _KNOWN_ENGINES), None)
        if engine is None and server:
            low = server.lower()
            engine = next((v for k, v in _KNOWN_ENGINES.items() if k in low), None)
        facts: dict[str, Any] = {"engine": engine or "unknown", "version": version, "models": models,
                                 "server_header": server, "url": self.target.url}
        lens = {e["id"]: e["max_model_len"] for e in entries if isinstance(e.get("max_model_len"), int)}
        if lens:
            facts["max_model_len"] = lens
        if not (200 <= status < 300):
            facts["models_error"] = f"HTTP {status}: {_wire.error_text(raw)}"
        if self._model is None and models:
            self._model = models[0]
        return facts

    async def aclose(self) -> None:
        await self._pool.aclose()

    @property
    def connections_opened(self) -> int:
        """Connections opened so far (near the concurrency when keep-alive works)."""
        return self._pool.opened

    async def _list_models(self) -> list[str]:
        try:
            status, _, raw = await self._call("GET", self.endpoint.path("/models"), None)
        except (OSError, TimeoutError) as err:
            raise TargetError(f"cannot list models at {self.target.url}/models: {err}",
                              hint="check the URL, or set target.model") from err
        if not 200 <= status < 300:
            raise TargetError(f"GET {self.target.url}/models answered HTTP {status}: {_wire.error_text(raw)}",
                              hint="set target.model to the name the server serves")
        return [e["id"] for e in _model_entries(raw)]

    async def _call(self, method: str, path: str, body: bytes | None) -> tuple[int, dict[str, str], bytes]:
        """One small request read whole: (status, lower-cased headers, body)."""
        conn = await self._pool.acquire()
        ex = PlainExchange(conn)
        conn.exchange = ex
        head = _wire.request_head(method, path, self._json_headers, None if body is None else len(body))
        conn.write(head + body if body is not None else head)
        try:
            async with asyncio.timeout(min(_SMALL_CALL_TIMEOUT_S, self.target.timeouts.total_s)):
                await ex.fut
        except BaseException:
            if conn.exchange is ex:
                conn.exchange = None
                conn.close()
            raise
        return ex.status, ex.headers, ex.body


def _failed(rec: RequestRecord, t: int, status: str, error: str) -> RequestRecord:
    rec.status = status
    rec.error = error
    rec.end_ns = t
    return rec


def _reset(rec: RequestRecord) -> None:
    rec.status = CANCELLED
    rec.error = rec.sent_ns = rec.end_ns = rec.http_status = None


def _model_entries(raw: bytes) -> list[dict[str, Any]]:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, list):
        return []
    return [e for e in data if isinstance(e, dict) and isinstance(e.get("id"), str)]


def _token_count(raw: bytes) -> int | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("count"), int):
        return obj["count"]
    tokens = obj.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None


def _version_of(raw: bytes) -> str | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        text = raw.decode("utf-8", "replace").strip()
        return text[:100] or None
    if isinstance(obj, dict):
        v = obj.get("version") or obj.get("build_info")
        return str(v)[:100] if v is not None else None
    return None
