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

_SECRET_KEY = re.compile(r"(authorization|api[-_]?key|token|secret|password|cookie)", re.I)
_SECRET_FLAG = re.compile(r"^--?(api-key|token|secret|password)(=.*)?$", re.I)
REDACTED = "***"


def redact(obj: Any) -> Any:
    """Replace the values of secret-looking keys (Authorization, api_key, token...) recursively."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if isinstance(k, str) and _SECRET_KEY.search(k) and not k.endswith("_env") and isinstance(v, str):
                out[k] = REDACTED
            else:
                out[k] = redact(v)
        return out
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def redact_argv(argv: list[str]) -> list[str]:
    out: list[str] = []
    hide_next = False
    for a in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        m = _SECRET_FLAG.match(a)
        if m:
            if m.group(2):
                out.append(a.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(a)
                hide_next = True
            continue
        if a.lower().startswith("authorization:"):
            out.append("Authorization: " + REDACTED)
            continue
        out.append(a)
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
