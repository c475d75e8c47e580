"""Gateway overhead: the same workload sent straight to a server and through a gateway in front of it.

Pure functions over the two runs' request records (a requests Table, records, or samples from
:func:`servelab.analysis.compare.request_samples`). Every figure is "how much worse through the gateway":

* latency (TTFT, ITL, e2e) at each percentile: ``overhead = via - direct`` in ms and ``overhead_pct =
  100 * (via / direct - 1)``;
* throughput (output tokens/s, requests/s over equal time buckets): ``overhead = direct - via`` and
  ``overhead_pct = 100 * (1 - via / direct)`` (the share of throughput lost).

Each carries a bootstrap interval: latency percentiles resample the requests of each run independently
(m-out-of-n beyond ``max_n``, as :mod:`servelab.analysis.stats`); throughput resamples time buckets (a
block bootstrap, so bursts stay together). The relative interval is bootstrapped as a ratio, so the
direct run's own noise widens it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from servelab.analysis.compare import _boot_means, _rate_buckets, request_samples
from servelab.analysis.metrics import LoadMode
from servelab.analysis.stats import DEFAULT_MAX_N, _bootstrap_distribution

LATENCY_METRICS: tuple[str, ...] = ("ttft_ms", "itl_ms", "e2e_ms")
DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
MIN_SAMPLES = 10


def _interval(x: np.ndarray, confidence: float) -> tuple[float | None, float | None]:
    x = x[np.isfinite(x)]
    if x.size == 0:
        return None, None
    alpha = 100 * (1 - confidence) / 2
    lo, hi = np.percentile(x, [alpha, 100 - alpha])
    return float(lo), float(hi)


def _row(figure: str, unit: str, direct: float | None, via: float | None, diff: np.ndarray, ratio: np.ndarray,
         n: tuple[int, int], confidence: float, sign: float) -> dict[str, Any]:
    """One figure: point values, overhead (sign: +1 latency, -1 throughput) and its intervals."""
    row: dict[str, Any] = {"figure": figure, "unit": unit, "direct": direct, "via": via, "n": n,
                           "overhead": None, "overhead_lo": None, "overhead_hi": None,
                           "overhead_pct": None, "pct_lo": None, "pct_hi": None, "verdict": "too few samples"}
    if direct is None or via is None or min(n) < MIN_SAMPLES:
        return row
    lo, hi = _interval(sign * diff, confidence)
    row.update(overhead=sign * (via - direct), overhead_lo=lo, overhead_hi=hi)
    if direct > 0:
        plo, phi = _interval(sign * 100 * (ratio - 1), confidence)
        row.update(overhead_pct=sign * 100 * (via / direct - 1), pct_lo=plo, pct_hi=phi)
    if lo is None or hi is None:
        return row
    row["verdict"] = "within noise" if lo <= 0 <= hi else ("overhead" if lo > 0 else "faster via the gateway")
    return row


def _latency_rows(xa: np.ndarray, xb: np.ndarray, metric: str, percentiles: Sequence[float], resamples: int,
                  max_n: int, rng: np.random.Generator, confidence: float) -> list[dict[str, Any]]:
    xa, xb = xa[np.isfinite(xa)], xb[np.isfinite(xb)]
    pcts = [float(p) for p in percentiles]
    name = metric.removesuffix("_ms")
    if xa.size < 2 or xb.size < 2:
        empty = np.array([])
        return [_row(f"{name} p{p:g}", "ms", None, None, empty, empty, (int(xa.size), int(xb.size)),
                     confidence, 1.0) for p in pcts]
    pa_, pb_ = np.percentile(xa, pcts), np.percentile(xb, pcts)
    ra, sa = _bootstrap_distribution(xa, pcts, resamples, max_n, rng)
    rb, sb = _bootstrap_distribution(xb, pcts, resamples, max_n, rng)
    da = pa_ + sa * (ra - pa_)  # m-out-of-n: rescale each side's spread around its own estimate
    db = pb_ + sb * (rb - pb_)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(da > 0, db / da, np.nan)
    return [_row(f"{name} p{p:g}", "ms", float(pa_[i]), float(pb_[i]), db[:, i] - da[:, i], ratio[:, i],
                 (int(xa.size), int(xb.size)), confidence, 1.0) for i, p in enumerate(pcts)]


def _throughput_row(sa: Mapping[str, np.ndarray], sb: Mapping[str, np.ndarray], figure: str, unit: str,
                    buckets: int, resamples: int, rng: np.random.Generator, confidence: float) -> dict[str, Any]:
    ba, bb = _rate_buckets(sa, buckets), _rate_buckets(sb, buckets)
    n = (int(ba.size), int(bb.size))
    if ba.size < 2 or bb.size < 2:
        empty = np.array([])
        return _row(figure, unit, None, None, empty, empty, n, confidence, -1.0)
    ma, mb = _boot_means(ba, resamples, rng), _boot_means(bb, resamples, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(ma > 0, mb / ma, np.nan)
    row = _row(figure, unit, float(ba.mean()), float(bb.mean()), mb - ma, ratio, n, confidence, -1.0)
    row["note"] = f"block bootstrap over {buckets} time buckets"
    return row


def _count_samples(s: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**s, "out_tokens": np.ones_like(s["end_s"])}


def gateway_overhead(direct: Any, via: Any, *, mode: LoadMode = "closed",
                     percentiles: Sequence[float] = DEFAULT_PERCENTILES, resamples: int = 1000,
                     max_n: int = DEFAULT_MAX_N, buckets: int = 20, confidence: float = 0.95,
                     seed: int = 0) -> dict[str, Any]:
    """Overhead of ``via`` (through the gateway) over ``direct``: ``{"rows": [...], "headline": {...},
    "failures": {...}}``. Rows: TTFT, ITL and e2e at each percentile, then output tokens/s and requests/s.
    Same inputs and seed, same intervals."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    sa = direct if isinstance(direct, Mapping) else request_samples(direct, mode)
    sb = via if isinstance(via, Mapping) else request_samples(via, mode)
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for metric in LATENCY_METRICS:
        rows += _latency_rows(sa[metric], sb[metric], metric, percentiles, resamples, max_n, rng, confidence)
    rows.append(_throughput_row(sa, sb, "output tokens/s", "tok/s", buckets, resamples, rng, confidence))
    rows.append(_throughput_row(_count_samples(sa), _count_samples(sb), "requests/s", "req/s", buckets,
                                resamples, rng, confidence))
    by_name = {r["figure"]: r for r in rows}
    p0 = f"p{float(percentiles[0]):g}" if percentiles else "p50"
    headline = {k: by_name.get(f"{k} {p0}") for k in ("ttft", "e2e")}
    headline["throughput"] = by_name["output tokens/s"]
    failures = {"direct": _failure_rate(sa), "via": _failure_rate(sb)}
    return {"rows": rows, "headline": headline, "failures": failures, "confidence": confidence,
            "percentiles": [float(p) for p in percentiles]}


def _failure_rate(s: Mapping[str, np.ndarray]) -> dict[str, Any]:
    f = np.asarray(s.get("failed", np.array([])), dtype=float)
    return {"requests": int(f.size), "failed": int(f.sum()), "rate": float(f.mean()) if f.size else None}
