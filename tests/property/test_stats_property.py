import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.analysis.histogram import LogHistogram
from servelab.analysis.stats import bootstrap_ci, percentile_summary

finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)
latency = st.floats(min_value=0.01, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(st.lists(finite, min_size=1, max_size=300), st.lists(st.floats(0.1, 100), max_size=3))
def test_percentiles_are_monotone_and_bounded(values, extra):
    s = percentile_summary(values, extra)
    keys = sorted((k for k in s if k.startswith("p")), key=lambda k: float(k[1:]))
    seq = [min(values), *(s[k] for k in keys), s["max"]]
    tol = 1e-9 * max(1.0, max(abs(v) for v in values))
    assert all(a <= b + tol for a, b in zip(seq, seq[1:], strict=False))
    assert min(values) - tol <= s["mean"] <= s["max"] + tol
    assert s["n"] == len(values)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(latency, min_size=20, max_size=400, unique=True),
    st.integers(0, 2**32 - 1),
)
def test_bootstrap_ci_contains_the_point_estimate(values, seed):
    s = percentile_summary(values)
    ci = bootstrap_ci(values, seed=seed, resamples=300)
    for k in ("p50", "p95", "p99"):
        lo, hi = ci[k]
        assert lo <= s[k] <= hi, (k, lo, s[k], hi)


@settings(max_examples=30, deadline=None, derandomize=True)  # bootstrap widths are noisy: fixed examples
@given(st.integers(0, 2**32 - 1), st.integers(1, 50_000), st.floats(0.5, 3.0))
def test_ci_of_a_larger_sample_is_not_wider(seed, n_small, sigma):
    # Quadrupling a well-behaved (lognormal) sample roughly halves the interval; never widens it much.
    rng = np.random.default_rng(seed)
    big = rng.lognormal(3, sigma, 4 * max(n_small, 200))
    small = big[: max(n_small, 200)]
    w_small = np.diff(bootstrap_ci(small, [50], seed=seed, resamples=300)["p50"])[0]
    w_big = np.diff(bootstrap_ci(big, [50], seed=seed, resamples=300)["p50"])[0]
    assert w_big <= w_small * 1.0


@given(st.lists(latency, min_size=1, max_size=300), st.floats(0, 100))
def test_histogram_percentile_within_precision_of_nearest_rank(values, p):
    h = LogHistogram(precision=0.01)
    for v in values:
        h.add(v)
    rank = max(1, math.ceil(p / 100 * len(values)))
    exact = sorted(values)[rank - 1]
    assert math.isclose(h.percentile(p), exact, rel_tol=0.011)
