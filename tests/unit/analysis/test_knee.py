import numpy as np
import pytest

from servelab.analysis.knee import find_knee, max_load_meeting_slo
from servelab.errors import ConfigError

GRID = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def _saturating(knee: float, seed: int, noise: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Closed-loop-like sweep: throughput = min(level, knee) * c, latency flat then linear in load."""
    rng = np.random.default_rng(seed)
    lv = np.array(GRID, dtype=float)
    tp = np.minimum(lv, knee) * 40.0 * (1 + rng.normal(0, noise, lv.size))
    lat = np.maximum(lv / knee, 1.0) * 80.0 * (1 + rng.normal(0, noise, lv.size))
    return tp, lat


@pytest.mark.parametrize("seed", range(10))
def test_knee_at_16_within_one_level(seed):
    tp, lat = _saturating(16, seed)
    r = find_knee(GRID, tp, latency_p95=lat)
    assert r["level"] in (8.0, 16.0, 32.0)
    assert r["beyond"] is False
    assert r["low"] < r["level"] < r["high"]
    assert r["signals"]["latency"]["agrees"] is True


def test_knee_is_always_a_grid_level():
    tp, _ = _saturating(20, 3)  # true knee between two grid levels
    r = find_knee(GRID, tp)
    assert r["level"] in GRID and r["level"] in (16.0, 32.0)


def test_smooth_saturation_curve():
    lv = np.array(GRID, dtype=float)
    tp = 1000 * lv / (lv + 16)  # Michaelis-Menten shape: half of peak at 16
    r = find_knee(GRID, tp)
    assert r["level"] in (16.0, 32.0, 64.0)


def test_linear_curve_is_beyond_the_last_level():
    r = find_knee(GRID, [lv * 37.0 for lv in GRID])
    assert r["level"] is None and r["beyond"] is True
    assert r["low"] == 256.0
    assert "256 or beyond" in r["reason"]


def test_flat_curve_saturates_at_first_level():
    r = find_knee(GRID, [500.0] * len(GRID))
    assert r["level"] == 1.0 and r["low"] is None and r["high"] == 2.0


def test_too_little_data_gives_null_level_with_reason():
    r = find_knee([1, 2], [10.0, 20.0])
    assert r["level"] is None and r["beyond"] is False
    assert "too little data" in r["reason"]


def test_failed_points_are_dropped_and_unsorted_input_is_sorted():
    tp, lat = _saturating(16, 0)
    tp[2] = np.nan  # level 4 failed
    order = np.random.default_rng(5).permutation(len(GRID))
    r = find_knee(np.array(GRID)[order], tp[order], latency_p95=lat[order])
    assert r["level"] in (8.0, 16.0, 32.0)
    assert r["levels"] == len(GRID) - 1


def test_latency_that_does_not_rise_lowers_confidence():
    tp, lat = _saturating(16, 1)
    high = find_knee(GRID, tp, latency_p95=lat)
    low = find_knee(GRID, tp, latency_p95=np.full(len(GRID), 80.0))
    assert low["signals"]["latency"]["agrees"] is False
    assert low["score"] < high["score"]
    assert "does not confirm" in low["reason"]


def test_goodput_peak_before_knee_is_reported():
    tp, lat = _saturating(32, 2)
    good = tp * (np.array(GRID) <= 8)  # requests past 8 miss the SLO
    r = find_knee(GRID, tp, latency_p95=lat, goodput=good)
    assert r["goodput_peak_level"] == 8.0
    assert "goodput peaks earlier" in r["reason"]


def test_bad_input_raises_config_error():
    with pytest.raises(ConfigError):
        find_knee([1, 2, 3], [1.0, 2.0])
    with pytest.raises(ConfigError):
        find_knee([0, 1, 2], [1.0, 2.0, 3.0])
    with pytest.raises(ConfigError):
        find_knee([1, 1, 2], [1.0, 2.0, 3.0])


def _summary(p99_ttft: float, good: float = 1.0) -> dict:
    return {"metrics": {"ttft_ms": {"p50": p99_ttft / 2, "p99": p99_ttft}}, "goodput": {"fraction": good}}


def test_max_load_meeting_slo_and_refinement():
    levels = [1, 2, 4, 8, 16, 32]
    sums = [_summary(v) for v in (50, 60, 80, 150, 400, 900)]
    r = max_load_meeting_slo(levels, sums, {"ttft_ms": 100, "percentile": 99})
    assert r["level"] == 4 and r["first_failing"] == 8
    assert r["refine"] == 6.0  # round(sqrt(4 * 8))
    assert r["checks"][3]["misses"] == ["ttft_ms p99 150.0 > 100"]


def test_max_load_slo_all_pass_all_fail_and_failed_points():
    levels = [1, 2, 4]
    ok = max_load_meeting_slo(levels, [_summary(10)] * 3, {"ttft_ms": 100, "percentile": 99})
    assert ok["level"] == 4 and ok["first_failing"] is None and "or beyond" in ok["reason"]
    bad = max_load_meeting_slo(levels, [_summary(500)] * 3, {"ttft_ms": 100, "percentile": 99})
    assert bad["level"] is None and bad["refine"] is None
    holes = max_load_meeting_slo(levels, [_summary(10), None, _summary(10)], {"ttft_ms": 100})
    assert holes["level"] == 1 and holes["first_failing"] == 2 and "holds again at 4" in holes["reason"]
    assert holes["refine"] is None  # no integer between 1 and 2


def test_max_load_slo_goodput_and_missing_percentile():
    r = max_load_meeting_slo([1, 2], [_summary(10, 0.99), _summary(10, 0.5)], {"min_goodput_fraction": 0.9})
    assert r["level"] == 1
    miss = max_load_meeting_slo([1], [_summary(10)], {"ttft_ms": 100, "percentile": 95})
    assert miss["level"] is None and "not measured" in miss["checks"][0]["misses"][0]
    with pytest.raises(ConfigError):
        max_load_meeting_slo([1], [_summary(10)], {})


def test_knee_where_throughput_accelerates_on_log_load_then_flattens():
    # Kneedle's difference curve has no concave bend here (its argmax is the first level); the knee is
    # where growth stops: elasticities 0.96, 0.86, then 0.34 from 16 to 64.
    out = find_knee([1, 4, 16, 64], [172, 652, 2158, 3471])
    assert out["level"] == 16 and out["low"] == 4 and out["high"] == 64 and not out["beyond"]
