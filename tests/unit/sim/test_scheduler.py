"""Hand-worked scheduler cases: budget split, chunked prefill, preemption, prefix hits, eviction order."""

from __future__ import annotations

from servelab.sim.api import SimRequest
from servelab.sim.kvcache import KVCache
from servelab.sim.scheduler import DECODE, DONE, PREFILL, WAITING, Scheduler, Seq


def seq(rid: int, prompt: list[int], target: int) -> Seq:
    return Seq(SimRequest(rid=rid, prompt_ids=prompt, max_tokens=target), target, "length")


def make(blocks: int = 1000, bs: int = 4, caching: bool = False, **kw) -> Scheduler:
    kw.setdefault("max_num_seqs", 16)
    kw.setdefault("max_num_batched_tokens", 10)
    return Scheduler(KVCache(blocks, bs, caching), **kw)


def step(s: Scheduler, t: int):
    b = s.schedule(t)
    s.complete(b, t + 1, 0)
    return b


def test_decodes_first_then_prefill_chunks_within_the_token_budget():
    s = make()
    a, b = seq(1, list(range(4)), 10), seq(2, list(range(100, 104)), 10)
    s.add(a)
    s.add(b)
    first = step(s, 0)
    assert [n for _, n in first.prefills] == [4, 4] and first.n_dec == 0
    assert a.state == b.state == DECODE and a.out == b.out == 1
    c = seq(3, list(range(200, 220)), 5)
    s.add(c)
    second = step(s, 10)
    assert second.n_dec == 2 and [n for _, n in second.prefills] == [8]  # 10 - 2 decodes
    third = step(s, 20)
    assert third.n_dec == 2 and [n for _, n in third.prefills] == [8]
    assert c.state == PREFILL and c.computed == 16
    fourth = step(s, 30)
    assert fourth.n_dec == 2 and [n for _, n in fourth.prefills] == [4]
    assert c.state == DECODE and c.out == 1 and c.req.first_token_ns == 31


def test_prefill_not_chunked_waits_for_a_whole_prompt_budget():
    s = make(chunked_prefill=False, max_num_batched_tokens=20)
    a, b = seq(1, list(range(12)), 3), seq(2, list(range(50, 62)), 3)
    s.add(a)
    s.add(b)
    first = step(s, 0)
    assert [x.req.rid for x, _ in first.prefills] == [1]  # 12 + 12 > 20: b waits whole
    assert b.state == WAITING


def test_finish_gives_one_time_per_token_and_frees_blocks():
    s = make(blocks=100)
    a = seq(1, list(range(6)), 5)
    s.add(a)
    for t in range(0, 50, 10):
        step(s, t)
    assert a.state == DONE and a.out == 5
    assert s.token_times(a) == [1, 11, 21, 31, 41]
    assert s.kv.used() == 0 and s.kv.available() == 100


def test_preemption_recomputes_the_newest_request_when_blocks_run_out():
    s = make(blocks=6, bs=4, max_num_batched_tokens=64)
    a, b = seq(1, list(range(8)), 50), seq(2, list(range(100, 108)), 50)
    s.add(a)
    s.add(b)
    step(s, 0)  # both prompts: 2 blocks each; both sample their first token
    assert s.kv.available() == 2
    step(s, 10)  # slot 9 needs a third block each: 6 used
    assert s.kv.available() == 0 and s.preemptions == 0
    for t in range(20, 60, 10):  # slots 10-12 fit; slot 13 needs a 4th block each
        step(s, t)
    assert s.preemptions == 1 and b.state == WAITING and a.state == DECODE
    assert b.req.preemptions == 1 and b.out == 5 and b.blocks == 0
    assert list(s.waiting) == [b]


def test_prefix_hits_on_a_shared_prefix_count_tokens():
    s = make(blocks=100, bs=4, caching=True, max_num_batched_tokens=64)
    shared = list(range(16))
    a = seq(1, shared + [900, 901, 902], 1)
    s.add(a)
    step(s, 0)
    assert a.state == DONE
    b = seq(2, shared + [700, 701], 1)
    s.add(b)
    batch = step(s, 10)
    assert b.req.cached_tokens == 16 and [n for _, n in batch.prefills] == [2]
    assert s.kv.queries == 19 + 18 and s.kv.hits == 16
    c = seq(3, shared, 1)  # fully cached prompt: the last block is recomputed
    s.add(c)
    step(s, 20)
    assert c.req.cached_tokens == 12


def test_eviction_frees_least_recently_released_blocks_tail_first():
    kv = KVCache(4, 4, True)
    assert kv.allocate(2)
    assert kv.register(11) and kv.register(12)
    kv.release([11, 12], 0)  # tail first into the LRU: 12 then 11
    assert list(kv.lru) == [12, 11]
    assert kv.allocate(3)  # 2 free + evict one: the tail block 12
    assert 12 not in kv.ref and 11 in kv.ref and kv.match([11, 12]) == 1
    assert kv.evictions == 1
    assert not kv.allocate(2)  # 1 evictable left


def test_prefix_cache_off_never_hits():
    s = make(blocks=100, caching=False, max_num_batched_tokens=64)
    for rid in (1, 2):
        x = seq(rid, list(range(16)), 1)
        s.add(x)
        step(s, rid * 10)
        assert x.req.cached_tokens == 0
    assert s.kv.hits == 0


def test_max_num_seqs_caps_running():
    s = make(max_num_seqs=2, max_num_batched_tokens=100)
    xs = [seq(i, [i] * 4, 10) for i in range(4)]
    for x in xs:
        s.add(x)
    step(s, 0)
    assert len(s.running) == 2 and len(s.waiting) == 2


def test_reserve_full_admits_only_what_fits_to_the_end_and_never_preempts():
    # 10 blocks of 4 tokens; requests of 8 prompt + 8 output tokens need 4 blocks each by the end.
    # Reserving the whole length (TensorRT-LLM's GUARANTEED_NO_EVICT) admits floor(10 / 4) = 2 of 3;
    # on demand (vLLM) all 3 start (2 prompt blocks each) and one is preempted when decode blocks run out.
    def run(reserve: bool) -> tuple[int, int]:
        s = make(blocks=10, max_num_batched_tokens=100, reserve_full=reserve)
        for i in range(3):
            s.add(seq(i + 1, list(range(10 * i, 10 * i + 8)), 8))
        most = 0
        for t in range(0, 400, 10):
            step(s, t)
            most = max(most, len(s.running))
            if not s.has_work():
                break
        assert not s.has_work() and s.reserved == 0
        return most, s.preemptions

    assert run(True) == (2, 0)
    most, preemptions = run(False)
    assert most == 3 and preemptions >= 1
