"""Mixed traffic on one endpoint as runner work: every class of ``cfg.mix`` at once, on one clock and one
target (one simulated GPU, or one server).

The runner sees one job per *user*: each closed-loop user of a class runs that class's sessions one after
another; an open-loop class has one dispatcher job that starts its sessions at Poisson times. A class's
session ``k`` is planned from (the class's seed, ``k``) alone, so the first class run alone (the
interference baseline, :mod:`servelab.bench.mix_run`) sends exactly the sessions it sends in the mix.
Session ids interleave the classes (``k * classes + i``); every request and session record carries its
``mix_class`` and ``tenant``.

When the mix ends: at ``limits.duration_s``; else when the first class has run its ``sessions``. A class
with a ``sessions`` count of its own stops there; one without keeps its users busy until the first class
is done (so the interactive class is measured under the bulk load from start to end). Warm-up:
``limits.warmup_requests`` counts the first sessions of each class, ``limits.warmup_s`` the first seconds.

Tenants: against an HTTP target a class with ``api_key_env`` or ``headers`` gets its own connection pool
whose requests carry its key and headers; the key is read from the environment by the transport and never
stored. The in-process simulator takes no headers (see :func:`tenant_notes`).
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from servelab.bench.targets import make_transport
from servelab.bench.work import RunRecords, Work, shard_ids
from servelab.clock import NS_PER_S, Clock
from servelab.config.agent import SessionConfig
from servelab.config.mix import MixClassConfig
from servelab.config.models import RunConfig
from servelab.errors import ServelabError
from servelab.load.runner import RunOutcome, RunPlan
from servelab.load.session import RequestIds, run_session
from servelab.records.schema import RequestRecord, SessionRecord
from servelab.records.sink import RecordSink
from servelab.transport.base import Transport, client_error_record
from servelab.transport.probe import TargetProbe
from servelab.workload.agent import build_plan, synth_text_source
from servelab.workload.profiles import load_profile
from servelab.workload.tokens import resolve_counter


def class_seed(seed: int, name: str) -> int:
    """A class's own seed: the run's seed and the class's name (not its position in the mix)."""
    return (seed * 1_000_003 + zlib.crc32(name.encode())) & 0xFFFFFFFF


def class_specs(cfg: RunConfig) -> list[tuple[MixClassConfig, SessionConfig, str]]:
    """(class, its session spec, its profile's name) for every class; ConfigError on an unknown profile."""
    out = []
    for c in cfg.mix or []:
        prof = load_profile(c.workload)
        out.append((c, prof.session, prof.name))
    return out


def class_rows(cfg: RunConfig) -> list[dict[str, Any]]:
    """What the summary says of each class's set-up."""
    return [
        {
            "name": c.label,
            "workload": c.workload,
            "tenant": c.tenant,
            "mode": c.mode,
            "users": c.concurrency,
            "rate": c.rate,
            "sessions": c.sessions,
        }
        for c in cfg.mix or []
    ]


def tenant_notes(cfg: RunConfig) -> list[str]:
    """Warnings about tenants the target cannot tell apart (the in-process simulator reads no headers)."""
    if not cfg.target.is_sim:
        return []
    named = [c.label for c in cfg.mix or [] if c.headers or c.api_key_env]
    if not named:
        return []
    return [
        f"class(es) {', '.join(named)} set tenant headers or keys, which the in-process simulator does not "
        "read (records still carry the tenant); serve it over HTTP to send them (servelab sim serve)"
    ]


@dataclass
class _Class:
    cfg: MixClassConfig
    index: int
    spec: SessionConfig
    profile: str
    seed: int
    users: int  # runner jobs: closed loop its users, open loop one dispatcher
    transport: Transport
    issued: int = 0  # sessions taken so far
    finished_users: int = 0

    @property
    def label(self) -> str:
        return self.cfg.label


@dataclass
class _State:
    n_classes: int
    start_ns: int | None = None
    deadline_ns: int | None = None
    first_done: asyncio.Event = field(default_factory=asyncio.Event)


async def mix_work(cfg: RunConfig, transport: Transport, clock: Clock, sink: RecordSink,
                   probe: TargetProbe | None = None) -> Work:
    """The work of a mixed run (see the module docstring)."""
    specs = class_specs(cfg)
    counter = await resolve_counter(probe.count_tokens if probe is not None else None, cfg.target.tokenizer)
    texts = await synth_text_source(counter, cfg.seed)
    ids = RequestIds(*shard_ids(sink))
    target, lim = cfg.target, cfg.limits
    own: list[Transport] = []
    classes: list[_Class] = []
    for i, (c, spec, profile) in enumerate(specs):
        tr = transport
        if not target.is_sim and (c.headers or c.api_key_env):
            tenant_target = target.model_copy(update={"headers": {**target.headers, **c.headers},
                                                      "api_key_env": c.api_key_env or target.api_key_env})
            tr = make_transport(tenant_target, clock, concurrency=c.concurrency or 16, seed=cfg.seed)
            own.append(tr)
        classes.append(_Class(c, i, spec, profile, class_seed(cfg.seed, c.label),
                              c.concurrency if c.concurrency is not None else 1, tr))
    owner = [c for c in classes for _ in range(c.users)]
    st = _State(len(classes))

    def may_start(c: _Class, t: int) -> bool:
        if st.deadline_ns is not None and t >= st.deadline_ns:
            return False
        if c.cfg.sessions is not None:
            return c.issued < c.cfg.sessions
        return c.index == 0 or not st.first_done.is_set()

    def tag(c: _Class) -> tuple[Any, Any]:
        def on_record(r: RequestRecord) -> None:
            r.mix_class, r.tenant = c.label, c.cfg.tenant
            sink.request(r)

        def on_session(s: SessionRecord) -> None:
            s.mix_class, s.tenant = c.label, c.cfg.tenant
            sink.session(s)

        return on_record, on_session

    tags = [tag(c) for c in classes]

    async def session(c: _Class, k: int, intended_ns: int) -> None:
        plan = replace(build_plan(c.spec, k, c.seed), session_id=k * st.n_classes + c.index)
        start = st.start_ns if st.start_ns is not None else intended_ns
        warm = k < lim.warmup_requests or (intended_ns - start) < lim.warmup_s * NS_PER_S
        on_record, on_session = tags[c.index]
        try:
            await run_session(
                plan,
                c.transport,
                clock,
                ids,
                on_record=on_record,
                texts=texts,
                on_session=on_session,
                intended_ns=intended_ns,
                warmup=warm,
                api=target.api,
                stream=target.stream,
                extra_body=dict(target.extra_body),
            )
        except (ServelabError, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - recorded as a failed request; the user goes on
            on_record(client_error_record(ids.next(), intended_ns, warm, clock.now(), exc,
                                          session_id=plan.session_id))

    async def closed_user(c: _Class) -> None:
        while True:
            now = clock.now()
            if not may_start(c, now):
                return
            k = c.issued
            c.issued += 1
            await session(c, k, now)

    async def dispatcher(c: _Class) -> None:
        rng = np.random.default_rng([c.seed, 0x0A11])
        t = st.start_ns if st.start_ns is not None else clock.now()
        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                t += int(rng.exponential(1.0 / float(c.cfg.rate or 1.0)) * NS_PER_S)
                if not may_start(c, t):
                    break
                if clock.now() < t:
                    await clock.sleep_until(t)
                if not may_start(c, t):
                    break
                k = c.issued
                c.issued += 1
                task = asyncio.ensure_future(session(c, k, t))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            while tasks:
                await asyncio.gather(*list(tasks))
        except asyncio.CancelledError:
            for x in list(tasks):
                x.cancel()
            await asyncio.gather(*list(tasks), return_exceptions=True)
            raise

    async def job(index: int, intended_ns: int, warmup: bool) -> None:
        if st.start_ns is None:
            st.start_ns = intended_ns
            if lim.duration_s is not None:
                st.deadline_ns = intended_ns + int(lim.duration_s * NS_PER_S)
        c = owner[index]
        try:
            await (closed_user(c) if c.cfg.rate is None else dispatcher(c))
        finally:
            c.finished_users += 1
            if c.index == 0 and c.finished_users >= c.users:
                st.first_done.set()

    users = len(owner)
    plan = RunPlan(concurrency=users, max_jobs=users, duration_s=lim.duration_s,
                   drain_timeout_s=lim.drain_timeout_s)

    async def aclose() -> None:
        for tr in own:
            await tr.aclose()

    facts = {"mix": class_rows(cfg), "profile": "mix: " + " + ".join(c.label for c in classes),
             "token_source": counter.source}

    def summarize(records: RunRecords, outcome: RunOutcome) -> dict[str, Any]:
        return mix_summary(cfg, facts, records, outcome)

    return Work(job, count_hint=users, summarize=summarize, facts=facts, plan=plan, aclose=aclose)


def mix_summary(
    cfg: RunConfig, facts: dict[str, Any], records: RunRecords, outcome: RunOutcome
) -> dict[str, Any]:
    """The mix's part of the summary: the run's tasks (all classes) and ``classes`` (each class's figures)."""
    # analysis (pyarrow) runs at the summary, in the coordinator: a worker running the mix never loads it
    from servelab.analysis.agents import agent_summary
    from servelab.analysis.cost import cost_summary
    from servelab.analysis.mix import class_figures

    sessions = records.sessions if records.sessions is not None else []
    duration_s = (outcome.ended_ns - outcome.started_ns) / NS_PER_S
    out: dict[str, Any] = {"profile": facts.get("profile")}
    out.update(agent_summary(sessions, duration_s=duration_s, percentiles=cfg.percentiles))
    if cfg.cost is not None:
        out["cost"] = cost_summary(cfg.cost, sessions, duration_s=duration_s)
    out["classes"] = class_figures(records.requests, sessions, cfg, facts.get("mix") or class_rows(cfg),
                                   started_ns=outcome.started_ns, ended_ns=outcome.ended_ns)
    return out
