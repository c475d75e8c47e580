"""Trace replay as a run's work: recorded traffic sent again, on its own schedule.

A timed trace (azure, mooncake, jsonl, servelab, claude-code) becomes an open-loop schedule: each unit (an
independent request, or a root session with its sub-agents) starts at its trace offset, scaled by
``speed`` or compressed to ``rate``. Prompts come from :func:`request_prompt`, so equal hash ids give
identical text blocks and a server's prefix cache sees the trace's reuse; each response is forced to the
trace's output length (``ignore_eos``). An untimed trace (mt-bench) starts its sessions at ``rate``
(Poisson) or as the load's closed loop decides.

A session replays its turns in order: turn k is sent its recorded think time after turn k-1 answered (or,
without think times, no earlier than its trace offset from the session start). With real prompt text
(mt-bench) the conversation grows: every earlier turn and answer is sent again. A sub-agent starts after
the parent turn that spawned it, as long after that turn's answer as the trace says, and runs beside
its parent; the job ends when the session and all its sub-agents have.

The summary's ``replay`` section compares the arrivals the replay achieved with the replayed trace's.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from servelab.bench.sink import RecordSink
from servelab.bench.workloads import Work
from servelab.clock import NS_PER_S, Clock
from servelab.config.models import ReplayWorkloadConfig, RunConfig
from servelab.errors import ConfigError
from servelab.load.arrivals import arrival_offsets_ns
from servelab.load.runner import RunOutcome
from servelab.load.session import RequestIds
from servelab.records.schema import CANCELLED, OK, RequestRecord, SessionRecord
from servelab.transport.base import ModelRequest, Transport
from servelab.workload.traces import (
    Trace,
    TraceRequest,
    TraceSession,
    interarrival_gaps,
    ks_interarrival,
    load_trace,
    prefix_reuse,
    request_prompt,
    retime,
    select,
)

S_OK, S_FAILED = "ok", "failed"


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
    children = _children(trace)
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


def _root(trace: Trace, sid: str) -> str:
    hops = 0
    while hops < 64:
        parent = trace.sessions[sid].parent_session_id if sid in trace.sessions else None
        if parent is None or parent not in trace.sessions:
            return sid
        sid, hops = parent, hops + 1
    return sid


def _children(trace: Trace) -> dict[str, list[TraceSession]]:
    out: dict[str, list[TraceSession]] = defaultdict(list)
    for s in trace.sessions.values():
        if s.parent_session_id is not None and s.parent_session_id in trace.sessions and s.requests:
            out[s.parent_session_id].append(s)
    for v in out.values():
        v.sort(key=lambda s: s.start_ns)
    return out


def _tree(s: TraceSession, children: dict[str, list[TraceSession]]) -> list[TraceSession]:
    out, stack = [], [s]
    while stack:
        x = stack.pop()
        out.append(x)
        stack.extend(children.get(x.session_id, ()))
    return out


async def replay_work(cfg: RunConfig, transport: Transport, clock: Clock, sink: RecordSink) -> Work:
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
    player = _Player(cfg, trace, units, transport, clock, sink)
    speed = float(trace.metadata.get("retime", {}).get("speed", 1.0)) if trace.timed else None

    def summarize(s: RecordSink, outcome: RunOutcome) -> dict[str, Any]:
        return {"replay": replay_summary(trace, units[: outcome.issued], s.requests, speed=speed)}

    facts = {"trace": {"source": trace.source, "format": trace.format, "requests": len(trace),
                       "units": len(units), "speed": speed}}
    tail_s = max((u.offsets_ns[-1] - u.start_ns for u in units), default=0) / NS_PER_S
    return Work(player.job, count_hint=len(units), summarize=summarize, facts=facts, offsets_ns=offsets,
                extra_drain_s=tail_s)


class _Player:
    """Sends the units of a trace: one method per runner job, sessions and sub-agents below it."""

    def __init__(self, cfg: RunConfig, trace: Trace, units: Sequence[Unit], transport: Transport, clock: Clock,
                 sink: RecordSink) -> None:
        w = cfg.workload
        assert isinstance(w, ReplayWorkloadConfig)
        self.units, self.tr, self.clock, self.sink = units, transport, clock, sink
        self.api, self.stream, self.extra = cfg.target.api, cfg.target.stream, dict(cfg.target.extra_body)
        self.ignore_eos, self.seed, self.block = w.ignore_eos, cfg.seed, trace.block_tokens
        self.profile = f"replay:{trace.format}"
        self.children = _children(trace)
        self.ids = RequestIds()
        self.sids = itertools.count(len(units))  # sub-agents get session ids after the roots'

    async def job(self, index: int, intended_ns: int, warmup: bool) -> None:
        u = self.units[index]
        if u.request is not None:
            r = u.request
            rid = self.ids.next()
            text = request_prompt(r, seed=self.seed, block_tokens=self.block, tail_key=rid)
            rec = await self._send(self._request(rid, r, text, None, intended_ns, warmup, -1, 0, r.input_tokens))
            rec.output_text = ""
            return
        assert u.session is not None
        await self._session(u.session, index, intended_ns, warmup)

    def _request(self, rid: int, r: TraceRequest, text: str | None, messages: list[dict[str, Any]] | None,
                 intended_ns: int, warmup: bool, sid: int, turn: int, est: int) -> ModelRequest:
        out = max(1, r.output_tokens)
        if messages is None:
            assert text is not None
            messages = [{"role": "user", "content": text}]
        chat = self.api == "chat"
        return ModelRequest(
            request_id=rid, api=self.api, messages=messages if chat else None,
            prompt=None if chat else "\n".join(str(m["content"]) for m in messages),
            max_tokens=out, min_tokens=out if self.ignore_eos else None, ignore_eos=self.ignore_eos,
            stream=self.stream, est_prompt_tokens=est, session_id=sid, turn=turn, warmup=warmup,
            intended_ns=intended_ns, extra_body=self.extra,
        )

    async def _send(self, req: ModelRequest) -> RequestRecord:
        try:
            rec = await self.tr.send(req)
        except asyncio.CancelledError:
            self.sink.request(RequestRecord(
                request_id=req.request_id, session_id=req.session_id, turn=req.turn, warmup=req.warmup,
                status=CANCELLED, intended_ns=req.intended_ns, end_ns=self.clock.now(),
                est_prompt_tokens=req.est_prompt_tokens, requested_output_tokens=req.max_tokens))
            raise
        self.sink.request(rec)
        return rec

    async def _session(self, s: TraceSession, sid: int, start_ns: int, warmup: bool) -> None:
        clock = self.clock
        rec = SessionRecord(session_id=sid, profile=s.label or self.profile, start_ns=clock.now(), warmup=warmup)
        subs: list[asyncio.Task[None]] = []
        messages: list[dict[str, Any]] = []  # the growing conversation of a session with real prompt text
        context = 0
        failed = False
        first_t = s.requests[0].t_offset_ns
        kids = self.children.get(s.session_id, [])
        try:
            subs += [self._spawn(c, start_ns + c.start_ns - first_t, warmup) for c in kids
                     if c.spawn_after_turn is None]
            for k, r in enumerate(s.requests):
                intended = self._turn_time(k, r, start_ns, first_t)
                t0 = clock.now()
                if intended > t0:
                    await clock.sleep_until(intended)
                    rec.think_ns += clock.now() - t0
                rid = self.ids.next()
                if r.prompt is not None:
                    messages.append({"role": "user", "content": r.prompt})
                    context += len(r.prompt.split())
                    req = self._request(rid, r, None, list(messages), intended, warmup, sid, k, context)
                else:
                    text = request_prompt(r, seed=self.seed, block_tokens=self.block, tail_key=rid)
                    req = self._request(rid, r, text, None, intended, warmup, sid, k, r.input_tokens)
                sent = clock.now()
                out = await self._send(req)
                self._account(rec, out, sent)
                if out.status != OK:
                    failed = True
                elif r.prompt is not None:
                    messages.append({"role": "assistant", "content": out.output_text})
                    context += out.completion_tokens
                out.output_text = ""
                subs += [self._spawn(c, self._spawn_at(c, r, sent), warmup) for c in kids
                         if c.spawn_after_turn == k]
            n = len(s.requests)  # a sub-agent whose spawning turn was cut away starts after the last turn
            subs += [self._spawn(c, clock.now(), warmup) for c in kids
                     if c.spawn_after_turn is not None and c.spawn_after_turn >= n]
            if subs:
                await asyncio.gather(*subs)
            rec.status = S_FAILED if failed else S_OK
        except asyncio.CancelledError:
            rec.status = CANCELLED
            for t in subs:
                t.cancel()
            await asyncio.gather(*subs, return_exceptions=True)
            raise
        finally:
            rec.end_ns = clock.now()
            self.sink.session(rec)

    def _turn_time(self, k: int, r: TraceRequest, start_ns: int, first_t: int) -> int:
        """When turn ``k`` is due: the session start, its think time after the last answer, or its offset."""
        now = self.clock.now()
        if k == 0:
            return start_ns
        if r.think_time_s is not None:
            return now + round(r.think_time_s * NS_PER_S)
        return max(now, start_ns + r.t_offset_ns - first_t)

    def _spawn_at(self, c: TraceSession, r: TraceRequest, sent_ns: int) -> int:
        """Sub-agent ``c``, spawned by turn ``r``, starts as long after that turn's answer as in the trace
        (after the turn's send, when the trace has no service time); never before now."""
        now = self.clock.now()
        if r.api_time_s is not None:
            at = now + c.start_ns - r.t_offset_ns - round(r.api_time_s * NS_PER_S)
        else:
            at = sent_ns + c.start_ns - r.t_offset_ns
        return max(now, at)

    def _spawn(self, c: TraceSession, at_ns: int, warmup: bool) -> asyncio.Task[None]:
        sid = next(self.sids)

        async def run() -> None:
            if at_ns > self.clock.now():
                await self.clock.sleep_until(at_ns)
            await self._session(c, sid, at_ns, warmup)

        return asyncio.ensure_future(run())

    @staticmethod
    def _account(rec: SessionRecord, r: RequestRecord, sent_ns: int) -> None:
        rec.requests += 1
        rec.turns += r.status == OK
        rec.model_ns += (r.end_ns or sent_ns) - sent_ns
        rec.queue_ns += r.srv_queue_ns or 0
        rec.input_tokens += r.prompt_tokens or 0
        rec.output_tokens += r.completion_tokens
        rec.cached_tokens += r.usage_cached_tokens or 0


def _cv(gaps: np.ndarray) -> float | None:
    if gaps.size < 2 or gaps.mean() <= 0:
        return None
    return float(gaps.std() / gaps.mean())


def _rate(offsets: np.ndarray) -> float | None:
    if offsets.size < 2:
        return None
    span = float(offsets.max() - offsets.min())
    return (offsets.size - 1) * NS_PER_S / span if span > 0 else None


def replay_summary(trace: Trace, issued: Sequence[Unit], records: Sequence[RequestRecord], *,
                   speed: float | None) -> dict[str, Any]:
    """The replayed trace's arrivals (of the units the runner issued) against the achieved sends.

    Rates are (n - 1) / span, CVs population std / mean of consecutive gaps, lag the send time minus the
    intended time (p99, ms), ``ks`` the two-sample KS test of trace against achieved gaps;
    ``cached_fraction`` is the server-reported cached share of prompt tokens over ok requests, beside the
    trace's reusable fraction under an unbounded cache (``trace_prefix_reuse``)."""
    trace_offs = np.sort(np.fromiter((o for u in issued for o in u.offsets_ns), dtype=np.int64))
    sent = [r for r in records if r.attempt == 0 and r.sent_ns is not None]
    achieved = np.sort(np.fromiter((r.sent_ns for r in sent), dtype=np.int64, count=len(sent)))
    lags = np.fromiter(((r.sent_ns - r.intended_ns) / 1e6 for r in sent), dtype=np.float64, count=len(sent))
    tg, ag = interarrival_gaps(trace_offs), interarrival_gaps(achieved)
    ks = None
    if trace.timed and tg.size and ag.size:
        k = ks_interarrival(tg, ag)
        ks = {"statistic": k.statistic, "pvalue": k.pvalue, "n_trace": k.n_a, "n_achieved": k.n_b}
    ok = [r for r in records if r.status == OK and r.usage_prompt_tokens]
    prompt = sum(r.usage_prompt_tokens or 0 for r in ok)
    reuse = prefix_reuse(trace)
    return {
        "format": trace.format,
        "source": trace.source,
        "speed": speed,
        "trace_requests": int(trace_offs.size),
        "requests": len(sent),
        "trace_rate": _rate(trace_offs) if trace.timed else None,
        "achieved_rate": _rate(achieved),
        "trace_cv": _cv(tg) if trace.timed else None,
        "achieved_cv": _cv(ag),
        "lag_ms_p99": float(np.percentile(lags, 99)) if lags.size else None,
        "ks": ks,
        "trace_prefix_reuse": None if reuse is None else reuse["fraction"],
        "cached_fraction": sum(r.usage_cached_tokens or 0 for r in ok) / prompt if prompt else None,
    }
