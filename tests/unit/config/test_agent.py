"""Agent session, profile and cost config: strict, with clear errors."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from servelab.config.agent import (
    AcceptanceConfig,
    AgentWorkloadConfig,
    CostConfig,
    GpuHourCost,
    ModelStep,
    RepeatStep,
    SessionConfig,
    TokenPriceCost,
    ToolStep,
)
from servelab.config.distributions import Fixed, LogNormal
from servelab.config.loading import validate
from servelab.errors import ConfigError


def session(steps, **kw) -> SessionConfig:
    return SessionConfig.model_validate({"steps": steps, **kw})


def test_steps_are_chosen_by_kind_and_nest_in_repeat():
    s = session([
        {"kind": "model", "output_tokens": 50},
        {"kind": "repeat", "count": 3, "steps": [
            {"kind": "tool", "duration_s": {"kind": "lognormal", "median": 2, "sigma": 0.5}},
            {"kind": "model"},
        ]},
    ])
    assert isinstance(s.steps[0], ModelStep) and s.steps[0].output_tokens == Fixed(value=50)
    rep = s.steps[1]
    assert isinstance(rep, RepeatStep) and rep.count == Fixed(value=3)
    assert isinstance(rep.steps[0], ToolStep) and isinstance(rep.steps[0].duration_s, LogNormal)


@pytest.mark.parametrize("bad, where", [
    ({"steps": [{"kind": "model", "outptu_tokens": 5}]}, "steps.0.outptu_tokens"),
    ({"steps": [{"kind": "walk"}]}, "steps.0"),
    ({"steps": [{"kind": "model", "output_tokens": 0}]}, "steps.0.output_tokens"),
    ({"steps": [{"kind": "tool", "failure_prob": 1.5}, {"kind": "model"}]}, "steps.0.failure_prob"),
    ({"steps": [{"kind": "model"}], "policy": {"retry": {"max_retries": -1}}}, "policy.retry.max_retries"),
])
def test_bad_keys_and_values_name_their_path(bad, where):
    with pytest.raises(ConfigError) as e:
        validate(SessionConfig, bad, source="session.yaml")
    assert where in str(e.value) and "session.yaml" in str(e.value)


def test_a_session_needs_a_model_step_even_inside_repeat():
    with pytest.raises(ValidationError, match="at least one model step"):
        session([{"kind": "tool"}, {"kind": "think", "duration_s": 1}])
    session([{"kind": "repeat", "count": 2, "steps": [{"kind": "model"}]}])


def test_real_execution_is_command_or_url_not_both():
    with pytest.raises(ValidationError, match="not both"):
        ToolStep(command=["true"], url="http://127.0.0.1:1/x")
    with pytest.raises(ValidationError, match="http"):
        ToolStep(url="ftp://127.0.0.1/x")
    with pytest.raises(ValidationError, match="program"):
        ToolStep(command=[])
    assert ToolStep(url="http://127.0.0.1:9/x", method="POST", body="{}").method == "POST"


def test_acceptance_checks_its_own_settings():
    with pytest.raises(ValidationError, match="does not compile"):
        AcceptanceConfig(regex="(")
    with pytest.raises(ValidationError, match="max_tokens"):
        AcceptanceConfig(min_tokens=10, max_tokens=5)


def test_agent_workload_takes_exactly_one_source():
    assert AgentWorkloadConfig(profile="chat").profile == "chat"
    with pytest.raises(ValidationError, match="exactly one"):
        AgentWorkloadConfig()
    with pytest.raises(ValidationError, match="exactly one"):
        AgentWorkloadConfig(profile="chat", session=session([{"kind": "model"}]))


def test_cost_model_kinds():
    c = CostConfig.model_validate({"model": {"kind": "gpu_hour", "gpu_hour_usd": 3.5, "gpus": 8}})
    assert isinstance(c.model, GpuHourCost) and c.model.gpus == 8 and c.tool_call_usd == 0
    c = CostConfig.model_validate(
        {"model": {"kind": "tokens", "input_per_million": 3, "output_per_million": 15}}
    )
    assert isinstance(c.model, TokenPriceCost) and c.model.cached_input_per_million is None
    with pytest.raises(ValidationError):
        CostConfig.model_validate({"model": {"kind": "gpu_hour", "gpu_hour_usd": 0}})
    with pytest.raises(ValidationError):
        CostConfig.model_validate({"model": {"kind": "free"}})


def test_every_field_is_described():
    from servelab.config import agent

    for name in dir(agent):
        obj = getattr(agent, name)
        if isinstance(obj, type) and hasattr(obj, "model_fields") and obj.__module__ == agent.__name__:
            for fname, f in obj.model_fields.items():
                assert f.description, f"{name}.{fname} has no description"
