"""The topology decision table, and advice derived from it (pure; no I/O).

Input: one :class:`PointData` per finished sweep point (target x load level). Output, per target x level:
throughput, tasks/h over a COMMON steady-state window, task p50/p95, TTFT p50/p95, timeouts, success rate,
$/successful task priced at THAT target's GPU count (a plain sweep, without tasks: $/request and $/1M
output tokens); scaling efficiency against the smallest topology of the same model at the SAME level
(only when that model's targets differ in GPU count); the crossover level at which a larger topology starts
to win on tasks/h and on $/task; and advice whose every threshold is a level read off the table.

Steady-state window: every point is measured over the same span of its own run, ``[w0, w1]`` seconds after
the run start, with ``w1`` the shortest load window of the sweep (the configured duration, or the shortest
run) and ``w0 = WARM_FRACTION x w1``: tasks that ended inside it, per hour of it. One straggler finishing
long after the others does not stretch it (first start to last end did).

A target COLLAPSES at a level when its success rate falls below ``MIN_SUCCESS`` or its tasks/h falls more
than ``COLLAPSE_DROP`` below its own best at a lower level. A target is HEALTHY at a level when its success
rate is at least ``MIN_SUCCESS`` (and task p95 meets ``task_p95_slo_s`` when one is given).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from servelab.records.summary import dig as _get

WARM_FRACTION = 0.25
MIN_SUCCESS = 0.9
COLLAPSE_DROP = 0.2
MIN_TASKS = 10  # tasks inside the window below which a cell is noisy (flagged, not hidden)


@dataclass
class PointData:
    target: str  # a label: the target spec or URL
    level: float
    summary: Mapping[str, Any]
    model: str | None = None
    gpus: int | None = None
    nodes: int | None = None
    window_s: float | None = None  # this run's load window (configured duration, else run length)
    task_ends_s: Sequence[float] = ()  # successful tasks' end times, s after the run start
    ready_s: float | None = None  # server start to healthy, when the sweep started it
    extra: dict[str, Any] = field(default_factory=dict)


def common_window(points: Sequence[PointData]) -> tuple[float, float] | None:
    ws = [p.window_s for p in points if p.window_s]
    if not ws:
        return None
    w1 = float(min(ws))
    return WARM_FRACTION * w1, w1


def _row(p: PointData, win: tuple[float, float] | None, gpu_hour_usd: float | None) -> dict[str, Any]:
    s = p.summary
    sess = s.get("sessions") or {}
    agent = bool(sess)
    row: dict[str, Any] = {"target": p.target, "model": p.model, "gpus": p.gpus, "nodes": p.nodes,
                           "level": p.level, "ready_s": p.ready_s,
                           "output_tokens_per_s": _get(s, "throughput", "output_tokens_per_s"),
                           "requests_per_s": _get(s, "throughput", "requests_per_s"),
                           "ttft_p50_ms": _get(s, "metrics", "ttft_ms", "p50"),
                           "ttft_p95_ms": _get(s, "metrics", "ttft_ms", "p95")}
    if agent:
        started, cancelled = sess.get("started") or 0, sess.get("cancelled") or 0
        ok = sess.get("accepted", sess.get("completed")) or 0
        finished = started - cancelled
        row.update(task_p50_s=_s(_get(s, "task_ms", "p50")), task_p95_s=_s(_get(s, "task_ms", "p95")),
                   timeouts=sess.get("timed_out", 0), started=started, successful=ok,
                   success_rate=ok / finished if finished > 0 else None)
    else:
        req = s.get("requests") or {}
        failed = sum((req.get("failed") or {}).values())
        sent = (req.get("ok") or 0) + failed
        row.update(timeouts=(req.get("failed") or {}).get("timeout", 0),
                   success_rate=(req.get("ok") or 0) / sent if sent else None)
    if win is not None and agent:
        w0, w1 = win
        ends = np.asarray(p.task_ends_s, dtype=np.float64)
        n = int(((ends >= w0) & (ends <= w1)).sum())
        hours = (w1 - w0) / 3600.0
        row["tasks_in_window"] = n
        row["low_sample"] = n < MIN_TASKS
        row["tasks_per_hour"] = n / hours if hours > 0 else None
        if gpu_hour_usd is not None and p.gpus:
            row["usd_per_task"] = gpu_hour_usd * p.gpus * hours / n if n else None
    elif gpu_hour_usd is not None and p.gpus and row.get("requests_per_s"):
        row["usd_per_request"] = gpu_hour_usd * p.gpus / 3600.0 / row["requests_per_s"]
        if tok := row.get("output_tokens_per_s"):  # what serving prices are quoted in
            row["usd_per_1m_output_tokens"] = gpu_hour_usd * p.gpus / 3600.0 / tok * 1e6
    return row


def _s(ms: Any) -> float | None:
    return None if ms is None else float(ms) / 1000.0


def _goal(rows: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(the throughput column, the cost column) the table is judged on."""
    agent = any(r.get("tasks_per_hour") is not None for r in rows)
    return ("tasks_per_hour", "usd_per_task") if agent else ("output_tokens_per_s", "usd_per_request")


def _collapse(rows: list[dict[str, Any]], col: str) -> None:
    """Mark, per target, the levels where it collapsed (see the module docstring)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["target"], []).append(r)
    for members in by.values():
        best = 0.0
        for r in sorted(members, key=lambda r: r["level"]):
            v = r.get(col) or 0.0
            why = []
            if r.get("success_rate") is not None and r["success_rate"] < MIN_SUCCESS:
                why.append(f"success {r['success_rate']:.0%} < {MIN_SUCCESS:.0%}")
            if best > 0 and v < (1 - COLLAPSE_DROP) * best:
                why.append(
                    f"{col.replace('_', ' ')} {v:,.0f} is {1 - v / best:.0%} below its best {best:,.0f}"
                )
            r["collapsed"] = bool(why)
            r["collapse_reason"] = "; ".join(why) or None
            best = max(best, v)


def _scaling(rows: list[dict[str, Any]], col: str) -> None:
    """Efficiency against the smallest topology of the same model at the same level: only across GPU counts.
    Targets on the same GPUs (a max_num_seqs sweep, two engines on one GPU) have no scaling to measure:
    their efficiency is None (a ratio between them would read 378% as if one GPU scaled past linear)."""
    for r in rows:
        base = [b for b in rows if b["model"] == r["model"] and b["level"] == r["level"] and b.get("gpus")]
        if len({b["gpus"] for b in base}) < 2 or not r.get("gpus") or r.get(col) is None:
            r["scaling_efficiency"] = None
            continue
        b = min(base, key=lambda b: b["gpus"])
        if b is r or not b.get(col) or b["gpus"] == r["gpus"]:
            r["scaling_efficiency"] = 1.0 if b is r and b.get(col) else None
            continue
        r["scaling_efficiency"] = r[col] / (b[col] * r["gpus"] / b["gpus"])


def crossovers(rows: Sequence[Mapping[str, Any]], col: str, cost: str) -> list[dict[str, Any]]:
    """For each pair (smaller, larger) of one model: the first level from which the larger wins for good on
    ``col`` (higher) and on ``cost`` (lower); None when it never does."""
    out = []
    targets = _targets(rows)
    for i, a in enumerate(targets):
        for b in targets[i + 1:]:
            if a["model"] != b["model"] or (a["gpus"] or 0) >= (b["gpus"] or 0):
                continue
            ra, rb = _by_level(rows, a["target"]), _by_level(rows, b["target"])
            levels = sorted(set(ra) & set(rb))
            out.append({"smaller": a["target"], "larger": b["target"], "levels": levels,
                        "on_throughput": _first_win(levels, ra, rb, col, higher=True),
                        "on_cost": _first_win(levels, ra, rb, cost, higher=False),
                        "wins_throughput_at": _wins(levels, ra, rb, col, higher=True),
                        "wins_cost_at": _wins(levels, ra, rb, cost, higher=False)})
    return out


def _wins(levels: list[float], ra: dict, rb: dict, col: str, higher: bool) -> list[float]:
    return [lv for lv in levels if _beats(ra[lv].get(col), rb[lv].get(col), higher)]


def _beats(x: float | None, y: float | None, higher: bool) -> bool:
    if y is None:
        return False
    if x is None:
        return True
    return y > x if higher else y < x


def _first_win(levels: list[float], ra: dict, rb: dict, col: str, higher: bool) -> float | None:
    def wins(lv: float) -> bool:
        x, y = ra[lv].get(col), rb[lv].get(col)
        if y is None:
            return False
        if x is None:
            return True
        return y > x if higher else y < x

    for i, lv in enumerate(levels):
        if all(wins(v) for v in levels[i:]):
            return lv
    return None


def _targets(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for r in rows:
        seen.setdefault(r["target"], {"target": r["target"], "model": r["model"], "gpus": r["gpus"],
                                      "nodes": r["nodes"]})
    return sorted(seen.values(), key=lambda t: (t["gpus"] or 0, _natural(t["target"])))


def _natural(name: str) -> list[tuple[int, float | str]]:
    """Sort key reading the numbers in a name as numbers (max_num_seqs=4 before max_num_seqs=16)."""
    return [(0, float(x)) if x[:1].isdigit() else (1, x) for x in re.findall(r"\d+(?:\.\d+)?|\D+", name)]


def _by_level(rows: Sequence[Mapping[str, Any]], target: str) -> dict[float, Mapping[str, Any]]:
    return {r["level"]: r for r in rows if r["target"] == target}


def _backends(points: Sequence[PointData]) -> dict[str, str]:
    """The step-cost backend that priced each simulated target (``summary.simulator.backend``)."""
    out: dict[str, str] = {}
    for p in points:
        b = (p.summary.get("simulator") or {}).get("backend")
        if b:
            out.setdefault(p.target, str(b))
    return out


def decision_table(points: Sequence[PointData], *, gpu_hour_usd: float | None = None,
                   task_p95_slo_s: float | None = None) -> dict[str, Any]:
    """``{rows, window_s, goal, crossovers, advice, targets}``; see the module docstring."""
    win = common_window(points)
    rows = [
        _row(p, win, gpu_hour_usd)
        for p in sorted(points, key=lambda p: (p.gpus or 0, _natural(p.target), p.level))
    ]
    col, cost = _goal(rows)
    _collapse(rows, col)
    _scaling(rows, col)
    for r in rows:
        r["healthy"] = bool(r.get("success_rate") is not None and r["success_rate"] >= MIN_SUCCESS
                            and not r["collapsed"]
                            and (task_p95_slo_s is None or (r.get("task_p95_s") or 0) <= task_p95_slo_s))
    cross = crossovers(rows, col, cost)
    from servelab.analysis.decision_advice import advice_from_table

    out = {"rows": rows, "window_s": list(win) if win else None, "goal": {"throughput": col, "cost": cost},
           "gpu_hour_usd": gpu_hour_usd, "task_p95_slo_s": task_p95_slo_s, "crossovers": cross,
           "targets": _targets(rows), "backends": _backends(points)}
    out["advice"] = advice_from_table(out)
    return out
