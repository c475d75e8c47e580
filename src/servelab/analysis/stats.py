"""Percentile summaries and bootstrap confidence intervals (numpy, seeded, bounded).

Percentiles use numpy's default (linear interpolation between closest ranks, "type 7"), the same as
vLLM's benchmark and most tools, so figures compare like for like.

Bootstrap: the percentile bootstrap over ``resamples`` resamples (default 1000), drawn in chunks so
memory stays bounded. Samples larger than ``max_n`` use the m-out-of-n bootstrap: resamples of size
``m = max_n`` are drawn from the whole sample and their spread around the full-sample estimate is scaled
by ``sqrt(m / n)`` (the spread of a quantile shrinks as ``1 / sqrt(n)``), so a million-request run costs
the same as a ``max_n`` one and its interval is not artificially wide.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)
CI_PERCENTILES: tuple[float, ...] = (50.0, 95.0, 99.0)
DEFAULT_RESAMPLES = 1000
DEFAULT_MAX_N = 5000
DEFAULT_CONFIDENCE = 0.95
_CHUNK_ELEMENTS = 1 << 20  # values held per resampling chunk (8 MiB of float64)
_COUNT_ELEMENTS = 1 << 18  # running rank counts held at once when counting resamples (2 MiB of int64)
_RANKED_MAX_RATIO = 8  # count resamples per rank while the sample is at most 8x the resample size


def pct_key(p: float) -> str:
    """The summary key of a percentile: 50 -> "p50", 99.9 -> "p99.9"."""
    return f"p{p:g}"


def merge_percentiles(extra: Iterable[float] = ()) -> tuple[float, ...]:
    """The default percentiles plus any extra configured ones, sorted, without duplicates."""
    return tuple(sorted({*DEFAULT_PERCENTILES, *(float(p) for p in extra)}))


def _clean(values: np.ndarray | Sequence[float]) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64).ravel()
    return a[np.isfinite(a)]


def percentile_summary(values: np.ndarray | Sequence[float], percentiles: Iterable[float] = ()) -> dict:
    """``{mean, p50, p90, p95, p99, [extra pXX], max, n}`` over the finite values; ``None`` when empty."""
    a = _clean(values)
    pcts = merge_percentiles(percentiles)
    out: dict = {"mean": None}
    if a.size == 0:
        out.update({pct_key(p): None for p in pcts})
        out.update(max=None, n=0)
        return out
    qs = np.percentile(a, pcts)
    out["mean"] = float(a.mean())
    out.update({pct_key(p): float(q) for p, q in zip(pcts, qs, strict=True)})
    out["max"] = float(a.max())
    out["n"] = int(a.size)
    return out


def _replicates(a: np.ndarray, stat: Callable[[np.ndarray], np.ndarray], width: int, resamples: int,
                max_n: int, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """The one resampling engine: ``stat`` of each resample, shape ``(resamples, width)`` (``stat`` maps a
    ``(k, m)`` block of resamples to ``(k, width)``), drawn in chunks of about a million values, and the
    spread scale (``sqrt(m / n)``; 1 when the whole sample is resampled, ``m = min(n, max_n)``)."""
    n = a.size
    m = min(n, max_n)
    rows = max(1, _CHUNK_ELEMENTS // m)
    reps = np.empty((resamples, width), dtype=np.float64)
    done = 0
    while done < resamples:
        k = min(rows, resamples - done)
        idx = rng.integers(0, n, size=(k, m))
        reps[done:done + k] = stat(a[idx])
        done += k
    return reps, math.sqrt(m / n)


def _bootstrap_distribution(
    a: np.ndarray, percentiles: Sequence[float], resamples: int, max_n: int, rng: np.random.Generator
) -> tuple[np.ndarray, float]:
    """Bootstrap replicates of each percentile, shape ``(resamples, len(percentiles))``, and the
    spread scale (``sqrt(m / n)``; 1 when the whole sample is resampled)."""
    m = min(a.size, max_n)
    if 0 < a.size <= _RANKED_MAX_RATIO * m:
        return _ranked_percentile_replicates(a, percentiles, resamples, m, rng), math.sqrt(m / a.size)
    return _replicates(a, lambda x: np.percentile(x, percentiles, axis=1).T, len(percentiles), resamples,
                       max_n, rng)


def _ranked_percentile_replicates(a: np.ndarray, percentiles: Sequence[float], resamples: int, m: int,
                                  rng: np.random.Generator) -> np.ndarray:
    """What ``_replicates`` with ``np.percentile`` gives for resamples of size ``m`` (same draws, same
    chunks, equal to the last bit), about 2.5x faster: a resample is counted per rank of the sorted
    sample (``bincount``), and each percentile's two neighbouring order statistics are found in the
    running counts, then interpolated as numpy's "linear" method does. No partition of each resample.
    Counting costs ``n`` per resample as well as ``m``: used while ``n <= _RANKED_MAX_RATIO * m``."""
    n = a.size
    order = np.argsort(a, kind="stable")
    ranked = a[order]
    rank = np.empty(n, dtype=np.intp)
    rank[order] = np.arange(n)
    q = np.true_divide(np.asarray(percentiles, dtype=np.float64), 100)
    virtual = (m - 1) * q  # numpy's "linear" (Hyndman & Fan type 7) index into the sorted resample
    below = np.floor(virtual)
    gamma = virtual - below
    lo = below.astype(np.intp)
    hi = np.where(virtual >= m - 1, m - 1, lo + 1)
    lo = np.where(virtual >= m - 1, m - 1, lo)
    wanted = np.unique(np.concatenate([lo, hi]))
    rows = max(1, _CHUNK_ELEMENTS // m)
    # rows counted at once: a row's running counts hold n int64 (two arrays of them at the peak), so a block
    # of all ``rows`` held 2 x rows x n x 8 bytes (33 MB at n = 10,000, 134 MB at 40,000); ~2 MiB a block
    block = max(1, _COUNT_ELEMENTS // n)
    reps = np.empty((resamples, len(q)), dtype=np.float64)
    done = 0
    while done < resamples:
        k = min(rows, resamples - done)
        idx = rng.integers(0, n, size=(k, m))  # the same draws as _replicates
        for b in range(0, k, block):
            reps[done + b:done + min(k, b + block)] = _ranked_rows(rank[idx[b:b + block]], ranked, n, m,
                                                                   wanted, lo, hi, gamma)
        done += k
    return reps


def _ranked_rows(ranks: np.ndarray, ranked: np.ndarray, n: int, m: int, wanted: np.ndarray, lo: np.ndarray,
                 hi: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """The percentiles of each row of resample ranks (``ranks``: shape ``(k, m)``, owned), by counting."""
    k = ranks.shape[0]
    row = np.arange(k, dtype=np.intp)
    ranks += (row * n)[:, None]
    counts = np.bincount(ranks.ravel(), minlength=k * n).reshape(k, n)
    cum = np.cumsum(counts, axis=1)
    del counts
    cum += (row * (m + 1))[:, None]  # rows made one increasing sequence for one searchsorted
    flat = cum.ravel()
    # order statistic j (from 0) of a row: the first rank whose running count exceeds j
    stat = {int(j): ranked[np.searchsorted(flat, j + 1 + row * (m + 1)) - row * n] for j in wanted}
    x0 = np.stack([stat[int(j)] for j in lo], axis=1)
    x1 = np.stack([stat[int(j)] for j in hi], axis=1)
    diff = x1 - x0
    out = x0 + diff * gamma  # numpy's _lerp, to the bit: from the far end when gamma >= 0.5
    np.subtract(x1, diff * (1 - gamma), out=out, where=np.broadcast_to(gamma >= 0.5, out.shape))
    return out


def bootstrap_ci(
    values: np.ndarray | Sequence[float],
    percentiles: Sequence[float] = CI_PERCENTILES,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    max_n: int = DEFAULT_MAX_N,
    seed: int = 0,
) -> dict[str, list[float] | None]:
    """Percentile-bootstrap confidence interval ``[lo, hi]`` of each percentile, keyed ``"p50"`` etc.

    ``None`` for a key when fewer than 2 finite values exist. Same seed and data, same interval.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    a = _clean(values)
    keys = [pct_key(p) for p in percentiles]
    if a.size < 2 or not percentiles:
        return {k: None for k in keys}
    rng = np.random.default_rng(seed)
    pcts = [float(p) for p in percentiles]
    reps, scale = _bootstrap_distribution(a, pcts, resamples, max_n, rng)
    point = np.percentile(a, pcts)
    alpha = (1 - confidence) / 2
    lo, hi = np.percentile(reps, [100 * alpha, 100 * (1 - alpha)], axis=0)
    lo = point + scale * (lo - point)
    hi = point + scale * (hi - point)
    return {k: [float(x), float(y)] for k, x, y in zip(keys, lo, hi, strict=True)}


def bootstrap_diff_ci(
    a: np.ndarray | Sequence[float],
    b: np.ndarray | Sequence[float],
    percentile: float = 50.0,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    max_n: int = DEFAULT_MAX_N,
    seed: int = 0,
) -> dict[str, float | None]:
    """Bootstrap CI of ``percentile(b) - percentile(a)`` for two independent samples.

    Returns ``{"diff", "lo", "hi", "rel"}`` where ``rel`` is ``diff / percentile(a)`` (None when that is 0).
    An interval that excludes 0 means the samples differ at that confidence.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    xa, xb = _clean(a), _clean(b)
    if xa.size < 2 or xb.size < 2:
        return {"diff": None, "lo": None, "hi": None, "rel": None}
    rng = np.random.default_rng(seed)
    pa_, pb_ = float(np.percentile(xa, percentile)), float(np.percentile(xb, percentile))
    ra, sa = _bootstrap_distribution(xa, [percentile], resamples, max_n, rng)
    rb, sb = _bootstrap_distribution(xb, [percentile], resamples, max_n, rng)
    # Rescale each side's spread around its own estimate before differencing (m-out-of-n).
    da = pa_ + sa * (ra[:, 0] - pa_)
    db = pb_ + sb * (rb[:, 0] - pb_)
    alpha = (1 - confidence) / 2
    lo, hi = np.percentile(db - da, [100 * alpha, 100 * (1 - alpha)])
    diff = pb_ - pa_
    return {"diff": diff, "lo": float(lo), "hi": float(hi), "rel": None if pa_ == 0 else diff / pa_}


def bootstrap_mean_diff_ci(
    a: np.ndarray | Sequence[float],
    b: np.ndarray | Sequence[float],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> dict[str, float | None]:
    """Bootstrap CI of ``mean(b) - mean(a)`` for two independent samples (whole-sample resamples; a share
    such as the failure rate is the mean of 0/1 values): ``{"diff", "lo", "hi", "rel"}``, ``rel`` relative
    to ``mean(a)`` (None when that is 0). All None with fewer than 2 finite values on a side."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    xa, xb = _clean(a), _clean(b)
    if xa.size < 2 or xb.size < 2:
        return {"diff": None, "lo": None, "hi": None, "rel": None}
    rng = np.random.default_rng(seed)

    def means(x: np.ndarray) -> np.ndarray:
        return x.mean(axis=1)[:, None]

    ma, _ = _replicates(xa, means, 1, resamples, xa.size, rng)
    mb, _ = _replicates(xb, means, 1, resamples, xb.size, rng)
    alpha = (1 - confidence) / 2
    lo, hi = np.percentile(mb[:, 0] - ma[:, 0], [100 * alpha, 100 * (1 - alpha)])
    diff = float(xb.mean() - xa.mean())
    mean_a = float(xa.mean())
    return {"diff": diff, "lo": float(lo), "hi": float(hi), "rel": diff / mean_a if mean_a else None}


@dataclass(frozen=True)
class RateSample:
    """The per-request inputs of a throughput figure ``sum(tokens) / window_s``.

    ``tokens``: what each measured request contributes (its output tokens, or 1 per ok request for
    requests/s; 0 for a failed one); ``busy``: each request's time in the system (s); ``window_s``: the
    measured window; ``closed``: a closed loop (the window is set by how long requests take).
    """

    tokens: np.ndarray
    busy: np.ndarray
    window_s: float
    closed: bool

    @property
    def rate(self) -> float:
        return float(self.tokens.sum()) / self.window_s


def rate_replicates(s: RateSample, *, resamples: int = DEFAULT_RESAMPLES, max_n: int = DEFAULT_MAX_N,
                    rng: np.random.Generator) -> np.ndarray:
    """Bootstrap replicates of ``s.rate``, resampling requests (the unit the figure sums over).

    Open loop: the window is fixed by the schedule, so a replicate is ``sum(tokens*) / window``. Closed
    loop: the window is set by the requests' own durations (Little's law: rate = users x tokens / latency),
    so it scales with the resampled busy time, ``window * sum(busy*) / sum(busy)`` (a ratio estimator; the
    full sample gives the figure exactly). Beyond ``max_n`` requests, m-out-of-n as :func:`bootstrap_ci`.
    """
    n = s.tokens.size
    m = min(n, max_n)
    scale_n = n / m
    total_busy = float(s.busy.sum())
    rows = max(1, _CHUNK_ELEMENTS // m)
    out = np.empty(resamples, dtype=np.float64)
    done = 0
    while done < resamples:
        k = min(rows, resamples - done)
        idx = rng.integers(0, n, size=(k, m))
        tok = s.tokens[idx].sum(axis=1) * scale_n
        if s.closed and total_busy > 0:
            window = s.window_s * s.busy[idx].sum(axis=1) * scale_n / total_busy
            with np.errstate(divide="ignore", invalid="ignore"):
                out[done:done + k] = np.where(window > 0, tok / window, np.nan)
        else:
            out[done:done + k] = tok / s.window_s
        done += k
    point = s.rate
    return point + math.sqrt(m / n) * (out - point)


def rate_diff_ci(a: RateSample, b: RateSample, *, confidence: float = DEFAULT_CONFIDENCE,
                 resamples: int = DEFAULT_RESAMPLES, max_n: int = DEFAULT_MAX_N,
                 rng: np.random.Generator) -> dict[str, float | None]:
    """Bootstrap CI of ``b.rate - a.rate`` (independent runs): ``{"diff", "lo", "hi", "rel"}``."""
    ra = rate_replicates(a, resamples=resamples, max_n=max_n, rng=rng)
    rb = rate_replicates(b, resamples=resamples, max_n=max_n, rng=rng)
    d = (rb - ra)[np.isfinite(rb - ra)]
    diff = b.rate - a.rate
    if not d.size:
        return {"diff": diff, "lo": None, "hi": None, "rel": diff / a.rate if a.rate else None}
    alpha = (1 - confidence) / 2
    lo, hi = np.percentile(d, [100 * alpha, 100 * (1 - alpha)])
    return {"diff": diff, "lo": float(lo), "hi": float(hi), "rel": diff / a.rate if a.rate else None}
