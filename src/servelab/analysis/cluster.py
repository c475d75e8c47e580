"""Bootstrap of a pooled percentile whose values come in clusters (every gap of every request).

A pooled metric such as inter-token latency holds many values per request, and the values of one request
are not independent draws: a stall on the server delays every gap of the requests in flight at once. A
bootstrap that resamples single gaps treats 10,000 gaps of 64 requests as 10,000 independent samples and
calls a seed-to-seed wobble of a bimodal p95 "significant". This one resamples whole requests (the cluster
bootstrap): each replicate draws ``k`` requests with replacement and pools their gaps, weighted by how
often each was drawn. Each replicate is computed exactly as ``np.percentile`` ("linear", type 7) of that
pooled resample, from one sort of the values and a running sum of weights.

Cost is one pass over the values per replicate; runs with more than ``max_clusters`` requests use the
m-out-of-n bootstrap over requests (a fixed random subset of ``max_clusters`` requests, spread scaled by
``sqrt(m / k)`` around the whole-sample estimate, as :mod:`servelab.analysis.stats` does per value).
"""

from __future__ import annotations

import math

import numpy as np

from servelab.analysis.stats import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES

DEFAULT_MAX_CLUSTERS = 2000
_BUDGET = 50_000_000  # values swept over all replicates of one side (replicates shrink to fit, to >= 100)


def cluster_percentile_replicates(values: np.ndarray, owner: np.ndarray, percentile: float, *,
                                  resamples: int = DEFAULT_RESAMPLES,
                                  max_clusters: int = DEFAULT_MAX_CLUSTERS,
                                  rng: np.random.Generator) -> np.ndarray:
    """Replicates of ``np.percentile(values, percentile)`` under resampling of whole clusters (``owner``:
    each value's cluster, e.g. its request index). Empty when there are fewer than 2 clusters."""
    x = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(x)
    x, own = x[keep], np.asarray(owner)[keep]
    if x.size == 0:
        return np.empty(0)
    point = float(np.percentile(x, percentile))
    _, own = np.unique(own, return_inverse=True)
    k = int(own.max()) + 1
    if k < 2:
        return np.empty(0)
    scale = 1.0
    if k > max_clusters:
        chosen = np.zeros(k, dtype=bool)
        chosen[rng.choice(k, max_clusters, replace=False)] = True
        sub = chosen[own]
        x, own = x[sub], own[sub]
        _, own = np.unique(own, return_inverse=True)
        scale, k = math.sqrt(max_clusters / k), max_clusters
    order = np.argsort(x, kind="stable")
    xs, own = x[order], own[order]
    q = percentile / 100
    reps = np.empty(max(1, min(resamples, max(100, _BUDGET // max(1, xs.size)))))
    for r in range(reps.size):
        counts = np.bincount(rng.integers(0, k, k), minlength=k)
        cum = np.cumsum(counts[own])
        total = int(cum[-1])
        virtual = (total - 1) * q  # numpy's "linear" index into the sorted pooled resample
        below = math.floor(virtual)
        i = int(np.searchsorted(cum, below + 1))
        j = int(np.searchsorted(cum, min(below + 2, total)))
        reps[r] = xs[i] + (virtual - below) * (xs[j] - xs[i])
    return point + scale * (reps - point)


def cluster_percentile_diff_ci(a: np.ndarray, owner_a: np.ndarray, b: np.ndarray, owner_b: np.ndarray,
                               percentile: float = 50.0, *, confidence: float = DEFAULT_CONFIDENCE,
                               resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> dict[str, float | None]:
    """Cluster-bootstrap CI of ``percentile(b) - percentile(a)`` for two independent runs:
    ``{"diff", "lo", "hi", "rel"}`` as :func:`servelab.analysis.stats.bootstrap_diff_ci` (all None when a
    side has fewer than 2 clusters)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    ra = cluster_percentile_replicates(a, owner_a, percentile, resamples=resamples, rng=rng)
    rb = cluster_percentile_replicates(b, owner_b, percentile, resamples=resamples, rng=rng)
    if not ra.size or not rb.size:
        return {"diff": None, "lo": None, "hi": None, "rel": None}
    n = min(ra.size, rb.size)
    pa_ = float(np.percentile(a[np.isfinite(a)], percentile))
    pb_ = float(np.percentile(b[np.isfinite(b)], percentile))
    alpha = (1 - confidence) / 2
    lo, hi = np.percentile(rb[:n] - ra[:n], [100 * alpha, 100 * (1 - alpha)])
    diff = pb_ - pa_
    return {"diff": diff, "lo": float(lo), "hi": float(hi), "rel": None if pa_ == 0 else diff / pa_}
