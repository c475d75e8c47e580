"""The replay session executor: sends the units of a trace as runner jobs.

A session replays its turns in order: turn k is sent its recorded think time after turn k-1 answered (or,
without think times, no earlier than its trace offset from the session start). With real prompt text
(mt-bench) the conversation grows: every earlier turn and answer is sent again. A sub-agent starts after
the parent turn that spawned it, as long after that turn's answer as the trace says, and runs beside
its parent; the job ends when the session and all its sub-agents have.

Prompts are built ahead of their send time, never between the due time and the send (a 128k-token prompt
costs ~35 ms when its blocks are new, which is the client's schedule lag if built when due): a session's
next turn while it waits its think time, a sub-agent's first turn while it waits to start, and the first
request of this shard's next unit as soon as the unit before it has sent (the first units before the run
starts). Only the few words unique to the request (keyed by its request id) are added when it is sent.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from servelab.clock import NS_PER_S, Clock
from servelab.load.session import RequestIds
from servelab.records.schema import CANCELLED, OK, RequestRecord, started_session
from servelab.records.sink import RecordSink
from servelab.transport.base import ModelRequest, Transport, ended_record
from servelab.workload.traces import TraceRequest, TraceSession
from servelab.workload.traces.prompts import PromptHead, finish_prompt, prompt_head
from servelab.workload.traces.units import Unit

S_OK, S_FAILED = "ok", "failed"


@dataclass(frozen=True)
class ReplayOptions:
    """How requests are sent: the API, streaming, extra body, forced output length, prompt seed."""

    api: str = "chat"
    stream: bool = True
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    ignore_eos: bool = True
    seed: int = 0
    block_tokens: int | None = None
    profile: str = "replay"
    id_start: int = 0  # this shard's first request id and the step between ids (unique across shards);
    id_step: int = 1  # also this shard's first unit and the step between its units
    prepare_units: int = 32  # first units' prompts built before the run (those due at the first instant)


class ReplayPlayer:
    """Sends the units of a trace: one method per runner job, sessions and sub-agents below it."""

    def __init__(self, units: Sequence[Unit], children: dict[str, list[TraceSession]], opts: ReplayOptions,
                 transport: Transport, clock: Clock, sink: RecordSink) -> None:
        self.units, self.tr, self.clock, self.sink = units, transport, clock, sink
        self.api, self.stream, self.extra = opts.api, opts.stream, dict(opts.extra_body)
        self.ignore_eos, self.seed, self.block = opts.ignore_eos, opts.seed, opts.block_tokens
        self.profile = opts.profile
        self.children = children
        self.ids = RequestIds(opts.id_start, opts.id_step)
        # sub-agents get session ids after the roots', interleaved across shards
        self.sids = itertools.count(len(units) + opts.id_start, opts.id_step)
        self.unit_step = opts.id_step
        self.ready: dict[int, PromptHead] = {}  # unit index -> its first request's prompt head
        first = opts.id_start
        if first < len(units):  # every unit due with this shard's first, and the one after them
            t0 = units[first].start_ns
            k = first
            while k < len(units) and k < first + opts.prepare_units * opts.id_step:
                self._prepare_unit(k)
                k += opts.id_step
                if units[k - opts.id_step].start_ns > t0:
                    break

    def _first_request(self, index: int) -> TraceRequest:
        u = self.units[index]
        if u.request is not None:
            return u.request
        assert u.session is not None
        return u.session.requests[0]

    def _head(self, r: TraceRequest) -> PromptHead | None:
        """The prompt head of ``r`` (None when the trace gives the prompt text itself)."""
        if r.prompt is not None:
            return None
        return prompt_head(r, seed=self.seed, block_tokens=self.block)

    def _prepare_unit(self, index: int) -> None:
        if index < len(self.units) and index not in self.ready:
            head = self._head(self._first_request(index))
            if head is not None:
                self.ready[index] = head

    def _text(self, r: TraceRequest, head: PromptHead | None, rid: int) -> str:
        if head is None:
            head = self._head(r)
            if head is None:
                assert r.prompt is not None
                return r.prompt
        return finish_prompt(head, r, seed=self.seed, tail_key=rid)

    async def job(self, index: int, intended_ns: int, warmup: bool) -> None:
        u = self.units[index]
        head = self.ready.pop(index, None)
        # the next unit's prompt, once this one's request is on its way (the loop runs it when this job
        # first waits)
        asyncio.get_running_loop().call_soon(self._prepare_unit, index + self.unit_step)
        if u.request is not None:
            r = u.request
            rid = self.ids.next()
            text = self._text(r, head, rid)
            rec = await self._send(
                self._request(rid, r, text, None, intended_ns, warmup, -1, 0, r.input_tokens)
            )
            rec.output_text = ""
            return
        assert u.session is not None
        await self._session(u.session, index, intended_ns, warmup, head)

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
            self.sink.request(ended_record(req, CANCELLED, end_ns=self.clock.now()))
            raise
        self.sink.request(rec)
        return rec

    async def _session(self, s: TraceSession, sid: int, start_ns: int, warmup: bool,
                       head: PromptHead | None = None) -> None:
        clock = self.clock
        rec = started_session(sid, s.label or self.profile, clock.now(), warmup)
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
                if k > 0 or head is None:
                    head = self._head(r)  # ahead of the think time, not after it
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
                    text = self._text(r, head, rid)
                    req = self._request(rid, r, text, None, intended, warmup, sid, k, r.input_tokens)
                head = None
                sent = clock.now()
                out = await self._send(req)
                rec.add_request(out, sent, clock.now())
                rec.turns += out.status == OK
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
            head = self._head(c.requests[0])  # before the wait to start, not after it
            if at_ns > self.clock.now():
                await self.clock.sleep_until(at_ns)
            await self._session(c, sid, at_ns, warmup, head)

        return asyncio.ensure_future(run())

