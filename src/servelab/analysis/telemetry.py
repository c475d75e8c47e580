"""What the server said about itself during the run, reduced to figures (pure; no I/O).

Counters become deltas over the run (last minus first sample of each series, summed over labels);
gauges become mean and max over time; histograms become mean = delta(sum) / delta(count). Prefix-cache
effects are claimed only from the hit and query counters.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

GAUGES = ("requests_running", "requests_waiting", "kv_cache_usage", "slots_busy", "gpu_utilization",
          "gpu_memory_used_bytes", "gpu_power_watts", "gpu_sm_clock_mhz")
COUNTERS = ("preemptions_total", "prefix_cache_queries_total", "prefix_cache_hits_total", "prompt_tokens_total",
            "generation_tokens_total", "request_success_total")
HISTOGRAMS = ("ttft_seconds", "itl_seconds", "queue_time_seconds", "e2e_seconds")


def _series(cols: dict[str, list[Any]]) -> dict[tuple[str, str], list[tuple[int, float]]]:
    out: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for t, name, labels, value in zip(cols["t_ns"], cols["name"], cols["labels"], cols["value"], strict=True):
        if name is None:
            continue
        out[(name, labels)].append((t, value))
    for pts in out.values():
        pts.sort()
    return out


def _delta(series: dict[tuple[str, str], list[tuple[int, float]]], name: str) -> float | None:
    found = False
    total = 0.0
    for (n, _labels), pts in series.items():
        if n != name or not pts:
            continue
        found = True
        d = pts[-1][1] - pts[0][1]
        total += d if d >= 0 else pts[-1][1]  # a counter reset (server restart): count from zero
    return total if found else None


def _gauge(series: dict[tuple[str, str], list[tuple[int, float]]], name: str) -> dict[str, float] | None:
    by_t: dict[int, float] = defaultdict(float)
    for (n, _labels), pts in series.items():
        if n == name:
            for t, v in pts:
                by_t[t] += v  # several GPUs or engines: total at each instant
    if not by_t:
        return None
    vals = list(by_t.values())
    return {"mean": sum(vals) / len(vals), "max": max(vals), "n": len(vals)}


def summarize_telemetry(cols: dict[str, list[Any]], engine: str | None = None) -> dict[str, Any]:
    """Figures from telemetry columns (t_ns, name, labels, value[, source])."""
    if not cols.get("t_ns"):
        return {"available": False}
    series = _series(cols)
    ts = cols["t_ns"]
    out: dict[str, Any] = {"available": True, "engine": engine, "samples": len(ts),
                           "window_s": (max(ts) - min(ts)) / 1e9}
    out["gauges"] = {g: v for g in GAUGES if (v := _gauge(series, g)) is not None}
    out["counters"] = {c: v for c in COUNTERS if (v := _delta(series, c)) is not None}
    hist: dict[str, Any] = {}
    for h in HISTOGRAMS:
        s, n = _delta(series, h + "_sum"), _delta(series, h + "_count")
        if s is not None and n:
            hist[h] = {"mean_ms": 1000.0 * s / n, "n": n}
    out["histograms"] = hist
    q, hits = out["counters"].get("prefix_cache_queries_total"), out["counters"].get("prefix_cache_hits_total")
    out["prefix_cache_hit_rate"] = (hits / q) if q else None
    return out


def token_agreement(server: dict[str, Any], client_output: int, client_input: int) -> dict[str, Any]:
    """Client token counts beside the server's own counters, with the relative difference."""
    c = server.get("counters", {}) if server else {}
    out: dict[str, Any] = {}
    for key, mine in (("generation_tokens_total", client_output), ("prompt_tokens_total", client_input)):
        theirs = c.get(key)
        if theirs is None:
            continue
        diff = (mine - theirs) / theirs if theirs else None
        out[key] = {"server": theirs, "client": mine, "relative_difference": diff}
    return out
