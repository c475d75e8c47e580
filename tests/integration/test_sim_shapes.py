"""The shapes every simulator prediction must show (facts/calibration.md), on the engine over VirtualClock."""

from __future__ import annotations

import asyncio
import statistics

import pytest

from servelab.clock import VirtualClock
from servelab.sim.api import SimRequest
from servelab.sim.engine import Engine
from servelab.sim.target import parse_sim_target
from servelab.sim.tokenizer import filler_ids


def closed_loop(spec: str, sessions: int, per_session: int, in_len: int, out_len: int, *,
                shared_prefix: int = 0, seed: int = 0) -> dict:
    """``sessions`` users each send ``per_session`` requests back to back; output tok/s and latencies."""
    clock = VirtualClock()
    dep = parse_sim_target(spec)
    prefix = filler_ids(shared_prefix, 999).tolist()
    lat: list[float] = []

    async def main() -> dict:
        eng = Engine(dep, clock, seed=seed)
        eng.start()
        toks = 0

        async def user(u: int) -> None:
            nonlocal toks
            for k in range(per_session):
                rid = u * 10_000 + k + 1
                ids = prefix + filler_ids(in_len - shared_prefix, rid).tolist()
                req = SimRequest(rid=rid, prompt_ids=ids, max_tokens=out_len, ignore_eos=True)
                eng.submit(req)
                await req.done
                assert req.finish_reason == "length" and len(req.token_times_ns) == out_len
                toks += req.output_tokens
                lat.append((req.finish_ns - req.arrival_ns) / 1e9)

        t0 = clock.now()
        await asyncio.gather(*(user(u) for u in range(sessions)))
        elapsed = (clock.now() - t0) / 1e9
        stats = eng.stats()
        await eng.stop()
        return {"tput": toks / elapsed, "p50": statistics.median(lat), "stats": stats}

    return clock.run(main)


def knee(spec: str, in_len: int, out_len: int, levels=(1, 2, 4, 8, 16, 32, 64, 128, 256)) -> tuple[int, list]:
    """Where the curve flattens: the first concurrency reaching 80% of the best throughput seen."""
    tputs = [closed_loop(spec, n, 2, in_len, out_len)["tput"] for n in levels]
    best = max(tputs)
    return next(n for n, t in zip(levels, tputs, strict=True) if t >= 0.8 * best), tputs


def test_throughput_near_linear_then_sublinear_then_flat():
    spec = "sim:llama-3.1-8b@1xh100,dtype=fp8"
    t = {n: closed_loop(spec, n, 2, 512, 256)["tput"] for n in (1, 8, 64, 256)}
    assert t[8] / t[1] > 6.0  # near-linear
    assert 2.0 < t[64] / t[8] < 7.0  # sublinear but strong
    assert t[256] / t[64] < 0.6 * (t[64] / t[8])  # diminishing


def test_preemption_at_high_concurrency_with_long_contexts():
    out = closed_loop("sim:llama-3.1-70b@2xh100,dtype=fp8,max_num_seqs=256", 128, 1, 4096, 512)
    assert out["stats"]["preemptions_total"] > 0


@pytest.mark.parametrize(
    "pair", [("sim:llama-3.1-70b@8xh200", "sim:deepseek-v3@8xh200,dtype=fp8,ep=8,dp_attention=true")]
)
def test_dense_70b_knee_before_moe_mla(pair):
    k_dense, t_dense = knee(pair[0], 1024, 128)
    k_moe, t_moe = knee(pair[1], 1024, 128)
    assert k_dense <= k_moe
    gain_dense, gain_moe = t_dense[-1] / t_dense[-3], t_moe[-1] / t_moe[-3]  # 64 -> 256 sessions
    # (1.4x, was 1.5x: engine profiles - vLLM's 1024 sequences, BF16 KV for FP8 weights - and skewed routing
    # changed both curves on purpose; the shape, MoE gaining far more past 64 sessions, holds on both
    # backends)
    assert gain_dense < 1.4 and gain_moe > 1.4 * gain_dense


def test_longer_inputs_move_the_knee_down():
    spec = "sim:llama-3.1-70b@2xh100,dtype=fp8,max_num_seqs=512"
    levels = (4, 8, 16, 32, 64, 128, 256)
    k_short, _ = knee(spec, 2048, 64, levels)
    k_long, _ = knee(spec, 8192, 64, levels)
    assert k_long < k_short


def test_prefix_caching_lifts_shared_prefix_throughput_several_fold():
    on = closed_loop("sim:llama-3.1-8b@1xh100,prefix_caching=on", 64, 2, 2048 + 32, 16, shared_prefix=2048)
    off = closed_loop("sim:llama-3.1-8b@1xh100,prefix_caching=off", 64, 2, 2048 + 32, 16, shared_prefix=2048)
    assert on["stats"]["prefix_cache_hits_tokens"] > 0 and off["stats"]["prefix_cache_hits_tokens"] == 0
    assert on["tput"] > 3.0 * off["tput"]


def test_more_nodes_slower_for_light_agents_faster_for_sustained_long_generation():
    # One backend for both: with the silicon extra installed, one node would be priced by silicon and two by
    # the roofline (multi-node groups always are), and a comparison across backends is not a topology's.
    one = "sim:deepseek-v3@8xh200,dtype=fp8,ep=8,dp_attention=true,backend=roofline"
    two = "sim:deepseek-v3@2x8xh200,dtype=fp8,ep=16,dp_attention=true,backend=roofline"
    light1, light2 = closed_loop(one, 2, 3, 256, 32), closed_loop(two, 2, 3, 256, 32)
    assert light2["p50"] > light1["p50"]
    heavy1, heavy2 = closed_loop(one, 1024, 1, 1024, 1024), closed_loop(two, 1024, 1, 1024, 1024)
    assert heavy2["tput"] > heavy1["tput"]
