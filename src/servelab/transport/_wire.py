"""Wire helpers for the HTTP transport: endpoint parsing, request heads and bodies, error text.

Pure functions and small immutable values, so they are tested on their own (tests/unit/transport).
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from servelab.errors import TargetError
from servelab.transport.base import ModelRequest

ERROR_TEXT_MAX = 500  # characters of an error body kept in a record
USER_AGENT = "servelab"
_FORBIDDEN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where requests go, split out of ``target.url`` once."""

    scheme: str
    host: str
    port: int
    base_path: str  # e.g. "/v1" (no trailing slash; may be "")
    host_header: str

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def root_path(self) -> str:
        """The server root: ``base_path`` without a trailing ``/v1`` (where /tokenize and /version live)."""
        return self.base_path[:-3] if self.base_path.endswith("/v1") else self.base_path

    def path(self, suffix: str) -> str:
        return f"{self.base_path}{suffix}"

    def root(self, suffix: str) -> str:
        return f"{self.root_path}{suffix}"


def parse_endpoint(url: str) -> Endpoint:
    """Split an ``http(s)://host[:port][/base]`` URL; raise :class:`TargetError` for anything else."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetError(
            f"target.url '{url}' is not an http(s) URL with a host",
            hint="use e.g. http://127.0.0.1:8000/v1",
        )
    if parts.query or parts.fragment:
        raise TargetError(f"target.url '{url}' has a query or fragment; expected a base URL such as "
                          "http://127.0.0.1:8000/v1", hint="remove everything after '?' or '#'")
    try:
        port = parts.port
    except ValueError as err:
        raise TargetError(f"target.url '{url}' has an invalid port: {err}") from err
    default = 443 if parts.scheme == "https" else 80
    port = port or default
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == default else f"{shown}:{port}"
    return Endpoint(parts.scheme, host, port, parts.path.rstrip("/"), host_header)


def ssl_context(endpoint: Endpoint, verify: bool) -> ssl.SSLContext | None:
    """A client TLS context for https endpoints (``None`` for plain http)."""
    if not endpoint.tls:
        return None
    ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def bearer_from_env(var: str | None) -> str | None:
    """Read the API key from the environment variable named ``var`` (once, at construction)."""
    if var is None:
        return None
    key = os.environ.get(var)
    if not key:
        raise TargetError(
            f"target.api_key_env names the environment variable '{var}', but it is not set or empty",
            hint=f"export {var}=<your key>, or remove target.api_key_env for an endpoint without a key",
        )
    return key


def header_block(endpoint: Endpoint, extra: Mapping[str, str], bearer: str | None, accept: str) -> bytes:
    """The header lines shared by every request (no request line, no Content-Length, no final CRLF).

    Extra headers replace a default of the same name (case-insensitive); framing headers are refused.
    """
    headers: dict[str, tuple[str, str]] = {}

    def put(name: str, value: str) -> None:
        headers[name.lower()] = (name, value)

    put("Host", endpoint.host_header)
    put("User-Agent", USER_AGENT)
    put("Accept", accept)
    if bearer is not None:
        put("Authorization", f"Bearer {bearer}")
    for name, value in extra.items():
        if name.lower() in _FORBIDDEN_HEADERS:
            raise TargetError(f"target.headers sets '{name}', which the HTTP client manages itself",
                              hint=f"remove '{name}' from target.headers")
        if any(c in name for c in "\r\n:") or not name.strip() or "\r" in value or "\n" in value:
            raise TargetError(f"target.headers has an invalid header {name!r}: {value!r} "
                              "(names need no ':', CR or LF; values no CR or LF)")
        put(name, value)
    lines = "".join(f"{n}: {v}\r\n" for n, v in headers.values())
    return lines.encode("latin-1")


def request_head(method: str, path: str, headers: bytes, body_len: int | None) -> bytes:
    """The request line and headers, ending with the blank line."""
    length = (
        b"" if body_len is None else b"Content-Type: application/json\r\nContent-Length: %d\r\n" % body_len
    )
    return b"%s %s HTTP/1.1\r\n%s%s\r\n" % (method.encode(), path.encode(), headers, length)


def build_body(req: ModelRequest, model: str | None, stream: bool, target_extra: dict[str, Any]) -> bytes:
    """The JSON body of a chat or completions request (vLLM/SGLang/llama.cpp-compatible)."""
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    if req.api == "chat":
        messages = req.messages
        if messages is None:
            messages = [{"role": "user", "content": req.prompt or ""}]
        body["messages"] = messages
    else:
        body["prompt"] = req.prompt if req.prompt is not None else req.text()
    body["max_tokens"] = req.max_tokens
    body["temperature"] = req.temperature
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": False}
    if req.ignore_eos:
        body["ignore_eos"] = True
        body["min_tokens"] = req.max_tokens
    elif req.min_tokens is not None:
        body["min_tokens"] = req.min_tokens
    if req.stop:
        body["stop"] = req.stop
    if target_extra:
        body.update(target_extra)
    if req.extra_body:
        body.update(req.extra_body)
    return orjson.dumps(body)


# Terminal escape sequences (CSI, OSC, other ESC sequences) and C0/C1 control characters. Server text is
# untrusted: it reaches records and the terminal only through clean_text.
_ESCAPES = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|\x9b[0-?]*[ -/]*[@-~]"
)
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def clean_text(text: str) -> str:
    """``text`` without terminal escape sequences; runs of other control characters (newlines too) become
    one space, so a server's message is one printable line."""
    return _CONTROLS.sub(" ", _ESCAPES.sub("", text)).strip()


def error_text(body: bytes, limit: int = ERROR_TEXT_MAX) -> str:
    """An error body as text for a record: decoded leniently, escapes and control characters removed,
    whitespace-trimmed, truncated."""
    text = clean_text(body[: limit * 4].decode("utf-8", "replace"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def body_preview(body: bytes, limit: int = 120) -> str:
    """The first bytes of a body nobody could read, for an error message: clean text when it is text,
    else the byte count and the first bytes in hex (a gzip body, say)."""
    if not body:
        return "an empty body"
    head = body[: limit * 4]
    text = head.decode("utf-8", "replace")
    bad = text.count("\ufffd") + len(
        _CONTROLS.findall(text.replace("\n", "").replace("\r", "").replace("\t", ""))
    )
    if bad * 10 > len(text):  # mostly binary
        return f"binary data starting {body[:16].hex(' ')}"
    return repr(error_text(head, limit))


def error_message(payload: Any) -> str:
    """The human part of an OpenAI-style error payload ({"error": {"message": ...}} and variants)."""
    err = payload.get("error", payload) if isinstance(payload, dict) else payload
    if isinstance(err, dict):
        msg = err.get("message") or err.get("detail") or err
        return error_text(str(msg).encode())
    return error_text(str(err).encode())


INT64_MAX = 2**63 - 1


def usage_count(usage: dict, key: str) -> tuple[int | None, str | None]:
    """``usage[key]`` as a token count: (value, None), (None, None) when absent or null, or
    (None, reason) when it is not a non-negative integer that fits in int64 (a string, a bool, 2.5, 1e30)."""
    v = usage.get(key)
    if v is None:
        return None, None
    if v.__class__ is int:
        if 0 <= v <= INT64_MAX:
            return v, None
    elif v.__class__ is float and v.is_integer() and 0 <= v <= INT64_MAX:
        return int(v), None
    shown = error_text(repr(v).encode(), 40)
    return None, f"usage.{key} is {shown} ({type(v).__name__}); expected a non-negative integer (int64)"
