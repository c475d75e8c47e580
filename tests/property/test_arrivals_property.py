"""Arrival schedules have the asked mean rate and coefficient of variation, within sampling error.

Tolerances come from n: for m gamma gaps of shape k (Poisson: k = 1), mean 1/rate and CV 1/sqrt(k),
  SE(mean gap) = CV * mean / sqrt(m)
  SE(CV) <= CV * sqrt((2 + 6/k) / 4 + CV^2) / sqrt(m)   (delta method; gamma excess kurtosis is 6/k)
and each check allows 5 standard errors. Examples are derandomized so CI is stable.
"""

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.load.arrivals import arrival_offsets_ns

N = 20_000
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])

rates = st.floats(min_value=0.5, max_value=500.0)
seeds = st.integers(min_value=0, max_value=2**32 - 1)


def _check(offsets: np.ndarray, rate: float, shape: float) -> None:
    gaps = np.diff(offsets).astype(np.float64) / 1e9
    m = len(gaps)
    mean, cv = 1.0 / rate, 1.0 / math.sqrt(shape)
    se_mean = cv * mean / math.sqrt(m)
    assert abs(gaps.mean() - mean) <= 5 * se_mean, (gaps.mean(), mean, se_mean)
    measured_rate = m / (offsets[-1] / 1e9)
    assert abs(measured_rate - rate) <= 5 * (cv / math.sqrt(m)) * rate * 1.05
    se_cv = cv * math.sqrt((2 + 6 / shape) / 4 + cv * cv) / math.sqrt(m)
    got_cv = gaps.std() / gaps.mean()
    assert abs(got_cv - cv) <= 5 * se_cv, (got_cv, cv, se_cv)


@SETTINGS
@given(rate=rates, seed=seeds)
def test_poisson_rate_and_cv(rate, seed):
    _check(arrival_offsets_ns(rate, "poisson", n=N, seed=seed), rate, 1.0)


@SETTINGS
@given(rate=rates, burstiness=st.floats(min_value=0.25, max_value=8.0), seed=seeds)
def test_gamma_rate_and_cv(rate, burstiness, seed):
    _check(arrival_offsets_ns(rate, "gamma", burstiness, n=N, seed=seed), rate, burstiness)


@SETTINGS
@given(rate=rates, arrival=st.sampled_from(["poisson", "gamma", "constant"]),
       burstiness=st.floats(min_value=0.1, max_value=10.0), seed=seeds,
       n=st.integers(min_value=0, max_value=3000) | st.none(),
       duration=st.floats(min_value=0.01, max_value=60.0))
def test_schedule_shape_and_bounds(rate, arrival, burstiness, seed, n, duration):
    o = arrival_offsets_ns(rate, arrival, burstiness, n=n, duration_s=duration, seed=seed)
    assert o.dtype == np.int64
    if n is not None:
        assert len(o) <= n
    if len(o):
        assert o[0] == 0 and o[-1] < duration * 1e9
        assert bool(np.all(np.diff(o) >= 0))
    # Duration-bound: the next arrival would have fallen at or past the end (same seed, one more asked).
    if n is None or len(o) < n:
        more = arrival_offsets_ns(rate, arrival, burstiness, n=len(o) + 1, seed=seed)
        assert np.array_equal(more[: len(o)], o)
        assert more[-1] >= duration * 1e9 - 1
