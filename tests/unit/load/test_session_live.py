"""Live mode in the session executor on virtual time, against an in-memory transport twin."""

from __future__ import annotations

import pytest

from servelab.clock import NS_PER_S, VirtualClock
from servelab.config.agent import SessionConfig
from servelab.errors import ConfigError
from servelab.load.session import RequestIds, run_session
from servelab.records.schema import OK, RequestRecord
from servelab.transport.base import ModelRequest
from servelab.workload.agent import build_plan

TOOL = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}


class Words:
    def text(self, n_tokens: int, key: int) -> str:
        return " ".join([f"t{key}"] * n_tokens)


class CallsTwice:
    """Answers the first two requests with a search call, then plainly; 1 s per request."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock, self.calls = clock, []

    async def send(self, req: ModelRequest) -> RequestRecord:
        self.calls.append(req)
        t0 = self.clock.now()
        await self.clock.sleep(1.0)
        n = len(self.calls)
        calls = [{"id": f"c{n}", "type": "function", "function": {"name": "search", "arguments": "{}"}}]
        return RequestRecord(request_id=req.request_id, status=OK, sent_ns=t0, end_ns=self.clock.now(),
                             usage_completion_tokens=5, tool_calls=calls if n <= 2 else None,
                             output_text="" if n <= 2 else "done")


def _spec(tool: dict) -> SessionConfig:
    return SessionConfig.model_validate(
        {
            "steps": [{"kind": "model"}],
            "policy": {"retry": {"max_retries": 0}},
            "live": {"tools": [TOOL], "tool_results": {"search": tool}},
        }
    )


def _run(spec: SessionConfig):
    clock = VirtualClock()
    tr = CallsTwice(clock)

    async def main():
        return await run_session(build_plan(spec, 0), tr, clock, RequestIds(), on_record=lambda r: None,
                                 texts=Words())

    return clock.run(main), tr


def test_live_turns_and_tool_time_add_up_on_virtual_time():
    s, tr = _run(_spec({"duration_s": 2.5, "result_tokens": 4}))
    assert s.status == "ok" and s.turns == 3 and s.tool_calls == 2
    assert s.tool_ns == 5 * NS_PER_S and s.model_ns == 3 * NS_PER_S
    assert s.end_ns - s.start_ns == 8 * NS_PER_S
    assert all(r.extra_body["tools"] == [TOOL] and r.min_tokens is None for r in tr.calls)
    assert [r.turn for r in tr.calls] == [0, 1, 2]


def test_a_live_tool_timeout_counts_as_a_timed_out_tool_failure():
    s, _ = _run(_spec({"duration_s": 9, "timeout_s": 1}))
    assert s.status == "failed" and s.timeouts == 1 and s.tool_failures == 1 and s.turns == 1


def test_a_real_live_tool_is_refused_on_virtual_time():
    with pytest.raises(ConfigError, match="cannot be timed on virtual time"):
        _run(_spec({"command": ["true"]}))
