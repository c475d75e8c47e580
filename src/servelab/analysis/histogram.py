"""A bounded, mergeable latency histogram with log-spaced buckets (for live progress, not final figures).

Values are rounded to a bucket whose width is a fixed fraction of the value (``precision``, 1% by
default), so the histogram holds a fixed number of counters however many values arrive, two histograms
of the same layout merge by adding counters (one per worker process, say), and a percentile read from it
is within ``precision`` of the exact one. Final figures come from :mod:`servelab.analysis.stats` over the
exact values; this is what a progress line can afford to update per record.
"""

from __future__ import annotations

import math

import numpy as np


class LogHistogram:
    """Counts of values in ``[lo, hi]`` in buckets of relative width ``precision``; values outside the
    range are clamped into the first or last bucket (and min/max stay exact)."""

    __slots__ = ("lo", "hi", "precision", "_log_lo", "_log_step", "counts", "n", "total", "min", "max")

    def __init__(self, lo: float = 0.01, hi: float = 1e7, precision: float = 0.01) -> None:
        if not (0 < lo < hi) or not 0 < precision < 1:
            raise ValueError(
                f"need 0 < lo < hi and 0 < precision < 1, got lo={lo} hi={hi} precision={precision}"
            )
        self.lo, self.hi, self.precision = float(lo), float(hi), float(precision)
        self._log_lo = math.log(lo)
        self._log_step = math.log1p(precision)
        size = int(math.ceil((math.log(hi) - self._log_lo) / self._log_step)) + 1
        self.counts = np.zeros(size, dtype=np.int64)
        self.n = 0
        self.total = 0.0
        self.min = math.inf
        self.max = -math.inf

    def _index(self, v: float) -> int:
        if v <= self.lo:
            return 0
        i = int((math.log(v) - self._log_lo) / self._log_step)
        return min(i, self.counts.size - 1)

    def _value(self, i: int) -> float:
        """Representative value of bucket ``i``: the geometric middle of its bounds."""
        return math.exp(self._log_lo + (i + 0.5) * self._log_step)

    def add(self, v: float) -> None:
        """Count one value (NaN is ignored). O(1)."""
        if v != v:  # NaN
            return
        self.counts[self._index(v)] += 1
        self.n += 1
        self.total += v
        if v < self.min:
            self.min = v
        if v > self.max:
            self.max = v

    def merge(self, other: LogHistogram) -> LogHistogram:
        """Add ``other``'s counts into this histogram (same layout required); returns self."""
        if (other.lo, other.hi, other.precision) != (self.lo, self.hi, self.precision):
            raise ValueError(
                f"cannot merge histograms of different layouts: ({self.lo}, {self.hi}, {self.precision}) vs "
                f"({other.lo}, {other.hi}, {other.precision})"
            )
        self.counts += other.counts
        self.n += other.n
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        return self

    def percentile(self, p: float) -> float | None:
        """The ``p``-th percentile (0-100), nearest rank over buckets (within ``precision`` of the exact
        value); the first and last ranks are the exact min and max."""
        if self.n == 0:
            return None
        if not 0 <= p <= 100:
            raise ValueError(f"percentile must be in [0, 100], got {p}")
        rank = max(1, math.ceil(p / 100 * self.n))
        if rank == 1:
            return self.min
        if rank == self.n:
            return self.max
        i = int(np.searchsorted(np.cumsum(self.counts), rank))
        if i == 0 and self.min <= self.lo:  # the underflow bucket: its lowest value is the best we know
            return self.min
        if i == self.counts.size - 1 and self.max >= self.hi:
            return self.max
        return min(max(self._value(i), self.min), self.max)

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None
