"""Replay prompts: equal hash ids give equal blocks, token counts match, tails are unique."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.sim.tokenizer import tokenize
from servelab.workload.traces import TraceRequest, block_text, load_trace, request_prompt

DATA = Path(__file__).parents[3] / "data" / "traces"


def test_block_text_is_deterministic_and_distinct() -> None:
    assert block_text(7, 64) == block_text(7, 64)
    assert len(block_text(7, 64).split()) == 64
    assert block_text(7, 64) != block_text(8, 64)
    assert block_text(7, 64, seed=1) != block_text(7, 64)
    assert block_text(7, 32).split() == block_text(7, 64).split()[:32]
    texts = {block_text(h, 16) for h in range(2000)}
    assert len(texts) == 2000
    with pytest.raises(ValueError):
        block_text(1, 0)


def test_mooncake_prompts_have_input_tokens_and_share_exact_prefixes() -> None:
    tr = load_trace(DATA / "mooncake_head.jsonl", "mooncake")
    prompts = [request_prompt(r) for r in tr.requests]
    for r, p in zip(tr.requests, prompts, strict=True):
        assert len(p.split()) == r.input_tokens
        assert len(tokenize(p)) == r.input_tokens  # the simulator's tokenizer: one word, one token
    # pairs sharing k leading hash ids share exactly k * 512 leading words
    words = [p.split() for p in prompts]
    checked = 0
    for i in range(len(tr.requests)):
        for j in range(i + 1, len(tr.requests)):
            a, b = tr.requests[i], tr.requests[j]
            k = 0
            while k < min(len(a.hash_ids), len(b.hash_ids)) and a.hash_ids[k] == b.hash_ids[k]:
                k += 1
            if k == 0 or k * 512 >= min(a.input_tokens, b.input_tokens):
                continue
            wa, wb = words[i], words[j]
            assert wa[: k * 512] == wb[: k * 512]
            assert wa[k * 512: k * 512 + 512] != wb[k * 512: k * 512 + 512]
            checked += 1
    assert checked >= 5, checked


def test_tail_padding_is_unique_per_request() -> None:
    tr = load_trace(DATA / "claude_code", "claude-code")
    r = tr.sessions["trace_0277/agent_001"].requests[0]
    assert r.input_tokens > len(r.hash_ids) * 64  # this trace hashes whole blocks only
    p = request_prompt(r)
    assert len(p.split()) == r.input_tokens
    a = TraceRequest(0, 50, 1)
    b = TraceRequest(1, 50, 1)
    assert request_prompt(a) == request_prompt(a) and request_prompt(a) != request_prompt(b)
    assert request_prompt(a, tail_key=5) == request_prompt(b, tail_key=5)
    assert len(request_prompt(a).split()) == 50


def test_real_text_is_sent_as_is() -> None:
    r = TraceRequest(0, 3, 1, prompt="What is 2+2?")
    assert request_prompt(r) == "What is 2+2?"


def test_hash_ids_need_a_block_size() -> None:
    r = TraceRequest(0, 10, 1, hash_ids=[1, 2])
    with pytest.raises(ValueError, match="block_tokens"):
        request_prompt(r)
    assert len(request_prompt(r, block_tokens=4).split()) == 10
