import math

import numpy as np
import pytest

from servelab.analysis.histogram import LogHistogram


def test_percentiles_within_precision():
    h = LogHistogram(precision=0.01)
    for v in range(1, 101):
        h.add(float(v))
    # Nearest rank over 1..100: p50 is 50, p90 is 90, p99 is 99.
    for p, exact in ((50, 50), (90, 90), (99, 99)):
        assert h.percentile(p) == pytest.approx(exact, rel=0.01)
    assert h.n == 100 and h.mean == pytest.approx(50.5)
    assert h.percentile(100) == 100.0  # clamped to the exact max


def test_single_value_is_exact_and_nan_ignored():
    h = LogHistogram()
    h.add(123.4)
    h.add(math.nan)
    assert h.n == 1
    assert h.percentile(50) == 123.4


def test_out_of_range_values_are_clamped_into_end_buckets():
    h = LogHistogram(lo=1.0, hi=100.0)
    h.add(0.001)
    h.add(1e9)
    assert h.n == 2
    assert h.percentile(0) == 0.001
    assert h.percentile(100) == 1e9
    assert h.counts[0] == 1 and h.counts[-1] == 1


def test_merge_equals_one_histogram_of_everything():
    rng = np.random.default_rng(0)
    x = rng.lognormal(3, 1, 2000)
    whole, a, b = LogHistogram(), LogHistogram(), LogHistogram()
    for v in x:
        whole.add(v)
    for v in x[:700]:
        a.add(v)
    for v in x[700:]:
        b.add(v)
    a.merge(b)
    assert np.array_equal(a.counts, whole.counts)
    assert (a.n, a.min, a.max) == (whole.n, whole.min, whole.max)
    assert a.percentile(95) == whole.percentile(95)


def test_merge_rejects_other_layouts():
    with pytest.raises(ValueError, match="layouts"):
        LogHistogram(precision=0.01).merge(LogHistogram(precision=0.02))


def test_empty_and_bad_arguments():
    assert LogHistogram().percentile(50) is None
    assert LogHistogram().mean is None
    with pytest.raises(ValueError):
        LogHistogram(lo=10, hi=1)
