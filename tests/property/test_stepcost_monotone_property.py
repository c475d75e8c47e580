"""Step cost is monotone in work: more decoding sequences, longer contexts or more prefill never make a step
faster (the roofline backend; the same for the engine step around any backend, jitter off)."""

from __future__ import annotations

from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.sim.costmodel import RooflineCost
from servelab.sim.stepcost import EngineStep
from servelab.sim.target import parse_sim_target

SPECS = (
    "sim:llama-3.1-8b@1xh100",
    "sim:llama-3.1-70b@8xh100,dtype=fp8",
    "sim:deepseek-v3@8xb200,dtype=fp8,ep=8,dp_attention=true",
    "sim:deepseek-v3@4x8xh200,dtype=fp8,ep=32,dp_attention=true,overlap=true",
    "sim:gpt-oss-120b@1xh100",
    "sim:qwen3-235b-a22b@8xh200,dtype=fp8,ep=8",
    "sim:llama-3.1-70b@8xmi300x",
    "sim:qwen3-235b-a22b@8xh100,tp=8,engine=vllm",  # every expert TP-sliced 8 ways
    "sim:gpt-oss-120b@1xb200,engine=trtllm",  # Blackwell: few-tokens-per-expert penalty
    # per-engine MoE constants: Blackwell SGLang prices prefill tokens' experts above decode's (1.2)
    "sim:deepseek-v3@8xb200,dtype=fp8,ep=8,dp_attention=true,engine=sglang",
    # vLLM's MLA constants on Hopper: a least time a layer, a prefill step's extra time, per-token passes
    "sim:deepseek-v3@8xh200,dtype=fp8,tp=8,engine=vllm",
)


@cache
def cost(i: int) -> RooflineCost:
    return RooflineCost(parse_sim_target(SPECS[i] + ",backend=roofline"))


def test_adding_one_prefill_token_to_a_big_decode_batch_never_speeds_it_up():
    # The case found by hand: 8 x B200 DeepSeek, 7,168 decodes took 63.2 ms and 50.8 ms with a prefill token.
    cm = cost(2)
    base = cm.step(7168, 7168 * 2048)
    assert cm.step(7168, 7168 * 2048, 1, 1, 1).time_s >= base.time_s


@settings(max_examples=300, deadline=None)
@given(i=st.integers(0, len(SPECS) - 1), n=st.integers(0, 8000), ctx=st.integers(1, 8192),
       p=st.integers(0, 16384), extra_n=st.integers(0, 512), extra_p=st.integers(0, 4096),
       extra_ctx=st.integers(0, 4096))
def test_step_time_is_monotone_in_work(i, n, ctx, p, extra_n, extra_p, extra_ctx):
    cm = cost(i)
    pairs, pctx = p * (p + 1) // 2, p
    a = cm.step(n, n * ctx, p, pairs, pctx).time_s
    more_dec = cm.step(n + extra_n, (n + extra_n) * ctx, p, pairs, pctx).time_s
    longer = cm.step(n, n * (ctx + extra_ctx), p, pairs, pctx).time_s
    q = p + extra_p
    more_pre = cm.step(n, n * ctx, q, q * (q + 1) // 2, q).time_s
    # shapes are memoized in ~1.5% buckets: a bucket's midpoint may sit below the point
    tol = 1e-9 + 0.031 * a
    assert more_dec >= a - tol and longer >= a - tol and more_pre >= a - tol


@cache
def padded_engine() -> EngineStep:
    return EngineStep(parse_sim_target("sim:gpt-oss-20b@1xh100,engine=trtllm,jitter=0,backend=roofline,"
                                       "cuda_graph_batch_sizes=1/2/4/8/16/32/64/128/256/384/512/1024/2048"))


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 2500), ctx=st.integers(1, 4096), p=st.integers(0, 8192),
       extra_n=st.integers(0, 512), extra_p=st.integers(0, 4096))
def test_padded_engine_step_is_monotone_in_work(n, ctx, p, extra_n, extra_p):
    es = padded_engine()
    a = es.step(n, n * ctx, p, p * (p + 1) // 2, p).time_s
    more_dec = es.step(n + extra_n, (n + extra_n) * ctx, p, p * (p + 1) // 2, p).time_s
    q = p + extra_p
    more_pre = es.step(n, n * ctx, q, q * (q + 1) // 2, q).time_s
    tol = 1e-9 + 0.031 * a
    assert more_dec >= a - tol and more_pre >= a - tol
