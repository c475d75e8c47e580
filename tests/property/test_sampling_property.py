"""Samplers respect their kind's bounds for any parameters, and token counts are integers >= 1."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.config.distributions import Empirical, Exponential, LogNormal, Normal, Uniform
from servelab.workload.sampling import int_sample, int_sample_n, make_sampler

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)
pos = st.floats(min_value=0.0, max_value=1e5, allow_nan=False)
seeds = st.integers(min_value=0, max_value=2**32 - 1)


def _draws(dist, seed, n=500):
    s = make_sampler(dist, np.random.default_rng(seed))
    return s, np.concatenate([s.sample_n(n), np.array([s.sample() for _ in range(20)])])


@SETTINGS
@given(a=pos, b=pos, seed=seeds)
def test_uniform_within_range(a, b, seed):
    lo, hi = min(a, b), max(a, b)
    s, x = _draws(Uniform(low=lo, high=hi), seed)
    assert x.min() >= lo and x.max() <= hi
    assert lo <= s.mean() <= hi


@SETTINGS
@given(mean=pos, std=pos, lo=pos, span=st.none() | pos, seed=seeds)
def test_normal_clipped(mean, std, lo, span, seed):
    hi = None if span is None else lo + span
    s, x = _draws(Normal(mean=mean, std=std, min=lo, max=hi), seed)
    assert x.min() >= lo and (hi is None or x.max() <= hi)
    assert s.mean() >= lo - 1e-6 and (hi is None or s.mean() <= hi + 1e-6)


@SETTINGS
@given(median=st.floats(min_value=1e-3, max_value=1e5), sigma=st.floats(min_value=0, max_value=3),
       lo=pos, span=st.none() | pos, seed=seeds)
def test_lognormal_clipped_positive(median, sigma, lo, span, seed):
    hi = None if span is None else lo + span
    s, x = _draws(LogNormal(median=median, sigma=sigma, min=lo, max=hi), seed)
    assert x.min() >= lo and (x.min() > 0 or hi == 0) and (hi is None or x.max() <= hi)
    assert math.isfinite(s.mean()) and s.mean() >= lo * (1 - 1e-9)


@SETTINGS
@given(mean=st.floats(min_value=1e-3, max_value=1e5), cap=st.none() | pos, seed=seeds)
def test_exponential_nonnegative_and_capped(mean, cap, seed):
    s, x = _draws(Exponential(mean=mean, max=cap), seed)
    assert x.min() >= 0 and (cap is None or x.max() <= cap)
    assert 0 <= s.mean() <= mean * (1 + 1e-12)


@SETTINGS
@given(values=st.lists(pos, min_size=1, max_size=12), data=st.data(), seed=seeds)
def test_empirical_draws_only_weighted_values(values, data, seed):
    weights = data.draw(st.none() | st.lists(st.floats(0, 10), min_size=len(values), max_size=len(values))
                        .filter(lambda w: sum(w) > 0))
    _, x = _draws(Empirical(values=values, weights=weights), seed)
    allowed = {v for i, v in enumerate(values) if weights is None or weights[i] > 0}
    assert set(x.tolist()) <= allowed


@SETTINGS
@given(mean=pos, std=pos, seed=seeds)
def test_int_samples_are_positive_integers(mean, std, seed):
    s = make_sampler(Normal(mean=mean, std=std), np.random.default_rng(seed))
    a = int_sample_n(s, 200)
    assert a.dtype == np.int64 and a.min() >= 1
    one = int_sample(s)
    assert isinstance(one, int) and one >= 1
