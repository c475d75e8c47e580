"""Agent sessions as runner jobs: each job runs one session (one task) from a profile or inline spec."""

from __future__ import annotations

from typing import Any

from servelab.bench.work import RunRecords, Work, shard_ids
from servelab.clock import NS_PER_S, Clock
from servelab.config.agent import SessionConfig
from servelab.config.models import RunConfig
from servelab.load.runner import RunOutcome
from servelab.load.session import RequestIds, run_session
from servelab.records.sink import RecordSink
from servelab.transport.base import Transport
from servelab.transport.probe import TargetProbe
from servelab.workload.agent import build_plan, synth_text_source
from servelab.workload.profiles import load_profile
from servelab.workload.tokens import resolve_counter


def session_spec(cfg: RunConfig) -> tuple[SessionConfig, str]:
    w = cfg.workload
    if w.profile is not None:  # type: ignore[union-attr]
        prof = load_profile(w.profile)  # type: ignore[union-attr]
        return prof.session, prof.name
    assert w.session is not None  # type: ignore[union-attr]
    return w.session, w.session.name  # type: ignore[union-attr]


async def sessions_work(cfg: RunConfig, transport: Transport, clock: Clock, sink: RecordSink,
                        probe: TargetProbe | None = None) -> Work:
    spec, name = session_spec(cfg)
    counter = await resolve_counter(probe.count_tokens if probe is not None else None, cfg.target.tokenizer)
    texts = await synth_text_source(counter, cfg.seed)
    ids = RequestIds(*shard_ids(sink))
    target = cfg.target

    async def job(index: int, intended_ns: int, warmup: bool) -> None:
        plan = build_plan(spec, index, cfg.seed)
        await run_session(
            plan,
            transport,
            clock,
            ids,
            on_record=sink.request,
            texts=texts,
            on_session=sink.session,
            intended_ns=intended_ns,
            warmup=warmup,
            api=target.api,
            stream=target.stream,
            extra_body=dict(target.extra_body),
        )

    def summarize(records: RunRecords, outcome: RunOutcome) -> dict[str, Any]:
        return sessions_summary(cfg, {"profile": name}, records, outcome)

    return Work(job, summarize=summarize, facts={"profile": name, "token_source": counter.source})


def sessions_summary(cfg: RunConfig, facts: dict[str, Any], records: RunRecords, outcome: RunOutcome
                     ) -> dict[str, Any]:
    """The agent part of the summary (warm-up sessions are left out)."""
    # analysis (pyarrow) runs at the summary, in the coordinator: a worker running sessions never loads it
    from servelab.analysis.agents import SUMMARY_COLUMNS, SessionColumns, agent_summary
    from servelab.analysis.cost import cost_summary

    stream = getattr(records, "iter_sessions", None)  # Parquet, a batch at a time (RunTables)
    batches = stream(SUMMARY_COLUMNS) if stream is not None else None
    sessions: Any = (SessionColumns.from_tables(batches) if batches is not None
                     else records.sessions if records.sessions is not None else [])
    duration_s = (outcome.ended_ns - outcome.started_ns) / NS_PER_S
    out: dict[str, Any] = {"profile": facts.get("profile") or session_spec(cfg)[1]}
    out.update(agent_summary(sessions, duration_s=duration_s, percentiles=cfg.percentiles))
    if cfg.cost is not None:
        out["cost"] = cost_summary(cfg.cost, sessions, duration_s=duration_s)
    return out
