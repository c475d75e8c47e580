"""The engine on virtual time: the expert-imbalance histogram on /metrics, and jitter that breaks lockstep."""

from __future__ import annotations

import asyncio
import re

from servelab.clock import VirtualClock
from servelab.sim.prom import RequestMetrics, render_metrics
from servelab.sim.target import parse_sim_target
from servelab.sim.tokenizer import filler_text
from servelab.transport.base import ModelRequest
from servelab.transport.sim import SimTransport


def closed_loop(spec: str, users: int, turns: int, in_len: int, out_len: int):
    clock = VirtualClock()

    async def main():
        t = SimTransport(parse_sim_target(spec), clock, seed=5)
        recs = []

        async def user(u: int) -> None:
            for k in range(turns):
                recs.append(
                    await t.send(
                        ModelRequest(
                            request_id=u * 1000 + k,
                            prompt=filler_text(in_len, u * 7 + k),
                            max_tokens=out_len,
                            ignore_eos=True,
                        )
                    )
                )

        await asyncio.gather(*(user(u) for u in range(users)))
        text = t.metrics_text()
        await t.aclose()
        return recs, text

    return clock.run(main)


def test_expert_imbalance_histogram_is_exported_within_one_and_ep():
    recs, text = closed_loop(
        "sim:deepseek-v3@8xh200,dtype=fp8,ep=8,dp_attention=true,backend=roofline", 16, 2, 256, 32
    )
    assert all(r.status == "ok" for r in recs)
    buckets = {le: float(v) for le, v in re.findall(
        r'^servelab_sim_expert_imbalance_ratio_bucket\{le="([^"]+)"[^}]*\} (\S+)$', text, re.M)}
    steps = float(re.search(r"^servelab_sim_steps_total\{[^}]*\} (\S+)$", text, re.M)[1])
    bounds = list(buckets)
    assert float(bounds[-2]) == 8 and bounds[-1] == "+Inf"  # the last finite bound is ep
    assert buckets["+Inf"] == buckets[bounds[-2]] == steps  # one observation per step, none above ep
    assert buckets[bounds[0]] == 0 and float(bounds[0]) == 1  # skewed routing by default: never balanced
    assert re.search(r"^servelab_sim_expert_imbalance\{", text, re.M)  # the gauge stays beside it
    assert (
        len(
            re.findall(r'^servelab_sim_step_seconds_total\{part="(compute|memory|communication)"', text, re.M)
        )
        == 3
    )


def test_dense_model_imbalance_is_one():
    _, text = closed_loop("sim:llama-3.1-8b@1xh100,backend=roofline", 2, 1, 64, 4)
    les = re.findall(r'^servelab_sim_expert_imbalance_ratio_bucket\{le="([^"]+)"', text, re.M)
    assert [float(x) for x in les] == [1.0, float("inf")]


def _instants(recs) -> int:
    return len({r.sent_ns for r in recs})


def test_jitter_desynchronises_closed_loop_lockstep():
    # 32 users, fixed lengths: without jitter (and API-server spread) they finish in the same steps and send
    # again at the same instants; the default seeded jitter spreads them.
    base = "sim:llama-3.1-8b@1xh100,backend=roofline"
    locked, _ = closed_loop(base + ",jitter=0,engine=trtllm", 32, 4, 128, 64)
    spread, _ = closed_loop(base + ",engine=trtllm", 32, 4, 128, 64)
    assert _instants(spread) > 3 * _instants(locked)
    again, _ = closed_loop(base + ",engine=trtllm", 32, 4, 128, 64)
    assert [r.end_ns for r in again] == [r.end_ns for r in spread]  # seeded: the same run twice


def test_metrics_render_without_an_imbalance_snapshot():
    text = render_metrics({}, RequestMetrics(), "m")
    assert "servelab_sim_expert_imbalance_ratio" not in text and "servelab_sim_expert_imbalance{" in text
