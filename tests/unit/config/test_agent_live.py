"""Live mode in the session config: OpenAI tool definitions, tool_results names, defaults."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from servelab.config.agent import SessionConfig

TOOL = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}


def _session(**live) -> SessionConfig:
    return SessionConfig.model_validate({"steps": [{"kind": "model"}], "live": live})


def test_a_live_block_validates_with_defaults():
    c = _session(
        tools=[TOOL],
        tool_results={"search": {"duration_s": 2, "result_tokens": {"kind": "fixed", "value": 9}}},
    )
    assert c.live.max_turns == 8 and c.live.on_max_turns == "fail" and c.live.tool_names == {"search"}
    assert c.live.tool_results["search"].duration_s.value == 2
    assert SessionConfig.model_validate({"steps": [{"kind": "model"}]}).live is None


@pytest.mark.parametrize("live,msg", [
    ({"tools": []}, "at least 1"),
    ({"tools": [{"type": "function", "function": {}}]}, "must be an OpenAI tool"),
    ({"tools": [{"name": "search"}]}, "must be an OpenAI tool"),
    ({"tools": [TOOL], "tool_results": {"serach": {}}}, "'serach', which is not among tools ['search']"),
    ({"tools": [TOOL], "max_turns": 0}, "greater than or equal to 1"),
    ({"tools": [TOOL], "on_max_turns": "retry"}, "'fail' or 'stop'"),
    ({"tools": [TOOL], "default_tool": {"command": ["x"], "url": "http://a"}}, "either command or url"),
    ({"tools": [TOOL], "bogus": 1}, "Extra inputs"),
])
def test_bad_live_blocks_are_rejected_with_the_reason(live, msg):
    with pytest.raises(ValidationError) as e:
        _session(**live)
    assert msg in str(e.value)
