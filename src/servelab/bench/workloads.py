"""Build the work of a run, dispatched by the workload's ``kind``: its runner job and its summary part."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from servelab.bench.sessions import sessions_summary, sessions_work
from servelab.bench.single import single_turn_job
from servelab.bench.work import RunRecords, Work
from servelab.clock import Clock
from servelab.config.models import RunConfig
from servelab.load.runner import RunOutcome
from servelab.records.sink import RecordSink
from servelab.transport.base import Transport
from servelab.transport.probe import TargetProbe
from servelab.workload.requests import make_synthesizer, planner

WorkBuilder = Callable[[RunConfig, Transport, Clock, RecordSink, "TargetProbe | None"], Awaitable[Work]]


async def requests_work(cfg: RunConfig, transport: Transport, clock: Clock, sink: RecordSink,
                        probe: TargetProbe | None = None) -> Work:
    synth = await make_synthesizer(cfg, probe.count_tokens if probe is not None else None)
    plans = await planner(cfg, synth)
    source = synth.source

    def summarize(records: RunRecords, outcome: RunOutcome) -> dict[str, Any]:
        return requests_summary(cfg, {"token_source": source}, records, outcome)

    return Work(
        single_turn_job(cfg, plans, transport, sink), summarize=summarize, facts={"token_source": source}
    )


def requests_summary(cfg: RunConfig, facts: dict[str, Any], records: RunRecords, outcome: RunOutcome
                     ) -> dict[str, Any]:
    return {"prompt_token_source": facts.get("token_source")}


async def replay_work(cfg: RunConfig, transport: Transport, clock: Clock, sink: RecordSink,
                      probe: TargetProbe | None = None) -> Work:
    # imported for a replay run only: traces and their shaping are no part of any other run's worker
    from servelab.bench.replay import replay_work as work

    return await work(cfg, transport, clock, sink, probe)


def replay_run_summary(cfg: RunConfig, facts: dict[str, Any], records: RunRecords, outcome: RunOutcome
                       ) -> dict[str, Any]:
    from servelab.bench.replay import replay_run_summary as summary

    return summary(cfg, facts, records, outcome)


WorkSummary = Callable[[RunConfig, dict[str, Any], RunRecords, RunOutcome], dict[str, Any]]
BUILDERS: dict[str, WorkBuilder] = {"requests": requests_work, "agent": sessions_work, "replay": replay_work}
# The work's part of the summary from its facts, where the Work itself stayed in a worker process.
SUMMARIES: dict[str, WorkSummary] = {"requests": requests_summary, "agent": sessions_summary,
                                     "replay": replay_run_summary}


async def prepare_work(cfg: RunConfig, transport: Transport, clock: Clock, sink: RecordSink,
                       probe: TargetProbe | None = None) -> Work:
    """The run's work; ``probe`` counts prompt tokens as the target does (None: a local count)."""
    if getattr(cfg, "mix", None):  # mixed traffic: several classes at once (bench.mix)
        from servelab.bench.mix import mix_work

        return await mix_work(cfg, transport, clock, sink, probe)
    kind = getattr(cfg.workload, "kind", "requests")
    return await BUILDERS[kind](cfg, transport, clock, sink, probe)
