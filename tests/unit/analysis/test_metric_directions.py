"""Which way is better is declared once, in the metric tables, and compare and check read it from there."""

import dataclasses

import pytest

from servelab.analysis import metrics
from servelab.analysis.compare import compare_figures
from servelab.analysis.gate import check_regression
from servelab.analysis.pareto import point_of
from servelab.records.schema import OK, RequestRecord

MS = 1_000_000


def _closed(n: int, *, tokens: int, e2e_ms: float, ttft_ms: float, users: int = 4) -> list[RequestRecord]:
    """``users`` back-to-back streams of identical requests (deterministic: zero-width intervals)."""
    recs, free = [], [0] * users
    for i in range(n):
        u = i % users
        sent = free[u]
        first, end = sent + int(ttft_ms * MS), sent + int(e2e_ms * MS)
        step = (end - first) // (tokens - 1)
        times = [first + k * step for k in range(tokens)]
        recs.append(
            RequestRecord(
                request_id=i,
                status=OK,
                intended_ns=sent,
                sent_ns=sent,
                first_token_ns=first,
                last_token_ns=times[-1],
                end_ns=end,
                token_times_ns=times,
                usage_completion_tokens=tokens,
                est_completion_tokens=tokens,
            )
        )
        free[u] = end
    return recs


def test_every_entry_declares_its_direction_and_unit():
    for m in metrics.METRICS:
        assert m.better == "lower", m.name  # every request metric is a latency
    better = {d.name: d.better for d in metrics.DERIVED}
    assert better["output_tokens_per_s"] == better["goodput_requests_per_s"] == "higher"
    assert better["goodput_fraction"] == better["tokens_per_s_per_user"] == "higher"
    assert better["failure_rate"] == better["cost_per_successful_task"] == better["task_ms"] == "lower"
    assert metrics.lower_is_better("ttft_ms") and not metrics.lower_is_better("requests_per_s")
    assert metrics.unit_of("cost_per_successful_task") == "USD"
    with pytest.raises(KeyError, match="neither"):
        metrics.lower_is_better("no_such_figure")


def test_derived_figures_from_a_summary():
    s = {
        "metrics": {"tpot_ms": {"p50": 8.0}},
        "throughput": {"output_tokens_per_s": 2400},
        "sessions": {"started": 8, "completed": 6},
        "task_ms": {"p95": 1500.0},
        "goodput": {"fraction": 0.75},
    }
    d = metrics.DERIVED_BY_NAME
    assert d["tokens_per_s_per_user"].value(s) == 125.0  # 1000 / 8 ms
    assert d["task_success_rate"].value(s) == 0.75  # 6 / 8
    assert d["task_ms"].value(s, "p95") == 1500.0
    assert d["goodput_fraction"].value(s) == 0.75
    assert d["cost_per_successful_task"].value(s) is None  # no price given
    assert point_of(s, gpus=4) == (125.0, 600.0)  # the Pareto point reads the same table


# A: 40 requests, 4 users, 1000 ms each, 100 tokens: 4000 tokens in 10 s = 400 tok/s, TTFT 20 ms.
# B: 183 tokens in the same time (732 tok/s, +83%) and TTFT 30 ms (+50%).
A = _closed(40, tokens=100, e2e_ms=1000, ttft_ms=20)
B = _closed(40, tokens=183, e2e_ms=1000, ttft_ms=30)


def test_compare_a_throughput_gain_is_better_and_a_ttft_increase_is_worse():
    rows = {r["figure"]: r for r in compare_figures(A, B, resamples=200)}
    assert rows["output tokens/s"]["a"] == pytest.approx(400.0) and rows["output tokens/s"]["b"] == 732.0
    assert rows["output tokens/s"]["verdict"] == "better"
    assert rows["ttft_ms p50"]["a"] == pytest.approx(20.0) and rows["ttft_ms p50"]["b"] == pytest.approx(30.0)
    assert rows["ttft_ms p50"]["verdict"] == "worse"
    assert rows["ttft_ms p50"]["unit"] == "ms" and rows["output tokens/s"]["unit"] == "tok/s"


def _flip(monkeypatch: pytest.MonkeyPatch, table: dict, name: str) -> None:
    e = table[name]
    monkeypatch.setitem(
        table, name, dataclasses.replace(e, better="higher" if e.better == "lower" else "lower")
    )


def test_compare_takes_the_direction_from_the_table(monkeypatch: pytest.MonkeyPatch):
    _flip(monkeypatch, metrics.METRICS_BY_NAME, "ttft_ms")
    _flip(monkeypatch, metrics.DERIVED_BY_NAME, "output_tokens_per_s")
    rows = {r["figure"]: r for r in compare_figures(A, B, resamples=200)}
    assert rows["ttft_ms p50"]["verdict"] == "better"
    assert rows["output tokens/s"]["verdict"] == "worse"


def _summary(ttft: float, tok_s: float) -> dict:
    return {"metrics": {"ttft_ms": {"p50": ttft, "p95": ttft, "p99": ttft}},
            "throughput": {"output_tokens_per_s": tok_s}, "valid": True}


def test_check_a_throughput_gain_passes_and_a_ttft_increase_fails():
    base = _summary(20.0, 400.0)
    assert check_regression(base, _summary(20.0, 732.0), 0.1) == []  # +83% throughput: better, no failure
    fails = check_regression(base, _summary(30.0, 400.0), 0.1)  # +50% TTFT: worse at every percentile
    assert [f["metric"] for f in fails] == ["ttft_ms p50", "ttft_ms p95", "ttft_ms p99"]
    assert fails[0]["message"] == "ttft_ms p50: 30.0 ms vs 20.0 ms (+50.0%, limit +10%)"


def test_check_takes_the_direction_from_the_table(monkeypatch: pytest.MonkeyPatch):
    _flip(monkeypatch, metrics.METRICS_BY_NAME, "ttft_ms")
    _flip(monkeypatch, metrics.DERIVED_BY_NAME, "output_tokens_per_s")
    base = _summary(20.0, 400.0)
    assert check_regression(base, _summary(30.0, 400.0), 0.1) == []
    fails = check_regression(base, _summary(20.0, 300.0), 0.1)  # -25% throughput, now "better lower"
    assert [f["metric"] for f in fails] == []
    fails = check_regression(base, _summary(20.0, 732.0), 0.1)
    assert [f["metric"] for f in fails] == ["output tokens/s"]
