"""The request-clustered bootstrap of a pooled percentile (servelab.analysis.cluster)."""

import numpy as np

from servelab.analysis.cluster import cluster_percentile_diff_ci, cluster_percentile_replicates
from servelab.analysis.stats import bootstrap_diff_ci


def test_each_replicate_is_numpys_percentile_of_the_pooled_resample():
    # Three requests with 2, 3 and 1 gaps. Replaying the generator's draws by hand: every replicate equals
    # np.percentile (linear) of the gaps of the drawn requests, each repeated as often as it was drawn.
    x = np.array([5.0, 1.0, 7.0, 2.0, 9.0, 4.0])
    owner = np.array([0, 0, 1, 1, 1, 2])
    for p in (0, 10, 50, 95, 100):
        got = cluster_percentile_replicates(x, owner, p, resamples=20, rng=np.random.default_rng(7))
        rng = np.random.default_rng(7)
        for r in got:
            drawn = rng.integers(0, 3, 3)
            pooled = np.concatenate([x[owner == k] for k in drawn])
            assert r == np.percentile(pooled, p)


def test_one_request_is_not_a_sample_and_a_single_value_cluster_is():
    rng = np.random.default_rng(0)
    assert cluster_percentile_replicates(np.arange(5.0), np.zeros(5), 50, rng=rng).size == 0
    # one value per request: the same as resampling values, so replicates stay within the data
    reps = cluster_percentile_replicates(np.arange(10.0), np.arange(10), 50, resamples=200, rng=rng)
    assert reps.size == 200 and reps.min() >= 0 and reps.max() <= 9


def _stalled_run(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """One run: 64 requests of 200 gaps, 9 ms apart except stalls of 10-30 ms whose share differs a lot
    from request to request (a stall hits whole stretches of the requests in flight): p95 sits among them."""
    rng = np.random.default_rng(seed)
    share = rng.beta(0.5, 5.5, 64)  # mean 8% of a request's gaps stalled
    gaps = [np.where(rng.random(200) < s, rng.uniform(10, 30, 200), 9.0 + rng.normal(0, 0.3, 200))
            for s in share]
    return np.concatenate(gaps), np.repeat(np.arange(64), 200)


def test_a_p95_wobble_between_two_runs_of_one_system_is_noise_by_requests_not_by_gaps():
    xa, oa = _stalled_run(2)
    xb, ob = _stalled_run(102)  # the same system, another seed: p95 17.2 -> 19.3 ms (+12%)
    assert np.percentile(xb, 95) / np.percentile(xa, 95) > 1.10
    by_gap = bootstrap_diff_ci(xa, xb, 95, seed=0)  # 12,800 values taken as independent: "different"
    by_request = cluster_percentile_diff_ci(xa, oa, xb, ob, 95, seed=0)
    assert by_request["diff"] == by_gap["diff"]
    assert by_gap["lo"] > 0
    assert by_request["lo"] <= 0 <= by_request["hi"]


def test_a_real_shift_is_still_found():
    xa, oa = _stalled_run(1)
    ci = cluster_percentile_diff_ci(xa, oa, xa * 1.3, oa, 50, seed=0)
    assert ci["lo"] > 0 and abs(ci["rel"] - 0.3) < 1e-9


def test_many_requests_use_a_subset_scaled_by_sqrt_m_over_k():
    rng = np.random.default_rng(3)
    x = rng.exponential(10.0, 40_000)
    owner = np.repeat(np.arange(20_000), 2)
    full = cluster_percentile_replicates(x, owner, 90, resamples=300, max_clusters=20_000,
                                         rng=np.random.default_rng(1))
    sub = cluster_percentile_replicates(x, owner, 90, resamples=300, max_clusters=2_000,
                                        rng=np.random.default_rng(1))
    point = np.percentile(x, 90)
    assert abs(np.median(sub) - point) < 0.5
    assert 0.7 < np.std(sub) / np.std(full) < 1.4  # the m-out-of-n spread, rescaled, matches the full one
