import math

import pytest

from servelab.errors import TargetError
from servelab.sim.tokenizer import tokenize
from servelab.workload.prompts import LEAD_WORDS, PromptSynthesizer, _base_words
from servelab.workload.tokens import EstimateCounter, LocalTokenizerCounter, ServerCounter


async def sim_count(text: str) -> int:
    return len(tokenize(text))


def _bpe_file(tmp_path, *, metaspace: bool) -> str:
    """A small BPE trained on the synthesizer's own words (vocab 300: most words split into pieces),
    with a BOS token like Llama's, saved as tokenizer.json."""
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    if metaspace:  # SentencePiece style ("▁word")
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        trainer = trainers.BpeTrainer(vocab_size=300, show_progress=False, special_tokens=["<s>", "<unk>"])
    else:  # GPT style byte-level
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False, special_tokens=["<s>", "<unk>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([" ".join(_base_words())] * 2, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return str(path)


async def test_hits_target_exactly_with_the_sim_tokenizer_and_never_calls_after_calibration():
    counter = ServerCounter(sim_count)
    synth = PromptSynthesizer(counter, seed=1)
    cal = await synth.calibrate()
    assert cal.source == "server" and cal.probe_error == 0.0
    calls = counter.calls
    assert calls <= len(_base_words()) + LEAD_WORDS + 4
    for target in (1, 3, 17, 128, 512, 4000):
        for i in range(20):
            p = synth.build(target, index=i)
            assert len(tokenize(p.text)) == target == p.tokens
    assert counter.calls == calls
    assert await synth.calibrate() is cal  # idempotent, no new calls
    assert counter.calls == calls


@pytest.mark.parametrize("metaspace", [False, True], ids=["bytelevel", "metaspace"])
async def test_local_bpe_tokenizer_hits_target(tmp_path, metaspace):
    counter = LocalTokenizerCounter.load(_bpe_file(tmp_path, metaspace=metaspace))
    assert counter.count_now("hello world") > 2  # the tiny vocabulary really splits words
    synth = PromptSynthesizer(counter, seed=5)
    cal = await synth.calibrate()
    assert cal.source == "local"
    for target in (16, 100, 512, 2000):
        for i in range(10):
            p = synth.build(target, index=i)
            n = counter.count_now(p.text)
            assert abs(n - target) <= max(1, 0.01 * target), (target, n)
            assert p.tokens == n
    # As continuation text (after a shared prefix), counted the same way the planner joins it.
    p = synth.build(300, index=3, lead=False)
    assert counter.count_now("the " + p.text) - counter.count_now("the") == 300


async def test_non_additive_server_counter_within_two_percent_without_per_prompt_calls():
    async def chars_over_4(text: str) -> int:
        return math.ceil(len(text) / 4)

    counter = ServerCounter(chars_over_4)
    synth = PromptSynthesizer(counter, seed=2)
    await synth.calibrate()
    calls = counter.calls
    for target in (256, 512, 4000):
        for i in range(50):
            p = synth.build(target, index=i)
            assert abs(math.ceil(len(p.text) / 4) - target) <= 0.02 * target
    assert counter.calls == calls


async def test_estimate_counter_is_checked_per_prompt():
    counter = EstimateCounter()
    synth = PromptSynthesizer(counter, seed=0)
    cal = await synth.calibrate()
    assert cal.source == "estimate" and cal.probe_error > 0  # ceil(words / 0.75) does not add up per word
    for target in (50, 512, 3000):
        p = synth.build(target, index=1)
        assert abs(counter.count_now(p.text) - target) <= 1 and p.tokens == counter.count_now(p.text)


class _CountingEstimate(EstimateCounter):
    """The estimate, with a tally of the texts it was asked to count."""

    def __init__(self) -> None:
        self.texts = 0

    def count_now(self, text: str) -> int:
        self.texts += 1
        return super().count_now(text)


async def test_estimate_checks_prompts_by_word_count_without_recounting_the_text():
    counter = _CountingEstimate()
    synth = PromptSynthesizer(counter, seed=0)
    await synth.calibrate()
    counter.texts = 0
    body = synth.build(3000, index=1)
    after = synth.build(300, index=2, lead=False)  # text that follows other text: counted after "the"
    assert counter.texts == 0  # checked by word count: the text was never split and counted again
    words = len(body.text.split())
    assert body.tokens == math.ceil(words / 0.75) and abs(body.tokens - 3000) <= 1
    n = len(after.text.split())  # "the" + n words minus "the" alone: ceil((n + 1) * 4 / 3) - 2
    assert after.tokens == math.ceil((n + 1) * 4 / 3) - 2 and abs(after.tokens - 300) <= 1


async def test_prompts_start_with_distinct_tags():
    synth = PromptSynthesizer(ServerCounter(sim_count), seed=7)
    await synth.calibrate()
    heads = {tuple(synth.build(64, index=i).text.split()[:3]) for i in range(3000)}
    assert len(heads) == 3000
    prefixes = {tuple(synth.build(64, index=g, kind=1).text.split()[:3]) for g in range(200)}
    assert len(prefixes) == 200 and not prefixes & heads
    # The first word alone tells apart the first LEAD_WORDS / 2 requests (tag value 2 * index).
    firsts = {tuple(synth.build(64, index=i).text.split()[:1]) for i in range(LEAD_WORDS // 2)}
    assert len(firsts) == LEAD_WORDS // 2


async def test_deterministic_by_seed_and_index_not_by_call_order():
    a = PromptSynthesizer(ServerCounter(sim_count), seed=3)
    b = PromptSynthesizer(ServerCounter(sim_count), seed=3)
    c = PromptSynthesizer(ServerCounter(sim_count), seed=4)
    for s in (a, b, c):
        await s.calibrate()
    forward = [a.build(200, index=i).text for i in range(50)]
    backward = [b.build(200, index=i).text for i in reversed(range(50))][::-1]
    assert forward == backward
    assert all(x != y for x, y in zip(forward, (c.build(200, index=i).text for i in range(50)), strict=True))


async def test_build_before_calibrate_is_an_error():
    with pytest.raises(RuntimeError, match="calibrate"):
        PromptSynthesizer(EstimateCounter()).build(10, index=0)


async def test_counter_that_stops_answering_or_counts_nothing():
    state = {"n": 0}

    async def flaky(text: str) -> int | None:
        state["n"] += 1
        return None if state["n"] > 10 else len(text.split())

    with pytest.raises(TargetError, match="stopped answering during calibration"):
        await PromptSynthesizer(ServerCounter(flaky)).calibrate()

    async def constant(text: str) -> int:
        return 1

    with pytest.raises(TargetError, match="implausible counts"):
        await PromptSynthesizer(ServerCounter(constant)).calibrate()
