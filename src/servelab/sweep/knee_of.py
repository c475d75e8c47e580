"""The knee of each group of sweep points (points that differ only in the knee's axis).

The axis is any swept parameter with numeric values: the load level (concurrency, rate, sessions) when it
takes at least three values, otherwise the swept key with the most numeric values (``max_num_seqs`` or
any ``--set`` key). Latency votes with the server queue (p50, from the server's ground truth or its queue
histogram), falling back to TTFT p95 and e2e p95: a closed loop's client queue is always 0 and says nothing.
Each knee carries its range (the grid neighbours) and a bootstrap confidence from counting noise.
"""

from __future__ import annotations

from typing import Any

from servelab.analysis.knee import MIN_LEVELS, bootstrap_knee, find_knee
from servelab.sweep.grid import LEVEL_AXES


def _metric(summary: dict[str, Any], group: str, name: str, stat: str | None = None) -> float | None:
    v = (summary or {}).get(group, {}).get(name)
    if stat is not None:
        v = (v or {}).get(stat)
    return None if v is None else float(v)


def _server_queue(summary: dict[str, Any]) -> float | None:
    q = ((summary or {}).get("evidence") or {}).get("server_queue_ms") or {}
    v = q.get("p50", q.get("mean"))
    if v is None:
        v = (((summary or {}).get("server") or {}).get("histograms") or {}).get("queue_time_seconds", {}) \
            .get("mean_ms")
    return None if v is None else float(v)


def _numeric(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v > 0


def knee_axis(points: list[dict[str, Any]]) -> str | None:
    """The swept axis the knee runs over (see the module docstring)."""
    values: dict[str, set[float]] = {}
    for e in points:
        for k, v in (e.get("params") or {}).items():
            if _numeric(v):
                values.setdefault(k, set()).add(float(v))
    for k in LEVEL_AXES:
        if len(values.get(k, ())) >= MIN_LEVELS:
            return k
    others = [k for k in values if len(values[k]) >= MIN_LEVELS]
    if others:
        return max(others, key=lambda k: len(values[k]))
    return next((k for k in LEVEL_AXES if k in values), None)


def _knee(members: list[dict[str, Any]], axis: str) -> dict[str, Any]:
    xs = [float(e["params"][axis]) for e in members]
    sums = [e["summary"] for e in members]
    tp = [_metric(s, "throughput", "output_tokens_per_s") or 0.0 for s in sums]
    queue = [_server_queue(s) for s in sums]
    knee = find_knee(
        xs, tp,
        latency_p50=[_metric(s, "metrics", "e2e_ms", "p95") for s in sums],
        latency_p95=[_metric(s, "metrics", "ttft_ms", "p95") for s in sums],
        queue=None if all(q is None for q in queue) else [float("nan") if q is None else q for q in queue],
        goodput=[_metric(s, "throughput", "goodput_requests_per_s") for s in sums],
    )
    counts = [_metric(s, "requests", "ok") for s in sums]
    boot = bootstrap_knee(xs, tp, counts, knee.get("level"))
    if boot is not None:
        knee["bootstrap"] = boot
    knee["axis"] = axis
    return knee


def knees_for(points: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any] | None, str | None]:
    ok = [e for e in points if e.get("status") == "ok"]
    axis = knee_axis(ok)
    if axis is None:
        return (
            [],
            None,
            "no finished points with a numeric swept axis (load level, max_num_seqs, any --set key)",
        )
    groups: dict[str, list[dict[str, Any]]] = {}
    for e in ok:
        if not _numeric((e.get("params") or {}).get(axis)):
            continue
        fixed = {k: v for k, v in e["params"].items() if k != axis}
        groups.setdefault(repr(sorted(fixed.items(), key=lambda kv: kv[0])), []).append(e)
    if not groups:
        return [], None, f"no finished points along {axis}"
    knees: list[dict[str, Any]] = []
    for members in groups.values():
        members = sorted(members, key=lambda e: float(e["params"][axis]))
        fixed = {k: v for k, v in members[0]["params"].items() if k != axis}
        knees.append({"params": fixed, "axis": axis, "knee": _knee(members, axis)})
    first = knees[0]["knee"]
    reason = None if first is not None else "too few levels or no bend found"
    if isinstance(first, dict) and first.get("level") is None and first.get("reason"):
        reason = first["reason"]
    return knees, first, reason


def split_for(points: list[dict[str, Any]], slo: Any) -> list[dict[str, Any]]:
    """Split-traffic numbers per group of a max-num-seqs sweep (see
    :func:`servelab.analysis.knee.split_endpoints`); [] when the sweep is not over max_num_seqs or sets no
    SLO."""
    from servelab.analysis.knee import split_endpoints

    ok = [e for e in points if e.get("status") == "ok"]
    axis = knee_axis(ok)
    if not slo or axis is None or "max_num_seqs" not in axis:
        return []
    knees, _, _ = knees_for(points)
    out = []
    for g in knees:
        members = sorted(
            (e for e in ok if {k: v for k, v in e["params"].items() if k != axis} == g["params"]),
            key=lambda e: float(e["params"][axis]),
        )
        res = split_endpoints(
            [float(e["params"][axis]) for e in members],
            [e["summary"] for e in members],
            slo,
            (g["knee"] or {}).get("level"),
            axis,
        )
        if res is not None:
            out.append({"params": g["params"], **res})
    return out
