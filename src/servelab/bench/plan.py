"""From config to the runner's plan: closed loop workers, or an open-loop schedule computed up front."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from servelab.config.models import RunConfig
from servelab.load.arrivals import arrival_offsets_ns
from servelab.load.runner import RunPlan


def plan_for(cfg: RunConfig, count_hint: int | None = None,
             offsets_ns: Sequence[int] | npt.NDArray[np.int64] | None = None,
             extra_drain_s: float = 0.0) -> RunPlan:
    """The runner's plan. ``offsets_ns`` (a workload's own schedule, e.g. a trace replay) wins over the
    load's; ``extra_drain_s`` (how long one job may legitimately run, e.g. a replayed session) adds to the
    drain."""
    load, lim = cfg.load, cfg.limits
    if cfg.is_agent:
        max_jobs = lim.sessions if lim.sessions is not None else count_hint
    else:
        max_jobs = lim.requests if lim.requests is not None else count_hint
    common = RunPlan(
        max_jobs=max_jobs,
        duration_s=lim.duration_s,
        warmup_jobs=lim.warmup_requests,
        warmup_s=lim.warmup_s,
        drain_timeout_s=lim.drain_timeout_s + extra_drain_s,
    )
    if offsets_ns is not None:
        return replace(common, offsets_ns=offsets_ns)
    if load.rate is not None:
        offsets = arrival_offsets_ns(
            rate=load.rate, arrival=load.arrival, burstiness=load.burstiness,
            n=max_jobs, duration_s=lim.duration_s, seed=cfg.seed,
        )
        return replace(common, offsets_ns=offsets)
    return replace(common, concurrency=load.effective_concurrency, think_time_s=load.think_time_s)
