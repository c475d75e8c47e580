"""Per-metric statistics gathered batch by batch, in memory that does not grow with the run.

A run's figures are summarised from ``requests.parquet`` one batch of rows at a time. Each metric's values
go to a :class:`MetricAccumulator`:

* while it has seen at most ``exact_max`` values (:data:`EXACT_MAX_VALUES`, 262,144: 2 MiB of float64) it
  keeps them all, and the figures are exactly what :func:`servelab.analysis.stats.percentile_summary` and
  :func:`~servelab.analysis.stats.bootstrap_ci` give over one array of every value (same order, same
  seed: bit-identical to summarising the whole run at once);
* past that it moves them into a :class:`QuantileSketch` and keeps only counters.

**Error bound of the sketch.** Values are counted in log-spaced bins ``[b, b * (1 + 1/1000))`` (0.1 %
wide) over ``1e-6 .. 1e10`` (ms: 1 ns to about 115 days), one set for positive values, one for negative,
and one bin for ``|v| < 1e-6`` (read as 0). A bin is read as ``2 b h / (b + h)``, whose distance from any
value in the bin is at most ``(h - b) / (h + b)`` < 0.05 % of that value. So every order statistic read
from the sketch, and every percentile interpolated between two of them (numpy's default "linear"
method, type 7), is within **0.05 % relative (or 1e-6 absolute, one nanosecond in ms)** of the exact one
over the same values. ``n``, ``mean`` (a running sum), ``min`` and ``max`` stay exact; values beyond
``1e10`` are clamped into the last bin but ``max`` is exact.

**Confidence intervals past the threshold** are distribution-free order-statistic intervals read from the
sketch (the ranks ``n q -/+ z sqrt(n q (1 - q))``, z for the confidence level), not the bootstrap; with
more than 262,144 values both are far narrower than any difference a reader acts on.

Memory: an exact buffer of at most 2 MiB plus, once sketched, 2 x 36,860 int64 counters (590 KB) per
metric, however many values arrive.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from servelab.analysis.stats import (
    CI_PERCENTILES,
    DEFAULT_CONFIDENCE,
    bootstrap_ci,
    merge_percentiles,
    pct_key,
    percentile_summary,
)

EXACT_MAX_VALUES = 1 << 18  # values kept exactly per metric before switching to the sketch
RELATIVE_BIN = 1e-3  # bin width relative to its lower edge; read error <= RELATIVE_BIN / 2
SKETCH_LO = 1e-6  # smallest magnitude binned; below it a value reads as 0
SKETCH_HI = 1e10  # largest magnitude binned; above it values are clamped into the last bin


class QuantileSketch:
    """Counts of values in log-spaced bins of relative width ``rel`` (see the module docstring for the
    error bound). Mergeable: two sketches of the same layout add their counters."""

    __slots__ = ("rel", "lo", "hi", "_log_lo", "_log_step", "nbins", "pos", "neg", "zero", "n", "total",
                 "min", "max")

    def __init__(self, rel: float = RELATIVE_BIN, lo: float = SKETCH_LO, hi: float = SKETCH_HI) -> None:
        if not (0 < lo < hi) or not 0 < rel < 1:
            raise ValueError(f"need 0 < lo < hi and 0 < rel < 1, got lo={lo} hi={hi} rel={rel}")
        self.rel, self.lo, self.hi = float(rel), float(lo), float(hi)
        self._log_lo = math.log(lo)
        self._log_step = math.log1p(rel)
        self.nbins = int(math.ceil((math.log(hi) - self._log_lo) / self._log_step))
        self.pos = np.zeros(self.nbins, dtype=np.int64)
        self.neg = np.zeros(self.nbins, dtype=np.int64)
        self.zero = 0
        self.n = 0
        self.total = 0.0
        self.min = math.inf
        self.max = -math.inf

    def _bins(self, mag: np.ndarray) -> np.ndarray:
        idx = np.floor((np.log(mag) - self._log_lo) / self._log_step).astype(np.int64)
        return np.clip(idx, 0, self.nbins - 1)

    def add(self, values: np.ndarray) -> None:
        """Count the finite values of ``values``."""
        v = np.asarray(values, dtype=np.float64).ravel()
        v = v[np.isfinite(v)]
        if not v.size:
            return
        self.n += int(v.size)
        self.total += float(v.sum())
        self.min = min(self.min, float(v.min()))
        self.max = max(self.max, float(v.max()))
        small = np.abs(v) < self.lo
        self.zero += int(small.sum())
        p, q = v[~small & (v > 0)], -v[~small & (v < 0)]
        if p.size:
            self.pos += np.bincount(self._bins(p), minlength=self.nbins)
        if q.size:
            self.neg += np.bincount(self._bins(q), minlength=self.nbins)

    def merge(self, other: QuantileSketch) -> QuantileSketch:
        if (other.rel, other.lo, other.hi) != (self.rel, self.lo, self.hi):
            raise ValueError("cannot merge sketches of different layouts")
        self.pos += other.pos
        self.neg += other.neg
        self.zero += other.zero
        self.n += other.n
        self.total += other.total
        self.min, self.max = min(self.min, other.min), max(self.max, other.max)
        return self

    def _reading(self, i: np.ndarray) -> np.ndarray:
        """The value a positive bin reads as: ``2 b h / (b + h)``, within ``rel / 2`` of all it holds."""
        b = np.exp(self._log_lo + i * self._log_step)
        h = b * (1 + self.rel)
        return 2 * b * h / (b + h)

    def order_stats(self, ranks: np.ndarray) -> np.ndarray:
        """The ``k``-th smallest value (0-based) for each ``k`` in ``ranks``, read from the bins."""
        counts = np.concatenate([self.neg[::-1], [self.zero], self.pos])
        where = np.searchsorted(np.cumsum(counts), np.asarray(ranks, dtype=np.int64), side="right")
        nb = self.nbins
        out = np.where(where < nb, -self._reading(nb - 1 - np.minimum(where, nb - 1)),
                       np.where(where == nb, 0.0, self._reading(np.clip(where - nb - 1, 0, nb - 1))))
        ranks = np.asarray(ranks)
        out = np.clip(out, self.min, self.max)
        out = np.where(ranks <= 0, self.min, out)
        return np.where(ranks >= self.n - 1, self.max, out)

    def percentiles(self, pcts: Sequence[float]) -> np.ndarray:
        """numpy's default ("linear", type 7) percentiles, interpolated between order statistics."""
        h = (self.n - 1) * np.asarray(pcts, dtype=np.float64) / 100.0
        lo = np.floor(h).astype(np.int64)
        x0, x1 = self.order_stats(lo), self.order_stats(np.minimum(lo + 1, self.n - 1))
        return x0 + (h - lo) * (x1 - x0)

    def summary(self, percentiles: Iterable[float] = ()) -> dict[str, Any]:
        """The keys of :func:`~servelab.analysis.stats.percentile_summary`, read from the sketch."""
        pcts = merge_percentiles(percentiles)
        if not self.n:
            return {"mean": None, **{pct_key(p): None for p in pcts}, "max": None, "n": 0}
        qs = self.percentiles(pcts)
        return {"mean": self.total / self.n, **{pct_key(p): float(q) for p, q in zip(pcts, qs, strict=True)},
                "max": self.max, "n": self.n}

    def ci(self, percentiles: Sequence[float] = CI_PERCENTILES, confidence: float = DEFAULT_CONFIDENCE
           ) -> dict[str, list[float] | None]:
        """Distribution-free order-statistic interval of each percentile: the values at ranks
        ``n q -/+ z sqrt(n q (1 - q))``."""
        if self.n < 2:
            return {pct_key(p): None for p in percentiles}
        z = NormalDist().inv_cdf(0.5 + confidence / 2)
        out: dict[str, list[float] | None] = {}
        for p in percentiles:
            q = float(p) / 100
            half = z * math.sqrt(self.n * q * (1 - q))
            lo = max(0, math.floor(self.n * q - half) - 1)
            hi = min(self.n - 1, math.ceil(self.n * q + half))
            a, b = self.order_stats(np.array([lo, hi]))
            out[pct_key(p)] = [float(a), float(b)]
        return out


class MetricAccumulator:
    """One metric's values, batch by batch: exact up to ``exact_max`` values, a :class:`QuantileSketch`
    past it (module docstring)."""

    def __init__(self, exact_max: int = EXACT_MAX_VALUES) -> None:
        self.exact_max = exact_max
        self._parts: list[np.ndarray] = []
        self._held = 0
        self.sketch: QuantileSketch | None = None

    @property
    def exact(self) -> bool:
        return self.sketch is None

    @property
    def n(self) -> int:
        return self._held if self.sketch is None else self.sketch.n

    def add(self, values: np.ndarray) -> None:
        """Add a batch of finite values (in record order)."""
        if self.sketch is not None:
            self.sketch.add(values)
            return
        self._parts.append(np.asarray(values, dtype=np.float64))
        self._held += int(values.size)
        if self._held > self.exact_max:
            self.sketch = QuantileSketch()
            for p in self._parts:
                self.sketch.add(p)
            self._parts, self._held = [], 0

    def values(self) -> np.ndarray:
        """Every value, in order (exact mode only)."""
        if self.sketch is not None:
            raise ValueError("the values were sketched: only percentiles remain")
        return np.concatenate(self._parts) if self._parts else np.empty(0)

    def summary(self, percentiles: Iterable[float], seed: int) -> dict[str, Any]:
        """``{mean, pXX..., max, n, ci}`` as the summary reports a metric."""
        if self.sketch is None:
            vals = self.values()
            return {**percentile_summary(vals, percentiles), "ci": bootstrap_ci(vals, seed=seed)}
        return {**self.sketch.summary(percentiles), "ci": self.sketch.ci()}

    def percentile(self, pct: float) -> float | None:
        if self.sketch is None:
            vals = self.values()
            return float(np.percentile(vals, pct)) if vals.size else None
        return float(self.sketch.percentiles([pct])[0]) if self.sketch.n else None
