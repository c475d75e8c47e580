"""Gateway overhead: the same workload sent straight to a server and through a gateway in front of it.

Pure functions over the two runs' request records (a requests Table, records, or samples from
:func:`servelab.analysis.compare.request_samples`). Every figure is "how much worse through the gateway":

* latency (TTFT, ITL, e2e) at each percentile: ``overhead = via - direct`` in ms and ``overhead_pct =
  100 * (via / direct - 1)``;
* throughput (output tokens/s, requests/s over equal time buckets): ``overhead = direct - via`` and
  ``overhead_pct = 100 * (1 - via / direct)`` (the share of throughput lost).

Each carries a bootstrap interval: latency percentiles resample the requests of each run independently
(m-out-of-n beyond ``max_n``, as :mod:`servelab.analysis.stats`); throughput resamples requests too, as
the figure is computed (:func:`servelab.analysis.stats.rate_replicates`). The relative interval is
bootstrapped as a ratio, so the direct run's own noise widens it.

Each side may be several repetitions (``servelab gateway-overhead`` interleaves them A B B A, so a drift
of the server over time falls on both sides alike): their samples are pooled, throughput over the summed
windows.

A gateway cannot make the server faster: a negative overhead is run-to-run noise, however narrow its
interval. The verdict is ``overhead`` (the interval is above 0 and the overhead above the noise floor) or
``no measurable overhead``, never "faster"; a negative overhead beyond its interval is flagged in ``note``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from servelab.analysis.compare import rate_inputs, request_samples
from servelab.analysis.metrics import LoadMode
from servelab.analysis.stats import DEFAULT_MAX_N, RateSample, _bootstrap_distribution, rate_replicates

LATENCY_METRICS: tuple[str, ...] = ("ttft_ms", "itl_ms", "e2e_ms")
DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
MIN_SAMPLES = 10
DEFAULT_NOISE_FLOOR = 0.01  # overheads at or under 1% of the direct figure are not a measurable overhead
NO_OVERHEAD = "no measurable overhead"


def _interval(x: np.ndarray, confidence: float) -> tuple[float | None, float | None]:
    x = x[np.isfinite(x)]
    if x.size == 0:
        return None, None
    alpha = 100 * (1 - confidence) / 2
    lo, hi = np.percentile(x, [alpha, 100 - alpha])
    return float(lo), float(hi)


def _row(figure: str, unit: str, direct: float | None, via: float | None, diff: np.ndarray, ratio: np.ndarray,
         n: tuple[int, int], confidence: float, sign: float, floor: float) -> dict[str, Any]:
    """One figure: point values, overhead (sign: +1 latency, -1 throughput) and its intervals."""
    row: dict[str, Any] = {"figure": figure, "unit": unit, "direct": direct, "via": via, "n": n,
                           "overhead": None, "overhead_lo": None, "overhead_hi": None,
                           "overhead_pct": None, "pct_lo": None, "pct_hi": None, "verdict": "too few samples"}
    if direct is None or via is None or min(n) < MIN_SAMPLES:
        return row
    lo, hi = _interval(sign * diff, confidence)
    overhead = sign * (via - direct)
    row.update(overhead=overhead, overhead_lo=lo, overhead_hi=hi)
    if direct > 0:
        plo, phi = _interval(sign * 100 * (ratio - 1), confidence)
        row.update(overhead_pct=sign * 100 * (via / direct - 1), pct_lo=plo, pct_hi=phi)
    if lo is None or hi is None:
        return row
    small = direct > 0 and abs(overhead) <= floor * direct
    row["verdict"] = "overhead" if lo > 0 and not small else NO_OVERHEAD
    if hi < 0 and not small:
        row["note"] = ("lower through the gateway beyond the interval: run-to-run drift, not a gain "
                       "(more repetitions narrow it)")
    return row


def _latency_rows(
    xa: np.ndarray,
    xb: np.ndarray,
    metric: str,
    percentiles: Sequence[float],
    resamples: int,
    max_n: int,
    rng: np.random.Generator,
    confidence: float,
    floor: float,
) -> list[dict[str, Any]]:
    xa, xb = xa[np.isfinite(xa)], xb[np.isfinite(xb)]
    pcts = [float(p) for p in percentiles]
    name = metric.removesuffix("_ms")
    if xa.size < 2 or xb.size < 2:
        empty = np.array([])
        return [_row(f"{name} p{p:g}", "ms", None, None, empty, empty, (int(xa.size), int(xb.size)),
                     confidence, 1.0, floor) for p in pcts]
    pa_, pb_ = np.percentile(xa, pcts), np.percentile(xb, pcts)
    ra, sa = _bootstrap_distribution(xa, pcts, resamples, max_n, rng)
    rb, sb = _bootstrap_distribution(xb, pcts, resamples, max_n, rng)
    da = pa_ + sa * (ra - pa_)  # m-out-of-n: rescale each side's spread around its own estimate
    db = pb_ + sb * (rb - pb_)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(da > 0, db / da, np.nan)
    return [_row(f"{name} p{p:g}", "ms", float(pa_[i]), float(pb_[i]), db[:, i] - da[:, i], ratio[:, i],
                 (int(xa.size), int(xb.size)), confidence, 1.0, floor) for i, p in enumerate(pcts)]


def _pooled_rate(runs: Sequence[Mapping[str, np.ndarray]], what: str) -> RateSample | None:
    """One throughput sample over repetitions: requests pooled, windows summed."""
    parts = [r for r in (rate_inputs(s, what) for s in runs) if r is not None]
    if not parts:
        return None
    return RateSample(np.concatenate([p.tokens for p in parts]), np.concatenate([p.busy for p in parts]),
                      sum(p.window_s for p in parts), all(p.closed for p in parts))


def _throughput_row(
    sa: Sequence[Mapping[str, np.ndarray]],
    sb: Sequence[Mapping[str, np.ndarray]],
    figure: str,
    unit: str,
    what: str,
    resamples: int,
    max_n: int,
    rng: np.random.Generator,
    confidence: float,
    floor: float,
) -> dict[str, Any]:
    ra, rb = _pooled_rate(sa, what), _pooled_rate(sb, what)
    n = (0 if ra is None else int(ra.tokens.size), 0 if rb is None else int(rb.tokens.size))
    if ra is None or rb is None or min(n) < 2:
        empty = np.array([])
        return _row(figure, unit, None, None, empty, empty, n, confidence, -1.0, floor)
    ma = rate_replicates(ra, resamples=resamples, max_n=max_n, rng=rng)
    mb = rate_replicates(rb, resamples=resamples, max_n=max_n, rng=rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(ma > 0, mb / ma, np.nan)
    row = _row(figure, unit, ra.rate, rb.rate, mb - ma, ratio, n, confidence, -1.0, floor)
    row["note"] = row.get("note") or "per-request bootstrap of the run's figure"
    return row


def _samples(x: Any, mode: LoadMode) -> list[Mapping[str, np.ndarray]]:
    """One side as a list of sample dicts: one run (records, a Table, samples) or a list of repetitions."""
    if isinstance(x, Mapping):
        return [x]
    if isinstance(x, list | tuple) and x and not hasattr(x[0], "request_id"):
        return [r if isinstance(r, Mapping) else request_samples(r, mode) for r in x]
    return [request_samples(x, mode)]


def _pool(runs: Sequence[Mapping[str, np.ndarray]], key: str) -> np.ndarray:
    return np.concatenate([np.asarray(r.get(key, np.array([])), dtype=float) for r in runs])


def gateway_overhead(direct: Any, via: Any, *, mode: LoadMode = "closed",
                     percentiles: Sequence[float] = DEFAULT_PERCENTILES, resamples: int = 1000,
                     max_n: int = DEFAULT_MAX_N, confidence: float = 0.95, seed: int = 0,
                     noise_floor: float = DEFAULT_NOISE_FLOOR) -> dict[str, Any]:
    """Overhead of ``via`` (through the gateway) over ``direct``: ``{"rows": [...], "headline": {...},
    "failures": {...}}``. Rows: TTFT, ITL and e2e at each percentile, then output tokens/s and requests/s.
    Each side: one run's records/Table/samples, or a list of repetitions (pooled). Same inputs and seed,
    same intervals."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    sa, sb = _samples(direct, mode), _samples(via, mode)
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for metric in LATENCY_METRICS:
        rows += _latency_rows(
            _pool(sa, metric),
            _pool(sb, metric),
            metric,
            percentiles,
            resamples,
            max_n,
            rng,
            confidence,
            noise_floor,
        )
    rows.append(_throughput_row(sa, sb, "output tokens/s", "tok/s", "req_tokens", resamples, max_n, rng,
                                confidence, noise_floor))
    rows.append(_throughput_row(sa, sb, "requests/s", "req/s", "req_ok", resamples, max_n, rng, confidence,
                                noise_floor))
    by_name = {r["figure"]: r for r in rows}
    p0 = f"p{float(percentiles[0]):g}" if percentiles else "p50"
    headline = {k: by_name.get(f"{k} {p0}") for k in ("ttft", "e2e")}
    headline["throughput"] = by_name["output tokens/s"]
    failures = {"direct": _failure_rate(_pool(sa, "failed")), "via": _failure_rate(_pool(sb, "failed"))}
    return {"rows": rows, "headline": headline, "failures": failures, "confidence": confidence,
            "percentiles": [float(p) for p in percentiles], "noise_floor": noise_floor,
            "repetitions": {"direct": len(sa), "via": len(sb)}}


def output_lengths(direct: Any, via: Any) -> dict[str, Any]:
    """Do both sides hold the same output lengths, request by request (same seed, ignore_eos)? A gateway
    comparison with different lengths compares different work (e2e and ITL move with the length)."""
    def lengths(x: Any) -> list[np.ndarray]:
        return [np.sort(np.nan_to_num(s["out_tokens"])) for s in _samples(x, "closed")]

    la, lb = lengths(direct), lengths(via)
    total_a, total_b = float(sum(x.sum() for x in la)), float(sum(x.sum() for x in lb))
    same = all(np.array_equal(la[0], x) for x in [*la[1:], *lb])
    return {"identical": same, "direct_tokens": int(total_a), "via_tokens": int(total_b)}


def _failure_rate(f: np.ndarray) -> dict[str, Any]:
    return {"requests": int(f.size), "failed": int(f.sum()), "rate": float(f.mean()) if f.size else None}
