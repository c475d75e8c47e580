"""Summaries streamed batch by batch: identical to the whole-run summary while exact; past the threshold the
sketch's percentiles stay within its stated error (0.05 % relative or 1e-6 absolute) of numpy's."""

import json
import random

import numpy as np
import pytest

from servelab.analysis.sketch import EXACT_MAX_VALUES, RELATIVE_BIN, MetricAccumulator, QuantileSketch
from servelab.analysis.summary import build_summary, summarize_batches
from servelab.config import RunConfig
from servelab.records.schema import RequestRecord

MS = 1_000_000
S = 1_000_000_000
PCTS = [0, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 100]


def _records(n: int, seed: int) -> list[RequestRecord]:
    """A mixed run with integer ns times (as recorded): ok, failed, cancelled, warm-up, no-usage."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        status = rng.choice(["ok"] * 8 + ["http_error", "timeout", "cancelled"])
        intended = 10**15 + i * 3 * MS + rng.randrange(MS)
        sent = intended + rng.randrange(2 * MS)
        if status != "ok":
            out.append(RequestRecord(request_id=i, status=status, warmup=i < 20, intended_ns=intended,
                                     sent_ns=sent, end_ns=sent + MS, http_status=500 if status == "http_error"
                                     else None, error=f"boom {rng.randrange(4)}"))
            continue
        tt = [sent + rng.randrange(1, 90) * MS]
        for _ in range(rng.randrange(0, 30)):
            tt.append(tt[-1] + rng.randrange(20 * MS))
        usage = None if rng.random() < 0.1 else len(tt)
        out.append(RequestRecord(request_id=i, status="ok", warmup=i < 20, intended_ns=intended, sent_ns=sent,
                                 first_token_ns=tt[0], first_content_ns=tt[0], last_token_ns=tt[-1],
                                 end_ns=tt[-1] + MS, token_times_ns=tt, usage_prompt_tokens=100,
                                 usage_completion_tokens=usage, est_prompt_tokens=100,
                                 est_completion_tokens=len(tt)))
    return out


@pytest.mark.parametrize("load", [{"concurrency": 8}, {"rate": 300}])
def test_batched_summary_is_identical_to_the_whole_run_summary(load):
    recs = _records(1500, seed=1)
    cfg = RunConfig.model_validate({"load": load, "slo": {"ttft_ms": 50, "itl_ms": 9, "percentile": 95}})
    whole = build_summary(recs, cfg, started_ns=0, ended_ns=100 * S)
    batched = summarize_batches([recs[i:i + 7] for i in range(0, len(recs), 7)], cfg, started_ns=0,
                                ended_ns=100 * S)
    assert whole["metrics"]["itl_ms"]["n"] > 10_000 and whole["goodput"]["checks"]
    assert json.dumps(batched, sort_keys=True) == json.dumps(whole, sort_keys=True)


def _hand_made() -> np.ndarray:
    """Latency-like values over 9 decades, with exact zeros and a few negatives (a clock step)."""
    rng = np.random.default_rng(7)
    return np.concatenate([rng.lognormal(np.log(12), 0.6, 200_000), rng.lognormal(np.log(900), 1.0, 60_000),
                           rng.uniform(1e-6, 1e-3, 5_000), np.zeros(3_000), -rng.uniform(0.001, 2, 500),
                           [1e5, 4.2e6]])


def test_sketch_percentiles_are_within_the_stated_error_of_numpy():
    v = _hand_made()
    sk = QuantileSketch()
    for part in np.array_split(v, 13):
        sk.add(part)
    exact = np.percentile(v, PCTS)
    got = sk.percentiles(PCTS)
    bound = RELATIVE_BIN / 2 * np.abs(exact) + 1e-6
    assert np.all(np.abs(got - exact) <= bound), np.max(np.abs(got - exact) / np.maximum(np.abs(exact), 1e-9))
    assert sk.n == v.size and sk.max == v.max() and sk.min == v.min()
    assert sk.total / sk.n == pytest.approx(v.mean(), rel=1e-12)


def test_sketch_reads_a_hand_worked_distribution():
    sk = QuantileSketch()
    sk.add(np.array([10.0, 10.0, 10.0, 20.0, np.nan]))
    # type-7 p50 of [10, 10, 10, 20] is 10; p90: rank 2.7 -> 10 + 0.7 * (20 - 10) = 17 (20 is the exact max)
    p50, p90 = sk.percentiles([50, 90])
    assert abs(p50 - 10) <= 10 * RELATIVE_BIN / 2 and abs(p90 - 17) <= 17 * RELATIVE_BIN / 2


def test_accumulator_is_exact_to_its_threshold_then_bounded():
    v = _hand_made()
    exact = MetricAccumulator(exact_max=v.size)
    sketched = MetricAccumulator(exact_max=10_000)
    for part in np.array_split(v, 40):
        exact.add(part)
        sketched.add(part)
    assert exact.exact and not sketched.exact and sketched.n == v.size
    e, s = exact.summary((99.9,), seed=0), sketched.summary((99.9,), seed=0)
    for k in ("p50", "p90", "p95", "p99", "p99.9"):
        assert abs(s[k] - e[k]) <= RELATIVE_BIN / 2 * abs(e[k]) + 1e-6, k
    assert s["max"] == e["max"] and s["n"] == e["n"]
    for k, (lo, hi) in s["ci"].items():  # order-statistic interval around the estimate
        assert lo <= s[k] <= hi
    assert sketched.percentile(99) == pytest.approx(s["p99"])
    with pytest.raises(ValueError, match="sketched"):
        sketched.values()
    assert EXACT_MAX_VALUES == 1 << 18


def test_open_loop_columns_cost_nine_bytes_a_request_once_joined():
    # What an open-loop summary keeps for offered-vs-achieved: per measured request intended + end
    # (float64) + cancelled (bool) = 17 bytes, in per-batch parts. Joined, the parts are let go and the
    # status column is references to two strings (8 bytes) beside the all-false warm-up mask (1 byte): 9
    # bytes a request more than before joining. Before: the parts stayed (17) and status was '<U9' (36):
    # 54 bytes a request.
    import tracemalloc

    from servelab.analysis.columns import as_columns
    from servelab.analysis.summary import _RunAccumulator

    recs = _records(2000, seed=3)
    cols = as_columns(recs)
    acc = _RunAccumulator(RunConfig.model_validate({"load": {"rate": 300}}), "open", EXACT_MAX_VALUES)
    n = 10 * sum(not r.warmup for r in recs)
    tracemalloc.start()  # before the parts are made, so that letting them go counts
    try:
        for _ in range(10):  # 20,000 requests in 10 batches (the same records: only sizes matter here)
            acc.add(cols)
        before = tracemalloc.get_traced_memory()[0]
        kept = acc.kept_columns()
        grew = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grew < 12 * n, f"{grew / n:.1f} bytes a request"
    assert kept.t("intended_ns").size == n and acc.kept == []
    assert int((kept.status == "cancelled").sum()) == 10 * sum(r.status == "cancelled" and not r.warmup
                                                               for r in recs)
