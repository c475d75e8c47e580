import math

import numpy as np
import pytest

from servelab.config.distributions import Empirical, Exponential, Fixed, LogNormal, Normal, Uniform
from servelab.errors import ConfigError
from servelab.workload.sampling import int_sample, int_sample_n, make_sampler

N = 200_000


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _se_ok(sampler, a: np.ndarray, k: float = 6.0) -> None:
    """The sample mean is within k standard errors of the sampler's stated mean."""
    se = a.std() / math.sqrt(len(a))
    assert abs(a.mean() - sampler.mean()) <= k * se + 1e-9


@pytest.mark.parametrize(
    "dist",
    [
        Uniform(low=2, high=9),
        Normal(mean=10, std=5),  # clipped at 0 from below: mean moves up
        Normal(mean=10, std=5, min=4, max=14),
        LogNormal(median=100, sigma=1.0),
        LogNormal(median=100, sigma=1.0, min=30, max=250),
        Exponential(mean=5),
        Exponential(mean=5, max=3),
        Empirical(values=[1, 2, 10], weights=[1, 0, 3]),
        Empirical(values=[4, 8]),
    ],
    ids=lambda d: d.kind,
)
def test_stated_mean_matches_draws(dist):
    s = make_sampler(dist, _rng(1))
    _se_ok(s, s.sample_n(N))


def test_clipped_normal_mean_is_not_the_unclipped_mean():
    s = make_sampler(Normal(mean=1, std=3), _rng())
    assert s.mean() > 1.5  # mass below 0 sits at 0
    assert s.sample_n(10_000).min() == 0.0


def test_bounds_are_respected_scalar_and_vector():
    cases = [
        (Normal(mean=0, std=100, min=5, max=6), 5, 6),
        (LogNormal(median=50, sigma=3, min=10, max=20), 10, 20),
        (Exponential(mean=100, max=1), 0, 1),
        (Uniform(low=3, high=3.5), 3, 3.5),
    ]
    for dist, lo, hi in cases:
        s = make_sampler(dist, _rng(2))
        a = s.sample_n(5000)
        assert a.min() >= lo and a.max() <= hi
        assert all(lo <= s.sample() <= hi for _ in range(500))


def test_fixed_and_degenerate_kinds():
    assert make_sampler(Fixed(value=7), _rng()).sample_n(3).tolist() == [7.0, 7.0, 7.0]
    assert make_sampler(Uniform(low=4, high=4), _rng()).sample() == 4.0
    assert make_sampler(LogNormal(median=30, sigma=0), _rng()).sample_n(4).tolist() == pytest.approx(
        [30.0] * 4
    )
    assert make_sampler(Normal(mean=3, std=0, min=5), _rng()).mean() == 5.0


def test_empirical_never_draws_a_zero_weight_value_and_follows_weights():
    a = make_sampler(Empirical(values=[1, 2, 10], weights=[1, 0, 3]), _rng(3)).sample_n(40_000)
    assert set(np.unique(a).tolist()) == {1.0, 10.0}
    frac = float(np.mean(a == 10.0))
    assert abs(frac - 0.75) < 5 * math.sqrt(0.75 * 0.25 / len(a))


def test_same_seed_same_draws_and_scalar_path_matches_kind():
    d = LogNormal(median=200, sigma=0.7)
    assert np.array_equal(make_sampler(d, _rng(9)).sample_n(100), make_sampler(d, _rng(9)).sample_n(100))
    assert not np.array_equal(make_sampler(d, _rng(9)).sample_n(100), make_sampler(d, _rng(10)).sample_n(100))
    s = make_sampler(d, _rng(4))
    scalars = np.array([s.sample() for _ in range(20_000)])
    assert abs(np.median(scalars) - 200) < 10


def test_int_sample_rounds_and_floors_at_one():
    s = make_sampler(Uniform(low=0, high=0.4), _rng())
    assert int_sample(s) == 1
    assert int_sample_n(s, 50).tolist() == [1] * 50
    s = make_sampler(Fixed(value=2.6), _rng())
    assert int_sample(s) == 3
    out = int_sample_n(s, 5)
    assert out.dtype == np.int64 and out.tolist() == [3] * 5


def test_bad_inputs():
    with pytest.raises(ConfigError, match="expected one of the distribution kinds"):
        make_sampler({"kind": "fixed", "value": 3}, _rng())
    with pytest.raises(ConfigError, match="max .* below min"):
        make_sampler(Normal(mean=1, std=1, min=5, max=2), _rng())
    with pytest.raises(ValueError, match="count >= 0"):
        make_sampler(Fixed(value=1), _rng()).sample_n(-1)
