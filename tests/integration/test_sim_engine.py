"""The engine and the in-process transport on VirtualClock: records, ground truth, determinism, options."""

from __future__ import annotations

import asyncio

from servelab.clock import VirtualClock
from servelab.sim.api import SimRequest
from servelab.sim.engine import Engine
from servelab.sim.target import parse_sim_target
from servelab.sim.tokenizer import filler_text
from servelab.transport.base import ModelRequest
from servelab.transport.sim import SimTransport


def run_sessions(spec: str, seed: int, sessions: int = 8, turns: int = 3) -> list:
    clock = VirtualClock()

    async def main() -> list:
        t = SimTransport(parse_sim_target(spec), clock, seed=seed)
        recs = []

        async def session(sid: int) -> None:
            msgs = [{"role": "user", "content": filler_text(300, sid)}]
            for turn in range(turns):
                r = await t.send(
                    ModelRequest(
                        request_id=sid * 100 + turn,
                        messages=list(msgs),
                        max_tokens=200,
                        session_id=sid,
                        turn=turn,
                    )
                )
                recs.append(r)
                msgs += [{"role": "assistant", "content": r.output_text},
                         {"role": "user", "content": filler_text(20, 1000 * sid + turn)}]

        await asyncio.gather(*(session(s) for s in range(sessions)))
        await t.aclose()
        return recs

    return clock.run(main)


def test_records_are_consistent_and_multi_turn_hits_the_prefix_cache():
    recs = run_sessions("sim", seed=1)
    assert len(recs) == 24 and all(r.status == "ok" for r in recs)
    for r in recs:
        assert r.usage_completion_tokens == len(r.token_times_ns) == len(r.output_text.split())
        assert r.sent_ns <= r.first_token_ns == r.token_times_ns[0] <= r.last_token_ns == r.end_ns
        assert r.token_times_ns == sorted(r.token_times_ns)
        assert r.srv_queue_ns + r.srv_prefill_ns + r.srv_decode_ns == r.end_ns - r.sent_ns
        assert r.finish_reason in ("stop", "length")
    later = [r for r in recs if r.turn > 0]
    # A follow-up turn re-sends the conversation: everything but the new message hits. Hits are whole blocks,
    # and two blocks can be partial: the previous turn's last one (its last token's KV was never computed)
    # and the new prompt's last one.
    assert all(r.usage_cached_tokens >= r.usage_prompt_tokens - 20 - 2 * 16 for r in later)


def test_deterministic_from_the_seed():
    a, b, c = run_sessions("sim", 7), run_sessions("sim", 7), run_sessions("sim", 8)
    key = lambda rs: sorted((r.request_id, r.end_ns, r.usage_completion_tokens) for r in rs)  # noqa: E731
    assert key(a) == key(b) and key(a) != key(c)


def test_prompt_longer_than_max_model_len_is_an_error_record():
    clock = VirtualClock()

    async def main():
        t = SimTransport(parse_sim_target("sim:llama-3.1-8b@1xh100,max_model_len=100"), clock)
        r = await t.send(ModelRequest(request_id=1, prompt=filler_text(150, 0), max_tokens=5))
        await t.aclose()
        return r

    r = clock.run(main)
    # As the simulator's HTTP front answers it: HTTP 400 with the OpenAI error body, no finish reason.
    assert r.status == "http_error" and r.http_status == 400 and r.finish_reason is None
    assert "maximum context length is 100" in r.error


def engine_run(spec: str, n: int, in_len: int, out_len: int, **req_kw):
    clock = VirtualClock()

    async def main():
        eng = Engine(parse_sim_target(spec), clock, seed=3)
        eng.start()
        reqs = [
            SimRequest(
                rid=i + 1, prompt_ids=list(range(i * in_len, (i + 1) * in_len)), max_tokens=out_len, **req_kw
            )
            for i in range(n)
        ]
        for r in reqs:
            eng.submit(r)
        await asyncio.gather(*(r.done for r in reqs))
        st = eng.stats()
        await eng.stop()
        return reqs, st

    return clock.run(main)


def test_natural_lengths_respect_min_and_max_tokens():
    reqs, _ = engine_run("sim:sim-tiny@1xh100,natural_median=50", 200, 32, 120, min_tokens=10)
    outs = [r.output_tokens for r in reqs]
    assert min(outs) >= 10 and max(outs) <= 120
    assert any(r.finish_reason == "stop" for r in reqs) and any(r.finish_reason == "length" for r in reqs)
    assert all((r.finish_reason == "length") == (r.output_tokens == 120) for r in reqs)


def test_streaming_callbacks_add_up_to_the_output():
    clock = VirtualClock()
    seen: dict[int, list[int]] = {}

    async def main():
        eng = Engine(parse_sim_target("sim"), clock)
        eng.start()
        reqs = []
        for i in range(4):
            got = seen.setdefault(i, [])
            r = SimRequest(rid=i, prompt_ids=[i] * 40, max_tokens=30, ignore_eos=True,
                           on_tokens=lambda n, t, got=got: got.append(n))
            eng.submit(r)
            reqs.append(r)
        await asyncio.gather(*(r.done for r in reqs))
        await eng.stop()

    clock.run(main)
    assert all(sum(v) == 30 for v in seen.values())


def test_disaggregated_prefill_decode_and_moe_stats():
    reqs, st = engine_run("sim:deepseek-v3@2x8xh200,dtype=fp8,ep=8,dp_attention=true,pd=1:1", 16, 512, 64,
                          ignore_eos=True)
    assert all(r.output_tokens == 64 and len(r.token_times_ns) == 64 for r in reqs)
    assert st["kv_transfer_seconds_total"] > 0 and st["all_to_all_bytes_total"] > 0
    assert all(r.comm_ns > 0 for r in reqs)


def test_speculative_decoding_and_expert_skew_with_eplb():
    reqs, st = engine_run("sim:deepseek-v3@8xh200,dtype=fp8,ep=8,dp_attention=true,mtp=1,spec_acceptance=0.8,"
                          "expert_skew=1.0", 32, 256, 100, ignore_eos=True)
    assert all(len(r.token_times_ns) == 100 for r in reqs)
    assert st["expert_imbalance"] > 1.2
    _, st_eplb = engine_run(
        "sim:deepseek-v3@8xh200,dtype=fp8,ep=8,dp_attention=true,expert_skew=1.0,eplb=true",
        32,
        256,
        100,
        ignore_eos=True,
    )
    assert st_eplb["expert_imbalance"] < st["expert_imbalance"]
    # Without speculation every step yields one token per request: at least 100 steps for 100 tokens. With one
    # draft token accepted 80% of the time a step yields 1.8 tokens on average: 99 decode tokens / 1.8 = 55
    # steps (+ the prefill step), so about 0.56 of the steps (+-0.05 for the seeded acceptance draws).
    assert st_eplb["steps_total"] >= 100
    assert 0.50 <= st["steps_total"] / st_eplb["steps_total"] <= 0.62


def test_abort_frees_the_request():
    clock = VirtualClock()

    async def main():
        eng = Engine(parse_sim_target("sim"), clock)
        eng.start()
        r = SimRequest(rid=1, prompt_ids=[1] * 100, max_tokens=10_000, ignore_eos=True)
        eng.submit(r)
        await asyncio.sleep(0.01)
        assert eng.abort(1)
        await r.done
        st = eng.stats()
        await eng.stop()
        return r, st

    r, st = clock.run(main)
    assert r.finish_reason == "abort" and st["running"] == 0 and st["kv_usage"] == 0.0
