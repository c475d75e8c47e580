"""One bootstrap engine (analysis.stats._replicates) behind every resampled interval: percentiles (summary,
compare, gateway) and means (compare's failure rate)."""

import numpy as np
import pytest

from servelab.analysis import stats
from servelab.analysis.compare import compare_figures
from servelab.analysis.stats import bootstrap_ci, bootstrap_mean_diff_ci
from servelab.records.schema import HTTP_ERROR, OK, RequestRecord


def test_mean_diff_hand_worked():
    # Constant samples: every resample has the same mean, so the interval has zero width at the difference.
    r = bootstrap_mean_diff_ci([0.25] * 8, [0.75] * 6, resamples=200)
    assert r == {"diff": 0.5, "lo": 0.5, "hi": 0.5, "rel": 2.0}
    assert bootstrap_mean_diff_ci([0.0] * 4, [1.0] * 4, resamples=50)["rel"] is None  # no change from 0
    assert bootstrap_mean_diff_ci([1.0], [1.0, 2.0])["lo"] is None  # fewer than 2 values on a side
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_mean_diff_ci([1.0, 2.0], [1.0, 2.0], confidence=1.0)


def test_mean_diff_interval_covers_the_difference_and_is_seeded():
    rng = np.random.default_rng(1)
    a, b = (rng.random(400) < 0.05).astype(float), (rng.random(400) < 0.15).astype(float)
    r = bootstrap_mean_diff_ci(a, b, resamples=500, seed=3)
    assert r["lo"] < r["diff"] < r["hi"] and r["lo"] > 0  # 5% vs 15% of 400: clearly apart
    assert bootstrap_mean_diff_ci(a, b, resamples=500, seed=3) == r


def _recs(n: int, fail_every: int) -> list[RequestRecord]:
    out = []
    for i in range(n):
        t = i * 1_000_000_000
        if fail_every and i % fail_every == 0:
            out.append(RequestRecord(request_id=i, status=HTTP_ERROR, intended_ns=t, sent_ns=t, end_ns=t + 5))
            continue
        times = [t + 50_000_000 + k * 10_000_000 for k in range(5)]
        out.append(RequestRecord(request_id=i, status=OK, intended_ns=t, sent_ns=t, first_token_ns=times[0],
                                 last_token_ns=times[-1], end_ns=times[-1], token_times_ns=times,
                                 usage_completion_tokens=5, est_completion_tokens=5))
    return out


def test_every_interval_goes_through_the_one_engine(monkeypatch):
    # percentiles: stats._bootstrap_distribution (ranked counting within max_n, _replicates beyond it);
    # means (the failure rate): stats._replicates
    calls: list[tuple[str, int]] = []
    real_dist, real_reps = stats._bootstrap_distribution, stats._replicates

    def dist_spy(a, percentiles, *args):
        calls.append(("percentiles", len(percentiles)))
        return real_dist(a, percentiles, *args)

    def reps_spy(a, stat, width, *args):
        calls.append((stat.__name__, width))
        return real_reps(a, stat, width, *args)

    monkeypatch.setattr(stats, "_bootstrap_distribution", dist_spy)
    monkeypatch.setattr(stats, "_replicates", reps_spy)
    bootstrap_ci(np.arange(50.0), (50, 99))
    assert calls == [("percentiles", 2)]  # two percentiles at once, within max_n: no _replicates
    calls.clear()
    bootstrap_ci(np.arange(50.0), (50, 99), max_n=5)  # 50 > 8 x 5: past the counted path
    assert calls == [("percentiles", 2), ("<lambda>", 2)]  # beyond max_n: m-out-of-n through _replicates
    calls.clear()
    rows = {r["figure"]: r for r in compare_figures(_recs(60, 10), _recs(60, 4), resamples=100)}
    assert calls.count(("means", 1)) == 2  # the failure rate: one mean per run
    # A and B x 3 per-request latency metrics x p50/p95/p99; ITL (many gaps per request) resamples whole
    # requests through analysis.cluster instead
    assert calls.count(("percentiles", 1)) == 2 * 3 * 3
    fr = rows["failure rate"]
    assert fr["a"] == pytest.approx(6 / 60) and fr["b"] == pytest.approx(15 / 60)
    direct = bootstrap_mean_diff_ci(np.r_[[1.0] * 6, [0.0] * 54], np.r_[[1.0] * 15, [0.0] * 45])
    assert fr["diff"] == pytest.approx(direct["diff"])


def test_ranked_counting_holds_a_bounded_block_and_gives_the_same_replicates():
    # The summary's bootstrap of 10,000 exact values (a 10,000-request run's TTFT) counted all of a draw
    # chunk's rows at once: 209 rows x 10,000 ranks of int64 counts and their running sums (2 x 16.7 MB)
    # beside the draws and their ranks (2 x 8.4 MB): 48 MB traced for one chunk. Counted a block of rows at
    # a time (2 MiB of counts) it holds the draws and a block: under 20 MB, with the same replicates.
    import tracemalloc

    a = np.random.default_rng(5).lognormal(3.0, 1.0, 10_000)
    pcts = [50.0, 95.0, 99.0]
    want = stats._replicates(a, lambda x: np.percentile(x, pcts, axis=1).T, 3, 209, 5000,
                             np.random.default_rng(2))[0]
    tracemalloc.start()
    try:
        got = stats._ranked_percentile_replicates(a, pcts, 209, 5000, np.random.default_rng(2))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(got, want)  # each replicate equal to the bit to np.percentile of the same draw
    assert peak < 20 * 2**20, f"{peak / 2**20:.1f} MB"
