import numpy as np
import pytest

from servelab.analysis.columns import as_columns, from_records, from_table
from servelab.analysis.metrics import METRICS, UNITS, metric_values, per_request
from servelab.records.rundir import REQUEST_SCHEMA, rows_to_table
from servelab.records.schema import RequestRecord, record_to_row

MS = 1_000_000
BASE = 10**17  # a monotonic clock that has run for a while: float64 of the raw ns would lose precision


def _rec(i, *, intended, sent, tokens, end, usage=None, content=None, status="ok", warmup=False, chunks=None):
    tt = [BASE + t * MS for t in tokens]
    return RequestRecord(
        request_id=i, status=status, warmup=warmup, intended_ns=BASE + intended * MS,
        sent_ns=None if sent is None else BASE + sent * MS,
        first_token_ns=tt[0] if tt else None, last_token_ns=tt[-1] if tt else None,
        first_content_ns=BASE + (content if content is not None else tokens[0]) * MS if tt else None,
        end_ns=None if end is None else BASE + end * MS, token_times_ns=tt,
        usage_completion_tokens=usage, est_completion_tokens=len(tt) if chunks is None else chunks,
    )


def _records():
    return [
        # Sent 2 ms late; chunks at 10, 12, 15, 21 ms (7 tokens by usage: chunks carry several); content at
        # 12.
        _rec(0, intended=0, sent=2, tokens=[10, 12, 15, 21], end=22, usage=7, content=12),
        # A second request whose tokens at 100 and 104 ms: the 21 -> 100 gap belongs to no request.
        _rec(1, intended=90, sent=90, tokens=[100, 104], end=105, usage=2),
        # One-token answer: TPOT and per-request ITL undefined.
        _rec(2, intended=200, sent=201, tokens=[230], end=231, usage=1),
        # Warm-up and a failure: never in latency figures; the failure (sent 5 ms late) counts in lag.
        _rec(3, intended=300, sent=300, tokens=[301, 302], end=303, usage=2, warmup=True),
        _rec(4, intended=400, sent=405, tokens=[], end=406, status="timeout"),
        # Cancelled before it was sent: in no figure.
        _rec(5, intended=500, sent=None, tokens=[], end=None, status="cancelled"),
    ]


def test_open_loop_latencies_start_at_the_intended_send():
    v = metric_values(from_records(_records()), "open")
    assert v["ttft_ms"].tolist() == [10.0, 10.0, 30.0]
    assert v["ttft_content_ms"].tolist() == [12.0, 10.0, 30.0]
    assert v["e2e_ms"].tolist() == [22.0, 15.0, 31.0]
    assert v["ttlt_ms"].tolist() == [21.0, 14.0, 30.0]
    assert v["queue_ms"].tolist() == [2.0, 0.0, 1.0]
    assert v["lag_ms"].tolist() == [2.0, 0.0, 1.0, 5.0]


def test_closed_loop_latencies_start_at_the_actual_send():
    v = metric_values(from_records(_records()), "closed")
    assert v["ttft_ms"].tolist() == [8.0, 10.0, 29.0]
    assert v["e2e_ms"].tolist() == [20.0, 15.0, 30.0]


def test_token_gap_metrics():
    v = metric_values(from_records(_records()), "open")
    assert v["itl_ms"].tolist() == [2.0, 3.0, 6.0, 4.0]  # pooled gaps, never across requests
    assert v["itl_request_ms"].tolist() == pytest.approx([11 / 3, 4.0])  # one mean per request with 2+ chunks
    # TPOT uses usage tokens: (21 - 10) / (7 - 1); (104 - 100) / (2 - 1); the one-token answer has none.
    assert v["tpot_ms"].tolist() == pytest.approx([11 / 6, 4.0])


def test_tpot_falls_back_to_counted_chunks_without_usage():
    r = _rec(0, intended=0, sent=0, tokens=[10, 20, 30], end=31, usage=None)
    assert per_request(from_records([r]), "open", "tpot_ms").tolist() == [10.0]


def test_pooled_metric_has_no_per_request_view():
    with pytest.raises(ValueError, match="pooled"):
        per_request(from_records(_records()), "open", "itl_ms")


def test_table_adapter_gives_the_same_columns():
    recs = _records()
    table = rows_to_table([record_to_row(r) for r in recs], REQUEST_SCHEMA)
    a, b = from_records(recs), from_table(table)
    assert a.base_ns == b.base_ns == BASE
    for name in a.times:
        np.testing.assert_array_equal(a.times[name], b.times[name])
    for name in a.counts:
        np.testing.assert_array_equal(a.counts[name], b.counts[name])
    np.testing.assert_array_equal(a.token_times, b.token_times)
    np.testing.assert_array_equal(a.token_offsets, b.token_offsets)
    assert a.status.tolist() == b.status.tolist() and a.warmup.tolist() == b.warmup.tolist()
    assert as_columns(table).n == as_columns(a).n == 6


def test_empty_input():
    v = metric_values(from_records([]), "open")
    assert all(x.size == 0 for x in v.values())


def test_every_metric_has_a_unit_and_description():
    assert set(UNITS) == {m.name for m in METRICS}
    assert all(m.description and m.unit == "ms" for m in METRICS)
