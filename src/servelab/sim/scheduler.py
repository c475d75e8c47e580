"""Continuous-batching scheduler (vLLM v1-like) for one engine replica.

Each step: running decodes first (one token each, plus speculative drafts), then running prefills and then
waiting requests (FCFS) as chunks within the remaining ``max_num_batched_tokens`` budget, up to
``max_num_seqs`` running. When blocks run out the newest running request is preempted (recompute: its blocks
are freed and it waits at the head of the queue). No new request is admitted in a step that preempted.

Decoding sequences advance together, so they are kept as a cohort with O(1) work per step: a global count of
decode tokens ``dtok`` (and the time each was produced), per-sequence offsets, block-boundary phases bucketed
by ``(slots - dtok) % block_size``, and a heap of finish points. Per-sequence work happens only on admission,
prefill chunks, preemption and finish; token times are sliced from the global list at finish.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable

from servelab.sim.api import SimRequest
from servelab.sim.kvcache import KVCache, block_hashes

WAITING, PREFILL, DECODE, DONE = 0, 1, 2, 3
TRIM_EVERY = 4096  # decode-token times kept before the oldest unneeded ones are dropped


class Seq:
    """Scheduler state of one request."""

    __slots__ = ("req", "prompt", "plen", "target", "reason", "hashes", "held", "blocks", "computed", "out",
                 "state", "off", "dtok0", "out0", "ver", "times", "t_sched", "t_preempt", "remote_kv",
                 "comm0", "comm_ns", "reg_upto", "admit_fail", "reserve")

    def __init__(self, req: SimRequest, target: int, reason: str) -> None:
        self.req = req
        self.prompt = req.prompt_ids
        self.plen = len(req.prompt_ids)
        self.target = target
        self.reason = reason
        self.hashes: list[int] | None = None
        self.held: list[int] = []  # registered block hashes this sequence references
        self.blocks = 0  # blocks held while not decoding (derived from slots while decoding)
        self.computed = 0
        self.out = 0
        self.state = WAITING
        self.off = 0  # slots - dtok while decoding
        self.dtok0 = 0
        self.out0 = 0
        self.ver = 0
        self.times: list[int] = []  # token times so far (decode runs copied out when the sequence leaves)
        self.t_sched: int | None = None
        self.t_preempt: int | None = None
        self.remote_kv = False  # KV arrives from a prefill pool (disaggregated): admit straight to decode
        self.comm0 = 0
        self.comm_ns = 0
        self.reg_upto = 0  # prompt blocks already offered to the prefix cache
        self.admit_fail: tuple[int, int] | None = None  # (KV release epoch, blocks) of a failed admission
        self.reserve = 0  # blocks set aside for the whole request while running (reserve_full)

    @property
    def known(self) -> int:
        return self.plen + self.out


class Batch:
    __slots__ = ("n_dec", "ctx_dec", "inc", "prefills", "p_tok", "p_pairs", "p_ctx")

    def __init__(self) -> None:
        self.n_dec = 0
        self.ctx_dec = 0
        self.inc = 1
        self.prefills: list[tuple[Seq, int]] = []
        self.p_tok = 0
        self.p_pairs = 0
        self.p_ctx = 0

    @property
    def empty(self) -> bool:
        return self.n_dec == 0 and not self.prefills


class Scheduler:
    """Admission, batching, KV blocks and preemption; the engine times the steps."""

    def __init__(
        self,
        kv: KVCache,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        chunked_prefill: bool = True,
        spec_tokens: int = 0,
        spec_acceptance: float = 0.0,
        seed: int = 0,
        on_finish: Callable[[Seq, int], None] | None = None,
        on_prefilled: Callable[[Seq, int], bool] | None = None,
        reserve_full: bool = False,
        max_model_len: int = 0,
    ) -> None:
        self.kv = kv
        self.bs = kv.block_size
        self.max_num_seqs = max_num_seqs
        self.max_batched = max_num_batched_tokens
        self.chunked = chunked_prefill
        self.spec_tokens = spec_tokens
        self.spec_acc = spec_acceptance
        self.rng = random.Random(seed)
        self.on_finish = on_finish
        self.on_prefilled = on_prefilled  # returns True when it takes the sequence (disaggregation)
        # reserve_full: admit a request only when the blocks of its whole length (prompt + max_tokens) fit
        # beside the reservations of the running ones, so nothing is ever preempted (TensorRT-LLM's default
        # capacity policy, GUARANTEED_NO_EVICT); otherwise blocks are taken as tokens arrive and the newest
        # running request is preempted when they run out (vLLM, SGLang).
        self.reserve_full = reserve_full
        self.max_model_len = max_model_len
        self.reserved = 0
        self.waiting: deque[Seq] = deque()
        self.running: dict[Seq, None] = {}  # admission order
        self.n_decoding = 0
        self.phase = [0] * self.bs
        self.sum_off = 0
        self.heap: list[tuple[int, int, int, Seq]] = []
        self._tie = 0
        self.dtok = 0  # decode tokens produced per decoding sequence so far
        # Time of decode token ``tok_base + i`` is ``tok_times[i]``; entries older than every decoding
        # sequence's start are dropped (bounded state in a long-running server).
        self.tok_times: list[int] = []
        self.tok_base = 0
        self._trim_at = TRIM_EVERY
        self.comm_total = 0  # cumulative communication ns of decode steps
        self.streaming: set[Seq] = set()
        self.preemptions = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0

    # ------------------------------------------------------------------ queue
    def add(self, seq: Seq) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.running) or bool(self.waiting)

    def load(self) -> int:
        return len(self.running) + len(self.waiting)

    # ------------------------------------------------------------------ decode cohort
    def _join(self, s: Seq) -> None:
        s.state = DECODE
        s.off = s.computed - self.dtok
        s.dtok0, s.out0 = self.dtok, s.out
        self.phase[s.off % self.bs] += 1
        self.sum_off += s.off
        self.n_decoding += 1
        s.ver += 1
        self._tie += 1
        heapq.heappush(self.heap, (self.dtok + s.target - s.out, self._tie, s.ver, s))
        s.comm0 = self.comm_total
        if s.req.on_tokens is not None:
            self.streaming.add(s)

    def _leave(self, s: Seq, upto: int) -> None:
        """Stop decoding at global decode index ``upto``: materialize counts and blocks."""
        self.phase[s.off % self.bs] -= 1
        self.sum_off -= s.off
        self.n_decoding -= 1
        s.ver += 1
        produced = upto - s.dtok0
        a = s.dtok0 - self.tok_base
        s.times.extend(self.tok_times[a:a + min(produced, s.target - s.out0)])
        s.out = min(s.out0 + produced, s.target)
        s.computed = s.off + upto
        s.blocks = -(-s.computed // self.bs)
        s.comm_ns += self.comm_total - s.comm0
        self.streaming.discard(s)

    # ------------------------------------------------------------------ blocks
    def _release(self, s: Seq) -> None:
        self.kv.release(s.held, s.blocks - len(s.held))
        s.held = []
        s.blocks = 0

    def _reservation(self, s: Seq) -> int:
        """Blocks of ``s``'s whole length: the prompt and every token it may generate (0: no reservation)."""
        if not self.reserve_full:
            return 0
        n = s.plen + max(s.req.max_tokens, s.target)
        if self.max_model_len:
            n = min(n, max(self.max_model_len, s.plen + s.target))
        return -(-n // self.bs)

    def _unreserve(self, s: Seq) -> None:
        self.reserved -= s.reserve
        s.reserve = 0

    def _preempt(self, s: Seq, now: int) -> None:
        if s.state == DECODE:
            self._leave(s, self.dtok)
        del self.running[s]
        self._unreserve(s)
        self._release(s)
        s.computed = 0
        s.state = WAITING
        s.t_preempt = now
        s.req.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(s)

    def _decode_need(self, inc: int) -> int:
        ph, bs, d = self.phase, self.bs, self.dtok
        return sum(ph[(-d - j) % bs] for j in range(inc))

    # ------------------------------------------------------------------ schedule
    def schedule(self, now: int) -> Batch:
        b = Batch()
        budget = self.max_batched
        preempted = False
        inc = 1
        if self.spec_tokens and self.n_decoding:
            while inc <= self.spec_tokens and self.rng.random() < self.spec_acc:
                inc += 1
        if self.n_decoding:
            need = self._decode_need(inc)
            while need > self.kv.available() and self.running:
                self._preempt(next(reversed(self.running)), now)
                preempted = True
                need = self._decode_need(inc)
            if need and not self.kv.allocate(need):
                raise AssertionError("decode allocation failed after preemption")
        b.n_dec, b.inc = self.n_decoding, inc
        b.ctx_dec = self.sum_off + self.n_decoding * (self.dtok + inc)
        budget -= self.n_decoding * (1 + self.spec_tokens)
        # Running prefills (admission order), then waiting requests.
        for s in list(self.running):
            if s.state != PREFILL or budget <= 0:
                continue
            if s not in self.running:
                continue
            n = min(s.known - s.computed, budget)
            extra = -(-(s.computed + n) // self.bs) - s.blocks
            while not self.kv.allocate(extra):
                victim = next(reversed(self.running))
                self._preempt(victim, now)
                preempted = True
                if victim is s:
                    break
            if s.state != PREFILL:
                continue
            s.blocks += extra
            budget -= n
            self._add_chunk(b, s, n)
        if not preempted:
            budget = self._admit(b, budget, now)
        return b

    def _add_chunk(self, b: Batch, s: Seq, n: int) -> None:
        b.prefills.append((s, n))
        b.p_tok += n
        b.p_pairs += n * (s.computed + (n + 1) // 2)
        b.p_ctx += s.computed + n

    def _admit(self, b: Batch, budget: int, now: int) -> int:
        kv, bs = self.kv, self.bs
        while self.waiting and len(self.running) < self.max_num_seqs:
            s = self.waiting[0]
            need = self._reservation(s)
            if need and self.reserved + need > kv.capacity:
                break  # its whole length does not fit beside the running requests' reservations
            if s.remote_kv:  # disaggregated: KV computed elsewhere, needs blocks only
                nb = -(-s.computed // bs)
                if not kv.allocate(nb):
                    break
                self.reserved += need
                s.reserve = need
                self.waiting.popleft()
                s.blocks, s.remote_kv = nb, False
                self.running[s] = None
                self._mark_sched(s, now)
                self._join(s)
                continue
            if budget <= 0:
                break
            if s.admit_fail is not None and s.admit_fail[0] == kv.epoch and budget >= s.admit_fail[1]:
                break  # failed with at least this budget and nothing was freed since: it fails again
            hit = 0
            if kv.prefix_caching:
                if s.hashes is None:
                    s.hashes = block_hashes(s.prompt, bs)
                hit = min(kv.match(s.hashes), (s.known - 1) // bs)
            todo = s.known - hit * bs
            if not self.chunked and todo > budget:
                break
            n = min(todo, budget)
            extra = -(-(hit * bs + n) // bs) - hit
            # Referencing cached blocks takes the unreferenced ones out of the evictable pool: check the
            # room first instead of acquiring and releasing thousands of blocks on every failed attempt.
            revive = kv.unreferenced(s.hashes[:hit]) if hit else 0  # type: ignore[index]
            if kv.available() - revive < extra:
                s.admit_fail = (kv.epoch, budget)
                break
            if hit:
                kv.acquire(s.hashes[:hit])  # type: ignore[index]
            if not kv.allocate(extra):
                raise AssertionError("allocation failed after the room check")
            s.admit_fail = None
            self.reserved += need
            s.reserve = need
            self.waiting.popleft()
            kv.queries += s.known
            kv.hits += hit * bs
            s.held = list(s.hashes[:hit]) if hit else []  # type: ignore[index]
            s.blocks = hit + extra
            s.computed = hit * bs
            s.reg_upto = hit
            if s.t_sched is None:
                s.req.cached_tokens = hit * bs
            s.state = PREFILL
            self.running[s] = None
            self._mark_sched(s, now)
            budget -= n
            self._add_chunk(b, s, n)
        return budget

    def _mark_sched(self, s: Seq, now: int) -> None:
        if s.t_sched is None:
            s.t_sched = now
        if s.t_preempt is not None:
            s.req.preempted_ns += now - s.t_preempt
            s.t_preempt = None

    # ------------------------------------------------------------------ apply
    def complete(self, b: Batch, now: int, comm_ns: int) -> None:
        """Apply the outcome of batch ``b`` whose step ended at ``now``."""
        if b.n_dec:
            inc = b.inc
            self.dtok += inc
            self.tok_times.extend([now] * inc)
            self.comm_total += comm_ns
            if len(self.tok_times) >= self._trim_at:
                self._trim()
            self.generation_tokens += b.n_dec * inc
            for s in list(self.streaming):
                s.req.on_tokens(min(inc, s.target - s.out0 - (self.dtok - inc - s.dtok0)), now)  # type: ignore[misc]
            heap = self.heap
            while heap and heap[0][0] <= self.dtok:
                _, _, ver, s = heapq.heappop(heap)
                if ver != s.ver or s.state != DECODE:
                    continue
                self._leave(s, self.dtok)
                self._finish(s, now)
        for s, n in b.prefills:
            if s.state != PREFILL:
                continue
            s.computed += n
            s.comm_ns += comm_ns
            self.prompt_tokens += n
            if self.kv.prefix_caching and s.hashes:
                full = min(s.computed, s.plen) // self.bs
                for h in s.hashes[s.reg_upto:full]:
                    if self.kv.register(h):
                        s.held.append(h)
                s.reg_upto = max(s.reg_upto, full)
            if s.computed < s.known:
                continue
            s.out += 1  # the step that completes a prefill samples one token
            self.generation_tokens += 1
            s.times.append(now)
            if s.req.first_token_ns is None:
                s.req.first_token_ns = now
            if s.req.on_tokens is not None:
                s.req.on_tokens(1, now)
            if s.out >= s.target:
                self._finish(s, now)
            elif self.on_prefilled is not None:  # disaggregated: the KV leaves for a decode pool
                del self.running[s]
                self._unreserve(s)
                self._release(s)
                self.on_prefilled(s, now)
            else:
                self._join(s)

    def _finish(self, s: Seq, now: int) -> None:
        s.state = DONE
        self.running.pop(s, None)
        self._unreserve(s)
        if self.on_finish is not None:
            self.on_finish(s, now)  # may register output blocks before release
        self._release(s)

    def token_times(self, s: Seq) -> list[int]:
        """Token times of a sequence that is not decoding (finished, waiting or failed)."""
        return s.times

    def _trim(self) -> None:
        """Drop decode-token times no decoding sequence can still need."""
        start = min((s.dtok0 for s in self.running if s.state == DECODE), default=self.dtok)
        cut = start - self.tok_base
        if cut > 0:
            del self.tok_times[:cut]
            self.tok_base = start
        self._trim_at = len(self.tok_times) + TRIM_EVERY
