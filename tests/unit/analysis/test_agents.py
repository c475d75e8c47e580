"""Agent-session aggregates on a hand-worked set of sessions."""

from __future__ import annotations

import pyarrow as pa
import pytest

from servelab.analysis.agents import agent_summary, per_session, time_split
from servelab.records.schema import SESSION_COLUMNS, SessionRecord, session_to_row

S = 1_000_000_000


def sessions() -> list[SessionRecord]:
    return [
        SessionRecord(
            1,
            status="ok",
            accepted=True,
            start_ns=0,
            end_ns=10 * S,
            model_ns=4 * S,
            tool_ns=2 * S,
            retrieval_ns=1 * S,
            tool_calls=3,
            input_tokens=10_000,
            cached_tokens=4_000,
            output_tokens=1_000,
            turns=4,
            queue_ns=S // 2,
        ),
        SessionRecord(
            2,
            status="ok",
            accepted=False,
            start_ns=0,
            end_ns=20 * S,
            model_ns=10 * S,
            code_ns=5 * S,
            tool_calls=2,
            retries=2,
            tool_failures=1,
            input_tokens=20_000,
            output_tokens=2_000,
            turns=6,
        ),
        SessionRecord(
            3,
            status="failed",
            accepted=False,
            start_ns=5 * S,
            end_ns=15 * S,
            model_ns=2 * S,
            tool_calls=1,
            tool_failures=1,
            timeouts=1,
            input_tokens=5_000,
            output_tokens=500,
        ),
        SessionRecord(4, status="cancelled", start_ns=10 * S, end_ns=20 * S, model_ns=1 * S),
        SessionRecord(
            5,
            status="ok",
            accepted=True,
            start_ns=0,
            end_ns=1000 * S,
            model_ns=900 * S,
            warmup=True,
            tool_calls=50,
            input_tokens=10**9,
            output_tokens=10**8,
        ),
    ]


def test_counts_rates_and_task_time():
    out = agent_summary(sessions())
    assert out["sessions"] == {
        "started": 4,
        "completed": 2,
        "accepted": 1,
        "failed": 1,
        "timed_out": 0,
        "cancelled": 1,
        "retries": 2,
        "tool_failures": 2,
        "timeouts": 1,
        "tool_calls": 6,
        "requests": 0,
    }
    assert out["duration_s"] == 20.0
    assert out["tasks_per_hour"] == pytest.approx(360.0)  # 2 completed in 20 s
    assert out["accepted_per_hour"] == pytest.approx(180.0)
    assert out["acceptance_rate"] == 0.5
    t = out["task_ms"]
    assert (t["mean"], t["p50"], t["max"], t["n"]) == (15_000.0, 15_000.0, 20_000.0, 2)
    assert t["p90"] == pytest.approx(19_000.0)
    assert out["tool_ms"]["mean"] == pytest.approx(4_000.0)  # (3 s + 5 s) / 2
    assert out["queue_ms"]["max"] == 500.0


def test_time_split_adds_up_and_counts_every_session_minute():
    split = time_split(sessions())
    # 50 s of task time: model 17 s, tool 8 s, the rest waiting
    assert split == pytest.approx({"model": 0.34, "tool": 0.16, "waiting": 0.5})
    assert sum(split.values()) == pytest.approx(1.0)


def test_table_and_records_agree():
    table = pa.Table.from_pylist([session_to_row(s) for s in sessions()])
    assert set(SESSION_COLUMNS) <= set(table.column_names)
    assert agent_summary(table) == agent_summary(sessions())


def test_per_session_waiting_and_empty_input():
    ps = per_session(sessions())
    assert list(ps["waiting_ms"]) == [3_000.0, 5_000.0, 8_000.0, 9_000.0]
    empty = agent_summary([])
    assert empty["sessions"]["started"] == 0 and empty["tasks_per_hour"] is None
    assert empty["task_ms"]["n"] == 0 and empty["time_split"]["model"] is None


def test_explicit_duration_sets_the_rate():
    assert agent_summary(sessions(), duration_s=3600)["tasks_per_hour"] == 2.0


def test_steady_tasks_per_hour_ignores_a_straggler():
    s = 1_000_000_000
    # 8 tasks ending 100 s apart (100..800 s), one straggler at 10,000 s: 36 tasks/h in steady state
    sess = [SessionRecord(session_id=i, status="ok", accepted=True, start_ns=0, end_ns=(i + 1) * 100 * s)
            for i in range(8)]
    sess.append(SessionRecord(session_id=8, status="ok", accepted=True, start_ns=0, end_ns=10_000 * s))
    out = agent_summary(sess)
    assert out["tasks_per_hour"] == pytest.approx(9 / 10_000 * 3600)  # first start to last end: 3.24
    # quartiles of the end times 300 s and 700 s: 5 completions, 4 intervals over 400 s
    assert out["tasks_per_hour_steady"] == pytest.approx(36.0)
    assert "context_ms" not in out  # context assembly is not timed (always 0): not reported as a figure
