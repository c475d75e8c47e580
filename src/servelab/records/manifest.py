"""The run manifest: what ran, where, with which settings. Secrets never reach it."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import socket
import sys
from typing import Any

from servelab import __version__
from servelab.records.schema import SCHEMA_VERSION

# A key or header name that holds a credential: Authorization, Proxy-Authorization, Cookie, api-key,
# x-api-key, X-Auth-Token, access_token, client_secret, password... (compared with separators removed).
_SECRET_NAME = re.compile(r"(authorization|apikey|secret|password|passwd|cookie|credential|bearer"
                          r"|xauth|privatekey|accesskey|signature)")
_SECRET_FLAG = re.compile(r"^--?(api-key|token|secret|password)(=.*)?$", re.I)
_HEADER_FLAGS = ("--header", "-H")
_USERINFO = re.compile(r"(?<=://)[^/@\s?#]+@")  # user:password@ in a URL
REDACTED = "***"


def is_secret_name(name: str) -> bool:
    """Does this key, header or dotted config path name a credential? (``*_env`` names a variable: no.)"""
    low = name.lower()
    if low.endswith("_env"):
        return False
    parts = [x for x in re.split(r"[^a-z0-9]+", low) if x]
    flat = "".join(parts)
    return bool(_SECRET_NAME.search(flat)) or (bool(parts) and parts[-1] in ("token", "auth"))


def redact_text(text: str) -> str:
    """A string with any URL's ``user:password@`` replaced by ``***@``."""
    return _USERINFO.sub(REDACTED + "@", text) if "://" in text else text


def _holds_text(v: Any) -> bool:
    return isinstance(v, str | bytes) or (isinstance(v, list | tuple) and any(isinstance(x, str) for x in v))


def redact(obj: Any) -> Any:
    """Replace the values of secret-looking keys (Authorization, api-key, *token, ...) recursively, and the
    user:password of any URL."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(k, str) and is_secret_name(k) and _holds_text(v):
                out[k] = REDACTED
            else:
                out[redact_text(k) if isinstance(k, str) else k] = redact(v)
        return out
    if isinstance(obj, list | tuple):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def _redact_header(text: str) -> str:
    name, sep, _value = text.partition(":")
    return f"{name}{sep} {REDACTED}" if sep and is_secret_name(name.strip()) else text


def _redact_set(text: str) -> str:
    key, sep, _value = text.partition("=")
    return f"{key}={REDACTED}" if sep and is_secret_name(key.strip()) else text


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with secrets hidden: --api-key/--token values, credential headers (--header 'x-api-key:
    K', --header=Authorization: Bearer K), --set target.headers.api-key=K, and URL user:password."""
    out: list[str] = []
    follow: str | None = None  # what the previous flag says this argument is
    for a in argv:
        kind, follow = follow, None
        if kind == "secret":
            out.append(REDACTED)
            continue
        if kind == "header":
            out.append(redact_text(_redact_header(a)))
            continue
        if kind == "set":
            out.append(redact_text(_redact_set(a)))
            continue
        flag, eq, value = a.partition("=")
        m = _SECRET_FLAG.match(a)
        if m:
            out.append(flag + "=" + REDACTED if m.group(2) else a)
            follow = None if m.group(2) else "secret"
        elif flag in _HEADER_FLAGS:
            out.append(f"{flag}={_redact_header(value)}" if eq else a)
            follow = None if eq else "header"
        elif flag == "--set":
            out.append(f"--set={_redact_set(value)}" if eq else a)
            follow = None if eq else "set"
        elif ":" in a and "://" not in a:
            out.append(_redact_header(a))
        else:
            out.append(redact_text(a))
    return out


def host_facts() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "cpu_count": os.cpu_count(),
    }


def utc_now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds")


def build_manifest(
    *,
    config: dict[str, Any],
    argv: list[str],
    target: dict[str, Any],
    seed: int,
    started_at: str,
    kind: str = "run",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    m: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "servelab_version": __version__,
        "command_line": redact_argv(list(argv)),
        "config": redact(config),
        "target": redact(target),
        "host": host_facts(),
        "seed": seed,
        "started_at": started_at,
        "ended_at": None,
    }
    if extra:
        m.update(redact(extra))
    return m
