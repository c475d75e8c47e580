"""Live agent sessions over loopback: a scripted OpenAI server on 127.0.0.1 answers with tool calls.

The server reads its script from the request body (``extra_body["script"]``): it answers with
``calls`` parallel tool calls while fewer than ``tool_turns`` tool turns were answered (counted from the
``tool`` messages it was sent), then with a plain answer. Streamed answers carry the calls as
``delta.tool_calls`` pieces (id and name first, arguments in fragments), whole answers as
``message.tool_calls``.
"""

from __future__ import annotations

import time

import orjson
import pytest
from aiohttp import web

from servelab.clock import NS_PER_S, VirtualClock, WallClock
from servelab.config.agent import SessionConfig
from servelab.config.models import TargetConfig
from servelab.load.session import RequestIds, run_session
from servelab.records.schema import OK, RequestRecord
from servelab.transport.http import HttpTransport
from servelab.workload.agent import build_plan
from tests.loopback import serve_app

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "web search",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    },
    {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}},
]
TOOL_S = 0.05  # simulated duration of one search call


class Words:
    def text(self, n_tokens: int, key: int) -> str:
        return " ".join([f"t{key}"] * n_tokens)


def _sse(delta: dict | None = None, finish: str | None = None, usage: dict | None = None) -> bytes:
    obj: dict = {"id": "c", "object": "chat.completion.chunk", "model": "m",
                 "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class Server:
    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.ends: list[int] = []  # monotonic ns when each answer was fully written

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        s = body.get("script", {})
        answered = sum(1 for m in body["messages"] if m["role"] == "assistant" and m.get("tool_calls"))
        turn = len(self.bodies)
        names = ["search", "read"][: s.get("calls", 1)]
        calls = [{"id": f"call_{turn}_{i}", "type": "function",
                  "function": {"name": n, "arguments": orjson.dumps({"q": f"x{turn}"}).decode()}}
                 for i, n in enumerate(names)] if answered < s.get("tool_turns", 2) else []
        usage = {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}
        if not body.get("stream"):
            msg = {"role": "assistant", "content": None, "tool_calls": calls} if calls else \
                {"role": "assistant", "content": "final answer"}
            resp = web.json_response({"id": "c", "object": "chat.completion", "model": "m", "usage": usage,
                                      "choices": [{"index": 0, "message": msg,
                                                   "finish_reason": "tool_calls" if calls else "stop"}]})
            self.ends.append(time.monotonic_ns())
            return resp
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_sse({"role": "assistant", "content": ""}))
        if calls:
            for i, c in enumerate(calls):
                args = c["function"]["arguments"]
                await resp.write(_sse({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                                       "function": {"name": c["function"]["name"],
                                                                    "arguments": ""}}]}))
                for part in (args[:4], args[4:]):
                    await resp.write(_sse({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
            await resp.write(_sse({}, finish="tool_calls"))
        else:
            for w in ("final", " answer"):
                await resp.write(_sse({"content": w}))
            await resp.write(_sse({}, finish="stop"))
        await resp.write(_sse(usage=usage))
        await resp.write(b"data: [DONE]\n\n")
        self.ends.append(time.monotonic_ns())
        return resp


@pytest.fixture
async def server():
    s = Server()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", s.chat)
    async with serve_app(app) as root:
        s.url = f"{root}/v1"  # type: ignore[attr-defined]
        yield s


def _spec(**live) -> SessionConfig:
    return SessionConfig.model_validate({
        "name": "live", "system_tokens": 5, "user_tokens": 7,
        "steps": [{"kind": "model", "output_tokens": 16}],
        "policy": {"retry": {"max_retries": 1, "backoff_s": 0.01}},
        "live": {"tools": TOOLS, "tool_results": {"search": {"duration_s": TOOL_S, "result_tokens": 12}},
                 "default_tool": {"duration_s": 0.0, "result_tokens": 3}, **live},
    })


async def _run(server, spec: SessionConfig, stream: bool, script: dict):
    clock = WallClock(use_uvloop=False)
    tr = HttpTransport(TargetConfig(url=server.url, model="m", stream=stream), clock, concurrency=2)
    records: list[RequestRecord] = []
    try:
        s = await run_session(build_plan(spec, 3, seed=1), tr, clock, RequestIds(), on_record=records.append,
                              texts=Words(), stream=stream, extra_body={"script": script})
    finally:
        await tr.aclose()
    return s, records


@pytest.mark.parametrize("stream", [True, False])
async def test_live_session_follows_tool_calls_until_a_plain_answer(server, stream):
    s, records = await _run(server, _spec(), stream, {"tool_turns": 2, "calls": 2})
    assert s.status == OK and s.accepted, s.error
    assert s.turns == 3 and s.requests == 3 and [r.status for r in records] == [OK] * 3
    assert s.tool_calls == 4 and s.tool_failures == 0  # two turns of two parallel calls
    assert records[0].tool_calls[0]["function"] == {"name": "search", "arguments": '{"q":"x1"}'}
    assert [c["id"] for c in records[1].tool_calls] == ["call_2_0", "call_2_1"]
    assert records[2].tool_calls is None and records[2].output_text == "final answer"
    b = server.bodies
    assert all(x["tools"] == TOOLS for x in b) and "ignore_eos" not in b[0]
    last = b[2]["messages"]
    assert [m["role"] for m in last] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
        "tool",
    ]
    assert last[2]["tool_calls"] == records[0].tool_calls and last[2]["content"] is None
    tool_msgs = [m for m in last if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["call_1_0", "call_1_1", "call_2_0", "call_2_1"]
    assert [len(m["content"].split()) for m in tool_msgs] == [12, 3, 12, 3]  # search / default sizes
    assert s.tool_ns >= 2 * TOOL_S * NS_PER_S and s.model_ns > 0
    for prev, nxt in zip(records, records[1:], strict=False):  # tools ran between the answer and the next ask
        assert nxt.sent_ns - prev.end_ns >= TOOL_S * NS_PER_S
    assert records[0].end_ns <= server.ends[0] + NS_PER_S  # same monotonic clock, sane ordering
    assert records[0].est_prompt_tokens < records[1].est_prompt_tokens < records[2].est_prompt_tokens


@pytest.mark.parametrize("policy,status", [("fail", "failed"), ("stop", "ok")])
async def test_max_turns_ends_the_loop(server, policy, status):
    s, records = await _run(server, _spec(max_turns=3, on_max_turns=policy), True, {"tool_turns": 99})
    assert s.status == status and s.turns == 3 and len(server.bodies) == 3
    assert s.tool_calls == 2  # the calls of the last allowed turn never run
    if policy == "fail":
        assert "max_turns 3" in s.error and "search" in s.error
    assert all(m.get("role") != "tool" or m["tool_call_id"] for m in server.bodies[-1]["messages"])


async def test_a_failing_live_tool_fails_the_session_after_its_retries(server):
    spec = _spec(tool_results={"search": {"duration_s": 0.0, "failure_prob": 1.0}})
    s, records = await _run(server, spec, True, {"tool_turns": 1})
    assert s.status == "failed" and "tool step search" in s.error
    assert s.tool_calls == 2 and s.tool_failures == 2 and s.retries == 1 and len(records) == 1


def test_the_simulator_never_calls_tools_so_a_live_step_is_one_turn():
    from servelab.sim.target import parse_sim_target
    from servelab.transport.sim import SimTransport

    clock = VirtualClock()
    spec = SessionConfig.model_validate(
        {
            "steps": [
                {"kind": "model", "output_tokens": 16},
                {"kind": "model", "output_tokens": 8, "user_tokens": 5},
            ],
            "live": {"tools": TOOLS, "max_turns": 4},
        }
    )
    records: list[RequestRecord] = []

    async def main():
        tr = SimTransport(parse_sim_target("sim"), clock, 0)
        try:
            return await run_session(build_plan(spec, 0), tr, clock, RequestIds(), on_record=records.append,
                                     texts=Words())
        finally:
            await tr.aclose()

    s = clock.run(main)
    assert s.status == OK and s.turns == 2 and s.tool_calls == 0 and len(records) == 2
    assert all(r.tool_calls is None and r.status == OK for r in records)
