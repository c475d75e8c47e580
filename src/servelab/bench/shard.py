"""A run as a shardable unit: what the coordinator hands each shard (:class:`RunSpec`), how a shard's part
of the load is cut (:func:`shard_plan`), and what a shard hands back (:class:`ShardOutcome`).

Requests and sessions are deterministic by global index, so shard ``w`` of ``W`` takes the indices
``k*W + w``: in open loop every W-th send time of the one schedule, in closed loop its share of the
concurrency (``C // W``, one more for the first ``C % W`` shards) over its own indices. Ids stay unique
(request ids of shard w count ``w, w + W, ...``) and every record carries its ``worker``.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from servelab.config.models import RunConfig
from servelab.load.runner import Job, RunOutcome, RunPlan
from servelab.records.journal import Journal


@dataclass(frozen=True)
class RunSpec:
    """Everything a shard needs, picklable (it travels to worker processes and Ray tasks)."""

    config: RunConfig
    run_dir: Path
    workers: int = 1
    executor: str = "local"  # local | processes | ray
    coordinator_host: str = field(default_factory=socket.gethostname)
    target_facts: dict[str, Any] | None = None  # described once by the coordinator (None: shard 0 does it)
    started_at: str = ""
    argv: tuple[str, ...] = ()


@dataclass
class ShardOutcome:
    """What one shard did. ``outcome`` is None when the shard failed before or during its run."""

    shard: int
    host: str = field(default_factory=socket.gethostname)
    outcome: RunOutcome | None = None
    error: str | None = None
    live: dict[str, Any] | None = None  # the last LiveStats delta (report-and-reset) not yet reported
    facts: dict[str, Any] = field(default_factory=dict)  # what the work says of itself (token source, trace)
    target_facts: dict[str, Any] | None = None  # when this shard described the target
    telemetry: dict[str, Any] | None = None  # shard 0: {"columns", "engine", "errors"}
    mono_minus_wall_ns: int = 0  # monotonic minus wall clock on the shard's host, at one instant
    clock_offset_ns: int = 0  # the shard host's wall clock minus the coordinator's (measured at the barrier)
    clock_rtt_ns: int | None = None  # round trip of the offset measurement (its error bound is half of it)
    journal_dir: str | None = None  # where its journals are when not in the run directory (another host)
    journals: dict[str, bytes] | None = None  # a remote shard's journal files, shipped back
    exitcode: int | None = None
    load_cpu_s: float | None = None  # this process's CPU time during the load window (not start-up)
    work: Any = None  # the Work object (in-process shards only; never pickled)

    def portable(self) -> ShardOutcome:
        """A copy that can cross a process boundary (without the in-process Work)."""
        return replace(self, work=None)


def _count(n: int, w: int, workers: int) -> int:
    """How many of the global indices 0..n-1 are congruent to ``w`` mod ``workers``."""
    return max(0, (n - w + workers - 1) // workers)


def split_concurrency(concurrency: int, workers: int) -> list[int]:
    """``concurrency`` users over ``workers`` shards, as even as it goes (first shards take the remainder)."""
    return [concurrency // workers + (w < concurrency % workers) for w in range(workers)]


def effective_workers(plan: RunPlan, workers: int) -> int:
    """No more shards than there is work for: closed loop at most one per user, open loop one per send."""
    if plan.concurrency is not None:
        workers = min(workers, max(1, plan.concurrency))
    if plan.max_jobs is not None:
        workers = min(workers, max(1, plan.max_jobs))
    return max(1, workers)


def shard_plan(plan: RunPlan, w: int, workers: int) -> RunPlan:
    """Shard ``w``'s part of ``plan``: its indices are ``k*workers + w`` (see :func:`global_job`)."""
    if workers == 1:
        return plan
    warm = _count(plan.warmup_jobs, w, workers)
    max_jobs = None if plan.max_jobs is None else _count(plan.max_jobs, w, workers)
    if plan.offsets_ns is not None:
        return replace(
            plan, offsets_ns=list(plan.offsets_ns[w::workers]), max_jobs=max_jobs, warmup_jobs=warm
        )
    return replace(plan, concurrency=split_concurrency(plan.concurrency or 1, workers)[w], max_jobs=max_jobs,
                   warmup_jobs=warm)


def global_job(job: Job, w: int, workers: int, journal: Journal | None = None) -> Job:
    """The job under the shard's local index ``k``: it runs global index ``k*workers + w`` (and, with a
    ``journal``, notes the index first, so a shard that dies leaves a list of what it had started)."""
    if workers == 1 and journal is None:
        return job

    async def run(k: int, intended_ns: int, warmup: bool) -> None:
        index = k * workers + w
        if journal is not None:
            journal.write_issued(index)
        await job(index, intended_ns, warmup)

    return run


def merge_outcomes(outcomes: list[RunOutcome]) -> RunOutcome:
    """One outcome for the run: the earliest start, the latest end, counts summed; interrupted if any
    shard was; event-loop lag samples pooled (their p99 is the run's)."""
    if not outcomes:
        return RunOutcome(started_ns=0, stopped_by="interrupt")
    out = RunOutcome(
        started_ns=min(o.started_ns for o in outcomes), ended_ns=max(o.ended_ns for o in outcomes)
    )
    for o in outcomes:
        out.issued += o.issued
        out.completed += o.completed
        out.cancelled_in_flight += o.cancelled_in_flight
        out.loop_lag_ms.extend(o.loop_lag_ms)
        out.job_errors.extend(getattr(o, "job_errors", ()))
    reasons = [o.stopped_by for o in outcomes]
    out.stopped_by = "interrupt" if "interrupt" in reasons else reasons[0]
    return out
