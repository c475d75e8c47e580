"""Live plans: per-call tool draws are seeded per session; ignore_eos defaults off in live mode."""

from __future__ import annotations

from servelab.config.agent import SessionConfig
from servelab.workload.agent import build_plan

TOOL = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}


def _spec(**extra) -> SessionConfig:
    return SessionConfig.model_validate(
        {
            "steps": [{"kind": "model"}],
            "policy": {"retry": {"max_retries": 2}},
            "live": {
                "tools": [TOOL],
                "tool_results": {
                    "search": {
                        "duration_s": {"kind": "uniform", "low": 1, "high": 2},
                        "failure_prob": 0.5,
                        "result_tokens": 50,
                    }
                },
                "default_tool": {"duration_s": 0.25, "result_tokens": 7, "timeout_s": 3},
            },
            **extra,
        }
    )


def test_tool_draws_repeat_per_session_and_differ_across_sessions():
    a, b, c = build_plan(_spec(), 4, seed=9), build_plan(_spec(), 4, seed=9), build_plan(_spec(), 5, seed=9)
    xa = [a.live.action("search") for _ in range(20)]
    xb = [b.live.action("search") for _ in range(20)]
    xc = [c.live.action("search") for _ in range(20)]
    assert xa == xb and xa != xc
    assert all(len(x.durations_s) == 3 and all(1 <= d <= 2 for d in x.durations_s) for x in xa)
    assert all(x.result_tokens == 50 and x.kind == "tool" and x.name == "search" for x in xa)
    fails = sum(f for x in xa for f in x.failures)
    assert 10 <= fails <= 50  # 60 draws at p=0.5


def test_an_unlisted_tool_runs_as_the_default_and_live_sends_no_ignore_eos():
    p = build_plan(_spec(), 0)
    x = p.live.action("other")
    assert (
        x.durations_s == (0.25, 0.25, 0.25)
        and x.result_tokens == 7
        and x.timeout_s == 3
        and x.name == "other"
    )
    assert p.ignore_eos is False and p.live.tools == [TOOL] and not p.live.real
    assert build_plan(_spec(ignore_eos=True), 0).ignore_eos is True
    scripted = SessionConfig.model_validate({"steps": [{"kind": "model"}]})
    assert build_plan(scripted, 0).live is None and build_plan(scripted, 0).ignore_eos is True
