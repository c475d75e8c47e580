"""What the server said about itself during the run, reduced to figures (pure; no I/O).

One canonical metric may arrive under several raw names (vLLM exports ``vllm:kv_cache_usage_perc`` and its
older name ``vllm:gpu_cache_usage_perc`` for the same gauge; ``inter_token_latency`` and
``time_per_output_token`` for the same histogram): ONE raw name is used per canonical metric (the
current one, :data:`PREFER`), never their sum.

Counters become deltas over the run (last minus first sample of each label set, summed over label sets);
histograms become mean = delta(sum) / delta(count). Gauges across label sets (data-parallel engines, GPUs)
combine by kind: fractions (KV-cache usage, GPU utilization) take the MEAN across engines at each instant
(``max_engine`` keeps the fullest engine's peak); counts and amounts (running requests, bytes, watts) add
up. Then mean and max over time. KV-cache usage adds the share (and seconds) of samples in which some
engine was above 90 %. Prefix-cache effects are claimed only from the hit and query counters.

The simulator's own series (``servelab_sim_*``) add KV evictions, the communication share of step time
(communication seconds / busy seconds; the parts may overlap, so they are not summed) and
the expert-load imbalance per step (a histogram of max/mean tokens per EP rank, <= ep by construction),
reported as p50/p95 over steps.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import orjson

GAUGES = ("requests_running", "requests_waiting", "kv_cache_usage", "slots_busy", "gpu_utilization",
          "gpu_memory_used_bytes", "gpu_power_watts", "gpu_sm_clock_mhz")
FRACTION_GAUGES = frozenset({"kv_cache_usage", "gpu_utilization"})
MEAN_GAUGES = frozenset({"gpu_sm_clock_mhz"})  # a clock does not add up across GPUs either
COUNTERS = (
    "preemptions_total",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "request_success_total",
)
HISTOGRAMS = ("ttft_seconds", "itl_seconds", "queue_time_seconds", "e2e_seconds")
# Raw names preferred when a server exports several for one canonical metric (current before older).
PREFER = ("vllm:kv_cache_usage_perc", "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total",
          "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
          "vllm:request_success_total", "vllm:inter_token_latency_seconds")
KV_HIGH = 0.9
SIM_EVICTED = "servelab_sim_kv_evicted_blocks_total"
SIM_STEP_PARTS = "servelab_sim_step_seconds_total"
SIM_IMBALANCE = "servelab_sim_expert_imbalance_ratio"
SIM_BUSY = "servelab_sim_busy_seconds_total"

Series = dict[tuple[str, str], list[tuple[int, float]]]


def _base(raw: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if raw.endswith(suffix):
            return raw[: -len(suffix)]
    return raw


def _rank(raw: str) -> tuple[int, str]:
    base = _base(raw)
    for i, p in enumerate(PREFER):
        if base == p or base == _base(p):
            return (i, raw)
    return (len(PREFER), raw)


def _series(cols: dict[str, list[Any]]) -> Series:
    """Canonical series keyed by (name, labels), one raw name per canonical name."""
    raws = cols.get("raw_name") or [None] * len(cols["t_ns"])
    chosen: dict[str, str] = {}
    for name, raw in zip(cols["name"], raws, strict=True):
        if name is None or raw is None:
            continue
        canon = _base(name)
        cur = chosen.get(canon)
        if cur is None or _rank(raw) < _rank(cur):
            chosen[canon] = raw
    out: Series = defaultdict(list)
    for t, name, raw, labels, value in zip(cols["t_ns"], cols["name"], raws, cols["labels"], cols["value"],
                                           strict=True):
        if name is None or (raw is not None and _base(chosen.get(_base(name), raw)) != _base(raw)):
            continue
        out[(name, labels)].append((t, value))
    for pts in out.values():
        pts.sort()
    return out


def _raw_series(cols: dict[str, list[Any]], raw_name: str) -> Series:
    out: Series = defaultdict(list)
    for t, raw, labels, value in zip(cols["t_ns"], cols.get("raw_name") or [], cols["labels"], cols["value"],
                                     strict=False):
        if raw == raw_name:
            out[(raw, labels)].append((t, value))
    for pts in out.values():
        pts.sort()
    return out


def _delta(series: Series, name: str) -> float | None:
    found = False
    total = 0.0
    for (n, _labels), pts in series.items():
        if n != name or not pts:
            continue
        found = True
        d = pts[-1][1] - pts[0][1]
        total += d if d >= 0 else pts[-1][1]  # a counter reset (server restart): count from zero
    return total if found else None


def _gauge(series: Series, name: str, window_s: float, span: tuple[int, int] | None = None
           ) -> dict[str, float] | None:
    """Mean, max (and for KV usage the time above 90%) of a gauge over its scrapes; None when it was never
    scraped, or when ``span`` (the first and last scrape of the run) holds no scrape of it strictly inside:
    the first scrape is taken before the load and the last after it, so a run shorter than the scrape
    interval never saw the gauge under load, and its readings (an idle server's 0) are not the run's."""
    by_t: dict[int, list[float]] = defaultdict(list)
    for (n, _labels), pts in series.items():
        if n == name:
            for t, v in pts:
                by_t[t].append(v)
    if not by_t or (span is not None and not any(span[0] < t < span[1] for t in by_t)):
        return None
    per_engine = name in FRACTION_GAUGES or name in MEAN_GAUGES
    vals = [sum(vs) / len(vs) if per_engine else sum(vs) for vs in by_t.values()]
    out = {"mean": sum(vals) / len(vals), "max": max(vals), "n": len(vals)}
    if name in FRACTION_GAUGES:
        out["max_engine"] = max(max(vs) for vs in by_t.values())
        out["engines"] = max(len(vs) for vs in by_t.values())
    if name == "kv_cache_usage":
        high = sum(1 for vs in by_t.values() if max(vs) > KV_HIGH) / len(by_t)
        out["share_above_90"] = high
        out["seconds_above_90"] = high * window_s
    return out


def bucket_quantile(bounds: list[float], cum: list[float], q: float, lowest: float = 0.0) -> float:
    """Prometheus ``histogram_quantile``: the ``q`` quantile from cumulative bucket counts, linear within the
    bucket that holds it (from ``lowest`` in the first); in the +Inf bucket, the last finite bound."""
    n = cum[-1]
    rank = q * n
    prev_b, prev_c = lowest, 0.0
    for b, c in zip(bounds, cum, strict=True):
        if c >= rank and c > prev_c:
            if math.isinf(b):
                return prev_b
            return prev_b + (b - prev_b) * (rank - prev_c) / (c - prev_c)
        prev_b, prev_c = (b if not math.isinf(b) else prev_b), c
    return prev_b


def _histogram_quantiles(series: Series, qs: tuple[float, ...], lowest: float = 0.0) -> dict[str, Any] | None:
    """Quantiles of a Prometheus histogram's delta over the run (``*_bucket`` series with ``le``)."""
    counts: dict[float, float] = defaultdict(float)
    for (_raw, labels), pts in series.items():
        le = orjson.loads(labels).get("le") if labels else None
        if le is None or not pts:
            continue
        d = pts[-1][1] - pts[0][1]
        counts[math.inf if le in ("+Inf", "inf") else float(le)] += d if d >= 0 else pts[-1][1]
    if not counts:
        return None
    bounds = sorted(counts)
    cum = [counts[b] for b in bounds]  # Prometheus buckets are cumulative already
    n = cum[-1]
    if n <= 0:
        return {"n": 0}
    out: dict[str, Any] = {"n": int(n)}
    for q in qs:
        out[f"p{q * 100:g}"] = bucket_quantile(bounds, cum, q, lowest)
    finite = [b for b in bounds if not math.isinf(b)]
    out["max_bound"] = finite[-1] if finite else None
    return out


def _sim_figures(cols: dict[str, list[Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ev = _delta(_raw_series(cols, SIM_EVICTED), SIM_EVICTED)
    if ev is not None:
        out["kv_evicted_blocks"] = ev
    parts = _raw_series(cols, SIM_STEP_PARTS)
    by_part: dict[str, float] = {}
    for (_raw, labels), pts in parts.items():
        part = orjson.loads(labels).get("part") if labels else None
        if part and pts:
            by_part[part] = by_part.get(part, 0.0) + max(pts[-1][1] - pts[0][1], 0.0)
    busy = _delta(_raw_series(cols, SIM_BUSY), SIM_BUSY)
    total = busy if busy else sum(by_part.values())  # step time; the parts' sum when busy time is absent
    if total > 0 and by_part:
        out["step_seconds"] = by_part
        out["busy_seconds"] = busy
        out["communication_share"] = min(by_part.get("communication", 0.0) / total, 1.0)
    imb = _histogram_quantiles(_raw_series(cols, SIM_IMBALANCE + "_bucket"), (0.5, 0.95), lowest=1.0)
    if imb and imb.get("n"):
        out["expert_imbalance"] = imb
    return out


def summarize_telemetry(cols: dict[str, list[Any]], engine: str | None = None) -> dict[str, Any]:
    """Figures from telemetry columns (t_ns, name, raw_name, labels, value[, source])."""
    if not cols.get("t_ns"):
        return {"available": False}
    series = _series(cols)
    ts = cols["t_ns"]
    window = (max(ts) - min(ts)) / 1e9
    out: dict[str, Any] = {"available": True, "engine": engine, "samples": len(ts), "window_s": window}
    span = (min(ts), max(ts))
    out["gauges"] = {g: v for g in GAUGES if (v := _gauge(series, g, window, span)) is not None}
    scraped = {n for n, _labels in series}
    out["unsampled_gauges"] = [g for g in GAUGES if g in scraped and g not in out["gauges"]]
    out["scrapes"] = len(set(ts))
    out["counters"] = {c: v for c in COUNTERS if (v := _delta(series, c)) is not None}
    hist: dict[str, Any] = {}
    for h in HISTOGRAMS:
        s, n = _delta(series, h + "_sum"), _delta(series, h + "_count")
        if s is not None and n:
            hist[h] = {"mean_ms": 1000.0 * s / n, "n": n}
    out["histograms"] = hist
    q, hits = (
        out["counters"].get("prefix_cache_queries_total"),
        out["counters"].get("prefix_cache_hits_total"),
    )
    out["prefix_cache_hit_rate"] = (hits / q) if q else None
    out.update(_sim_figures(cols))
    return out


# Engines whose prompt-token counter counts only the tokens they evaluated, not those found in the prompt
# cache (llama.cpp's llamacpp:prompt_tokens_total); their cached counter holds the rest.
_PROMPT_COUNTER_EXCLUDES_CACHED = frozenset({"llama.cpp"})


def token_agreement(server: dict[str, Any], client_output: int, client_input: int,
                    client_cached: int | None = None) -> dict[str, Any]:
    """Client token counts beside the server's own counters, with the relative difference.

    For an engine whose prompt counter excludes cached tokens (llama.cpp) the server's prompt figure is
    evaluated + cached (its cached-token counter); without that counter, the client's prompt tokens minus its
    usage-reported cached tokens (``client_cached``); with neither, the difference is not computed (None, with
    a ``note``) rather than reported as a mismatch."""
    c = server.get("counters", {}) if server else {}
    out: dict[str, Any] = {}
    for key, mine in (("generation_tokens_total", client_output), ("prompt_tokens_total", client_input)):
        theirs = c.get(key)
        if theirs is None:
            continue
        row: dict[str, Any] = {}
        if key == "prompt_tokens_total" and server.get("engine") in _PROMPT_COUNTER_EXCLUDES_CACHED:
            cached = c.get("prefix_cache_hits_total")
            if cached is not None:
                theirs, row["basis"] = theirs + cached, "server evaluated + cached prompt tokens"
            elif client_cached is not None:
                mine, row["basis"] = mine - client_cached, "client prompt tokens minus usage cached tokens"
            else:
                out[key] = {
                    "server": theirs,
                    "client": mine,
                    "relative_difference": None,
                    "note": "the server's prompt counter excludes cached tokens and no cached count is known",
                }
                continue
        diff = (mine - theirs) / theirs if theirs else None
        out[key] = {"server": theirs, "client": mine, "relative_difference": diff, **row}
    return out
