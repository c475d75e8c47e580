"""Gateway overhead from two runs' request records: a known added delay is recovered with its interval."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.analysis.gateway import gateway_overhead
from servelab.records.schema import OK, RequestRecord

MS = 1_000_000


def _records(n: int, extra_ms: float, rng: np.random.Generator, *, tokens: int = 8, gap_ms: float = 5.0,
             users: int = 4) -> list[RequestRecord]:
    """A closed loop of ``users``: each request waits a noisy TTFT (+ ``extra_ms``) then streams
    ``tokens``."""
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
    assert rows["itl p50"]["verdict"] == "no measurable overhead"
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
    assert rows["ttft p50"]["verdict"] == "no measurable overhead"
    assert rows["output tokens/s"]["verdict"] == "no measurable overhead"
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


def _fixed(n: int, ttft_ms: float, *, tokens: int = 8, gap_ms: float = 5.0) -> list[RequestRecord]:
    """Deterministic sequential requests: TTFT ``ttft_ms``, then ``tokens`` tokens ``gap_ms`` apart."""
    out, t = [], 0
    for i in range(n):
        first = t + int(ttft_ms * MS)
        times = [first + int(k * gap_ms * MS) for k in range(tokens)]
        out.append(RequestRecord(request_id=i, status=OK, intended_ns=t, sent_ns=t, first_token_ns=first,
                                 last_token_ns=times[-1], end_ns=times[-1], token_times_ns=times,
                                 usage_completion_tokens=tokens, est_completion_tokens=tokens))
        t = times[-1]
    return out


def test_the_gateway_is_never_reported_faster():
    # Drift made the via run 3 ms faster at TTFT, with zero-width intervals: still not "faster".
    res = gateway_overhead(_fixed(50, 30.0), _fixed(50, 27.0), seed=0)
    rows = {r["figure"]: r for r in res["rows"]}
    assert rows["ttft p50"]["overhead"] == pytest.approx(-3.0)
    assert rows["ttft p50"]["overhead_lo"] == rows["ttft p50"]["overhead_hi"] == pytest.approx(-3.0)
    assert rows["ttft p50"]["verdict"] == "no measurable overhead"
    assert "drift" in rows["ttft p50"]["note"]
    assert all(r["verdict"] in ("overhead", "no measurable overhead") for r in res["rows"]), res["rows"]
    # A 0.5% overhead with a zero-width interval is under the 1% floor: not a measurable overhead.
    tiny = {r["figure"]: r for r in gateway_overhead(_fixed(50, 30.0), _fixed(50, 30.15))["rows"]}
    assert (
        tiny["ttft p50"]["overhead"] == pytest.approx(0.15)
        and tiny["ttft p50"]["verdict"] == "no measurable overhead"
    )


def test_abba_repetitions_cancel_a_linear_drift():
    # The server slows 2 ms per run position; the gateway adds 10 ms. Positions 0..3 have TTFT 30, 32, 34, 36.
    # ABBA: direct at 0 and 3 (30, 36: pooled median 33), via at 1 and 2 (42, 44: median 43) -> exactly 10.
    runs = [_fixed(40, 30.0 + 2 * pos + (10.0 if role == "via" else 0.0))
            for pos, role in enumerate(("direct", "via", "via", "direct"))]
    res = gateway_overhead([runs[0], runs[3]], [runs[1], runs[2]], seed=0)
    ttft = {r["figure"]: r for r in res["rows"]}["ttft p50"]
    assert ttft["direct"] == pytest.approx(33.0) and ttft["via"] == pytest.approx(43.0)
    assert ttft["overhead"] == pytest.approx(10.0) and ttft["verdict"] == "overhead"
    assert res["repetitions"] == {"direct": 2, "via": 2}
    # ABAB would have charged the drift to the gateway: direct 30, 34 (32), via 42, 46 (44) -> 12.
    abab = [_fixed(40, 30.0 + 2 * pos + (10.0 if pos % 2 else 0.0)) for pos in range(4)]
    bad = gateway_overhead([abab[0], abab[2]], [abab[1], abab[3]], seed=0)
    assert {r["figure"]: r for r in bad["rows"]}["ttft p50"]["overhead"] == pytest.approx(12.0)
    # Throughput pools the windows: each run 40 requests x 8 tokens over its own time.
    thr = {r["figure"]: r for r in res["rows"]}["output tokens/s"]
    span = sum(40 * ((30.0 + 2 * pos + (10.0 if pos in (1, 2) else 0)) + 7 * 5.0) for pos in (0, 3)) / 1000
    assert thr["direct"] == pytest.approx(2 * 40 * 8 / span)


def test_output_lengths():
    from servelab.analysis.gateway import output_lengths

    assert output_lengths(_fixed(10, 30.0), _fixed(10, 40.0)) == {"identical": True, "direct_tokens": 80,
                                                                   "via_tokens": 80}
    assert output_lengths(_fixed(10, 30.0), _fixed(10, 30.0, tokens=9))["identical"] is False
