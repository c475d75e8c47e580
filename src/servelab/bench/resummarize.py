"""Recompute a run's summary from its stored records (a run that never finished has no summary.json)."""

from __future__ import annotations

from typing import Any

from servelab.analysis.summary import build_summary
from servelab.config.models import RunConfig
from servelab.records.rundir import RunData


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
    if cfg.mix:  # a --mix run: each class's figures, as written at the end of the run
        from servelab.analysis.mix import class_figures
        from servelab.bench.mix import class_rows

        summary["classes"] = class_figures(t, data.sessions, cfg, class_rows(cfg),
                                           started_ns=started, ended_ns=ended)
    return summary
