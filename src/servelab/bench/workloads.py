"""Build the work of a run, dispatched by the workload's ``kind``: its runner job and its summary part."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from servelab.bench.replay import replay_work
from servelab.bench.sessions import sessions_work
from servelab.bench.single import single_turn_job
from servelab.bench.work import RunRecords, Work
from servelab.clock import Clock
from servelab.config.models import RunConfig
from servelab.load.runner import RunOutcome
from servelab.records.sink import RecordSink
from servelab.transport.base import Transport
from servelab.workload.requests import make_synthesizer, planner

WorkBuilder = Callable[[RunConfig, Transport, Clock, RecordSink], Awaitable[Work]]


async def requests_work(cfg: RunConfig, transport: Transport, clock: Clock, sink: RecordSink) -> Work:
    synth = await make_synthesizer(cfg, transport.count_tokens)
    plans = await planner(cfg, synth)
    source = synth.source

    def summarize(_records: RunRecords, _outcome: RunOutcome) -> dict[str, Any]:
        return {"prompt_token_source": source}

    return Work(single_turn_job(cfg, plans, transport, sink), summarize=summarize, facts={"token_source": source})


BUILDERS: dict[str, WorkBuilder] = {"requests": requests_work, "agent": sessions_work, "replay": replay_work}


async def prepare_work(cfg: RunConfig, transport: Transport, clock: Clock, sink: RecordSink) -> Work:
    kind = getattr(cfg.workload, "kind", "requests")
    return await BUILDERS[kind](cfg, transport, clock, sink)
