"""Trace shaping for a replay: window, sample and retime a trace, then cut it into the units one runner
job replays (an independent request, or a root session with its sub-agents), on a schedule rebased to 0."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from servelab.config.models import ReplayWorkloadConfig
from servelab.errors import ConfigError
from servelab.workload.traces import Trace, TraceRequest, TraceSession, load_trace, retime, select


@dataclass(slots=True)
class Unit:
    """What one runner job replays: an independent request, or a root session (with its sub-agents)."""

    start_ns: int
    request: TraceRequest | None = None
    session: TraceSession | None = None
    offsets_ns: list[int] = field(default_factory=list)  # trace offsets of every request in the unit


def prepare_trace(w: ReplayWorkloadConfig, seed: int = 0) -> Trace:
    """Load the trace, cut the window/sample, then rescale time (speed or rate)."""
    trace = load_trace(w.path, w.format, **w.options)
    if any(v is not None for v in (w.start_s, w.duration_s, w.sample, w.max_requests)):
        trace = select(trace, w.start_s, w.duration_s, w.sample, seed, max_requests=w.max_requests)
    if not trace.timed:
        if w.speed is not None and w.speed != 1:
            raise ConfigError(
                f"the {trace.format} trace has no timestamps, so speed {w.speed:g} has nothing to scale",
                hint="give --rate R to start sessions at R per second (Poisson), or --concurrency N",
            )
        return trace
    if w.rate is not None:
        return retime(trace, rate=w.rate, scale_think=w.scale_think)
    if w.speed is not None and w.speed != 1:
        return retime(trace, speed=w.speed, scale_think=w.scale_think)
    return trace


def replay_units(trace: Trace) -> list[Unit]:
    """Units in order of their first request, start offsets rebased so the first is at 0."""
    children = sub_agents(trace)
    units: list[Unit] = []
    seen: set[str] = set()
    for r in trace.requests:
        sid = r.session_id
        if sid is None:
            units.append(Unit(r.t_offset_ns, request=r, offsets_ns=[r.t_offset_ns]))
            continue
        root = _root(trace, sid)
        if root in seen:
            continue
        seen.add(root)
        s = trace.sessions[root]
        offs = sorted(q.t_offset_ns for x in _tree(s, children) for q in x.requests)
        units.append(Unit(offs[0], session=s, offsets_ns=offs))
    units.sort(key=lambda u: u.start_ns)
    base = units[0].start_ns if units else 0
    for u in units:
        u.start_ns -= base
        u.offsets_ns = [o - base for o in u.offsets_ns]
    return units


def sub_agents(trace: Trace) -> dict[str, list[TraceSession]]:
    """Each session's sub-agent sessions (those that have requests), in order of their start."""
    out: dict[str, list[TraceSession]] = defaultdict(list)
    for s in trace.sessions.values():
        if s.parent_session_id is not None and s.parent_session_id in trace.sessions and s.requests:
            out[s.parent_session_id].append(s)
    for v in out.values():
        v.sort(key=lambda s: s.start_ns)
    return out


def _root(trace: Trace, sid: str) -> str:
    hops = 0
    while hops < 64:
        parent = trace.sessions[sid].parent_session_id if sid in trace.sessions else None
        if parent is None or parent not in trace.sessions:
            return sid
        sid, hops = parent, hops + 1
    return sid


def _tree(s: TraceSession, children: dict[str, list[TraceSession]]) -> list[TraceSession]:
    out, stack = [], [s]
    while stack:
        x = stack.pop()
        out.append(x)
        stack.extend(children.get(x.session_id, ()))
    return out
