import json
import math

import numpy as np
import orjson
import pytest

from servelab.analysis.summary import build_summary, jsonable
from servelab.config import RunConfig
from servelab.records.rundir import REQUEST_SCHEMA, rows_to_table
from servelab.records.schema import RequestRecord, record_to_row

MS = 1_000_000
S = 1_000_000_000


def rec(i, *, start_ms, ttft_ms=10, gaps_ms=(5,), status="ok", warmup=False, usage=None, prompt=100,
        lag_ms=0.0, chunks=None, http=None, error=None):
    """An ok request intended at ``start_ms``, sent ``lag_ms`` later, with chunks every ``gaps_ms``."""
    intended = start_ms * MS
    sent = intended + int(lag_ms * MS)
    if status != "ok":
        return RequestRecord(request_id=i, status=status, warmup=warmup, intended_ns=intended, sent_ns=sent,
                             end_ns=sent + 1 * MS, http_status=http, error=error)
    tt = [sent + ttft_ms * MS]
    for g in gaps_ms:
        tt.append(tt[-1] + int(g * MS))
    return RequestRecord(
        request_id=i, status="ok", warmup=warmup, intended_ns=intended, sent_ns=sent, first_token_ns=tt[0],
        first_content_ns=tt[0], last_token_ns=tt[-1], end_ns=tt[-1] + 1 * MS, token_times_ns=tt,
        usage_prompt_tokens=prompt, usage_completion_tokens=len(tt) if usage is None else usage,
        est_prompt_tokens=prompt, est_completion_tokens=len(tt) if chunks is None else chunks,
    )


def cfg(**kw):
    return RunConfig.model_validate(kw)


def summarize(records, config=None, extra=None):
    return build_summary(records, config or cfg(), started_ns=0, ended_ns=100 * S, extra=extra)


def test_throughput_time_base_is_first_measured_start_to_last_measured_end():
    records = [
        rec(0, start_ms=0, warmup=True, ttft_ms=9000),  # warm-up: outside the time base
        rec(1, start_ms=1000, ttft_ms=1000, gaps_ms=(999,), usage=10, prompt=50),  # ends at 3000 ms
        rec(2, start_ms=2000, ttft_ms=2000, gaps_ms=(999,), usage=30, prompt=150),  # ends at 5000 ms
    ]
    s = summarize(records)
    t = s["throughput"]
    assert t["duration_s"] == pytest.approx(4.0)
    assert t["requests_per_s"] == pytest.approx(2 / 4)
    assert t["output_tokens_per_s"] == pytest.approx(40 / 4)
    assert t["input_tokens_per_s"] == pytest.approx(200 / 4)
    assert t["total_tokens_per_s"] == pytest.approx(240 / 4)
    assert s["requests"] == {"sent": 2, "ok": 2, "failed": {"http_error": 0, "timeout": 0, "disconnected": 0,
                                                            "malformed": 0}, "cancelled": 0, "warmup": 1}


def test_open_loop_time_base_starts_at_the_intended_send():
    records = [rec(1, start_ms=1000, lag_ms=500, ttft_ms=500, gaps_ms=(999,)),  # sent 1500, ends 3000
               rec(2, start_ms=2000, ttft_ms=2000, gaps_ms=(999,))]
    closed = summarize(records)["throughput"]["duration_s"]
    opened = summarize(records, cfg(load={"rate": 1}, limits={"max_lag_p99_ms": 1000}))["throughput"][
        "duration_s"
    ]
    assert closed == pytest.approx(3.5) and opened == pytest.approx(4.0)


def test_goodput_counts_requests_meeting_every_slo():
    records = [
        rec(0, start_ms=0, ttft_ms=10, gaps_ms=(5, 5)),  # good
        rec(1, start_ms=100, ttft_ms=50, gaps_ms=(5, 5)),  # TTFT too slow
        rec(2, start_ms=200, ttft_ms=10, gaps_ms=(30, 30)),  # ITL and TPOT too slow
        rec(3, start_ms=300, ttft_ms=10, gaps_ms=()),  # one token: ITL/TPOT cannot be violated: good
        rec(4, start_ms=400, status="timeout"),  # failed: never good, but counts in the fraction
    ]
    s = summarize(records, cfg(slo={"ttft_ms": 20, "itl_ms": 10, "tpot_ms": 10}))
    g = s["goodput"]
    assert g["requests"] == 2
    assert g["fraction"] == pytest.approx(2 / 5)
    assert g["slo"] == {"ttft_ms": 20.0, "itl_ms": 10.0, "tpot_ms": 10.0}
    assert s["throughput"]["goodput_requests_per_s"] == pytest.approx(
        2 / s["throughput"]["duration_s"])
    # p99 TTFT of (10, 50, 10, 10) is 48.8 ms: over the 20 ms limit.
    check = g["checks"]["ttft_ms"]
    assert check["value"] == pytest.approx(48.8) and check["pass"] is False


def test_no_slo_means_every_ok_request_is_good():
    s = summarize([rec(0, start_ms=0), rec(1, start_ms=10, status="http_error", http=503)])
    assert s["goodput"]["requests"] == 1 and s["goodput"]["slo"] == {} and s["goodput"]["checks"] == {}


def test_counts_add_up_and_errors_by_status():
    records = [rec(0, start_ms=0), rec(1, start_ms=1, status="http_error", http=503, error="overloaded"),
               rec(2, start_ms=2, status="http_error", http=503, error="overloaded"),
               rec(3, start_ms=3, status="disconnected"), rec(4, start_ms=4, status="cancelled")]
    s = summarize(records)
    r = s["requests"]
    assert r["sent"] == 5 == r["ok"] + sum(r["failed"].values()) + r["cancelled"]
    assert r["failed"]["http_error"] == 2 and r["failed"]["disconnected"] == 1 and r["cancelled"] == 1
    assert s["errors"]["rate"] == pytest.approx(3 / 4)
    assert s["errors"]["by_http_status"] == {"503": 2}
    assert s["errors"]["top"] == [["overloaded", 2]]
    # 3 of 4 attempts failed (the cancelled one is not an attempt): far over the 5% error-rate limit.
    assert s["valid"] is False
    assert s["invalid_reasons"][0].startswith("error rate 75.0% (3 of 4 attempts failed: HTTP error 2; "
                                              "connection lost 1; HTTP 503 x2; first error: overloaded) "
                                              "exceeds validity.max_error_rate 5.0%")


def test_unknown_status_breaks_the_count_and_is_flagged():
    s = summarize([rec(0, start_ms=0), rec(1, start_ms=1, status="exploded")])
    assert s["valid"] is False
    assert "counts do not add up" in s["invalid_reasons"][0] and "'exploded': 1" in s["invalid_reasons"][0]


def test_open_loop_lag_over_the_limit_invalidates_with_the_numbers():
    records = [rec(i, start_ms=10 * i, lag_ms=25.0 if i % 2 else 0.0) for i in range(20)]
    s = summarize(records, cfg(load={"rate": 100}, limits={"max_lag_p99_ms": 10}))
    assert s["valid"] is False
    assert "schedule lag p99 25 ms exceeds limits.max_lag_p99_ms 10 ms" in s["invalid_reasons"][0]
    # The same lag in a closed loop is not a schedule violation.
    assert summarize(records, cfg(load={"concurrency": 1}, limits={"max_lag_p99_ms": 10}))["valid"] is True


def test_runner_hints_invalidate():
    records = [rec(0, start_ms=0)]
    s = summarize(records, extra={"loop_lag_p99_ms": 50.0})
    assert s["valid"] is False and "event loop saturated" in s["invalid_reasons"][0]
    assert summarize(records, extra={"loop_lag_ms_p99": 50.0})["valid"] is False
    assert summarize(records, extra={"loop_saturated": True})["valid"] is False
    one_user = cfg(load={"concurrency": 1})
    lost = summarize(records, one_user, extra={"requests_issued": 3})
    assert lost["invalid_reasons"] == ["records lost: the runner issued 3 requests but 1 records exist"]
    assert summarize(records, one_user, extra={"loop_lag_p99_ms": 1.0, "requests_issued": 1})["valid"] is True


@pytest.mark.parametrize(
    ("usages", "source", "estimated"),
    [((3, 3), "usage", 0), ((None, None), "estimate", 2), ((3, None), "mixed", 1)],
)
def test_token_source(usages, source, estimated):
    records = [rec(i, start_ms=i, gaps_ms=(5, 5), usage=u) for i, u in enumerate(usages)]
    if any(u is None for u in usages):
        for r, u in zip(records, usages, strict=True):
            if u is None:
                r.usage_completion_tokens = None
    s = summarize(records)
    assert s["tokens"]["source"] == source and s["tokens"]["estimated"] == estimated
    assert s["tokens"]["mismatch"] == estimated
    assert (source == "usage") == (not any("usage" in w for w in s["warnings"]))


def test_token_mismatch_only_when_chunks_exceed_usage():
    records = [
        rec(0, start_ms=0, gaps_ms=(5, 5), usage=12, chunks=3),  # 3 chunks carrying 12 tokens: fine
        rec(1, start_ms=1, gaps_ms=(5, 5), usage=2, chunks=3),  # more chunks than tokens: flagged
    ]
    t = summarize(records)["tokens"]
    assert t["mismatch"] == 1 and t["chunks_over_usage"] == 1
    assert t["output"] == 14 and t["input"] == 200 and t["source"] == "usage"


def test_configured_extra_percentile_and_ci_keys():
    records = [rec(i, start_ms=i, ttft_ms=i + 1) for i in range(100)]
    m = summarize(records, cfg(percentiles=[50, 99.9]))["metrics"]["ttft_ms"]
    assert m["p99.9"] == pytest.approx(99.901)
    assert set(m["ci"]) == {"p50", "p95", "p99"}
    lo, hi = m["ci"]["p50"]
    assert lo <= m["p50"] <= hi


def test_summary_is_plain_json_without_nan():
    # No ok requests at all: every metric is empty, rates undefined.
    s = summarize([rec(0, start_ms=0, status="timeout"), rec(1, start_ms=1, status="cancelled")])
    text = json.dumps(s, allow_nan=False)  # raises on NaN or infinity
    assert orjson.loads(orjson.dumps(s)) == json.loads(text)

    def walk(x):
        if isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
        else:
            assert x is None or type(x) in (bool, int, float, str), type(x)

    walk(s)
    assert s["metrics"]["ttft_ms"]["n"] == 0 and s["metrics"]["ttft_ms"]["p50"] is None
    assert "no successful measured requests" in s["warnings"][0]


def test_jsonable():
    assert jsonable(
        {"a": np.float64(1.5), "b": np.int32(2), "c": [math.nan, np.inf], "d": np.bool_(True)}
    ) == {"a": 1.5, "b": 2, "c": [None, None], "d": True}


def test_table_input_gives_the_same_summary():
    records = [rec(i, start_ms=7 * i, ttft_ms=3 + i % 5, gaps_ms=(1, 2 + i % 3)) for i in range(40)]
    records.append(rec(99, start_ms=1, status="malformed"))
    table = rows_to_table([record_to_row(r) for r in records], REQUEST_SCHEMA)
    assert summarize(table) == summarize(records)
