"""Server evidence: telemetry figures beside request ground truth, absent when not measured, and shown
in the terminal and the HTML report."""

import io

import pytest
from rich.console import Console

from servelab.analysis.evidence import run_evidence
from servelab.records.schema import OK, RequestRecord
from servelab.report.evidence import evidence_rows
from servelab.report.terminal import render_summary

MS = 1_000_000


def _reqs():
    # 10 requests: server queue 0, 10, ..., 90 ms; two preempted (30 ms and 50 ms waiting to resume)
    return [
        RequestRecord(
            request_id=i,
            status=OK,
            intended_ns=0,
            sent_ns=0,
            first_token_ns=1,
            end_ns=2,
            srv_queue_ns=10 * i * MS,
            srv_prefill_ns=0,
            srv_decode_ns=0,
            srv_preempted_ns={3: 30 * MS, 7: 50 * MS}.get(i, 0),
            srv_comm_ns=0,
        )
        for i in range(10)
    ]


SUMMARY = {
    "metrics": {"lag_ms": {"p50": 0.0, "p95": 1.5, "mean": 0.2, "n": 10}},
    "tokens": {"input": 1000, "cached": 250, "source": "usage"},
    "server": {
        "available": True,
        "gauges": {
            "kv_cache_usage": {
                "mean": 0.5,
                "max": 0.97,
                "max_engine": 0.99,
                "share_above_90": 0.25,
                "seconds_above_90": 15.0,
            }
        },
        "counters": {"preemptions_total": 2.0},
        "prefix_cache_hit_rate": 0.4,
        "kv_evicted_blocks": 12.0,
        "communication_share": 0.3,
        "step_seconds": {"communication": 3.0},
        "expert_imbalance": {"n": 500, "p50": 1.4, "p95": 3.0, "max_bound": 8.0},
    },
}
MANIFEST = {"target": {"deployment": {"ep": 8}}}


def test_evidence_from_telemetry_and_requests():
    ev = run_evidence(_reqs(), SUMMARY, MANIFEST)
    assert ev["kv"]["peak"] == 0.97 and ev["kv"]["seconds_above_90"] == 15.0
    assert ev["kv_evicted_blocks"] == 12.0 and ev["preemptions"] == 2.0
    assert ev["prefix_cache_hit_rate"] == 0.4  # telemetry first, not the usage fallback (0.25)
    # queue 0..90 ms: p50 = 45, p95 = 85.5 (linear between 80 and 90)
    assert ev["server_queue_ms"]["p50"] == pytest.approx(45) and ev["server_queue_ms"][
        "p95"
    ] == pytest.approx(85.5)
    assert ev["preempted_requests"] == {
        "count": 2,
        "share": 0.2,
        "waiting_ms_total": 80.0,
        "source": "requests",
    }
    assert ev["client_lag_ms"]["p95"] == 1.5
    assert ev["moe"]["ep"] == 8 and ev["moe"]["imbalance_p95"] == 3.0 and ev["moe"]["imbalance_within_ep"]
    assert ev["moe"]["communication_share"] == 0.3


def test_nothing_measured_is_absent_not_zero():
    ev = run_evidence(None, {"tokens": {"input": 100, "cached": 30, "source": "usage"}}, {})
    assert ev == {
        "prefix_cache_hit_rate": 0.3,
        "prefix_cache_source": "requests (usage cached / prompt tokens)",
    }
    assert [r[0] for r in evidence_rows(ev)] == ["prefix-cache hit rate"]


def test_terminal_shows_the_evidence():
    summary = {**SUMMARY, "evidence": run_evidence(_reqs(), SUMMARY, MANIFEST), "requests": {}, "metrics": {}}
    buf = io.StringIO()
    render_summary(summary, Console(file=buf, width=200))
    out = buf.getvalue()
    # three significant figures, each duration with its unit (was "15.00 s", "45.00 / p95 85.50 ms")
    assert "KV-cache usage" in out and "peak 97%" in out and "above 90% for 15 s" in out
    assert "p50 1.40, p95 3 " in out and "at most ep = 8" in out
    assert "server queue p50 45 ms / p95 85.5 ms" in out


def test_evidence_figures_have_three_significant_figures_and_units():
    ev = {"kv": {"peak": 0.042, "mean": 0.028, "seconds_above_90": 0.0, "share_above_90": 0.0},
          "preemptions": 0, "preempted_requests": {"count": 3, "share": 0.015, "waiting_ms_total": 1234.5},
          "prefix_cache_hit_rate": 0.904, "prefix_cache_source": "telemetry (hit / query tokens)",
          "server_queue_ms": {"p50": 1172.71, "p95": 7900.45}, "client_lag_ms": {"p50": 0.0, "p95": 0.0123}}
    rows = dict(evidence_rows(ev))
    assert rows["KV-cache usage"] == "peak 4.20%, mean 2.80%, above 90% for 0 s (0% of samples)"
    assert rows["preemptions"] == "0 by the server, 3 requests (1.50%) preempted, 1.23 s waiting to resume"
    # one pair of parentheses, not "(telemetry (hit / query tokens))"
    assert rows["prefix-cache hit rate"] == "90.4% (telemetry: hit / query tokens)"
    assert rows["queueing"] == "server queue p50 1.17 s / p95 7.90 s; client lag p50 0 ms / p95 12.3 µs"


def test_imbalance_without_a_known_ep_says_so():
    # An HTTP target exports the imbalance gauge but servelab cannot know its ep: no "at most ep = ?".
    ev = {"moe": {"imbalance_p50": 1.0, "imbalance_p95": 1.5, "steps": 10}}
    (row,) = [text for name, text in evidence_rows(ev) if name == "expert-load imbalance"]
    assert "?" not in row and "ep not known" in row
    ev["moe"]["ep"] = 8
    (row,) = [text for name, text in evidence_rows(ev) if name == "expert-load imbalance"]
    assert "at most ep = 8" in row


def test_an_even_imbalance_on_an_unknown_ep_is_not_shown():
    # a dense model behind HTTP (servelab sim serve of llama-3.1-8b): its simulator exports the imbalance
    # histogram at exactly 1 on every step, and servelab cannot know ep; "p50 1, p95 1 (... ep not known)"
    # says nothing about experts, so no row
    server = {"expert_imbalance": {"n": 1801, "p50": 1.0, "p95": 1.0, "max_bound": 1.0}}
    ev = run_evidence(None, {"server": server}, {"target": {"engine": "vllm"}})
    assert "imbalance_p50" not in ev.get("moe", {})
    assert "expert-load imbalance" not in dict(evidence_rows(ev))
    server["expert_imbalance"]["p95"] = 1.3  # uneven: shown, with its ep unknown
    rows = dict(evidence_rows(run_evidence(None, {"server": server}, {"target": {"engine": "vllm"}})))
    assert "ep not known" in rows["expert-load imbalance"]


def test_kv_not_scraped_under_load_says_so_instead_of_zero():
    server = {"available": True, "gauges": {}, "unsampled_gauges": ["kv_cache_usage"], "scrapes": 2,
              "window_s": 3.25, "counters": {}}
    ev = run_evidence(None, {"server": server}, {})
    assert ev["kv"]["peak"] is None and ev["kv"]["unsampled"] and ev["kv"]["scrapes"] == 2
    (label, words), = [r for r in evidence_rows(ev) if r[0] == "KV-cache usage"]
    assert words.startswith("not sampled under load: 2 scrapes in 3.25 s") and "0%" not in words
    # nothing scraped at all: still absent, not a row
    assert "kv" not in run_evidence(None, {"server": {"available": True, "gauges": {}}}, {})
