"""Mixed traffic: the figures of each workload class of a run, and the interference between classes.

``classes`` (summary.json) has one entry per class: its requests, latency percentiles (TTFT, ITL, TPOT,
end-to-end, server queue), throughput and goodput computed exactly as the run's own (``build_summary`` over
that class's records), and its tasks (sessions). Per-class request counts add up to the run's.

``interference`` compares the first (interactive) class in the mix with the same class run alone (same
seed, same load): for each metric and percentile, alone, mixed, delta (mixed - alone, ms) and ratio.
Pure: records in, dicts out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from servelab.analysis.agents import agent_summary
from servelab.analysis.summary import build_summary, jsonable
from servelab.records.schema import RequestRecord, SessionRecord

CLASS_METRICS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "queue_ms")
INTERFERENCE_METRICS = ("ttft_ms", "e2e_ms", "itl_ms")
INTERFERENCE_PCTS = ("p50", "p95", "p99")


def _of_class(records: Any, name: str) -> Any:
    """The rows (a Table) or records (a list) of class ``name``."""
    if records is None:
        return None
    if isinstance(records, pa.Table):
        if "mix_class" not in records.column_names:
            return records.slice(0, 0)
        return records.filter(pc.fill_null(pc.equal(records.column("mix_class"), name), False))
    return [r for r in records if getattr(r, "mix_class", None) == name]


def class_figures(
    requests: pa.Table | Sequence[RequestRecord],
    sessions: pa.Table | Sequence[SessionRecord] | None,
    config: Any,
    classes: Sequence[Mapping[str, Any]],
    *,
    started_ns: int,
    ended_ns: int,
) -> dict[str, Any]:
    """``{class name: figures}`` for each of ``classes`` ({name, workload, tenant, mode, users, rate})."""
    out: dict[str, Any] = {}
    for c in classes:
        name = str(c["name"])
        mine = _of_class(requests, name)
        s = build_summary(
            mine, config, started_ns=started_ns, ended_ns=ended_ns, mode=c.get("mode") or "closed"
        )
        metrics = {
            m: {k: v for k, v in (s["metrics"].get(m) or {}).items() if k != "ci"} for m in CLASS_METRICS
        }
        entry: dict[str, Any] = {
            "workload": c.get("workload"), "tenant": c.get("tenant"), "mode": c.get("mode"),
            "users": c.get("users"), "rate": c.get("rate"),
            "requests": s["requests"], "metrics": metrics, "throughput": s["throughput"],
            "goodput": {k: s["goodput"].get(k) for k in ("requests", "fraction")},
            "errors": {"rate": s["errors"].get("rate")},
        }
        ses = _of_class(sessions, name)
        if ses is not None:
            a = agent_summary(ses, percentiles=getattr(config, "percentiles", ()))
            entry["sessions"] = a["sessions"]
            entry["task_ms"] = {k: v for k, v in (a.get("task_ms") or {}).items() if k != "ci"}
            entry["tasks_per_hour"] = a.get("tasks_per_hour")
        out[name] = entry
    return jsonable(out)


def _ratio(mixed: float | None, alone: float | None) -> float | None:
    if mixed is None or alone is None or alone <= 0:
        return None
    return mixed / alone


def interference(mixed: Mapping[str, Any], alone: Mapping[str, Any], name: str, others: Sequence[str],
                 alone_run: str = "baseline") -> dict[str, Any]:
    """The class ``name`` with the ``others`` (``mixed``: its ``classes`` entry in the mixed run) vs alone
    (``alone``: its entry in the run of it alone): per metric and percentile {alone, mixed, delta, ratio}."""
    metrics: dict[str, Any] = {}
    for m in INTERFERENCE_METRICS:
        a_m, x_m = (alone.get("metrics") or {}).get(m) or {}, (mixed.get("metrics") or {}).get(m) or {}
        row = {}
        for p in INTERFERENCE_PCTS:
            a, x = a_m.get(p), x_m.get(p)
            row[p] = {"alone": a, "mixed": x, "delta": None if a is None or x is None else x - a,
                      "ratio": _ratio(x, a)}
        metrics[m] = row
    return jsonable(
        {
            "class": name,
            "with": list(others),
            "alone_run": alone_run,
            "requests": {
                "alone": (alone.get("requests") or {}).get("ok"),
                "mixed": (mixed.get("requests") or {}).get("ok"),
            },
            "metrics": metrics,
        }
    )
