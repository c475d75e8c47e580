"""Session plans: seeded, unrolled, with per-attempt draws fixed up front; acceptance checks; profiles."""

from __future__ import annotations

import pytest

from servelab.config.agent import SessionConfig
from servelab.errors import ConfigError
from servelab.workload.agent import Acceptance, Action, ModelTurn, Policy, Think, build_plan
from servelab.workload.profiles import list_profiles, load_profile, profile_names

SPEC = {
    "name": "t", "system_tokens": 100, "user_tokens": {"kind": "lognormal", "median": 200, "sigma": 0.5},
    "steps": [
        {"kind": "model", "name": "plan", "output_tokens": 50},
        {"kind": "repeat", "count": {"kind": "uniform", "low": 1, "high": 6}, "steps": [
            {"kind": "tool", "duration_s": {"kind": "exponential", "mean": 2}, "failure_prob": 0.3,
             "result_tokens": {"kind": "lognormal", "median": 300, "sigma": 1}},
            {"kind": "model", "output_tokens": {"kind": "lognormal", "median": 100, "sigma": 0.5}},
        ]},
        {"kind": "think", "duration_s": 4},
        {"kind": "model", "name": "answer", "user_tokens": 7, "output_tokens": 9},
    ],
    "policy": {"retry": {"max_retries": 2}, "correction": {"enabled": True, "output_tokens": 33}},
}


def spec(**kw) -> SessionConfig:
    return SessionConfig.model_validate({**SPEC, **kw})


def test_same_seed_and_session_same_plan_whatever_the_order():
    s = spec()
    a = [build_plan(s, i, seed=5) for i in range(20)]
    b = [build_plan(s, i, seed=5) for i in reversed(range(20))][::-1]
    assert a == b
    assert build_plan(s, 3, seed=6) != a[3]
    assert len({len(p.steps) for p in a}) > 1  # repeat counts vary between sessions


def test_plan_unrolls_repeat_in_order():
    p = build_plan(spec(), 0)
    kinds = [s.kind for s in p.steps]
    n = (len(kinds) - 3) // 2
    assert 1 <= n <= 6
    assert kinds == ["model"] + ["tool", "model"] * n + ["think", "model"]
    assert p.steps[0] == ModelTurn("plan", 50, 0, None)
    assert p.steps[-1] == ModelTurn("answer", 9, 7, None)
    assert p.steps[-2] == Think(4.0, "steps.2")
    assert p.model_turns == n + 2 and p.system_tokens == 100 and p.user_tokens > 0


def test_actions_fix_one_draw_per_attempt_and_corrections_only_after_failures():
    plans = [build_plan(spec(), i) for i in range(50)]
    actions = [s for p in plans for s in p.steps if isinstance(s, Action)]
    assert all(len(a.failures) == 3 and len(a.durations_s) == 3 for a in actions)
    assert all(
        c == (33 if f else 0) for a in actions for f, c in zip(a.failures, a.correction_tokens, strict=True)
    )
    rate = sum(f for a in actions for f in a.failures) / sum(len(a.failures) for a in actions)
    assert 0.2 < rate < 0.4  # failure_prob 0.3 over several hundred draws


def test_failure_prob_extremes():
    never = spec(steps=[{"kind": "tool", "failure_prob": 0}, {"kind": "model"}])
    always = spec(steps=[{"kind": "tool", "failure_prob": 1}, {"kind": "model"}])
    assert build_plan(never, 0).steps[0].failures == (False, False, False)
    assert build_plan(always, 0).steps[0].failures == (True, True, True)


def test_runaway_repeat_is_a_config_error():
    huge = spec(steps=[{"kind": "repeat", "count": 1000, "steps": [
        {"kind": "repeat", "count": 1000, "steps": [{"kind": "model"}]}]}])
    with pytest.raises(ConfigError, match="more than"):
        build_plan(huge, 0)


def test_backoff_grows_caps_and_jitters_down():
    p = Policy(backoff_s=1.0, multiplier=3.0, max_backoff_s=5.0, jitter=0.5)
    assert [p.backoff(k) for k in (1, 2, 3)] == [1.0, 3.0, 5.0]
    assert p.backoff(2, u=0.0) == 1.5 and p.backoff(2, u=0.5) == 2.25


@pytest.mark.parametrize("acc, text, tokens, ok", [
    (Acceptance(min_tokens=5), "x", 4, False),
    (Acceptance(min_tokens=5, max_tokens=9), "x", 9, True),
    (Acceptance(max_tokens=9), "x", 10, False),
    (Acceptance(valid_json=True), '{"a": [1, 2]}', 1, True),
    (Acceptance(valid_json=True), '{"a": ', 1, False),
    (Acceptance(tool_call_args=True), 'call: {"name": "f", "arguments": "{\\"x\\": 1}"}', 1, True),
    (Acceptance(tool_call_args=True), '{"function": {"name": "f", "arguments": {"x": 1}}}', 1, True),
    (Acceptance(tool_call_args=True), '{"name": "f", "arguments": "{broken"}', 1, False),
    (Acceptance(tool_call_args=True), '{"name": "f", "arguments": "[1]"}', 1, False),
    (Acceptance(tool_call_args=True), "no call here", 1, False),
])
def test_acceptance(acc, text, tokens, ok):
    assert acc.check(text, tokens)[0] is ok


def test_regex_acceptance_from_config():
    acc = build_plan(spec(acceptance={"regex": r"DONE\b"}), 0).acceptance
    assert acc.check("all DONE.", 3)[0] and not acc.check("DONEish", 3)[0]


def test_shipped_profiles_load_and_describe_themselves():
    names = profile_names()
    for required in ("chat", "rag", "coding-agent", "batch-summarize", "long-context", "agent-workflow"):
        assert required in names
    listed = dict(list_profiles())
    assert all(listed[n] for n in names)
    for n in names:
        prof = load_profile(n)
        assert prof.name == n and prof.session.name == n and prof.source
        assert build_plan(prof.session, 0).model_turns >= 1


def test_profile_by_path_and_unknown_name(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text(
        "name: mine\ndescription: one turn\nsession:\n  steps:\n    - {kind: model, output_tokens: 8}\n"
    )
    assert load_profile(f).session.steps[0].output_tokens.value == 8
    with pytest.raises(ConfigError, match="unknown profile 'nope'.*") as e:
        load_profile("nope")
    assert "coding-agent" in str(e.value)
