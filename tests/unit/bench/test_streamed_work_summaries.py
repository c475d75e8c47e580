"""The agent and replay parts of a run's summary are streamed from its Parquet files (issue 12 item 4: bounded
memory), never read whole, and give the figures the whole-record path gives: a small agent run and a small
replay run against the in-process simulator, then their summary parts recomputed from the records read back
as record objects (the path tests and `servelab show` use), compared for equality."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import servelab.bench.finish as fin
from servelab.analysis.agents import SessionColumns, agent_summary
from servelab.analysis.cost import cost_summary
from servelab.analysis.replay import replay_summary
from servelab.bench.run import Executor, execute
from servelab.config import RunConfig, validate
from servelab.records.rundir import read_parquet
from servelab.records.schema import RequestRecord, SessionRecord
from servelab.workload.traces.units import prepare_trace, replay_units

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


def _no_whole_reads(monkeypatch) -> None:
    def refuse(path, *a, **k):
        raise AssertionError(f"{Path(path).name} read whole at the end of the run")

    monkeypatch.setattr(fin, "read_parquet", refuse)


def _records(path: Path, cls: type) -> list:
    names = {f.name for f in dataclasses.fields(cls)}
    return [cls(**{k: v for k, v in row.items() if k in names}) for row in read_parquet(path).to_pylist()]


def test_an_agent_runs_task_figures_are_streamed_and_equal_the_records_figures(tmp_path, monkeypatch):
    _no_whole_reads(monkeypatch)  # before: sessions.parquet was read whole (finish.RunTables)
    sess = {"name": "short", "system_tokens": 16, "user_tokens": 16,
            "steps": [{"kind": "repeat", "count": 3,
                       "steps": [{"kind": "model", "output_tokens": 4, "user_tokens": 8},
                                 {"kind": "tool", "duration_s": 0.01, "result_tokens": 8,
                                  "failure_prob": 0.3}]}]}
    cfg = validate(RunConfig, {"target": {"url": "sim"}, "load": {"concurrency": 8},
                               "workload": {"kind": "agent", "session": sess},
                               "limits": {"sessions": 40, "warmup_requests": 6},
                               "cost": {"model": {"kind": "gpu_hour", "gpu_hour_usd": 2.0}},
                               "telemetry": {"enabled": False}, "out": str(tmp_path)})
    r = execute(cfg, report=False, executor=Executor(workers=1))
    monkeypatch.undo()
    sessions = _records(r.run_dir / "sessions.parquet", SessionRecord)
    duration_s = (r.outcome.ended_ns - r.outcome.started_ns) / 1e9
    again = agent_summary(sessions, duration_s=duration_s, percentiles=cfg.percentiles)
    again["cost"] = cost_summary(cfg.cost, sessions, duration_s=duration_s)
    warm = sum(bool(s.warmup) for s in sessions)
    assert warm > 0 and again["sessions"]["started"] == 40 - warm and again["sessions"]["tool_failures"] > 0
    for k, v in again.items():
        assert r.summary[k] == v, k


def test_a_replays_section_is_streamed_and_equals_the_records_section(tmp_path, monkeypatch):
    _no_whole_reads(monkeypatch)  # before: requests.parquet was read whole, token times included
    cfg = validate(RunConfig, {"target": {"url": "sim:llama-3.1-8b@1xh100"}, "telemetry": {"enabled": False},
                               "workload": {"kind": "replay", "path": str(TRACES / "azure_conv_head.csv"),
                                            "format": "azure", "speed": 20.0, "max_requests": 20},
                               "out": str(tmp_path)})
    r = execute(cfg, report=False, executor=Executor(workers=1))
    monkeypatch.undo()
    rep = r.summary["replay"]
    requests = _records(r.run_dir / "requests.parquet", RequestRecord)
    trace = prepare_trace(cfg.workload, cfg.seed)
    offsets = [o for u in replay_units(trace)[: r.outcome.issued] for o in u.offsets_ns]
    again = replay_summary(requests, trace_offsets_ns=offsets, timed=True, format=rep["format"],
                           source=rep["source"], trace_prefix_reuse=rep["trace_prefix_reuse"],
                           speed=rep["speed"])
    assert rep["requests"] == 20 and rep["ks"] is not None
    assert again == rep


def _session_table(rows: list[dict]) -> pa.Table:
    from servelab.records.rundir import SESSION_SCHEMA

    cols = {f.name: [row.get(f.name) for row in rows] for f in SESSION_SCHEMA}
    return pa.table(cols, schema=SESSION_SCHEMA)


def test_session_columns_from_batches_drop_warmup_and_keep_nulls():
    a = _session_table([
        {"session_id": 0, "status": "ok", "accepted": True, "start_ns": 10, "end_ns": 30, "turns": 2,
         "warmup": True},
        {"session_id": 1, "status": "failed", "accepted": None, "start_ns": 20, "end_ns": None, "turns": 3,
         "warmup": False},
    ])
    b = _session_table([
        {"session_id": 2, "status": "ok", "accepted": True, "start_ns": 5, "end_ns": 45, "turns": 1,
         "warmup": None},
    ])
    c = SessionColumns.from_tables([a, b])
    assert c.n == 2
    assert list(c.status) == ["failed", "ok"]
    assert list(c.accepted) == [False, True]
    assert list(c["start_ns"]) == [20.0, 5.0]
    assert np.isnan(c["end_ns"][0]) and c["end_ns"][1] == 45.0
    assert list(c["turns"]) == [3.0, 1.0]
    assert np.isnan(c["model_ns"]).all()  # a null integer column is NaN (as from_records: None -> NaN)
    assert SessionColumns.from_tables([]).n == 0


@pytest.mark.parametrize("split", [1, 2])
def test_replay_section_from_batches_equals_hand_worked(split):
    rows = [  # attempt, status, intended, sent, prompt, cached
        (0, "ok", 0, 1_000_000, 100, 40),
        (1, "ok", 0, 2_000_000, 50, 50),  # a retry: not a send of its own, its tokens still count
        (0, "http_error", 3_000_000, 5_000_000, 80, 80),  # sent, not ok: no tokens
        (0, "cancelled", 6_000_000, None, None, None),  # never sent
        (0, "ok", 9_000_000, 9_000_000, 0, 0),  # ok with zero prompt tokens: not counted
    ]
    names = ("attempt", "status", "intended_ns", "sent_ns", "usage_prompt_tokens", "usage_cached_tokens")
    t = pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})
    batches = [t] if split == 1 else [t.slice(0, 2), t.slice(2)]
    out = replay_summary(iter(batches), trace_offsets_ns=[0, 3_000_000, 9_000_000], timed=False,
                         format="azure", source="x", trace_prefix_reuse=None, speed=None)
    assert out["requests"] == 3  # first attempts with a send time
    assert out["cached_fraction"] == 90 / 150
    assert out["achieved_rate"] == pytest.approx(2 / 0.008)  # 3 sends over 1..9 ms
    assert out["lag_ms_p99"] == pytest.approx(np.percentile([1.0, 2.0, 0.0], 99))
