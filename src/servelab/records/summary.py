"""The contract of ``summary.json``: its typed shape, its JSON schema, and one way to read it.

``build_summary`` (analysis) writes a :class:`Summary`; terminal, report, compare, check and sweep read it.
The JSON schema shipped beside this module (``summary.schema.json``) states the required sections and the
types and ranges of their fields; sections a run kind adds (agents, replay, cost, server, evidence...) are
allowed beside them. :func:`dig` is the one accessor for optional paths into a summary (or a manifest).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, TypedDict

SCHEMA_PATH = Path(__file__).with_name("summary.schema.json")


class RequestCounts(TypedDict, total=False):
    sent: int
    ok: int
    failed: dict[str, int]  # by status
    cancelled: int
    warmup: int


class Percentiles(TypedDict, total=False):
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None
    n: int
    ci: dict[str, list[float] | None]  # p50/p95/p99 -> [lo, hi]


class Tokens(TypedDict, total=False):
    input: int
    output: int
    cached: int
    source: str  # usage | estimate | mixed
    estimated: int
    mismatch: int
    chunks_over_usage: int


class RunSpan(TypedDict, total=False):
    mode: str
    started_ns: int
    ended_ns: int
    duration_s: float
    extra: dict[str, Any]


class Summary(TypedDict, total=False):
    """summary.json (the sections every run has; others are added by the run's kind)."""

    requests: RequestCounts
    metrics: dict[str, Percentiles]  # ttft_ms, itl_ms, e2e_ms, ...
    throughput: dict[str, float | None]
    tokens: Tokens
    goodput: dict[str, Any]
    errors: dict[str, Any]
    valid: bool
    invalid_reasons: list[str]
    interrupted: bool
    warnings: list[str]
    units: dict[str, str]
    run: RunSpan


def dig(d: Any, *path: str) -> Any:
    """``d[path[0]][path[1]]...``, or None as soon as a step is missing or not a mapping."""
    for p in path:
        if not isinstance(d, Mapping):
            return None
        d = d.get(p)
    return d


@cache
def summary_schema() -> dict[str, Any]:
    """The JSON schema of summary.json (draft 2020-12)."""
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return schema


def schema_errors(summary: Mapping[str, Any]) -> list[str]:
    """Where ``summary`` breaks the schema, one line each (``[]``: it conforms). Needs ``jsonschema``."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(summary_schema())
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in sorted(validator.iter_errors(summary), key=lambda e: list(map(str, e.absolute_path)))]
