"""Attribution adds up on every request of random simulated workloads (in-process simulator, virtual time).

For each request: every disjoint part >= 0, the parts sum to end - intended exactly, the nested
communication fits inside prefill + decode; the simulator's own ground truth has no negative phase (a
request scheduled at virtual t = 0 is not "unscheduled"). Tail shares and growth shares lie in [0, 1]."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.analysis.attribution import request_attribution, request_parts
from servelab.clock import VirtualClock
from servelab.sim.target import parse_sim_target
from servelab.sim.tokenizer import filler_text
from servelab.transport.base import ModelRequest
from servelab.transport.sim import SimTransport

# preempts
SPECS = ("sim", "sim:llama-3.1-8b@1xh100,gpu_memory_utilization=0.22,max_num_seqs=16,max_model_len=7000",
         "sim:qwen3-30b-a3b@2xh100,tp=2,ep=2,max_num_seqs=16",  # expert exchange
         "sim:sim-tiny@1xh100,chunked_prefill=true,max_num_batched_tokens=256,max_num_seqs=16",
         "sim:sim-tiny@1xh100,prefix_caching=false,max_num_seqs=4")


def simulate(spec: str, seed: int, sessions: list[tuple[int, int, int, int]]) -> list:
    """``sessions``: (prompt tokens, max tokens, turns, start delay ms) each, run concurrently."""
    clock = VirtualClock()

    async def main() -> list:
        t = SimTransport(parse_sim_target(spec), clock, seed=seed)
        recs: list = []

        async def one(sid: int, prompt: int, out: int, turns: int, delay_ms: int) -> None:
            await clock.sleep(delay_ms / 1000)
            msgs = [{"role": "user", "content": filler_text(prompt, sid)}]
            for turn in range(turns):
                r = await t.send(
                    ModelRequest(
                        request_id=sid * 100 + turn,
                        messages=list(msgs),
                        max_tokens=out,
                        session_id=sid,
                        turn=turn,
                    )
                )
                recs.append(r)
                msgs += [{"role": "assistant", "content": r.output_text or "x"},
                         {"role": "user", "content": filler_text(30, 1000 * sid + turn)}]

        await asyncio.gather(*(one(i, *s) for i, s in enumerate(sessions)))
        await t.aclose()
        return recs

    return clock.run(main)


workloads = st.lists(
    st.tuples(st.integers(10, 3000), st.integers(1, 400), st.integers(1, 3), st.integers(0, 300)),
    min_size=1,
    max_size=14,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.sampled_from(SPECS), seed=st.integers(0, 2**16), sessions=workloads)
def test_parts_are_disjoint_nonnegative_and_sum_to_latency(spec, seed, sessions):
    recs = simulate(spec, seed, sessions)
    ok = [r for r in recs if r.status == "ok"]
    for r in ok:  # the simulator's ground truth itself
        assert r.srv_queue_ns >= 0 and r.srv_prefill_ns >= 0 and r.srv_decode_ns >= 0, r
        assert r.srv_queue_ns + r.srv_prefill_ns + r.srv_decode_ns == r.end_ns - r.sent_ns
        assert 0 <= r.srv_preempted_ns <= r.srv_prefill_ns + r.srv_decode_ns
    dec = request_parts(recs)
    assert dec["ground_truth"] is True and dec["n"] == len(ok)
    total = sum(dec["parts"].values())
    assert (total == dec["total"]).all()  # exact, in integer ns (well within 1 ms)
    for name, arr in dec["parts"].items():
        assert (arr >= 0).all(), name
    inside = dec["parts"]["prefill"] + dec["parts"]["decode"]
    assert ((dec["nested"]["expert_exchange"] >= 0) & (dec["nested"]["expert_exchange"] <= inside)).all()
    pre = {r.request_id: r.srv_preempted_ns for r in ok}
    assert sum(pre.values()) == int(dec["parts"]["preemption"].sum())
    if len(ok) >= 20:
        a = request_attribution(recs)
        top = [c for c in a["components"] if "nested_in" not in c]
        assert abs(sum(c["tail_share"] for c in top) - 1) < 1e-9
        assert all(0 <= c["excess_share"] <= 1 for c in top)
        assert abs(sum(c["excess_ms"] for c in top) - a["excess_ms"]) < 1e-6
