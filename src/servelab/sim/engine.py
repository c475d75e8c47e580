"""The simulated serving engine: scheduler + KV cache + cost model, stepping on a clock.

``Engine(deployment, clock, seed)``; fronts ``submit(SimRequest)`` and await ``req.done`` or receive
``req.on_tokens(n, t_ns)`` per step. ``run()`` is the step loop (one per replica): schedule a step, ask the
cost model how long it takes, sleep that long on the clock, apply the outcome. On a ``VirtualClock`` this
simulates as fast as the CPU allows; on a ``WallClock`` it serves in real time.

Output length: each request stops at ``min(max_tokens, natural)`` (finish "stop") unless ``ignore_eos``, with
``natural`` drawn from a lognormal around ``deployment.natural_median`` seeded by (engine seed, request id),
never below ``min_tokens``; ``max_model_len`` caps it (finish "length"). Generated text is
``output_text(req)``: filler words whose ids the engine caches as the output's KV blocks, so a later turn that
sends the conversation back hits the prefix cache.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import math
from statistics import NormalDist
from typing import Any

from servelab.clock import Clock
from servelab.sim.api import SimRequest
from servelab.sim.deployment import Deployment
from servelab.sim.fidelity import fidelity
from servelab.sim.kvcache import KVCache, block_hashes
from servelab.sim.scheduler import PREFILL, WAITING, Scheduler, Seq
from servelab.sim.stepcost import EngineStep
from servelab.sim.tokenizer import filler_ids, filler_text, tokenize

LATENCY_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                     10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ND = NormalDist()
TRIM_OUT = 4096  # delivery times kept per replica before the ones no running request needs are dropped


class Histogram:
    """Cumulative-bucket histogram (Prometheus style): ``buckets`` upper bounds in seconds."""

    __slots__ = ("buckets", "counts", "sum", "count")

    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # last = +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, x: float, n: int = 1) -> None:
        self.counts[bisect.bisect_left(self.buckets, x)] += n
        self.sum += x * n
        self.count += n

    def snapshot(self) -> dict[str, Any]:
        cum, acc = [], 0
        for c in self.counts:
            acc += c
            cum.append(acc)
        return {"buckets": list(self.buckets), "cumulative_counts": cum, "sum": self.sum, "count": self.count}


def _mix(seed: int, rid: int) -> int:
    """splitmix64 of (seed, rid): a stable 64-bit value."""
    z = (seed * 0x9E3779B97F4A7C15 + rid + 0x632BE59BD9B4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


class _Replica:
    __slots__ = ("dep", "sched", "cost", "wake", "role", "steps", "busy_s", "compute_s", "memory_s", "comm_s",
                 "a2a_bytes", "imbalance", "cpu_s", "out_ends", "out_delivered")
    sched: Scheduler  # set by the Engine once the pool's KV cache is sized

    def __init__(self, dep: Deployment, role: str, seed: int, backend: Any = None) -> None:
        self.dep, self.role = dep, role
        self.cost = EngineStep(dep, seed=seed, backend=backend)
        self.wake = asyncio.Event()
        self.steps = 0
        self.busy_s = self.compute_s = self.memory_s = self.comm_s = self.a2a_bytes = self.cpu_s = 0.0
        self.imbalance = 1.0
        # Steps with tokens for clients in process: end time -> when the API server's core had written them.
        self.out_ends: list[int] = []
        self.out_delivered: list[int] = []


def imbalance_buckets(ep: int) -> tuple[float, ...]:
    """Upper bounds of the expert-imbalance histogram: 1 (balanced) up to ``ep`` (all load on one rank)."""
    steps = (
        1.0,
        1.05,
        1.1,
        1.2,
        1.3,
        1.5,
        1.75,
        2.0,
        2.5,
        3.0,
        4.0,
        6.0,
        8.0,
        12.0,
        16.0,
        32.0,
        64.0,
        128.0,
        256.0,
    )
    return tuple(sorted({x for x in steps if x < ep} | {float(max(ep, 1))}))


class Engine:
    """One simulated deployment (all replicas and pools)."""

    def __init__(self, deployment: Deployment, clock: Clock, seed: int = 0) -> None:
        self.dep = deployment
        self.clock = clock
        self.seed = seed
        self.vocab = deployment.model.vocab
        split = deployment.split()
        pools = [(split[0], "prefill"), (split[1], "decode")] if split else [(deployment, "mixed")]
        self.replicas: list[_Replica] = []
        for i, (dep, role) in enumerate(pools):
            backend = None
            for j in range(dep.dp):
                r = _Replica(dep, role, _mix(seed ^ 0x57E9, 1000 * i + j), backend)
                backend = r.cost.backend  # replicas of one pool share the backend (and its memo)
                assert dep.memory is not None
                kv = KVCache(dep.memory.kv_blocks, dep.block_size, dep.prefix_caching)
                r.sched = Scheduler(
                    kv, max_num_seqs=dep.sched_max_seqs, max_num_batched_tokens=dep.sched_max_tokens,
                    chunked_prefill=dep.chunked_prefill, spec_tokens=dep.spec_tokens,
                    spec_acceptance=dep.spec_acceptance, seed=_mix(seed, 1000 * i + j),
                    on_finish=functools.partial(self._finished, r),
                    on_prefilled=self._handoff if role == "prefill" else None,
                    reserve_full=bool(dep.profile and dep.profile.reserve_full),
                    max_model_len=dep.max_model_len)
                self.replicas.append(r)
        self.entry = [r for r in self.replicas if r.role != "decode"]
        self.decode_pool = [r for r in self.replicas if r.role == "decode"]
        self._task: asyncio.Task | None = None
        self._stopping = False
        self._active: dict[int, tuple[Seq, _Replica]] = {}
        self._pending: dict[int, Seq] = {}  # in the API server, not yet queued
        self.ttft = Histogram()
        self.itl = Histogram()
        self.queue = Histogram()
        self.e2e = Histogram()
        self.requests_finished: dict[str, int] = {}
        self.kv_transfer_s = 0.0
        self.imbalance_hist = Histogram(imbalance_buckets(max(d.ep for d, _ in pools)))
        self.backend = self.replicas[0].cost.name
        self.fidelity = fidelity(deployment, self.backend)
        prof = deployment.profile
        # The API server's one core (shared by every replica, as vLLM's one API-server process fronts all of
        # its engines): CPU ns per request and per output token, and when it is next free.
        self.fe_req_ns = int((prof.frontend_req_ms if prof else 0.0) * 1e6)
        self.fe_tok_ns = int((prof.frontend_tok_us if prof else 0.0) * 1e3)
        self.fe_free = 0
        self.fe_busy_ns = 0

    # ------------------------------------------------------------------ requests
    def tokenize(self, text: str) -> list[int]:
        return tokenize(text, self.vocab)

    def output_seed(self, req: SimRequest) -> int:
        return _mix(self.seed ^ 0x5EED, req.rid)

    def output_text(self, req: SimRequest) -> str:
        """The generated text of a finished request (``output_tokens`` filler words)."""
        return filler_text(req.output_tokens, self.output_seed(req))

    def natural_length(self, req: SimRequest) -> int:
        u = (_mix(self.seed, req.rid) >> 11) / float(1 << 53)
        z = _ND.inv_cdf(min(max(u, 1e-12), 1 - 1e-12))
        return max(1, round(self.dep.natural_median * math.exp(self.dep.natural_sigma * z)))

    def submit(self, req: SimRequest) -> None:
        """Queue ``req``; its ``done`` future (created if missing) resolves when it finishes."""
        loop = asyncio.get_running_loop()
        if req.done is None:
            req.done = loop.create_future()
        now = self.clock.now()
        if not req.arrival_ns:
            req.arrival_ns = now
        plen, mml = len(req.prompt_ids), self.dep.max_model_len
        if plen >= mml or plen == 0 or req.max_tokens < 1:
            req.error = (
                (
                    f"prompt has {plen} tokens; this model's maximum context length is {mml} tokens"
                    if plen
                    else "empty prompt"
                )
                if req.max_tokens >= 1
                else "max_tokens must be at least 1"
            )
            self._resolve(req, "error", now)
            return
        if req.ignore_eos:
            target, reason = req.max_tokens, "length"
        else:
            natural = max(self.natural_length(req), req.min_tokens)
            target, reason = (natural, "stop") if natural < req.max_tokens else (req.max_tokens, "length")
        if plen + target > mml:
            target, reason = mml - plen, "length"
        seq = Seq(req, target, reason)
        due = now + self.api_delay_ns(req, 0xA91)
        if req.on_tokens is None and self.fe_req_ns:  # its CPU work waits for the API server's core
            due = self._frontend(now, self.fe_req_ns) + due - now
        if due <= now:
            self._enqueue(seq)
        else:  # the engine's API server (HTTP, tokenization) before the scheduler sees the request
            self._pending[req.rid] = seq
            loop.create_task(self._enqueue_at(seq, due))

    def _frontend(self, t: int, work_ns: int) -> int:
        """Book ``work_ns`` of CPU on the API server's one core from ``t`` (first come, first served: every
        booking is made at its own time, in time order); returns when that work is done."""
        start = max(t, self.fe_free)
        self.fe_free = start + work_ns
        self.fe_busy_ns += work_ns
        return self.fe_free

    def api_delay_ns(self, req: SimRequest, salt: int) -> int:
        """Half of the per-request API-server time of the engine profile (the request side, salt 0xA91:
        HTTP and tokenization; the response side, salt 0xA92: detokenization and HTTP): lognormal with mean
        ``api_ms / 2``, seeded by (engine seed, request id). For a client in process, the part that is CPU
        work on the API server's core (one request's and one token's) is booked there instead and left out
        here. The response side also spreads clients that would otherwise send again in lockstep."""
        prof = self.dep.profile
        if prof is None or prof.api_ms <= 0:
            return 0
        ms = prof.api_ms
        if req.on_tokens is None:  # the API server's CPU work is booked on its core (``_frontend``)
            ms = max(0.0, ms - prof.frontend_req_ms - prof.frontend_tok_us * 1e-3)
        u = (_mix(self.seed ^ salt, req.rid) >> 11) / float(1 << 53)
        z = _ND.inv_cdf(min(max(u, 1e-12), 1 - 1e-12))
        # jitter=0: every request alike, exactly repeatable
        sig = prof.api_sigma if self.dep.jitter > 0 else 0.0
        return int(ms * 0.5e6 * math.exp(sig * z - sig * sig / 2))

    async def _enqueue_at(self, seq: Seq, due: int) -> None:
        await self.clock.sleep_until(due)
        if self._pending.pop(seq.req.rid, None) is not None:
            self._enqueue(seq)

    def _enqueue(self, seq: Seq) -> None:
        r = min(self.entry, key=lambda x: x.sched.load())
        self._active[seq.req.rid] = (seq, r)
        r.sched.add(seq)
        r.wake.set()

    def abort(self, rid: int) -> bool:
        """Stop request ``rid`` (client gone): frees its blocks, resolves it with finish_reason "abort"."""
        item = self._active.get(rid)
        if item is None:
            pend = self._pending.pop(rid, None)
            if pend is None:
                return False
            pend.req.output_tokens = 0
            self._resolve(pend.req, "abort", self.clock.now())
            return True
        s, r = item
        sched = r.sched
        if s in sched.waiting:
            sched.waiting.remove(s)
        elif s in sched.running:
            sched._preempt(s, self.clock.now())
            sched.waiting.remove(s)
            s.req.preemptions -= 1
            sched.preemptions -= 1
        s.state = WAITING
        self._active.pop(rid, None)
        s.req.output_tokens = s.out
        self._resolve(s.req, "abort", self.clock.now())
        return True

    def _resolve(self, req: SimRequest, reason: str, now: int) -> None:
        req.finish_reason = reason
        req.finish_ns = now
        self.requests_finished[reason] = self.requests_finished.get(reason, 0) + 1
        if req.done is not None and not req.done.done():
            req.done.set_result(req)

    def _finished(self, r: _Replica, s: Seq, now: int) -> None:
        req, sched = s.req, r.sched
        if sched.kv.prefix_caching and s.out > 1 and s.hashes is not None:
            self._cache_output(sched, s)
        engine_end = now
        req.output_tokens = s.out
        req.token_times_ns = sched.token_times(s)
        if r.out_ends and req.on_tokens is None:  # tokens left the API server when its core got to them
            req.token_times_ns = self._delivered(r, req.token_times_ns)
            if req.first_token_ns is not None:
                req.first_token_ns = self._delivered(r, [req.first_token_ns])[0]
            if req.token_times_ns:
                now = max(now, req.token_times_ns[-1])
        # The response side of the API server: a client in process sees every token (and the end) later by
        # one per-request delay. Streaming fronts deliver tokens as they come (their own I/O is the delay).
        shift = self.api_delay_ns(req, 0xA92) if req.on_tokens is None else 0
        if shift:
            req.token_times_ns = [t + shift for t in req.token_times_ns]
            if req.first_token_ns is not None:
                req.first_token_ns += shift
        now += shift
        first = req.first_token_ns if req.first_token_ns is not None else now
        # 0 is a valid virtual time, not "unset"; a step anchored on the engine's timeline (t_free) may start
        # up to 2 ms before a request that arrived as it began: that request was not waiting before it
        # arrived.
        t_sched = now if s.t_sched is None else max(s.t_sched, req.arrival_ns)
        req.queue_ns = t_sched - req.arrival_ns
        req.prefill_ns = first - t_sched
        req.decode_ns = now - first
        req.comm_ns = s.comm_ns
        self._active.pop(req.rid, None)
        self.ttft.observe((first - req.arrival_ns) / 1e9)
        self.queue.observe(req.queue_ns / 1e9)
        self.e2e.observe((now - req.arrival_ns) / 1e9)
        if now == engine_end:
            self._resolve(req, s.reason, now)
        else:
            asyncio.get_running_loop().create_task(self._resolve_at(req, s.reason, now))

    @staticmethod
    def _delivered(r: _Replica, times: list[int]) -> list[int]:
        """When the tokens of ``r``'s steps that ended at ``times`` (ascending) left the API server."""
        if not times:
            return times
        ends, dl = r.out_ends, r.out_delivered
        i = bisect.bisect_left(ends, times[0])
        k = len(times)
        if ends[i:i + k] == times:  # one token per recorded step, the common case: one slice
            return dl[i:i + k]
        out, n = [], len(ends)
        for t in times:
            while i < n and ends[i] < t:
                i += 1
            out.append(dl[i] if i < n and ends[i] == t else t)
        return out

    def _stream_out(self, r: _Replica, b: Any, now: int) -> None:
        """Book the step's output tokens of clients in process on the API server's core (detokenize and
        write each, the step's outputs as one batch, as vLLM's output handler takes them); the step's tokens
        leave when that batch is done."""
        sched = r.sched
        n = (b.n_dec - len(sched.streaming)) * b.inc
        n += sum(1 for s, k in b.prefills
                 if s.state == PREFILL and s.computed + k >= s.known and s.req.on_tokens is None)
        if n <= 0:
            return
        done = self._frontend(now, n * self.fe_tok_ns)
        if r.out_ends and r.out_ends[-1] == now:  # a zero-time step: one batch with the step before
            r.out_delivered[-1] = done
            return
        if len(r.out_ends) >= TRIM_OUT:
            self._trim_out(r)
        r.out_ends.append(now)
        r.out_delivered.append(done)

    def _trim_out(self, r: _Replica) -> None:
        """Forget delivery times of steps before every request still running on ``r`` arrived."""
        oldest = min((s.req.arrival_ns for s, x in self._active.values() if x is r), default=self.clock.now())
        cut = bisect.bisect_left(r.out_ends, oldest)
        del r.out_ends[:cut], r.out_delivered[:cut]

    async def _resolve_at(self, req: SimRequest, reason: str, t: int) -> None:
        await self.clock.sleep_until(t)
        self._resolve(req, reason, t)

    def _cache_output(self, sched: Scheduler, s: Seq) -> None:
        """Register the full blocks of generated tokens (KV computed) so a follow-up turn can hit them."""
        bs = sched.bs
        first = s.plen // bs
        last = min(s.computed, s.plen + s.out) // bs
        if last <= first or not s.hashes or len(s.hashes) < first:
            return
        ids = filler_ids(s.out, self.output_seed(s.req), self.vocab).tolist()
        tail = list(s.prompt[first * bs:]) + ids
        parent = s.hashes[first - 1] if first else 0
        for h in block_hashes(tail[:(last - first) * bs], bs, parent):
            if sched.kv.register(h):
                s.held.append(h)

    def _handoff(self, s: Seq, now: int) -> bool:
        """Disaggregation: ship a prefilled sequence's KV to the least-loaded decode replica."""
        dst = min(self.decode_pool, key=lambda x: x.sched.load())
        dep = self.dep
        m = dep.model
        nbytes = s.computed * m.layers * m.kv_values_per_token_layer * (1 if dep.kv_dtype == "fp8" else 2)
        hw = dep.hardware
        bw = (hw.scaleout_gbps or 3.125) * 1e9 * dep.family.comm_eff * max(1, dep.tp)
        delay = hw.scaleout_latency_us * 1e-6 + nbytes / bw
        self.kv_transfer_s += delay
        s.req.comm_ns += int(delay * 1e9)
        s.state, s.remote_kv = WAITING, True

        def arrive() -> None:
            self._active[s.req.rid] = (s, dst)
            dst.sched.add(s)
            dst.wake.set()

        asyncio.get_running_loop().call_later(delay, arrive)
        return True

    # ------------------------------------------------------------------ the step loop
    async def run(self) -> None:
        await asyncio.gather(*(self._loop(r) for r in self.replicas))

    async def _loop(self, r: _Replica) -> None:
        clock, sched, cost = self.clock, r.sched, r.cost
        t_free = clock.now()
        while not self._stopping:
            if not sched.has_work():
                r.wake.clear()
                await r.wake.wait()
                t_free = clock.now()  # after idling, the next step starts now, never before the arrival
                continue
            wall = clock.now()
            # Back-to-back steps follow the engine's own timeline; timers that fire early or late by up to
            # 2 ms (uvloop rounds to 1 ms) do not drift it. After idling, start from now.
            t0 = t_free if wall - t_free < 2_000_000 else wall
            b = sched.schedule(t0)
            if b.empty:  # admitted straight to decode (disaggregated), or the head can never fit
                if not sched.running and sched.waiting:
                    self._reject_head(r, t0)
                continue
            c = cost.step(b.n_dec, b.ctx_dec, b.p_tok, b.p_pairs, b.p_ctx, len(sched.running))
            end = t0 + int(c.time_s * 1e9)
            await clock.sleep_until(end)
            while end - clock.now() > 1_000_000:  # woke early by more than a timer tick
                await clock.sleep_until(end)
            now = t_free = max(clock.now(), end) if clock.now() - end >= 2_000_000 else end
            r.steps += 1
            r.busy_s += c.time_s
            r.compute_s += c.compute_s
            r.memory_s += c.memory_s
            r.comm_s += c.comm_s
            r.a2a_bytes += c.a2a_bytes
            r.imbalance = c.imbalance
            r.cpu_s += c.cpu_s
            self.imbalance_hist.observe(c.imbalance)
            if b.n_dec:
                self.itl.observe(c.time_s, b.n_dec)
                if b.inc > 1:
                    self.itl.observe(0.0, b.n_dec * (b.inc - 1))
            if self.fe_tok_ns:
                self._stream_out(r, b, now)
            sched.complete(b, now, int(c.comm_s * 1e9))

    def _reject_head(self, r: _Replica, now: int) -> None:
        """Nothing could be scheduled with nothing running: the head request can never fit the KV cache."""
        s = r.sched.waiting.popleft()
        s.req.error = (f"request needs {s.known} tokens of KV cache but the cache holds "
                       f"{r.sched.kv.capacity * r.sched.bs} tokens")
        # Tokens it produced before it was preempted for good: the HTTP front streamed them already.
        s.req.output_tokens = s.out
        s.req.token_times_ns = r.sched.token_times(s)
        self._active.pop(s.req.rid, None)
        self._resolve(s.req, "error", now)

    def start(self) -> asyncio.Task:
        """Start the step loop on the running event loop (idempotent)."""
        if self._task is None or self._task.done():
            self._stopping = False
            self._task = asyncio.get_running_loop().create_task(self.run())
            self._task.add_done_callback(self._loop_ended)
        return self._task

    def _loop_ended(self, task: asyncio.Task) -> None:
        """A crashed step loop must not leave requests waiting forever: fail them with its error."""
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        for rid in list(self._active):
            s, _ = self._active.pop(rid)
            if s.req.done is not None and not s.req.done.done():
                s.req.done.set_exception(exc)

    async def stop(self) -> None:
        """Stop the loop; requests still in flight resolve with finish_reason "abort"."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for rid in list(self._active) + list(self._pending):
            self.abort(rid)

    # ------------------------------------------------------------------ metrics
    def stats(self) -> dict[str, Any]:
        rs = self.replicas
        kvs = [r.sched.kv for r in rs]
        return {
            "running": sum(len(r.sched.running) for r in rs),
            "waiting": sum(len(r.sched.waiting) for r in rs),
            "kv_usage": sum(k.usage() for k in kvs) / len(kvs),
            "kv_blocks_total": sum(k.capacity for k in kvs),
            "preemptions_total": sum(r.sched.preemptions for r in rs),
            "kv_evicted_blocks_total": sum(k.evictions for k in kvs),
            "prefix_cache_queries_tokens": sum(k.queries for k in kvs),
            "prefix_cache_hits_tokens": sum(k.hits for k in kvs),
            "prompt_tokens_total": sum(r.sched.prompt_tokens for r in rs),
            "generation_tokens_total": sum(r.sched.generation_tokens for r in rs),
            "steps_total": sum(r.steps for r in rs),
            "busy_seconds_total": sum(r.busy_s for r in rs),
            "step_compute_seconds_total": sum(r.compute_s for r in rs),
            "step_memory_seconds_total": sum(r.memory_s for r in rs),
            "step_comm_seconds_total": sum(r.comm_s for r in rs),
            "kv_transfer_seconds_total": self.kv_transfer_s,
            "expert_imbalance": max(r.imbalance for r in rs),
            "expert_imbalance_ratio": self.imbalance_hist.snapshot(),
            "step_cpu_seconds_total": sum(r.cpu_s for r in rs),
            "frontend_cpu_seconds_total": self.fe_busy_ns / 1e9,
            "cost_backend": self.backend,
            "all_to_all_bytes_total": sum(r.a2a_bytes for r in rs),
            "requests_finished": dict(self.requests_finished),
            "ttft_seconds": self.ttft.snapshot(),
            "itl_seconds": self.itl.snapshot(),
            "queue_seconds": self.queue.snapshot(),
            "e2e_seconds": self.e2e.snapshot(),
        }
