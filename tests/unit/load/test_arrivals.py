import numpy as np
import pytest

from servelab.errors import ConfigError
from servelab.load.arrivals import MAX_ARRIVALS, arrival_offsets_ns, time_scale


@pytest.mark.parametrize("arrival", ["poisson", "gamma", "constant"])
def test_bounded_by_count(arrival):
    o = arrival_offsets_ns(20.0, arrival, 0.5, n=1000, seed=1)
    assert o.dtype == np.int64 and len(o) == 1000
    assert o[0] == 0 and bool(np.all(np.diff(o) >= 0))


@pytest.mark.parametrize("arrival", ["poisson", "gamma", "constant"])
def test_bounded_by_duration_strictly_inside(arrival):
    o = arrival_offsets_ns(50.0, arrival, 2.0, duration_s=30.0, seed=2)
    assert o[-1] < 30 * 10**9
    # about rate * duration arrivals (Poisson count sd ~ sqrt(1500) ~ 39)
    assert abs(len(o) - 1500) < 6 * 39


def test_both_bounds_whichever_first():
    assert len(arrival_offsets_ns(10.0, "constant", n=5, duration_s=100.0)) == 5
    assert len(arrival_offsets_ns(10.0, "constant", n=5000, duration_s=2.0)) == 20


def test_constant_offsets_are_exact_without_drift():
    o = arrival_offsets_ns(3.0, "constant", n=300_001)
    assert o[300_000] == 100_000 * 10**9
    assert o[1] == 333_333_333 and o[2] == 666_666_667


def test_duration_bound_needs_more_than_one_chunk():
    o = arrival_offsets_ns(10_000.0, "poisson", duration_s=30.0, seed=4)
    assert abs(len(o) - 300_000) < 6 * 548 and o[-1] < 30 * 10**9


def test_seeded_and_reproducible():
    a = arrival_offsets_ns(7.0, "gamma", 0.3, n=500, seed=11)
    assert np.array_equal(a, arrival_offsets_ns(7.0, "gamma", 0.3, n=500, seed=11))
    assert not np.array_equal(a, arrival_offsets_ns(7.0, "gamma", 0.3, n=500, seed=12))


def test_gamma_burstiness_one_is_poisson_like_and_low_burstiness_clusters():
    smooth = np.diff(arrival_offsets_ns(10.0, "gamma", 8.0, n=20_000, seed=5)).astype(float)
    bursty = np.diff(arrival_offsets_ns(10.0, "gamma", 0.25, n=20_000, seed=5)).astype(float)
    assert smooth.std() / smooth.mean() < 0.45 < 1.6 < bursty.std() / bursty.mean()


def test_zero_requests_is_empty():
    assert len(arrival_offsets_ns(5.0, "poisson", n=0)) == 0
    assert len(arrival_offsets_ns(5.0, "constant", n=0)) == 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rate": 5.0}, "needs a bound"),
        ({"rate": 0.0, "n": 3}, "rate > 0"),
        ({"rate": float("inf"), "n": 3}, "rate > 0"),
        ({"rate": 5.0, "n": 3, "arrival": "weibull"}, "unknown arrival process"),
        ({"rate": 5.0, "n": 3, "burstiness": 0.0}, "burstiness"),
        ({"rate": 5.0, "duration_s": -1.0}, "duration_s"),
        ({"rate": 1e6, "duration_s": 1e6}, "above the limit"),
        ({"rate": 5.0, "n": MAX_ARRIVALS + 1}, "above the limit"),
    ],
)
def test_bad_inputs_are_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        arrival_offsets_ns(**kwargs)


def test_time_scale_speed_and_rate():
    trace = np.array([1_000, 3_000, 3_000, 9_000], dtype=np.int64)
    assert time_scale(trace, speed=2.0).tolist() == [0, 1_000, 1_000, 4_000]
    assert time_scale(trace, speed=0.5).tolist() == [0, 4_000, 4_000, 16_000]
    # 4 arrivals -> 3 gaps; at 1e6/s they span 3 us; shape (ratios of gaps) kept.
    assert time_scale(trace, rate=1e6).tolist() == [0, 750, 750, 3_000]
    assert time_scale(np.zeros(0, dtype=np.int64), speed=3.0).tolist() == []


def test_time_scale_errors():
    trace = np.array([0, 10, 20])
    with pytest.raises(ConfigError, match="exactly one"):
        time_scale(trace)
    with pytest.raises(ConfigError, match="exactly one"):
        time_scale(trace, speed=1.0, rate=1.0)
    with pytest.raises(ConfigError, match="non-decreasing"):
        time_scale(np.array([0, 10, 5]), speed=1.0)
    with pytest.raises(ConfigError, match="speed must be"):
        time_scale(trace, speed=0.0)
    with pytest.raises(ConfigError, match="at least two arrivals"):
        time_scale(np.array([7, 7]), rate=3.0)
