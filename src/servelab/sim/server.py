"""The simulator's OpenAI-compatible HTTP front (aiohttp), with fault injection.

Routes: ``POST /v1/chat/completions`` and ``/v1/completions`` (streamed as SSE or not; usage with cached
tokens; ``ignore_eos``, ``min_tokens``, ``max_tokens``/``max_completion_tokens``, ``stop``), ``GET
/v1/models``, ``POST /tokenize`` (vLLM and llama.cpp bodies), ``POST /detokenize``, ``GET /health``, ``GET
/version``, ``GET /metrics`` (Prometheus text, vLLM names plus ``servelab_sim_*``).

The engine runs on the event loop of the server, on the wall clock. Generated text is the tokenizer's
deterministic filler (one word per token). A client that goes away aborts its request in the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from servelab.clock import Clock, WallClock
from servelab.errors import ConfigError
from servelab.sim import tokenizer as tok
from servelab.sim.api import SimRequest
from servelab.sim.faults import ERROR, MALFORMED, NO_FAULT, RESET, STALL, TRUNCATE, FaultConfig, FaultPlan
from servelab.sim.oai import (
    BadRequest,
    ChunkWriter,
    Parsed,
    error_body,
    full_response,
    parse_completion,
    render_chat,
    usage,
)
from servelab.sim.prom import RequestMetrics, render_metrics

JSON = "application/json"
SIM_SERVER: web.AppKey[SimServer] = web.AppKey("sim_server")  # app[SIM_SERVER]: the handlers' object
_ERROR_KINDS = {408: "RequestTimeoutError", 429: "RateLimitError", 500: "InternalServerError",
                502: "BadGatewayError", 503: "ServiceUnavailableError", 504: "GatewayTimeoutError"}
_FIRST_WORDS = 64  # filler words made up front; more on demand (the filler is prefix-stable)


class _Gen:
    """One request in flight: the engine's token callbacks wake the handler."""

    __slots__ = ("req", "done", "n", "event", "seed", "stopped", "_text_words")

    def __init__(self, req: SimRequest, done: asyncio.Future[SimRequest], seed: int) -> None:
        self.req = req
        self.done = done  # req.done, known to be set (SimRequest's is optional)
        self.n = 0
        self.event = asyncio.Event()
        self.seed = seed
        self.stopped = False  # ended by a stop string (the engine sees an abort)
        self._text_words: list[str] = []

    def on_tokens(self, n_new: int, t_ns: int) -> None:
        self.n += n_new
        self.event.set()

    def on_done(self, _fut: asyncio.Future) -> None:
        self.event.set()

    def words(self, start: int, end: int) -> str:
        """Text of output tokens ``[start, end)``, with the separating spaces a word tokenizer needs."""
        words = self._text_words
        if end > len(words):
            want = min(self.req.max_tokens, max(end, 2 * len(words), _FIRST_WORDS))
            words = self._text_words = tok.filler_text(want, self.seed).split()
        piece = " ".join(words[start:end])
        return " " + piece if start > 0 else piece


class _Reset(Exception):
    """The connection was reset on purpose (fault injection): no response follows."""


@dataclass(slots=True)
class _Outcome:
    text: str
    completion_tokens: int
    reason: str


class SimServer:
    """Handlers bound to one engine. ``build_app`` wires them into an aiohttp application."""

    def __init__(self, engine: Any, deployment: Any, faults: FaultConfig | None, model_name: str,
                 clock: Clock, max_model_len: int) -> None:
        self.engine = engine
        self.deployment = deployment
        self.faults = faults if faults is not None and faults.enabled else None
        self.model_name = model_name
        self.clock = clock
        self.max_model_len = max_model_len
        self.metrics = RequestMetrics()
        self._rids = itertools.count(1)  # as the in-process transport: same rid, same seeded lengths and text
        self._fault_seq = itertools.count()
        self._unix0 = time.time()  # the protocol's "created" field is a Unix time; measured times use clock
        self._clock0 = clock.now()
        self._words: dict[int, str] = {}  # id -> word, for /detokenize (filler words and words seen)
        self._learn(" ".join(tok.WORDS), engine.tokenize(" ".join(tok.WORDS)))

    # ----------------------------------------------------------------------------------- helpers
    def _created(self) -> int:
        return int(self._unix0 + (self.clock.now() - self._clock0) / 1e9)

    def _tokenize(self, text: str) -> list[int]:
        ids = self.engine.tokenize(text)
        if len(self._words) < 200_000:
            self._learn(text, ids)
        return ids

    def _learn(self, text: str, ids: list[int]) -> None:
        words = text.split()
        if len(words) == len(ids):
            setdefault = self._words.setdefault
            for t, w in zip(ids, words, strict=True):
                setdefault(t, w)

    @staticmethod
    def _error(message: str, status: int, kind: str, param: str | None = None) -> web.Response:
        return web.Response(body=error_body(message, kind, status, param), status=status, content_type=JSON)

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise BadRequest(f"the request body is not valid JSON ({e})") from None

    def _abort(self, gen: _Gen) -> None:
        if not gen.done.done():
            abort = getattr(self.engine, "abort", None)
            if abort is not None:
                abort(gen.req.rid)

    @staticmethod
    def _reset(request: web.Request) -> None:
        """Reset the TCP connection (RST, not FIN): the client sees 'connection reset by peer'."""
        tr = request.transport
        if tr is None:
            raise _Reset()
        sock = tr.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        tr.abort()
        raise _Reset()

    def _submit(self, p: Parsed, rid: int) -> _Gen:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[SimRequest] = loop.create_future()
        req = SimRequest(rid=rid, prompt_ids=p.prompt_ids, max_tokens=p.max_tokens, min_tokens=p.min_tokens,
                         ignore_eos=p.ignore_eos, arrival_ns=self.clock.now(), done=done)
        # The engine's own output seed: the text sent back in a later turn then hits its cached output blocks.
        output_seed = getattr(self.engine, "output_seed", None)
        gen = _Gen(req, done, output_seed(req) if output_seed is not None else rid)
        req.on_tokens = gen.on_tokens
        done.add_done_callback(gen.on_done)
        done.add_done_callback(lambda fut: self._observe(fut, gen))
        self.engine.submit(req)
        return gen

    def _observe(self, fut: asyncio.Future, gen: _Gen) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self.metrics.observe(gen.req, reason="stop" if gen.stopped else None)

    # ----------------------------------------------------------------------------------- routes
    async def completions(self, request: web.Request) -> web.StreamResponse:
        api = "chat" if request.path.endswith("/chat/completions") else "completions"
        try:
            body = await self._body(request)
            p = parse_completion(body, api, self._tokenize, self.max_model_len, self.model_name)
        except BadRequest as e:
            return self._error(e.message, e.status, e.kind, e.param)
        plan = self.faults.plan(next(self._fault_seq)) if self.faults is not None else NO_FAULT
        try:
            if plan.first_byte_delay_s > 0:
                await asyncio.sleep(plan.first_byte_delay_s)
            if plan.kind == ERROR:
                return self._error(f"injected fault: HTTP {plan.status}", plan.status,
                                   _ERROR_KINDS.get(plan.status, "ServiceUnavailableError"))
            if plan.kind == RESET and (plan.after_chunks == 0 or not p.stream):
                self._reset(request)
            rid = next(self._rids)
            gen = self._submit(p, rid)
            try:
                if p.stream:
                    return await self._stream(request, p, gen, plan)
                return await self._whole(request, p, gen, plan)
            finally:
                self._abort(gen)
        except (_Reset, ConnectionError):
            # The connection is gone (reset on purpose or by the client): nothing more can be sent.
            raise asyncio.CancelledError() from None

    async def _generate(self, p: Parsed, gen: _Gen):
        """Yield ``(text piece, tokens so far, finish reason or None)`` as the engine produces tokens.

        With stop strings the last ``len(longest stop) - 1`` characters are held back until it is known
        that no stop string starts in them; on a match the text is cut before it, the request is aborted
        in the engine, and the token count is that of the tokens up to the one where the stop begins.
        """
        emitted = 0  # tokens consumed from the engine
        sent_chars = 0  # characters yielded so far
        pending = ""
        hold = max((len(s) for s in p.stop), default=1) - 1
        req = gen.req
        while True:
            await gen.event.wait()
            gen.event.clear()
            finished = gen.done.done()  # read before the count: every token before "done" is included
            n = gen.n
            if finished and req.finish_reason in ("stop", "length"):
                n = max(n, req.output_tokens)
            if n > emitted:
                piece = gen.words(emitted, n)
                emitted = n
                if not p.stop:
                    yield piece, emitted, None
                else:
                    pending += piece
                    cut = min((i for i in (pending.find(s) for s in p.stop) if i >= 0), default=-1)
                    if cut >= 0:
                        gen.stopped = True
                        self._abort(gen)
                        yield pending[:cut], _tokens_through(gen.words(0, emitted), sent_chars + cut), "stop"
                        return
                    if len(pending) > hold:
                        out, pending = pending[: len(pending) - hold], pending[len(pending) - hold:]
                        sent_chars += len(out)
                        yield out, emitted, None
            if finished:
                yield pending, emitted, req.finish_reason or "error"
                return

    async def _apply_fault(self, request: web.Request, resp: web.StreamResponse, plan: FaultPlan,
                           cw: ChunkWriter) -> bool:
        """Apply a mid-stream fault; True when the stream must end now (truncate)."""
        if plan.kind == STALL:
            await asyncio.sleep(plan.stall_s)
        elif plan.kind == MALFORMED:
            await resp.write(cw.garbage())
        elif plan.kind == RESET:
            self._reset(request)
        elif plan.kind == TRUNCATE:
            await resp.write_eof()
            return True
        return False

    async def _stream(
        self, request: web.Request, p: Parsed, gen: _Gen, plan: FaultPlan
    ) -> web.StreamResponse:
        rid = f"{'chatcmpl' if p.api == 'chat' else 'cmpl'}-{gen.req.rid}"
        cw = ChunkWriter(p.api, rid, self._created(), self.model_name, p.include_usage)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        fault_at = plan.after_chunks if plan.kind in (STALL, MALFORMED, RESET, TRUNCATE) else -1
        chunks = 0
        completion = 0
        reason = "error"
        async for piece, n_out, fin in self._generate(p, gen):
            completion = n_out
            if fin is not None:
                reason = fin
            if not piece:
                continue
            if chunks == fault_at and await self._apply_fault(request, resp, plan, cw):
                return resp
            out = cw.token(piece)
            if chunks == 0:
                out = cw.role() + out
            await resp.write(out)
            chunks += 1
        if chunks <= fault_at and await self._apply_fault(request, resp, plan, cw):
            return resp
        if reason == "error":
            await resp.write(cw.error(gen.req.error or "the simulated engine failed the request"))
        else:
            tail = cw.finish("length" if reason == "length" else "stop" if reason == "stop" else "abort")
            tail += cw.usage(usage(len(p.prompt_ids), completion, gen.req.cached_tokens))
            await resp.write(tail)
        await resp.write(cw.done())
        await resp.write_eof()
        return resp

    async def _whole(self, request: web.Request, p: Parsed, gen: _Gen, plan: FaultPlan) -> web.StreamResponse:
        parts: list[str] = []
        completion = 0
        reason = "error"
        async for piece, n_out, fin in self._generate(p, gen):
            completion = n_out
            parts.append(piece)
            if fin is not None:
                reason = fin
        if reason == "error":
            return self._error(gen.req.error or "the simulated engine failed the request", 500,
                               "InternalServerError")
        if plan.kind == STALL:
            await asyncio.sleep(plan.stall_s)
        rid = f"{'chatcmpl' if p.api == 'chat' else 'cmpl'}-{gen.req.rid}"
        body = full_response(p.api, rid, self._created(), self.model_name, "".join(parts), reason,
                             usage(len(p.prompt_ids), completion, gen.req.cached_tokens))
        if plan.kind == MALFORMED:
            body = body[: len(body) // 2] + b"\x00<garbage>"
        if plan.kind == TRUNCATE:
            resp = web.StreamResponse(headers={"Content-Type": JSON})
            resp.content_length = len(body)
            await resp.prepare(request)
            await resp.write(body[: len(body) // 2])
            if request.transport is not None:
                request.transport.close()
            raise _Reset()
        return web.Response(body=body, content_type=JSON)

    async def models(self, request: web.Request) -> web.Response:
        card = {"id": self.model_name, "object": "model", "created": int(self._unix0), "owned_by": "servelab",
                "root": self.model_name, "parent": None, "max_model_len": self.max_model_len}
        return web.Response(body=orjson.dumps({"object": "list", "data": [card]}), content_type=JSON)

    async def tokenize(self, request: web.Request) -> web.Response:
        try:
            body = await self._body(request)
            if not isinstance(body, dict):
                raise BadRequest("the request body must be a JSON object")
            if "content" in body and "prompt" not in body and "messages" not in body:  # llama.cpp
                if not isinstance(body["content"], str):
                    raise BadRequest("'content' must be a string", param="content")
                return web.json_response({"tokens": self._tokenize(body["content"])}, dumps=_dumps)
            if "messages" in body:
                from servelab.sim.oai import check_messages

                ids = self._tokenize(render_chat(check_messages(body["messages"])))
            elif isinstance(body.get("prompt"), str):
                ids = self._tokenize(body["prompt"])
            else:
                raise BadRequest("expected {'prompt': str}, {'messages': [...]} or {'content': str}",
                                 param="prompt")
        except BadRequest as e:
            return self._error(e.message, e.status, e.kind, e.param)
        return web.json_response({"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids},
                                 dumps=_dumps)

    async def detokenize(self, request: web.Request) -> web.Response:
        try:
            body = await self._body(request)
            ids = body.get("tokens") if isinstance(body, dict) else None
            if not isinstance(ids, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in ids
            ):
                raise BadRequest("expected {'tokens': [int, ...]}", param="tokens")
        except BadRequest as e:
            return self._error(e.message, e.status, e.kind, e.param)
        text = " ".join(self._words.get(t, f"<{t}>") for t in ids)
        # vLLM answers {"prompt": ...}, llama.cpp {"content": ...}: give both.
        return web.json_response({"prompt": text, "content": text}, dumps=_dumps)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        from servelab import __version__

        return web.json_response({"version": __version__, "engine": "servelab-sim"}, dumps=_dumps)

    async def prometheus(self, request: web.Request) -> web.Response:
        text = render_metrics(self.engine.stats(), self.metrics, self.model_name)
        return web.Response(text=text, content_type="text/plain", charset="utf-8",
                            headers={"X-Prometheus-Format": "0.0.4"})


def _tokens_through(text: str, pos: int) -> int:
    """Tokens of ``text`` (one per word, a word owning its leading space) up to the one holding ``pos``."""
    return len(text[: pos + 1].split()) + (1 if text[pos].isspace() else 0)


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def _max_model_len(deployment: Any) -> int:
    for attr in ("max_model_len", "max_seq_len", "context_length"):
        v = getattr(deployment, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    model = getattr(deployment, "model", None)
    for attr in ("max_model_len", "context_length", "max_position_embeddings"):
        v = getattr(model, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    return 32_768


def _model_name(deployment: Any) -> str:
    model = getattr(deployment, "model", None)
    name = getattr(model, "name", None) or getattr(deployment, "model_name", None)
    return str(name) if name else "servelab-sim"


def build_app(engine: Any, deployment: Any, faults: FaultConfig | None = None, model_name: str | None = None,
              clock: Clock | None = None) -> web.Application:
    """An aiohttp application serving ``engine`` (started and stopped with the application)."""
    clock = clock or getattr(engine, "clock", None) or WallClock()
    srv = SimServer(engine, deployment, faults, model_name or _model_name(deployment), clock,
                    _max_model_len(deployment))
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[SIM_SERVER] = srv
    app.router.add_post("/v1/chat/completions", srv.completions)
    app.router.add_post("/v1/completions", srv.completions)
    app.router.add_get("/v1/models", srv.models)
    app.router.add_post("/tokenize", srv.tokenize)
    app.router.add_post("/detokenize", srv.detokenize)
    app.router.add_get("/health", srv.health)
    app.router.add_get("/version", srv.version)
    app.router.add_get("/metrics", srv.prometheus)

    async def _start(app: web.Application) -> None:
        engine.start()

    async def _stop(app: web.Application) -> None:
        await engine.stop()

    app.on_startup.append(_start)
    app.on_cleanup.append(_stop)
    return app


class RunningServer:
    """A started server: ``base_url`` (``http://host:port/v1``), ``port``, ``await close()``."""

    def __init__(self, runner: web.AppRunner, host: str, port: int) -> None:
        self._runner = runner
        self.host = host
        self.port = port

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def app(self) -> web.Application:
        return self._runner.app

    async def close(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> RunningServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def start_server(engine: Any, deployment: Any, *, host: str = "127.0.0.1", port: int = 0,
                       faults: FaultConfig | None = None, model_name: str | None = None) -> RunningServer:
    """Serve ``engine`` on ``host:port`` (port 0: a free port) on the running loop; returns at once."""
    app = build_app(engine, deployment, faults=faults, model_name=model_name)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=2.0, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({e.strerror or e})",
            hint="choose another --port (0 picks a free one) or stop the process using it",
        ) from e
    bound = port
    server = getattr(site, "_server", None)
    if server is not None and server.sockets:
        bound = server.sockets[0].getsockname()[1]
    return RunningServer(runner, host, bound)


def make_engine(spec: str, clock: Clock, seed: int = 0) -> tuple[Any, Any]:
    """``(engine, deployment)`` for a simulator target spec (``sim``, ``sim:MODEL@NxHW``, a YAML file)."""
    from servelab.sim.engine import Engine
    from servelab.sim.target import parse_sim_target

    s = spec.strip()
    if s.lower() != "sim" and not s.lower().startswith("sim:"):
        s = "sim:" + s  # the CLI's --deployment may omit the prefix
    deployment = parse_sim_target(s)
    return Engine(deployment, clock, seed=seed), deployment


async def serve(spec: str, host: str = "127.0.0.1", port: int = 8000, faults: FaultConfig | None = None,
                seed: int = 0, ready: asyncio.Event | None = None) -> None:
    """Serve a simulated deployment over HTTP on the wall clock until cancelled."""
    clock = WallClock()
    engine, deployment = make_engine(spec, clock, seed=seed)
    running = await start_server(engine, deployment, host=host, port=port, faults=faults)
    print(f"servelab sim: serving {running.app[SIM_SERVER].model_name} at {running.base_url}", flush=True)
    if ready is not None:
        ready.set()
    try:
        await asyncio.Event().wait()
    finally:
        await running.close()
