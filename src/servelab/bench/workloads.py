"""Build the work of a run: its runner job, and what it adds to the summary."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from servelab.bench.single import single_turn_job
from servelab.bench.sink import RecordSink
from servelab.clock import Clock
from servelab.config.models import RunConfig
from servelab.load.runner import Job, RunOutcome
from servelab.transport.base import Transport
from servelab.workload.requests import make_synthesizer, planner


@dataclass
class Work:
    job: Job
    count_hint: int | None = None
    summarize: Callable[[RecordSink, RunOutcome], dict[str, Any]] | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    offsets_ns: Sequence[int] | None = None  # an open-loop schedule of its own (a trace replay)
    extra_drain_s: float = 0.0  # how long a job may legitimately run after it starts (a replayed session)


async def prepare_work(cfg: RunConfig, transport: Transport, clock: Clock, sink: RecordSink) -> Work:
    kind = getattr(cfg.workload, "kind", "requests")
    if kind == "requests":
        return await _requests_work(cfg, transport, sink)
    if kind == "replay":
        from servelab.bench.replay import replay_work

        return await replay_work(cfg, transport, clock, sink)
    from servelab.bench.sessions import sessions_work

    return await sessions_work(cfg, transport, clock, sink)


async def _requests_work(cfg: RunConfig, transport: Transport, sink: RecordSink) -> Work:
    synth = await make_synthesizer(cfg, transport.count_tokens)
    plans = await planner(cfg, synth)
    source = synth.source

    def summarize(_sink: RecordSink, _outcome: RunOutcome) -> dict[str, Any]:
        return {"prompt_token_source": source}

    return Work(single_turn_job(cfg, plans, transport, sink), summarize=summarize, facts={"token_source": source})
