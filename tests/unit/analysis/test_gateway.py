"""Gateway overhead from two runs' request records: a known added delay is recovered with its interval."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.analysis.gateway import gateway_overhead
from servelab.records.schema import OK, RequestRecord

MS = 1_000_000


def _records(n: int, extra_ms: float, rng: np.random.Generator, *, tokens: int = 8, gap_ms: float = 5.0,
             users: int = 4) -> list[RequestRecord]:
    """A closed loop of ``users``: each request waits a noisy TTFT (+ ``extra_ms``) then streams ``tokens``."""
    out, free = [], [0] * users
    for i in range(n):
        u = i % users
        sent = free[u]
        first = sent + int((30 + rng.exponential(5) + extra_ms) * MS)
        times = [first + int(k * gap_ms * MS + rng.normal(0, 0.2) * MS) for k in range(tokens)]
        times = list(np.maximum.accumulate(times))
        end = times[-1] + MS
        free[u] = end
        out.append(RequestRecord(request_id=i, status=OK, intended_ns=sent, sent_ns=sent, first_byte_ns=first,
                                 first_token_ns=first, first_content_ns=first, last_token_ns=times[-1],
                                 end_ns=end, token_times_ns=[int(t) for t in times],
                                 usage_completion_tokens=tokens, est_completion_tokens=tokens))
    return out


def test_added_delay_is_recovered():
    rng = np.random.default_rng(0)
    direct, via = _records(400, 0.0, rng), _records(400, 20.0, rng)
    res = gateway_overhead(direct, via, seed=1)
    rows = {r["figure"]: r for r in res["rows"]}
    for name in ("ttft p50", "e2e p50"):
        r = rows[name]
        assert r["overhead_lo"] <= 20.0 <= r["overhead_hi"], r
        assert r["verdict"] == "overhead" and r["pct_lo"] > 0
        assert r["overhead"] == pytest.approx(r["via"] - r["direct"])
    assert rows["itl p50"]["verdict"] == "within noise"
    # Throughput lost: each user's cycle grows by 20 ms out of about 70.
    thr = rows["output tokens/s"]
    assert thr["overhead_pct"] == pytest.approx(100 * (1 - thr["via"] / thr["direct"]))
    assert 15 < thr["overhead_pct"] < 40 and thr["pct_lo"] > 0 and thr["verdict"] == "overhead"
    assert res["headline"]["ttft"] is rows["ttft p50"]
    assert res["failures"]["via"] == {"requests": 400, "failed": 0, "rate": 0.0}


def test_no_difference_is_within_noise_and_deterministic():
    rng = np.random.default_rng(2)
    a, b = _records(300, 0.0, rng), _records(300, 0.0, rng)
    res = gateway_overhead(a, b, seed=3)
    rows = {r["figure"]: r for r in res["rows"]}
    assert rows["ttft p50"]["verdict"] == "within noise"
    assert rows["output tokens/s"]["verdict"] == "within noise"
    assert gateway_overhead(a, b, seed=3) == res


def test_too_few_samples():
    rng = np.random.default_rng(4)
    res = gateway_overhead(_records(5, 0.0, rng), _records(5, 20.0, rng))
    per_request = [r for r in res["rows"] if r["figure"].startswith(("ttft", "e2e"))]
    assert {r["verdict"] for r in per_request} == {"too few samples"}
    assert all(r["overhead"] is None for r in per_request)
    # 5 requests still hold 35 token gaps: ITL has enough samples.
    assert {r["n"] for r in res["rows"] if r["figure"].startswith("itl")} == {(35, 35)}
    with pytest.raises(ValueError):
        gateway_overhead([], [], confidence=1.5)
