"""Recompute a run's summary from its stored records (a run that never finished has no summary.json).

The figures are the ones the run writes at its end (``finish_run``): the run's own summary, then the
work's part from the same functions: an agent run's tasks (completed, ``task_ms``, tasks/hour, time
split, cost per task), a ``--mix`` run's tasks and per-class figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from servelab.analysis.summary import build_summary
from servelab.config.models import RunConfig
from servelab.load.runner import RunOutcome
from servelab.records.rundir import RunData


@dataclass
class _Stored:
    """A stored run's tables as a work's summary reads them (:class:`servelab.bench.work.RunRecords`)."""

    requests: pa.Table
    sessions: pa.Table | None


def summary_from_run(data: RunData) -> dict[str, Any]:
    cfg = RunConfig.model_validate(data.manifest.get("config") or {})
    t = data.requests
    clock = data.manifest.get("clock") or {}
    starts = [v for v in t.column("sent_ns").to_pylist() if v is not None] if t.num_rows else []
    ends = [v for v in t.column("end_ns").to_pylist() if v is not None] if t.num_rows else []
    started = clock.get("started_ns", min(starts) if starts else 0)
    ended = clock.get("ended_ns", max(ends) if ends else started)
    summary = build_summary(t, cfg, started_ns=started, ended_ns=ended,
                            extra={"stopped_by": "incomplete" if not data.complete else "limit"})
    stored, outcome = _Stored(t, data.sessions), RunOutcome(started_ns=started, ended_ns=ended)
    if cfg.mix:  # a --mix run: its tasks and each class's figures, as written at the end of the run
        from servelab.bench.mix import mix_summary

        profile = "mix: " + " + ".join(c.label for c in cfg.mix)
        summary.update(mix_summary(cfg, {"profile": profile}, stored, outcome))
    elif cfg.is_agent:  # an agent run: tasks completed, task time, tasks/hour, cost per task
        from servelab.bench.sessions import sessions_summary

        summary.update(sessions_summary(cfg, {}, stored, outcome))
    return summary
