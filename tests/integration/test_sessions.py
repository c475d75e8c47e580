"""The session executor on virtual time against a scripted transport (and the simulator when present)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from servelab.clock import NS_PER_S, VirtualClock, WallClock
from servelab.errors import ConfigError
from servelab.load.session import RequestIds, run_session
from servelab.records.schema import (
    CANCELLED,
    DISCONNECTED,
    HTTP_ERROR,
    OK,
    TIMEOUT,
    RequestRecord,
    SessionRecord,
)
from servelab.transport import mock
from servelab.transport.base import ModelRequest
from servelab.workload.agent import Acceptance, Action, ModelTurn, Policy, SessionPlan, Think


class Words:
    """Text of exactly n words; word ``t<key>`` tells where a part came from."""

    def text(self, n_tokens: int, key: int) -> str:
        return " ".join([f"t{key}"] * n_tokens)


def scripted(clock, faults=None, latency_s=0.1, output_text=""):
    """The in-library transport twin: answers after ``latency_s``; call i fails with ``faults[i]`` (a status,
    or 'hang'). The server counts one token per prompt word and streams ``max_tokens`` words (or
    ``output_text`` as one chunk)."""
    faults = faults or {}

    def handler(req: ModelRequest) -> mock.Reply:
        fault = faults.get(len(tr.calls) - 1)
        if fault == "hang":
            return mock.hang()
        if fault == HTTP_ERROR:
            return mock.error(503, "overloaded", delay_s=latency_s)
        if fault == DISCONNECTED:
            return mock.reset(delay_s=latency_s)
        assert fault is None, fault
        words = sum(len(str(m["content"]).split()) for m in req.messages or [])
        tokens = [output_text] if output_text else mock.words(req.max_tokens)
        return mock.chat_stream(tokens, ttft_s=latency_s, usage=mock.usage_block(words, req.max_tokens))

    tr = mock.MockTransport(handler, clock)
    return tr


def took(s: SessionRecord) -> float:
    """Session length, seconds (virtual timers round up to the next nanosecond)."""
    return (s.end_ns - s.start_ns) / NS_PER_S


def plan(steps, **policy) -> SessionPlan:
    acc = policy.pop("acceptance", None)
    return SessionPlan(session_id=7, profile="t", system_tokens=100, user_tokens=50, steps=steps,
                       policy=Policy(**{"backoff_s": 1.0, **policy}), acceptance=acc)


def act(failures=(False,), durations=None, kind="tool", **kw) -> Action:
    durations = durations or tuple(2.0 for _ in failures)
    return Action(kind=kind, name=kind, durations_s=durations, failures=failures, result_tokens=30,
                  error_tokens=4, **kw)


def run(p: SessionPlan, faults=None, output_text="", cancel_after_s=None):
    clock = VirtualClock()
    tr = scripted(clock, faults, output_text=output_text)
    records: list[RequestRecord] = []
    sessions: list[SessionRecord] = []

    async def main():
        coro = run_session(
            p, tr, clock, RequestIds(100), on_record=records.append, on_session=sessions.append, texts=Words()
        )
        if cancel_after_s is None:
            return await coro
        task = asyncio.ensure_future(coro)
        await clock.sleep(cancel_after_s)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return sessions[0]

    s = clock.run(main)
    return s, tr.requests, records


def test_steps_run_in_order_and_context_grows_like_a_resent_conversation():
    steps = [ModelTurn("a", 20), act(), ModelTurn("b", 10, user_tokens=5), Think(3.0), ModelTurn("c", 7)]
    s, calls, records = run(plan(steps))
    assert s.status == "ok" and s.accepted is True
    assert [c.est_prompt_tokens for c in calls] == [150, 205, 215]
    # The server saw exactly the prompt the executor counted (1 word = 1 token here).
    assert [r.usage_prompt_tokens for r in records] == [150, 205, 215]
    assert [[m["role"] for m in c.messages] for c in calls] == [
        ["system", "user"], ["system", "user", "assistant", "user"],
        ["system", "user", "assistant", "user", "assistant"],
    ]
    # Each request resends the previous one's messages unchanged (a growing prefix).
    assert calls[1].messages[:2] == calls[0].messages and calls[2].messages[:4] == calls[1].messages
    # tool result (30) and the new user text (5) travel together in one user message
    assert len(calls[1].messages[3]["content"].split()) == 35
    assert [r.request_id for r in records] == [100, 101, 102]
    assert [(r.session_id, r.turn, r.attempt) for r in records] == [(7, 0, 0), (7, 1, 0), (7, 2, 0)]
    assert s.turns == 3 and s.requests == 3 and s.retries == 0 and s.tool_calls == 1
    assert took(s) == pytest.approx(5.3, abs=1e-6)
    assert [x / NS_PER_S for x in (s.model_ns, s.tool_ns, s.think_ns)] == pytest.approx([0.3, 2, 3], abs=1e-6)
    # An HTTP server reports no queue time: only the simulator's ground truth fills it (tested below).
    assert s.input_tokens == 570 and s.output_tokens == 37 and s.queue_ns == 0


def test_model_retries_back_off_exponentially_then_succeed():
    s, calls, records = run(plan([ModelTurn("a", 20)], max_retries=2, multiplier=2.0),
                            faults={0: HTTP_ERROR, 1: HTTP_ERROR})
    assert s.status == "ok" and s.retries == 2 and s.requests == 3 and s.turns == 1
    assert [(r.turn, r.attempt, r.status) for r in records] == [
        (0, 0, HTTP_ERROR),
        (0, 1, HTTP_ERROR),
        (0, 2, OK),
    ]
    assert s.waiting_ns == 3 * NS_PER_S  # 1 s then 2 s
    assert took(s) == pytest.approx(3.3, abs=1e-6)
    assert all(c.est_prompt_tokens == 150 for c in calls)  # a retry resends the same prompt


def test_model_step_fails_the_session_when_retries_run_out():
    s, _, records = run(plan([ModelTurn("a", 20), ModelTurn("b", 5)], max_retries=1),
                        faults={0: HTTP_ERROR, 1: DISCONNECTED})
    assert s.status == "failed" and s.accepted is False
    assert "model step a" in s.error and "2 attempt" in s.error
    assert len(records) == 2 and s.retries == 1 and s.turns == 0


def test_failed_tool_gets_a_correction_turn_then_a_retry():
    a = act(failures=(True, False), correction_tokens=(9, 0))
    s, calls, records = run(plan([ModelTurn("a", 20), a, ModelTurn("b", 10)], max_retries=1, correction=True))
    assert s.status == "ok"
    # model a; tool attempt 0 fails (error 4 tokens joins); correction turn; backoff 1 s; tool ok; model b
    assert [c.max_tokens for c in calls] == [20, 9, 10]
    assert [c.est_prompt_tokens for c in calls] == [150, 174, 213]
    assert s.tool_calls == 2 and s.tool_failures == 1 and s.retries == 1 and s.turns == 3
    assert s.tool_ns == 4 * NS_PER_S and s.waiting_ns == NS_PER_S
    assert took(s) == pytest.approx(5.3, abs=1e-6)


def test_give_up_after_k_failures_across_steps():
    steps = [act(failures=(True, False)), act(failures=(True, False)), ModelTurn("a", 5)]
    s, calls, _ = run(plan(steps, max_retries=1, give_up_after=2))
    assert s.status == "failed" and "gave up after 2" in s.error
    assert s.tool_failures == 2 and s.tool_calls == 3 and calls == []


def test_step_timeout_is_a_failed_attempt_that_is_retried():
    s, _, records = run(plan([ModelTurn("a", 20, timeout_s=0.5)], max_retries=1), faults={0: "hang"})
    assert s.status == "ok" and s.timeouts == 1 and s.retries == 1
    assert [r.status for r in records] == [TIMEOUT, OK]
    assert records[0].end_ns - records[0].sent_ns == NS_PER_S // 2
    assert took(s) == pytest.approx(1.6, abs=1e-6)


def test_tool_timeout_counts_as_failure():
    a = act(failures=(False, False), durations=(9.0, 1.0), timeout_s=2.0)
    s, _, _ = run(plan([a, ModelTurn("a", 5)], max_retries=1))
    assert s.status == "ok" and s.timeouts == 1 and s.tool_failures == 1
    assert s.tool_ns == 3 * NS_PER_S


def test_session_deadline_stops_the_task_exactly_on_time():
    s, calls, _ = run(plan([ModelTurn("a", 5), Think(10.0), ModelTurn("b", 5)], deadline_s=4.0))
    assert s.status == "timed_out" and s.accepted is False and len(calls) == 1
    assert took(s) == pytest.approx(4, abs=1e-6)


def test_deadline_cuts_a_hanging_request():
    s, _, records = run(plan([ModelTurn("a", 5)], deadline_s=2.0, max_retries=3), faults={0: "hang"})
    assert s.status == "timed_out" and len(records) == 1 and records[0].status == TIMEOUT
    assert took(s) == pytest.approx(2, abs=1e-6)


def test_acceptance_checks_the_final_output():
    acc = Acceptance(valid_json=True, min_tokens=5)
    s, _, _ = run(plan([ModelTurn("a", 5)], acceptance=acc), output_text='{"answer": 42}')
    assert s.status == "ok" and s.accepted is True
    s, _, _ = run(plan([ModelTurn("a", 5)], acceptance=acc), output_text="not json")
    assert s.status == "ok" and s.accepted is False and "JSON" in s.error


def test_cancel_records_the_request_in_flight():
    s, _, records = run(plan([ModelTurn("a", 5), ModelTurn("b", 5)]), faults={1: "hang"}, cancel_after_s=1.0)
    assert s.status == CANCELLED
    assert [r.status for r in records] == [OK, CANCELLED] and s.requests == 2


def test_real_command_needs_a_wall_clock():
    p = plan([act(command=(sys.executable, "-c", "pass")), ModelTurn("a", 5)])
    with pytest.raises(ConfigError, match="virtual time"):
        run(p)


def test_real_commands_are_run_and_their_exit_status_decides():
    clock = WallClock(use_uvloop=False)
    bad = act(failures=(False, False), command=(sys.executable, "-c", "import sys; sys.exit(3)"))
    good = act(command=(sys.executable, "-c", "pass"), kind="code")
    p = plan([good, bad, ModelTurn("a", 5)], max_retries=1, backoff_s=0.0)

    async def main():
        tr = scripted(clock, latency_s=0.0)
        return await run_session(p, tr, clock, RequestIds(), on_record=lambda r: None, texts=Words())

    s = clock.run(main)
    assert s.status == "failed" and "exited with status 3" in s.error
    assert s.tool_calls == 3 and s.tool_failures == 2 and s.code_ns > 0 and s.tool_ns > 0


def test_a_scripted_session_against_the_simulator_on_virtual_time():
    from servelab.sim.target import parse_sim_target
    from servelab.transport.sim import SimTransport
    from servelab.transport.sim_probe import SimProbe
    from servelab.workload.agent import synth_text_source
    from servelab.workload.tokens import ServerCounter

    clock = VirtualClock()
    steps = [ModelTurn("a", 32), act(durations=(3.0,)), ModelTurn("b", 16), Think(2.0), ModelTurn("c", 8, 10)]
    records: list[RequestRecord] = []

    async def main():
        deployment = parse_sim_target("sim")
        tr = SimTransport(deployment, clock, 0)
        try:
            texts = await synth_text_source(ServerCounter(SimProbe(deployment).count_tokens), seed=0)
            return await run_session(
                plan(steps), tr, clock, RequestIds(), on_record=records.append, texts=texts
            )
        finally:
            await tr.aclose()

    s = clock.run(main)
    assert s.status == "ok" and s.turns == 3 and [r.status for r in records] == [OK, OK, OK]
    assert [r.turn for r in records] == [0, 1, 2]
    est = [r.est_prompt_tokens for r in records]
    assert est == [150, 212, 238]  # 150 + 32 out + 30 tool result; + 16 out + 10 user
    for r in records:  # the simulated server counts (about) the prompt the executor built
        assert abs(r.usage_prompt_tokens - r.est_prompt_tokens) <= 0.05 * r.est_prompt_tokens + 64
        assert r.usage_completion_tokens == r.requested_output_tokens
    assert s.model_ns > 0 and s.tool_ns == 3 * NS_PER_S and took(s) >= 5.0
    assert s.queue_ns == sum(r.srv_queue_ns for r in records)


@pytest.mark.parametrize("name", ["chat", "coding-agent", "agent-workflow"])
def test_shipped_profiles_run_end_to_end_on_virtual_time(name):
    from servelab.workload.agent import build_plan, synth_text_source
    from servelab.workload.profiles import load_profile
    from servelab.workload.tokens import EstimateCounter

    spec = load_profile(name).session
    clock = VirtualClock()
    records: list[RequestRecord] = []

    async def main():
        texts = await synth_text_source(EstimateCounter(), seed=0)
        tr, ids = scripted(clock, latency_s=0.5), RequestIds()
        return await asyncio.gather(
            *(
                run_session(build_plan(spec, i, 0), tr, clock, ids, on_record=records.append, texts=texts)
                for i in range(8)
            )
        )

    out = clock.run(main)
    # The twin never fails and every shipped profile retries its (seeded) tool failures: every task ends ok,
    # every model request is a turn (none was retried), every retry is a tool retry.
    assert [s.status for s in out] == ["ok"] * 8, [s.error for s in out]
    assert all(s.requests == s.turns and s.retries == s.tool_failures for s in out)
    assert sum(s.tool_failures for s in out) > 0 or name == "chat"  # the profiles' tools do fail sometimes
    assert sum(s.requests for s in out) == len(records) == len({r.request_id for r in records})
    for s in out:  # every model request resent a context at least as long as the one before
        est = [r.usage_prompt_tokens for r in records if r.session_id == s.session_id]
        assert est == sorted(est) and s.turns >= 1
