"""Cut a window, sample, and rescale time: new traces, the input left untouched.

Sessions are kept whole: a session (with its sub-agents) is in or out as a unit, judged by its first
request, so a replay never sends turn 5 of a conversation whose turn 1 was cut away.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from servelab.errors import ConfigError, TraceError
from servelab.workload.traces.base import NS_PER_S, Trace, TraceRequest, build_trace


def _units(trace: Trace) -> list[list[TraceRequest]]:
    """Requests grouped into units (a root session and its sub-agents, or one independent request),
    ordered by the unit's first request."""
    def root(sid: str) -> str:
        seen = set()
        while True:
            s = trace.sessions.get(sid)
            if s is None or s.parent_session_id is None or sid in seen:
                return sid
            seen.add(sid)
            sid = s.parent_session_id

    by_key: dict[object, list[TraceRequest]] = {}
    for i, r in enumerate(trace.requests):
        key: object = i if r.session_id is None else root(r.session_id)
        by_key.setdefault(key, []).append(r)
    return list(by_key.values())  # requests are time-sorted, so dict order is first-request order


def select(
    trace: Trace,
    start_s: float | None = None,
    duration_s: float | None = None,
    sample: float | None = None,
    seed: int = 0,
    *,
    max_requests: int | None = None,
) -> Trace:
    """Keep the units starting in ``[start_s, start_s + duration_s)``, then a seeded random ``sample``
    fraction of them (in (0, 1]; arrival times are kept, so the rate drops with it), then at most
    ``max_requests`` requests (whole units, in time order). With ``start_s`` the offsets are rebased so the
    window starts at 0."""
    if start_s is not None and start_s < 0:
        raise ConfigError(f"trace window start must be >= 0 s, got {start_s}")
    if duration_s is not None and duration_s <= 0:
        raise ConfigError(f"trace window duration must be > 0 s, got {duration_s}")
    if sample is not None and not 0 < sample <= 1:
        raise ConfigError(f"trace sample must be a fraction in (0, 1], got {sample}",
                          hint="0.1 keeps a tenth of the requests (or sessions)")
    if max_requests is not None and max_requests < 1:
        raise ConfigError(f"max_requests must be >= 1, got {max_requests}")
    if not trace.timed and (start_s is not None or duration_s is not None):
        raise TraceError(f"the {trace.format} trace has no timestamps: a time window cannot be cut",
                         hint="use sample or max_requests instead")
    lo = round((start_s or 0.0) * NS_PER_S)
    hi = None if duration_s is None else lo + round(duration_s * NS_PER_S)
    units = [u for u in _units(trace) if u[0].t_offset_ns >= lo and (hi is None or u[0].t_offset_ns < hi)]
    if sample is not None and sample < 1 and units:
        k = max(1, round(sample * len(units)))
        picked = np.sort(np.random.default_rng(seed).choice(len(units), size=k, replace=False))
        units = [units[i] for i in picked]
    if max_requests is not None:
        kept: list[list[TraceRequest]] = []
        total = 0
        for u in units:
            if kept and total + len(u) > max_requests:
                break
            kept.append(u)
            total += len(u)
        units = kept
    if not units:
        end = "end" if hi is None else f"{hi / NS_PER_S:g} s"
        raise TraceError(
            f"the selection keeps no requests: window {lo / NS_PER_S:g} s to {end}, but the trace spans "
            f"{trace.requests[0].t_s if trace.requests else 0:g} to {trace.duration_ns / NS_PER_S:g} s",
        )
    shift = lo if start_s is not None else 0
    reqs = [replace(r, t_offset_ns=r.t_offset_ns - shift) for u in units for r in u]
    meta = dict(trace.metadata)
    meta["selection"] = {"start_s": start_s, "duration_s": duration_s, "sample": sample, "seed": seed,
                         "max_requests": max_requests, "from_requests": len(trace.requests)}
    return build_trace(reqs, format=trace.format, block_tokens=trace.block_tokens, timed=trace.timed,
                       source=trace.source, metadata=meta, session_info=trace.sessions)


def mean_rate(trace: Trace) -> float:
    """Requests per second between the first and the last arrival: (n - 1) / span; 0 when undefined."""
    n = len(trace.requests)
    span = trace.duration_ns
    return (n - 1) * NS_PER_S / span if n >= 2 and span > 0 else 0.0


def retime(trace: Trace, speed: float | None = None, rate: float | None = None, *,
           scale_think: bool = True) -> Trace:
    """Scale the time axis: ``speed`` 2 plays the trace twice as fast; ``rate`` picks the speed that makes
    the mean arrival rate (as :func:`mean_rate` counts it) equal ``rate`` req/s. The shape (every gap's
    share of the span, the inter-arrival CV) is kept. Think times scale with it unless ``scale_think`` is
    False; recorded service times (``api_time_s``) never do."""
    if (speed is None) == (rate is None):
        raise ConfigError("retime needs exactly one of speed or rate",
                          hint="speed=2 plays twice as fast; rate=10 compresses to 10 req/s on average")
    if not trace.timed:
        raise TraceError(f"the {trace.format} trace has no timestamps: it cannot be retimed",
                         hint="let the load's arrival process set the rate")
    if rate is not None:
        if not rate > 0:
            raise ConfigError(f"retime rate must be > 0 req/s, got {rate}")
        current = mean_rate(trace)
        if current <= 0:
            raise TraceError("the trace's rate is undefined (fewer than 2 requests or all at one instant); "
                             "it cannot be scaled to a target rate")
        speed = rate / current
    assert speed is not None
    if not speed > 0:
        raise ConfigError(f"retime speed must be > 0, got {speed}")
    reqs = [
        replace(
            r,
            t_offset_ns=round(r.t_offset_ns / speed),
            think_time_s=r.think_time_s / speed
            if scale_think and r.think_time_s is not None
            else r.think_time_s,
        )
        for r in trace.requests
    ]
    meta = dict(trace.metadata)
    meta["retime"] = {"speed": speed, "target_rate": rate, "scale_think": scale_think}
    return build_trace(reqs, format=trace.format, block_tokens=trace.block_tokens, timed=True,
                       source=trace.source, metadata=meta, session_info=trace.sessions)
