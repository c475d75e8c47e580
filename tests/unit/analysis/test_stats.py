import math

import numpy as np
import pytest

from servelab.analysis.stats import (
    bootstrap_ci,
    bootstrap_diff_ci,
    merge_percentiles,
    pct_key,
    percentile_summary,
)


def test_percentile_summary_hand_worked():
    # Linear interpolation on [1, 2, 3, 4]: rank r = p/100 * 3; p90 -> r = 2.7 -> 3 + 0.7 * (4 - 3) = 3.7.
    s = percentile_summary([4, 1, 3, 2])
    assert s == {"mean": 2.5, "p50": 2.5, "p90": 3.7, "p95": pytest.approx(3.85), "p99": pytest.approx(3.97),
                 "max": 4.0, "n": 4}


def test_percentile_summary_extra_percentile_and_key():
    s = percentile_summary(list(range(1, 11)), [99.9, 50])  # 1..10: r = 0.999 * 9 = 8.991 -> 9.991
    assert s["p99.9"] == pytest.approx(9.991)
    assert list(s) == ["mean", "p50", "p90", "p95", "p99", "p99.9", "max", "n"]
    assert pct_key(50) == "p50" and pct_key(99.9) == "p99.9" and pct_key(97.5) == "p97.5"
    assert merge_percentiles([99, 75]) == (50.0, 75.0, 90.0, 95.0, 99.0)


def test_percentile_summary_ignores_nan_and_handles_empty():
    s = percentile_summary([1.0, math.nan, 3.0, math.inf])
    assert s["n"] == 2 and s["p50"] == 2.0 and s["max"] == 3.0
    e = percentile_summary([], [99.9])
    assert e["n"] == 0 and e["mean"] is None and e["p99.9"] is None and e["max"] is None


def test_bootstrap_ci_constant_sample_is_a_point():
    ci = bootstrap_ci([7.0] * 30)
    assert ci == {"p50": [7.0, 7.0], "p95": [7.0, 7.0], "p99": [7.0, 7.0]}


def test_bootstrap_ci_two_values():
    # Resamples of {0, 10} of size 2 have median 0, 5 or 10 with probability 1/4, 1/2, 1/4: the central 95%
    # of that distribution runs from 0 to 10.
    ci = bootstrap_ci([0.0, 10.0], [50])
    assert ci["p50"] == [0.0, 10.0]


def test_bootstrap_ci_too_small():
    assert bootstrap_ci([1.0]) == {"p50": None, "p95": None, "p99": None}


def test_bootstrap_ci_is_seeded():
    x = np.random.default_rng(3).exponential(10, 500)
    assert bootstrap_ci(x, seed=1) == bootstrap_ci(x, seed=1)
    assert bootstrap_ci(x, seed=1) != bootstrap_ci(x, seed=2)


def _median_ci_width_theory(sigma: float, n: int) -> float:
    # Asymptotic standard error of a normal sample's median: sqrt(pi / 2) * sigma / sqrt(n).
    return 2 * 1.96 * math.sqrt(math.pi / 2) * sigma / math.sqrt(n)


def test_bootstrap_median_ci_width_matches_theory():
    x = np.random.default_rng(0).normal(100, 10, 2000)
    lo, hi = bootstrap_ci(x, [50])["p50"]
    assert lo < np.median(x) < hi
    assert hi - lo == pytest.approx(_median_ci_width_theory(10, 2000), rel=0.25)


def test_subsampled_bootstrap_keeps_the_full_sample_width():
    # 50k values resampled 2k at a time: the interval must be that of n = 50k, not of n = 2k (5x wider).
    x = np.random.default_rng(1).normal(100, 10, 50_000)
    lo, hi = bootstrap_ci(x, [50], max_n=2000)["p50"]
    assert hi - lo == pytest.approx(_median_ci_width_theory(10, 50_000), rel=0.25)
    assert lo < np.median(x) < hi


def test_bootstrap_ci_rejects_bad_confidence():
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([1.0, 2.0], confidence=1.5)


def test_diff_ci_constant_samples():
    d = bootstrap_diff_ci([1.0] * 10, [3.0] * 10)
    assert d == {"diff": 2.0, "lo": 2.0, "hi": 2.0, "rel": 2.0}


def test_diff_ci_detects_a_shift_and_not_noise():
    rng = np.random.default_rng(5)
    a, b, c = rng.normal(10, 1, 800), rng.normal(11, 1, 800), rng.normal(10, 1, 800)
    shifted = bootstrap_diff_ci(a, b, 50)
    assert 0 < shifted["lo"] < shifted["diff"] < shifted["hi"]
    assert shifted["diff"] == pytest.approx(1.0, abs=0.2)
    same = bootstrap_diff_ci(a, c, 50)
    assert same["lo"] < 0 < same["hi"]


def test_diff_ci_too_small():
    assert bootstrap_diff_ci([1.0], [1.0, 2.0])["diff"] is None


def test_ranked_bootstrap_equals_resampling_with_np_percentile_to_the_bit():
    """The counting shortcut gives what resampling and np.percentile give, draw for draw (ties, tiny and
    chunked samples, percentiles on and between order statistics, 0 and 100)."""
    from servelab.analysis.stats import _bootstrap_distribution, _replicates

    data = np.random.default_rng(5)
    # 1,500: several chunks of resamples; max_n 600 < n: m-out-of-n resamples, counted over n ranks
    for n, max_n in ((2, 5000), (3, 5000), (11, 5000), (400, 5000), (1500, 5000), (1500, 600), (3000, 400)):
        for sample in (data.exponential(size=n), data.integers(0, 4, size=n).astype(float)):
            for pcts in ([50.0, 95.0, 99.0], [0.0, 37.5, 99.9, 100.0]):
                got, scale = _bootstrap_distribution(sample, pcts, 700, max_n, np.random.default_rng(9))
                want, want_scale = _replicates(sample, lambda x, p=pcts: np.percentile(x, p, axis=1).T,
                                               len(pcts), 700, max_n, np.random.default_rng(9))
                assert scale == want_scale == math.sqrt(min(n, max_n) / n)
                assert np.array_equal(got, want)
