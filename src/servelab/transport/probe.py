"""Probing a target: what it is (engine, version, model, the settings that make two runs comparable) and how
it counts tokens. Kept apart from the data path: a :class:`~servelab.transport.base.Transport` only sends.

:class:`HttpProbe` asks an OpenAI-compatible server on its own connection (never one of the measured
connections) for everything it exposes about itself:

* ``/v1/models``: served models, ``owned_by`` (the engine), ``max_model_len`` (vLLM);
* ``/version``: vLLM's version;
* ``/get_server_info``: SGLang's server arguments (tp_size, dtype, kv_cache_dtype, max_running_requests,
  context_length, chunked_prefill_size...) and version;
* ``/props``: llama.cpp's build, slots (``total_slots``: its batch size) and context (``n_ctx``);
* ``/metrics``: labelled info metrics (``vllm:cache_config_info{cache_dtype=...,enable_prefix_caching=...}``
  and any other ``*_info`` series), one dict of labels per metric;
* the server command line that started it, when known (a sweep's ``--server-cmd``), as ``server_flags``.

:meth:`HttpProbe.describe` returns them as one dict (the manifest's ``target``); the API key is never in it.
:class:`SimProbe` answers the same for the in-process simulator from its deployment.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from servelab.clock import Clock, WallClock
from servelab.errors import TargetError
from servelab.records.engines import engine_id, engines_in_metrics, engines_named_in
from servelab.transport import _wire
from servelab.transport._plain import PlainExchange
from servelab.transport._pool import Pool

SMALL_CALL_TIMEOUT_S = 30.0
_INFO_LINE = re.compile(r'^([A-Za-z_:][\w:]*_info)\{(.*)\}\s+\S+\s*$')
_LABEL = re.compile(r'([A-Za-z_]\w*)="((?:[^"\\]|\\.)*)"')
_MAX_FACT_LEN = 300  # a server-info value longer than this is not a setting (a chat template, a prompt)


class TargetProbe(Protocol):
    """What a target says about itself, apart from the measured requests."""

    async def describe(self) -> dict[str, Any]:
        """Facts about the target: engine, version, served models, settings, hardware (never secrets)."""

    async def count_tokens(self, text: str) -> int | None:
        """Tokens in ``text`` as the target counts them, or None when the target cannot say."""

    async def resolve_model(self) -> str:
        """The model to ask for: the configured one, else the first the target serves."""

    async def aclose(self) -> None:
        """Release connections."""


@dataclass(frozen=True)
class ProbeOptions:
    """What an :class:`HttpProbe` needs (built from the user's target config by the caller)."""

    url: str
    model: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    api_key_env: str | None = None
    verify_tls: bool = True
    connect_s: float = 10.0
    timeout_s: float = SMALL_CALL_TIMEOUT_S
    server_cmd: Sequence[str] | str | None = None  # the command line that started the server, when known


class HttpProbe:
    """:class:`TargetProbe` of an OpenAI-compatible HTTP server (vLLM, SGLang, llama.cpp, TensorRT-LLM...)."""

    def __init__(self, options: ProbeOptions, clock: Clock | None = None) -> None:
        self.options = options
        clock = clock or WallClock()
        self.endpoint = _wire.parse_endpoint(options.url)
        bearer = _wire.bearer_from_env(options.api_key_env)
        self._headers = _wire.header_block(self.endpoint, dict(options.headers), bearer, "application/json")
        now = time.monotonic_ns if type(clock) is WallClock else clock.now
        tls = _wire.ssl_context(self.endpoint, options.verify_tls)
        self._pool = Pool(self.endpoint, tls, options.connect_s, 1, now)
        self._model = options.model
        self._model_lock = asyncio.Lock()
        self._tokenize_style: str | None = None  # "vllm" | "llamacpp" | "none", once known

    async def resolve_model(self) -> str:
        """``options.model``, or the first model the server lists at ``/v1/models`` (cached)."""
        if self._model is not None:
            return self._model
        async with self._model_lock:
            if self._model is None:
                status, _, raw = await self._get_or_raise(self.endpoint.path("/models"), "list models at")
                fix = "set target.model (--model) to the name the server serves"
                if not 200 <= status < 300:
                    raise TargetError(f"GET {self.options.url}/models answered HTTP {status}: "
                                      f"{_wire.error_text(raw)}", hint=fix)
                models = [e["id"] for e in model_entries(raw)]
                if not models:
                    raise TargetError(f"{self.options.url}/models lists no model and target.model is unset",
                                      hint=fix)
                self._model = models[0]
        return self._model

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
                    model: str | None = await self.resolve_model()
                except TargetError:
                    model = None
                body: dict[str, Any] = {"prompt": text} if model is None else {"model": model, "prompt": text}
            else:
                body = {"content": text}
            try:
                status, _, raw = await self.call("POST", path, orjson.dumps(body))
            except (OSError, TimeoutError, TargetError):
                return None  # unreachable now: do not conclude the endpoint is missing
            count = token_count(raw) if 200 <= status < 300 else None
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
        """Everything the server says about itself (see the module docstring), never the API key."""
        status, headers, raw = await self._get_or_raise(self.endpoint.path("/models"), "reach")
        entries = model_entries(raw) if 200 <= status < 300 else []
        models = [e["id"] for e in entries]
        answers: dict[str, Any] = {}
        server = headers.get("server")
        for where in ("/version", "/get_server_info", "/props", "/metrics"):
            try:
                s, h, body = await self.call("GET", self.endpoint.root(where), None)
            except (OSError, TimeoutError):
                continue
            server = server or h.get("server")
            if 200 <= s < 300:
                answers[where] = body
        facts = engine_facts(entries, answers, server)
        facts.update({"models": models, "server_header": server, "url": self.options.url})
        if self._model is None and models:
            self._model = models[0]
        if self._model is not None:
            facts["model"] = self._model
            lens = facts.get("max_model_len") or {}
            if self._model in lens:
                facts["max_context_len"] = lens[self._model]  # the asked-for model's: one comparable figure
        if self.options.server_cmd:
            cmd = self.options.server_cmd
            facts["server_flags"] = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        if not 200 <= status < 300:
            facts["models_error"] = f"HTTP {status}: {_wire.error_text(raw)}"
        return facts

    async def aclose(self) -> None:
        await self._pool.aclose()

    async def _get_or_raise(self, path: str, what: str) -> tuple[int, dict[str, str], bytes]:
        try:
            return await self.call("GET", path, None)
        except (OSError, TimeoutError) as err:
            raise TargetError(f"cannot {what} {self.options.url}: {err or type(err).__name__}",
                              hint="check that the server is up and the URL is right (it ends with /v1)"
                              ) from err

    async def call(self, method: str, path: str, body: bytes | None) -> tuple[int, dict[str, str], bytes]:
        """One small request read whole: (status, lower-cased headers, body)."""
        conn = await self._pool.acquire()
        ex = PlainExchange(conn)
        conn.exchange = ex
        head = _wire.request_head(method, path, self._headers, None if body is None else len(body))
        conn.write(head + body if body is not None else head)
        try:
            async with asyncio.timeout(self.options.timeout_s):
                await ex.fut
        except BaseException:
            if conn.exchange is ex:
                conn.exchange = None
                conn.close()
            raise
        return ex.status, ex.headers, ex.body


class StaticProbe:
    """A :class:`TargetProbe` that answers what it is given: the probe twin of
    :class:`~servelab.transport.mock.MockTransport` in tests (``tokens`` counts, None: cannot say)."""

    def __init__(self, facts: Mapping[str, Any] | None = None, *, model: str | None = None,
                 tokens: Callable[[str], int | None] | None = None) -> None:
        self.facts = dict(facts or {})
        self.model = model or self.facts.get("model") or next(iter(self.facts.get("models") or []), None)
        self._tokens = tokens

    async def describe(self) -> dict[str, Any]:
        return dict(self.facts)

    async def count_tokens(self, text: str) -> int | None:
        return self._tokens(text) if self._tokens is not None else None

    async def resolve_model(self) -> str:
        if self.model is None:
            raise TargetError("the static probe was given no model")
        return str(self.model)

    async def aclose(self) -> None:
        return None


# -- what the answers say (pure) ----------------------------------------------------------------------


def model_entries(raw: bytes) -> list[dict[str, Any]]:
    """The ``data`` entries of a ``/v1/models`` answer that have a string ``id``."""
    obj = _json(raw)
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, list):
        return []
    return [e for e in data if isinstance(e, dict) and isinstance(e.get("id"), str)]


def token_count(raw: bytes) -> int | None:
    """The count in a ``/tokenize`` answer (``count``, or the length of ``tokens``)."""
    obj = _json(raw)
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("count"), int):
        return obj["count"]
    tokens = obj.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None


def info_metrics(text: str) -> dict[str, dict[str, str]]:
    """Labelled info series of a Prometheus page:
    ``{"vllm:cache_config_info": {"cache_dtype": "auto", ...}}``."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        m = _INFO_LINE.match(line.strip())
        if m and m.group(1) not in out:
            out[m.group(1)] = {k: v.replace('\\"', '"') for k, v in _LABEL.findall(m.group(2))}
    return out


def engine_facts(entries: Sequence[Mapping[str, Any]], answers: Mapping[str, bytes],
                 server_header: str | None) -> dict[str, Any]:
    """Engine, version and settings from the answers of ``/v1/models``, ``/version``, ``/get_server_info``,
    ``/props`` and ``/metrics`` (each present only when the server answered 2xx)."""
    facts: dict[str, Any] = {}
    owners = [str(e.get("owned_by", "")).lower() for e in entries]
    lens = {e["id"]: e["max_model_len"] for e in entries if isinstance(e.get("max_model_len"), int)}
    if lens:
        facts["max_model_len"] = lens  # by served model
        if len(set(lens.values())) == 1:
            facts["max_context_len"] = next(iter(lens.values()))
    guesses: list[str | None] = [engine_id(o) for o in owners]
    version = _version(answers.get("/version"))
    sglang = _json(answers.get("/get_server_info", b""))
    if isinstance(sglang, dict) and sglang:
        facts["server_info"] = _settings(sglang)
        version = version or _str(sglang.get("version"))
        guesses.append("sglang" if any(k in sglang for k in ("tp_size", "model_path", "max_running_requests"))
                       else None)
    props = _json(answers.get("/props", b""))
    if isinstance(props, dict) and props:
        facts["props"] = _llamacpp_props(props)
        version = version or _str(props.get("build_info"))
        guesses.append("llama.cpp" if "total_slots" in props or "build_info" in props else None)
    if "/metrics" in answers:
        text = answers["/metrics"].decode("utf-8", "replace")
        info = info_metrics(text)
        if info:
            facts["info_metrics"] = info
        guesses += engines_in_metrics(text)
    if server_header:
        guesses += engines_named_in(server_header)
    facts["engine"] = next((g for g in guesses if g), "unknown")
    facts["version"] = version
    return facts


def _llamacpp_props(props: Mapping[str, Any]) -> dict[str, Any]:
    """llama.cpp's /props: slots, context per slot, model file, build."""
    gen = props.get("default_generation_settings")
    keys = ("total_slots", "model_path", "build_info", "chat_template_caps")
    out = {k: props[k] for k in keys if k in props}
    if isinstance(gen, dict):
        if "n_ctx" in gen:
            out["n_ctx"] = gen["n_ctx"]
        params = gen.get("params")
        if isinstance(params, dict) and "n_predict" in params:
            out["n_predict"] = params["n_predict"]
    return _settings(out)


def _settings(d: Mapping[str, Any]) -> dict[str, Any]:
    """Scalar settings only (numbers, booleans, short strings, short lists), so manifests stay small."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, bool | int | float) or v is None:
            out[k] = v
        elif isinstance(v, str) and len(v) <= _MAX_FACT_LEN:
            out[k] = v
        elif isinstance(v, list) and len(v) <= 16 and all(isinstance(x, int | float | str) for x in v):
            out[k] = v
    return out


def _version(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    obj = _json(raw)
    if isinstance(obj, dict):
        return _str(obj.get("version"))
    text = raw.decode("utf-8", "replace").strip()
    return text[:100] or None


def _str(v: Any) -> str | None:
    return None if v is None or isinstance(v, dict | list) else str(v)[:100]


def _json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
