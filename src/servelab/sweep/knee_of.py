"""The knee of each group of sweep points (points that differ only in their load level)."""

from __future__ import annotations

from typing import Any

from servelab.analysis.knee import find_knee


def _metric(summary: dict[str, Any], group: str, name: str, stat: str | None = None) -> float | None:
    v = (summary or {}).get(group, {}).get(name)
    if stat is not None:
        v = (v or {}).get(stat)
    return None if v is None else float(v)


def knees_for(points: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any] | None, str | None]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for e in points:
        if e.get("status") != "ok" or e.get("level") is None:
            continue
        fixed = {k: v for k, v in e["params"].items() if k not in ("concurrency", "rate", "sessions",
                                                                     "session_rate")}
        groups.setdefault(repr(sorted(fixed.items())), []).append(e)
    if not groups:
        return [], None, "no finished points with a load level (sweep concurrency or rate)"
    knees: list[dict[str, Any]] = []
    for members in groups.values():
        members = sorted(members, key=lambda e: e["level"])
        fixed = {k: v for k, v in members[0]["params"].items() if k not in ("concurrency", "rate", "sessions",
                                                                             "session_rate")}
        knee = find_knee(
            [e["level"] for e in members],
            [_metric(e["summary"], "throughput", "output_tokens_per_s") or 0.0 for e in members],
            latency_p50=[_metric(e["summary"], "metrics", "ttft_ms", "p50") for e in members],
            latency_p95=[_metric(e["summary"], "metrics", "ttft_ms", "p95") for e in members],
            queue=[_metric(e["summary"], "metrics", "queue_ms", "p50") for e in members],
            goodput=[_metric(e["summary"], "throughput", "goodput_requests_per_s") for e in members],
        )
        knees.append({"params": fixed, "knee": knee})
    first = knees[0]["knee"]
    reason = None if first is not None else "too few load levels or no bend found"
    if isinstance(first, dict) and first.get("level") is None and first.get("reason"):
        reason = first["reason"]
    return knees, first, reason
