"""Trace replay as a run's work: recorded traffic sent again, on its own schedule.

A timed trace (azure, mooncake, jsonl, servelab, claude-code) becomes an open-loop schedule: each unit (an
independent request, or a root session with its sub-agents) starts at its trace offset, scaled by
``speed`` or compressed to ``rate``. Prompts come from :func:`request_prompt`, so equal hash ids give
identical text blocks and a server's prefix cache sees the trace's reuse; each response is forced to the
trace's output length (``ignore_eos``). An untimed trace (mt-bench) starts its sessions at ``rate``
(Poisson) or as the load's closed loop decides.

The pieces live where they belong: trace shaping in :mod:`servelab.workload.traces.units`, the session
executor in :mod:`servelab.load.replay`, the summary's ``replay`` section in :mod:`servelab.analysis.replay`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from servelab.bench.work import RunRecords, Work, shard_ids
from servelab.clock import NS_PER_S, Clock
from servelab.config.models import ReplayWorkloadConfig, RunConfig
from servelab.load.arrivals import arrival_offsets_ns
from servelab.load.replay import ReplayOptions, ReplayPlayer
from servelab.load.runner import RunOutcome
from servelab.records.sink import RecordSink
from servelab.transport.base import Transport
from servelab.transport.probe import TargetProbe
from servelab.workload.traces import Trace, prefix_reuse
from servelab.workload.traces.units import Unit, prepare_trace, replay_units, sub_agents


async def replay_work(cfg: RunConfig, transport: Transport, clock: Clock, sink: RecordSink,
                      probe: TargetProbe | None = None) -> Work:
    """The replay of ``cfg.workload`` (a :class:`ReplayWorkloadConfig`) as a runner job with its schedule."""
    w = cfg.workload
    assert isinstance(w, ReplayWorkloadConfig)
    trace = prepare_trace(w, cfg.seed)
    units = replay_units(trace)
    offsets: list[int] | None = None
    if trace.timed:
        offsets = [u.start_ns for u in units]
    elif w.rate is not None:
        offsets = [int(x) for x in arrival_offsets_ns(rate=w.rate, arrival="poisson", burstiness=1.0,
                                                        n=len(units), duration_s=None, seed=cfg.seed)]
    first_id, id_step = shard_ids(sink)
    opts = ReplayOptions(api=cfg.target.api, stream=cfg.target.stream, extra_body=dict(cfg.target.extra_body),
                         ignore_eos=w.ignore_eos, seed=cfg.seed, block_tokens=trace.block_tokens,
                         profile=f"replay:{trace.format}", id_start=first_id, id_step=id_step)
    player = ReplayPlayer(units, sub_agents(trace), opts, transport, clock, sink)
    speed = float(trace.metadata.get("retime", {}).get("speed", 1.0)) if trace.timed else None

    def summarize(records: RunRecords, outcome: RunOutcome) -> dict[str, Any]:
        return {"replay": trace_replay_summary(trace, units[: outcome.issued], _requests_of(records),
                                               speed=speed)}

    facts = {"trace": {"source": trace.source, "format": trace.format, "requests": len(trace),
                       "units": len(units), "speed": speed}}
    tail_s = max((u.offsets_ns[-1] - u.start_ns for u in units), default=0) / NS_PER_S
    return Work(player.job, count_hint=len(units), summarize=summarize, facts=facts, offsets_ns=offsets,
                extra_drain_s=tail_s)


def replay_request_count(cfg: RunConfig) -> int:
    """How many requests the replay of ``cfg.workload`` sends: every request of every unit of the shaped
    trace (window, sample, max_requests applied)."""
    w = cfg.workload
    assert isinstance(w, ReplayWorkloadConfig)
    return sum(len(u.offsets_ns) for u in replay_units(prepare_trace(w, cfg.seed)))


def _requests_of(records: RunRecords) -> Any:
    """The requests as the replay section reads them: streamed from Parquet, only its columns, where the
    records are a run's files (:class:`servelab.bench.finish.RunTables`), else as given."""
    stream = getattr(records, "iter_requests", None)
    if stream is None:
        return records.requests
    from servelab.analysis.replay import REPLAY_COLUMNS

    return stream(REPLAY_COLUMNS)


def trace_replay_summary(trace: Trace, issued: Sequence[Unit], requests: Any, *,
                         speed: float | None) -> dict[str, Any]:
    """:func:`~servelab.analysis.replay.replay_summary` of the units the runner issued."""
    from servelab.analysis.replay import replay_summary  # pyarrow.compute: at the summary, not in a worker

    reuse = prefix_reuse(trace)
    return replay_summary(requests, trace_offsets_ns=[o for u in issued for o in u.offsets_ns],
                          timed=trace.timed, format=trace.format, source=trace.source,
                          trace_prefix_reuse=None if reuse is None else reuse["fraction"], speed=speed)


def replay_run_summary(cfg: RunConfig, facts: dict[str, Any], records: RunRecords, outcome: RunOutcome
                       ) -> dict[str, Any]:
    """The replay section computed where the Work is not at hand (a run sharded over processes): the trace
    is shaped again from the config (deterministic for the seed). With W shards the issued units are the
    first ``issued`` of the schedule, which every shard's share approximates."""
    w = cfg.workload
    assert isinstance(w, ReplayWorkloadConfig)
    trace = prepare_trace(w, cfg.seed)
    units = replay_units(trace)
    speed = float(trace.metadata.get("retime", {}).get("speed", 1.0)) if trace.timed else None
    return {"replay": trace_replay_summary(trace, units[: outcome.issued], _requests_of(records),
                                           speed=speed)}
