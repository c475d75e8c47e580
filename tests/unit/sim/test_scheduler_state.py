"""Bounded scheduler state in a long-running engine, and admission without block churn."""

from __future__ import annotations

from servelab.sim.api import SimRequest
from servelab.sim.kvcache import KVCache
from servelab.sim.scheduler import TRIM_EVERY, Scheduler, Seq
from servelab.sim.tokenizer import IncrementalTokenizer, filler_text, tokenize


def seq(rid: int, prompt: list[int], target: int) -> Seq:
    return Seq(SimRequest(rid=rid, prompt_ids=prompt, max_tokens=target), target, "length")


def test_per_step_state_stays_bounded_and_token_times_stay_exact():
    s = Scheduler(KVCache(10_000, 16, False), max_num_seqs=8, max_num_batched_tokens=64)
    done: list[Seq] = []
    s.on_finish = lambda q, now: done.append(q)
    rid, t = 0, 0
    for _ in range(60):  # 60 waves of 8 requests of 500 tokens: 30,000 decode steps
        for _ in range(8):
            rid += 1
            s.add(seq(rid, [rid] * 8, 500))
        while s.has_work():
            t += 10
            s.complete(s.schedule(t), t, 0)
    assert s.dtok > 25_000
    assert len(s.tok_times) < 2 * TRIM_EVERY  # was one entry per decode step, forever
    assert len(done) == 480
    for q in done:
        times = s.token_times(q)
        assert len(times) == 500 and times == sorted(times) and len(set(times)) == 500


class CountingKV(KVCache):
    __slots__ = ("acquired",)

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.acquired = 0

    def acquire(self, hashes) -> None:
        self.acquired += len(hashes)
        super().acquire(hashes)


def test_a_head_that_cannot_fit_is_not_acquired_and_released_every_step():
    kv = CountingKV(200, 16, True)
    s = Scheduler(kv, max_num_seqs=8, max_num_batched_tokens=4096)
    prompt = list(range(1600))  # 100 blocks
    a = seq(1, prompt, 2000)  # decodes for a long time and holds the cache
    s.add(a)
    t = 0
    for _ in range(3):
        t += 1
        s.complete(s.schedule(t), t, 0)
    # A second request sharing the 100-block prefix plus 150 blocks of its own: more than what is left.
    b = seq(2, prompt + list(range(5000, 5000 + 2400)), 10)
    s.add(b)
    before = kv.acquired
    for _ in range(500):
        t += 1
        s.complete(s.schedule(t), t, 0)
    assert b in s.waiting
    assert kv.acquired - before == 0  # the old loop acquired (and released) 100 cached blocks per step


def test_incremental_tokenizer_equals_whole_text_and_splits_only_the_new_turn():
    tok = IncrementalTokenizer()
    convo = filler_text(3000, 1)
    assert tok.tokenize("s1", convo) == tokenize(convo)
    n0 = tok.words_split
    convo2 = convo + " " + filler_text(40, 2)
    assert tok.tokenize("s1", convo2) == tokenize(convo2)
    assert tok.words_split - n0 == 40
    # a cut inside a word is not a token boundary: the whole text is tokenized again
    assert tok.tokenize("s1", convo2 + "xyz") == tokenize(convo2 + "xyz")
    assert tok.tokenize("s2", "other text") == tokenize("other text")
    assert tok.tokenize(None, convo) == tokenize(convo)
    small = IncrementalTokenizer(max_keys=2)
    for k in range(5):
        small.tokenize(k, "a b")
    assert len(small._last) == 2
