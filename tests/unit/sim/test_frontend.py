"""The engine profile's API-server front end: one core whose CPU work (per request, per output token) is
serialised across requests, so it caps how fast requests enter and tokens leave. Steps here take a fixed time
(0 or 1 ms) so every figure is worked by hand."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from servelab.clock import VirtualClock
from servelab.sim.api import SimRequest
from servelab.sim.engine import Engine
from servelab.sim.stepcost import StepTime
from servelab.sim.target import parse_sim_target

MS = 1_000_000


def _engine(clock: VirtualClock, step_ms: float, **prof: float) -> Engine:
    dep = parse_sim_target("sim:sim-tiny@1xh100,backend=roofline,jitter=0")
    assert dep.profile is not None
    dep = replace(dep, profile=replace(dep.profile, **prof))
    eng = Engine(dep, clock, seed=0)
    for r in eng.replicas:  # GPU and scheduler CPU: a fixed time per step
        r.cost.step = lambda *a, **k: StepTime(step_ms / 1e3, 0.0, 0.0, 0.0, 1.0, 0.0)  # type: ignore[method-assign]
    return eng


def _run(eng: Engine, clock: VirtualClock, reqs: list[SimRequest]) -> list[SimRequest]:
    async def main() -> list[SimRequest]:
        eng.start()
        for r in reqs:
            eng.submit(r)
        await asyncio.gather(*(r.done for r in reqs))  # type: ignore[misc]
        await eng.stop()
        return reqs

    return clock.run(main)


def _req(rid: int, out: int) -> SimRequest:
    return SimRequest(rid=rid, prompt_ids=[rid * 100 + j for j in range(8)], max_tokens=out, ignore_eos=True)


def test_requests_enter_one_at_a_time_through_the_front_end():
    # 5 requests at t=0, 2 ms of front-end CPU each, GPU steps of 0 ms, no other API time: request k reaches
    # the scheduler when the core has done k+1 requests, at 2, 4, 6, 8, 10 ms, and its one token comes then.
    clock = VirtualClock()
    eng = _engine(clock, 0.0, api_ms=0.0, frontend_req_ms=2.0, frontend_tok_us=0.0)
    done = _run(eng, clock, [_req(i + 1, 1) for i in range(5)])
    assert sorted(r.first_token_ns for r in done) == [2 * MS, 4 * MS, 6 * MS, 8 * MS, 10 * MS]
    assert max(r.finish_ns for r in done) >= 5 * 2 * MS  # N requests x X ms each: no faster
    assert eng.stats()["frontend_cpu_seconds_total"] == 0.010


def test_tokens_leave_no_faster_than_the_front_end_writes_them():
    # 4 requests of 10 tokens, 1 ms steps, 0.4 ms of front-end CPU per token, none per request. Step k (k=0:
    # the prefill step of all four) ends at k+1 ms with 4 tokens = 1.6 ms of work: the core is behind from the
    # first step on, done with step k at 1 + 1.6 (k+1) ms. The last step (k=9) ends at 10 ms, its tokens leave
    # at 17 ms: 40 tokens x 0.4 ms after the first step's end.
    clock = VirtualClock()
    eng = _engine(clock, 1.0, api_ms=0.0, frontend_req_ms=0.0, frontend_tok_us=400.0)
    done = _run(eng, clock, [_req(i + 1, 10) for i in range(4)])
    for r in done:
        assert r.output_tokens == 10
        assert r.first_token_ns == int(2.6 * MS)
        assert r.token_times_ns == [int((1 + 1.6 * (k + 1)) * MS) for k in range(10)]
        assert r.finish_ns == 17 * MS


def test_an_idle_server_still_takes_api_ms_in_all():
    # api_ms 15 of which 6.6 ms per request and 0.045 ms per token are CPU work on the core; the rest,
    # 8.355 ms, is split between the request side and the response side: 4.1775 + 6.6 before the scheduler,
    # a 0 ms step, 0.045 ms to write the token, 4.1775 after: the first (and only) token at 15 ms.
    clock = VirtualClock()
    eng = _engine(clock, 0.0, api_ms=15.0, frontend_req_ms=6.6, frontend_tok_us=45.0)
    (r,) = _run(eng, clock, [_req(1, 1)])
    assert r.first_token_ns == 15 * MS
    assert r.finish_ns == 15 * MS


def test_streaming_fronts_bring_their_own_front_end():
    # A request with on_tokens comes through `sim serve`'s HTTP front, a real front end: nothing is booked.
    clock = VirtualClock()
    eng = _engine(clock, 0.0, api_ms=0.0, frontend_req_ms=2.0, frontend_tok_us=400.0)
    seen: list[tuple[int, int]] = []
    reqs = [_req(i + 1, 3) for i in range(3)]
    for r in reqs:
        r.on_tokens = lambda n, t: seen.append((n, t))
    done = _run(eng, clock, reqs)
    assert all(r.first_token_ns == 0 and r.token_times_ns == [0, 0, 0] for r in done)
    assert eng.stats()["frontend_cpu_seconds_total"] == 0.0


def test_vllm_profile_cites_its_front_end_costs():
    prof = parse_sim_target("sim:gpt-oss-120b@1xh100").profile
    assert prof is not None and prof.name == "vllm"
    assert (prof.frontend_req_ms, prof.frontend_tok_us) == (6.6, 45.0)
    assert prof.frontend_req_ms + prof.frontend_tok_us / 1e3 <= prof.api_ms
    for eng in ("sglang", "trtllm"):  # no public per-request figure: not modelled
        p = parse_sim_target(f"sim:llama-3.1-8b@1xh100,engine={eng}").profile
        assert p is not None and (p.frontend_req_ms, p.frontend_tok_us) == (0.0, 0.0)


def test_delivery_times_survive_the_trimming_of_old_steps():
    # One client sends three requests of 3000 tokens one after another (9000 steps, over TRIM_OUT = 4096
    # recorded steps, so old ones are dropped on the way). 1 ms steps, one token each, 0.5 ms to write it:
    # the core keeps up, every token leaves 0.5 ms after its step. Request n arrives when n-1 is done.
    clock = VirtualClock()
    eng = _engine(clock, 1.0, api_ms=0.0, frontend_req_ms=0.0, frontend_tok_us=500.0)

    async def main() -> list[SimRequest]:
        eng.start()
        done = []
        for rid in (1, 2, 3):
            r = _req(rid, 3000)
            r.arrival_ns = clock.now()
            eng.submit(r)
            await r.done  # type: ignore[misc]
            done.append(r)
        await eng.stop()
        return done

    done = clock.run(main)
    for r in done:
        start = r.arrival_ns
        assert r.token_times_ns == [start + k * MS + MS // 2 for k in range(1, 3001)]
    assert len(eng.replicas[0].out_ends) < 9000
