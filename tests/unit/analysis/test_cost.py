"""Cost per successful task, checked against a case worked by hand."""

from __future__ import annotations

import pytest

from servelab.analysis.cost import cost_summary
from servelab.config.agent import CostConfig
from servelab.records.schema import SessionRecord

S = 1_000_000_000


def sessions() -> list[SessionRecord]:
    """One success, one rejected, one failed, one cancelled (neither), one warm-up (ignored)."""
    return [
        SessionRecord(1, status="ok", accepted=True, start_ns=0, end_ns=10 * S, tool_calls=3,
                      input_tokens=10_000, cached_tokens=4_000, output_tokens=1_000),
        SessionRecord(2, status="ok", accepted=False, start_ns=0, end_ns=20 * S, tool_calls=2,
                      input_tokens=20_000, output_tokens=2_000),
        SessionRecord(3, status="failed", accepted=False, start_ns=5 * S, end_ns=15 * S, tool_calls=1,
                      input_tokens=5_000, output_tokens=500),
        SessionRecord(4, status="cancelled", start_ns=10 * S, end_ns=20 * S),
        SessionRecord(5, status="ok", accepted=True, start_ns=0, end_ns=999 * S, warmup=True, tool_calls=99,
                      input_tokens=10**9, output_tokens=10**8),
    ]


def prices(model: dict) -> CostConfig:
    return CostConfig.model_validate({
        "model": model, "tool_call_usd": 0.01, "orchestration_usd_per_session_s": 0.001,
        "failure_usd": 2.0, "rework_minutes": 30, "rework_hourly_usd": 60.0,
    })


def test_token_priced_cost_by_hand():
    c = cost_summary(prices({"kind": "tokens", "input_per_million": 3.0, "cached_input_per_million": 0.3,
                             "output_per_million": 15.0}), sessions())
    # tokens: 31,000 uncached x $3 + 4,000 cached x $0.30 + 3,500 out x $15, per million = $0.1467
    assert c["model"] == pytest.approx(0.1467)
    assert c["tool"] == pytest.approx(0.06)  # 6 calls x $0.01
    assert c["orchestration"] == pytest.approx(0.05)  # 50 session-seconds x $0.001
    assert c["failure"] == pytest.approx(64.0)  # 2 unsuccessful x ($2 + 0.5 h x $60)
    assert c["total"] == pytest.approx(64.2567)
    assert c["per_successful_task"] == pytest.approx(64.2567)  # one accepted task carries it all
    assert c["per_million_output_tokens"] == pytest.approx(41.9142857)  # $0.1467 / 3,500 tokens
    assert (c["successful_tasks"], c["unsuccessful_tasks"]) == (1, 2)


def test_gpu_hour_cost_uses_the_run_span_or_a_given_duration():
    model = {"kind": "gpu_hour", "gpu_hour_usd": 2.5, "gpus": 8}
    c = cost_summary(prices(model), sessions())
    assert c["duration_s"] == 20.0 and c["model"] == pytest.approx(20 * 20 / 3600)  # $20/h for 20 s
    c = cost_summary(prices(model), sessions(), duration_s=3600)
    assert c["model"] == pytest.approx(20.0)


def test_cached_price_defaults_to_input_price():
    p = prices({"kind": "tokens", "input_per_million": 1.0, "output_per_million": 0.0})
    c = cost_summary(p, sessions()[:1])  # 10,000 input of which 4,000 cached, all at $1 / M
    assert c["model"] == pytest.approx(0.01)
    assert c["per_million_output_tokens"] == pytest.approx(10.0)  # $0.01 over 1,000 output tokens


def test_no_success_means_no_per_task_figure():
    p = prices({"kind": "tokens", "input_per_million": 1.0, "output_per_million": 0.0})
    c = cost_summary(p, [s for s in sessions() if s.status == "failed"])
    assert c["per_successful_task"] is None and c["failure"] == pytest.approx(32.0)
