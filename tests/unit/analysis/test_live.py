import pytest

from servelab.analysis.live import LiveStats
from servelab.records.schema import RequestRecord

MS = 1_000_000


def ok(i, intended_ms, sent_ms, ttft_ms, end_ms, tokens=10, warmup=False):
    return RequestRecord(request_id=i, status="ok", warmup=warmup, intended_ns=intended_ms * MS,
                         sent_ns=sent_ms * MS, first_token_ns=(sent_ms + ttft_ms) * MS, end_ns=end_ms * MS,
                         usage_completion_tokens=tokens)


def test_counts_rates_and_ttft():
    s = LiveStats(mode="closed")
    s.update(ok(0, 0, 0, 100, 1000))
    s.update(ok(1, 500, 500, 200, 2000))
    s.update(ok(2, 600, 900, 300, 1500, warmup=True))
    s.update(RequestRecord(request_id=3, status="timeout", intended_ns=0))
    s.update(RequestRecord(request_id=4, status="cancelled", intended_ns=0))
    assert (s.done, s.ok, s.errors, s.cancelled, s.warmup) == (4, 2, 1, 1, 1)
    assert s.elapsed_s == pytest.approx(2.0)
    assert s.requests_per_s == pytest.approx(1.0)
    assert s.output_tokens_per_s == pytest.approx(10.0)
    assert s.ttft_p50_ms() == pytest.approx(100, rel=0.01)  # nearest rank of (100, 200)


def test_open_loop_ttft_counts_the_lag():
    s = LiveStats(mode="open")
    s.update(ok(0, 0, 50, 100, 1000))
    assert s.ttft_p50_ms() == pytest.approx(150, rel=0.01)


def test_merge():
    a, b = LiveStats(), LiveStats()
    a.update(ok(0, 0, 0, 100, 1000))
    b.update(ok(1, 2000, 2000, 300, 4000))
    a.merge(b)
    assert a.ok == 2 and a.elapsed_s == pytest.approx(4.0)
    assert a.ttft_ms.n == 2


def test_empty():
    s = LiveStats()
    assert s.requests_per_s is None and s.ttft_p50_ms() is None
