"""Open-loop arrival schedules: absolute send offsets (integer ns from run start), computed up front.

The run loop sleeps until ``start + offsets[i]`` on its clock; because offsets are absolute, a late
wake-up never shifts later sends (no drift), and the lag of each send is measurable.

Schedules (the first arrival is at offset 0, then one gap per arrival):

- ``poisson``: exponential gaps of mean ``1/rate`` (coefficient of variation 1).
- ``gamma``: gamma gaps with shape ``burstiness`` and scale ``1/(rate*burstiness)``: mean ``1/rate``,
  CV ``1/sqrt(burstiness)``; below 1 burstier than Poisson, above 1 smoother, 1 is Poisson.
- ``constant``: exactly ``1/rate`` apart (offsets computed from the index, so no accumulated round-off).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from servelab.errors import ConfigError

Arrival = Literal["poisson", "gamma", "constant"]

NS_PER_S = 1_000_000_000
MAX_ARRIVALS = 20_000_000  # 160 MB of int64 offsets; more is a configuration mistake, not a benchmark
_CHUNK = 65_536


def _check_inputs(
    rate: float, arrival: str, burstiness: float, n: int | None, duration_s: float | None
) -> None:
    if arrival not in ("poisson", "gamma", "constant"):
        raise ConfigError(
            f"load.arrival: unknown arrival process {arrival!r}; expected poisson, gamma or constant",
            hint="set load.arrival to poisson (random), gamma (with load.burstiness) or constant",
        )
    if not (isinstance(rate, int | float) and math.isfinite(rate) and rate > 0):
        raise ConfigError(f"load.rate: expected a finite rate > 0 requests/s, got {rate!r}",
                          hint="give e.g. --rate 10")
    if not (math.isfinite(burstiness) and burstiness > 0):
        raise ConfigError(f"load.burstiness: expected a finite value > 0, got {burstiness!r}",
                          hint="1 is Poisson, 0.5 burstier, 4 smoother")
    if n is None and duration_s is None:
        raise ConfigError(
            "an arrival schedule needs a bound: neither a request count nor a duration was given",
            hint="set limits.requests or limits.duration_s",
        )
    if n is not None and n < 0:
        raise ConfigError(f"limits.requests: expected a count >= 0, got {n}")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise ConfigError(f"limits.duration_s: expected a finite duration > 0 s, got {duration_s!r}")
    expected = min(math.inf if n is None else n, math.inf if duration_s is None else rate * duration_s)
    if expected > MAX_ARRIVALS:
        raise ConfigError(
            f"the schedule would hold about {expected:.3g} arrivals (rate {rate}/s"
            f"{'' if duration_s is None else f' for {duration_s} s'}), above the limit of {MAX_ARRIVALS}",
            hint="lower load.rate, limits.duration_s or limits.requests",
        )


def _gaps_ns(rng: np.random.Generator, arrival: str, rate: float, burstiness: float, k: int) -> np.ndarray:
    mean_ns = NS_PER_S / rate
    if arrival == "poisson":
        return rng.exponential(mean_ns, k)
    shape = burstiness
    return rng.gamma(shape, mean_ns / shape, k)


def arrival_offsets_ns(
    rate: float,
    arrival: Arrival = "poisson",
    burstiness: float = 1.0,
    n: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
) -> np.ndarray:
    """Send offsets in ns from run start (int64, non-decreasing, first 0), seeded and reproducible.

    Bounded by ``n`` arrivals and/or ``duration_s`` seconds (offsets strictly below the duration);
    with both, whichever comes first. ``burstiness`` only shapes ``gamma``.
    """
    _check_inputs(rate, arrival, burstiness, n, duration_s)
    limit_ns = math.inf if duration_s is None else duration_s * NS_PER_S
    cap = n if n is not None else MAX_ARRIVALS
    if arrival == "constant":
        count = cap if duration_s is None else min(cap, math.ceil(limit_ns * rate / NS_PER_S))
        out = np.rint(np.arange(count, dtype=np.float64) * (NS_PER_S / rate)).astype(np.int64)
        return out[out < limit_ns] if duration_s is not None else out
    if cap == 0:
        return np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng(seed)
    parts: list[np.ndarray] = []
    have, t = 0, 0.0
    while have < cap and t < limit_ns:
        # Draw what is still needed (or enough to cover the duration with margin), in bounded chunks.
        want = cap - have
        if duration_s is not None:
            want = min(want, max(_CHUNK, int((limit_ns - t) * rate / NS_PER_S * 1.1) + 64))
        gaps = _gaps_ns(rng, arrival, rate, burstiness, want)
        if have == 0:
            gaps[0] = 0.0  # the first arrival starts the run
        times = np.cumsum(gaps)
        times += t
        t = float(times[-1])
        parts.append(times)
        have += len(times)
    offsets = np.rint(np.concatenate(parts)).astype(np.int64)[:cap]
    if duration_s is not None:
        offsets = offsets[: int(np.searchsorted(offsets, limit_ns, side="left"))]
    return offsets


def time_scale(
    offsets_ns: np.ndarray, *, speed: float | None = None, rate: float | None = None
) -> np.ndarray:
    """Rebase offsets to start at 0 and rescale them: by a ``speed`` factor (2 = twice as fast), or
    compressed/stretched so the mean arrival rate becomes ``rate`` requests/s (exactly one of the two).

    For trace replay: gaps keep their shape (burstiness is preserved), only the time axis changes.
    """
    if (speed is None) == (rate is None):
        raise ConfigError("time_scale: give exactly one of speed (a factor) or rate (requests/s)",
                          hint="e.g. speed=2.0 to replay twice as fast, or rate=50")
    a = np.asarray(offsets_ns)
    if a.ndim != 1:
        raise ConfigError(f"time_scale: expected a 1-D array of offsets, got shape {a.shape}")
    if a.size == 0:
        return a.astype(np.int64)
    if a.size > 1 and bool(np.any(np.diff(a) < 0)):
        raise ConfigError("time_scale: offsets must be non-decreasing (sort the trace by timestamp first)")
    rel = (a - a[0]).astype(np.float64)
    if speed is not None:
        if not (math.isfinite(speed) and speed > 0):
            raise ConfigError(f"time_scale: speed must be a finite factor > 0, got {speed!r}")
        factor = 1.0 / speed
    else:
        assert rate is not None  # exactly one of speed and rate is set (checked above)
        if not (math.isfinite(rate) and rate > 0):
            raise ConfigError(f"time_scale: rate must be a finite value > 0 requests/s, got {rate!r}")
        span = rel[-1]
        if a.size < 2 or span <= 0:
            raise ConfigError(
                f"time_scale: cannot set a rate on {a.size} arrivals spanning {span:.0f} ns; "
                "a rate needs at least two arrivals at different times",
                hint="use speed= instead",
            )
        factor = ((a.size - 1) / rate * NS_PER_S) / span
    return np.rint(rel * factor).astype(np.int64)
