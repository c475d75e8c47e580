"""Wilson and Newcombe intervals: closed-form edge values, invariants, and coverage by simulation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.accuracy.stats import (
    difference_independent,
    difference_paired,
    proportion,
    wilson_interval,
)

Z95_SQ = 1.959963984540054 ** 2


def test_wilson_edges_have_closed_forms():
    # k = 0: the upper bound solves p = z^2 / (n + z^2); k = n mirrors it.
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(Z95_SQ / (10 + Z95_SQ))
    lo, hi = wilson_interval(10, 10)
    assert hi == 1.0 and lo == pytest.approx(10 / (10 + Z95_SQ))
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert proportion(0, 0)["value"] is None


@given(st.integers(1, 2000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_contains_the_estimate_and_stays_in_bounds(kn):
    k, n = kn
    lo, hi = wilson_interval(k, n)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    lo2, hi2 = wilson_interval(k, n, 0.99)
    assert lo2 <= lo + 1e-12 and hi2 >= hi - 1e-12  # more confidence, wider


def test_wilson_narrows_with_more_items():
    assert np.diff(wilson_interval(80, 100)) > np.diff(wilson_interval(800, 1000))


def _coverage(make, truth, trials=3000, seed=0):
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(trials):
        lo, hi = make(rng)
        hits += lo <= truth <= hi
    return hits / trials


@pytest.mark.parametrize(("p", "n"), [(0.9, 40), (0.5, 30), (0.97, 100)])
def test_wilson_coverage_near_nominal(p, n):
    cov = _coverage(lambda rng: wilson_interval(int(rng.binomial(n, p)), n), p)
    assert 0.92 <= cov <= 0.99, cov


@pytest.mark.parametrize(("p1", "p2", "n"), [(0.8, 0.7, 60), (0.95, 0.95, 80)])
def test_independent_difference_coverage(p1, p2, n):
    def make(rng):
        d = difference_independent(int(rng.binomial(n, p1)), n, int(rng.binomial(n, p2)), n)
        return d["lo"], d["hi"]

    cov = _coverage(make, p1 - p2)
    assert 0.92 <= cov <= 0.99, cov


def _paired_sample(rng, n, p_base, flip_down, flip_up):
    """Baseline correctness, and a candidate that loses some right answers and gains some wrong ones."""
    base = rng.random(n) < p_base
    u = rng.random(n)
    cand = np.where(base, u >= flip_down, u < flip_up)
    return cand, base


@pytest.mark.parametrize(("n", "p_base", "down", "up"), [(100, 0.8, 0.1, 0.2), (200, 0.9, 0.05, 0.0),
                                                         (60, 0.7, 0.0, 0.0)])
def test_paired_difference_coverage(n, p_base, down, up):
    truth = -p_base * down + (1 - p_base) * up

    def make(rng):
        cand, base = _paired_sample(rng, n, p_base, down, up)
        d = difference_paired(cand.tolist(), base.tolist())
        return d["lo"], d["hi"]

    cov = _coverage(make, truth, trials=2000)
    assert 0.92 <= cov <= 1.0, cov


def test_paired_is_tighter_than_independent_for_correlated_items():
    rng = np.random.default_rng(1)
    cand, base = _paired_sample(rng, 200, 0.8, 0.05, 0.05)
    paired = difference_paired(cand.tolist(), base.tolist())
    indep = difference_independent(int(cand.sum()), 200, int(base.sum()), 200)
    assert paired["diff"] == pytest.approx(indep["diff"])
    assert paired["hi"] - paired["lo"] < 0.7 * (indep["hi"] - indep["lo"])
    assert paired["lo"] <= paired["diff"] <= paired["hi"]


def test_paired_counts_and_length_check():
    d = difference_paired([True, True, False, False], [True, False, True, True])
    assert d["diff"] == pytest.approx(-0.25) and d["discordant"] == (1, 2) and d["n"] == 4
    with pytest.raises(ValueError, match="differ in length"):
        difference_paired([True], [True, False])
    assert difference_paired([], [])["diff"] is None
