"""Server evidence of one run, in one place (``summary.json`` ``evidence``; pure, no I/O).

What the server said (telemetry, :func:`servelab.analysis.telemetry.summarize_telemetry` under
``summary["server"]``) beside what the requests recorded (``srv_*`` ground truth when the target reports
it): KV-cache usage (peak, mean, time above 90 %), evictions, preemptions, prefix-cache hit rate, server
queueing beside the client's schedule lag, and for mixture-of-experts deployments the expert-load
imbalance (max/mean tokens per EP rank over steps, p50/p95; it cannot exceed ``ep``) and the
communication share of step time. Every figure says where it came from; a figure nobody measured is
absent, never 0.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from servelab.analysis.attribution import int_columns
from servelab.records.schema import OK
from servelab.records.summary import dig as _get


def _pcts(v: np.ndarray) -> dict[str, float] | None:
    if not v.size:
        return None
    p50, p95 = np.percentile(v, [50, 95])
    return {"p50": float(p50), "p95": float(p95), "mean": float(v.mean()), "n": int(v.size)}


def _request_side(requests: Any) -> dict[str, Any]:
    """From one table (or records), or an iterator of tables (a run's Parquet file batch by batch: only the
    successful requests' ``srv_*`` values are kept, and only while every one of them has a value)."""
    if requests is None:
        return {}
    names = ("srv_queue_ns", "srv_preempted_ns")
    keep: dict[str, list[np.ndarray] | None] = {k: [] for k in names}
    any_ok = False
    for part in (requests if isinstance(requests, Iterator) else [requests]):
        c = int_columns(part, names)
        ok = (c["status"] == OK) & ~c["warmup"]
        any_ok = any_ok or bool(ok.any())
        for k in names:
            got = keep[k]
            if got is not None:
                got.append(c[k][ok])
                if c[k + "?"][ok].any():
                    keep[k] = None
    out: dict[str, Any] = {}
    queue, pre_parts = keep["srv_queue_ns"], keep["srv_preempted_ns"]
    if any_ok and queue is not None:
        q = np.concatenate(queue)
        out["server_queue_ms"] = {**(_pcts(q / 1e6) or {}), "source": "requests (srv_queue_ns)"}
    if any_ok and pre_parts is not None:
        pre = np.concatenate(pre_parts)
        out["preempted_requests"] = {"count": int((pre > 0).sum()), "share": float((pre > 0).mean()),
                                     "waiting_ms_total": float(pre.sum() / 1e6), "source": "requests"}
    return out


def _ep(manifest: Mapping[str, Any] | None) -> int | None:
    for path in (("target", "deployment", "ep"), ("target", "ep"), ("target", "facts", "deployment", "ep")):
        v = _get(manifest or {}, *path)
        if isinstance(v, int | float) and v >= 1:
            return int(v)
    return None


def run_evidence(requests: Any, summary: Mapping[str, Any], manifest: Mapping[str, Any] | None = None
                 ) -> dict[str, Any]:
    """``{kv, kv_evicted_blocks, preemptions, preempted_requests, prefix_cache_hit_rate, server_queue_ms,
    client_lag_ms, moe}``; see the module docstring."""
    server = summary.get("server") or {}
    out: dict[str, Any] = {}
    kv = _get(server, "gauges", "kv_cache_usage")
    if kv:
        out["kv"] = {
            "peak": kv.get("max"),
            "mean": kv.get("mean"),
            "peak_engine": kv.get("max_engine"),
            "share_above_90": kv.get("share_above_90"),
            "seconds_above_90": kv.get("seconds_above_90"),
            "source": "telemetry (mean across engines at each scrape)",
        }
    elif "kv_cache_usage" in (server.get("unsampled_gauges") or ()):
        out["kv"] = {"peak": None, "mean": None, "unsampled": True, "scrapes": server.get("scrapes"),
                     "window_s": server.get("window_s"),
                     "source": "telemetry: no scrape fell between the first (before the load) and the last"}
    if server.get("kv_evicted_blocks") is not None:
        out["kv_evicted_blocks"] = server["kv_evicted_blocks"]
    pre = _get(server, "counters", "preemptions_total")
    if pre is not None:
        out["preemptions"] = pre
    if server.get("prefix_cache_hit_rate") is not None:
        out["prefix_cache_hit_rate"] = server["prefix_cache_hit_rate"]
        out["prefix_cache_source"] = "telemetry (hit / query tokens)"
    else:
        tok = summary.get("tokens") or {}
        if tok.get("input") and tok.get("cached") is not None and tok.get("source") == "usage":
            out["prefix_cache_hit_rate"] = tok["cached"] / tok["input"]
            out["prefix_cache_source"] = "requests (usage cached / prompt tokens)"
    out.update(_request_side(requests))
    if (
        "server_queue_ms" not in out
        and _get(server, "histograms", "queue_time_seconds", "mean_ms") is not None
    ):
        out["server_queue_ms"] = {"mean": server["histograms"]["queue_time_seconds"]["mean_ms"],
                                  "source": "telemetry (queue-time histogram)"}
    lag = _get(summary, "metrics", "lag_ms")
    if lag and lag.get("n"):
        out["client_lag_ms"] = {"p50": lag.get("p50"), "p95": lag.get("p95"), "mean": lag.get("mean"),
                                "source": "requests (sent - intended)"}
    moe = _moe(server, _ep(manifest))
    if moe:
        out["moe"] = moe
    return out


def _moe(server: Mapping[str, Any], ep: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if ep is not None:
        out["ep"] = ep
    imb = server.get("expert_imbalance")
    # ep unknown (an HTTP target) and every step even: a dense model or no expert parallelism, nothing to say
    even = ep is None and imb is not None and (imb.get("p95") or 0) <= 1 + 1e-9
    if imb and imb.get("n") and (ep is None or ep > 1) and not even:
        out["imbalance_p50"], out["imbalance_p95"], out["steps"] = (
            imb.get("p50"),
            imb.get("p95"),
            imb.get("n"),
        )
        if ep is not None:
            out["imbalance_within_ep"] = bool(imb.get("p95", 0) <= ep + 1e-9)
    if server.get("communication_share") is not None:
        out["communication_share"] = server["communication_share"]
        out["step_seconds"] = server.get("step_seconds")
    return out if (len(out) > 1 or "ep" not in out) else {}
