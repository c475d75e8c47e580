"""Turn a session spec (``servelab.config.agent.SessionConfig``) into a concrete, seeded plan.

A :class:`SessionPlan` is plain data: every length, duration and failure draw is fixed when the plan is
built, from a generator seeded by ``(seed, session_id)``, so session 17 sends the same requests whatever
the concurrency or the order sessions start in. ``repeat`` blocks are unrolled. The executor
(``servelab.load.session``) only follows the plan; what it cannot know in advance (server faults,
timeouts) it handles by the plan's policy.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from servelab.config.agent import (
    AcceptanceConfig,
    LiveConfig,
    LiveTool,
    ModelStep,
    RepeatStep,
    SessionConfig,
    ThinkStep,
)
from servelab.config.distributions import Fixed
from servelab.errors import ConfigError

MAX_PLAN_STEPS = 100_000


@dataclass(slots=True)
class ModelTurn:
    """One model request over the conversation so far."""

    name: str
    output_tokens: int
    user_tokens: int = 0  # a new user message appended before the request (0: none)
    timeout_s: float | None = None
    kind: str = "model"


@dataclass(slots=True)
class Action:
    """One tool / retrieval / code step; per-attempt draws are fixed up front (length 1 + max_retries)."""

    kind: str  # tool | retrieval | code
    name: str
    durations_s: tuple[float, ...]
    failures: tuple[bool, ...]
    result_tokens: int
    error_tokens: int
    correction_tokens: tuple[int, ...] = ()  # output of the correction turn after each failed attempt
    timeout_s: float | None = None
    command: tuple[str, ...] | None = None
    url: str | None = None
    method: str = "GET"
    body: str | None = None


@dataclass(slots=True)
class Think:
    duration_s: float
    name: str = ""
    kind: str = "think"


PlanStep = ModelTurn | Action | Think


@dataclass(slots=True)
class Acceptance:
    """A compiled acceptance check on the final model output."""

    min_tokens: int | None = None
    max_tokens: int | None = None
    regex: re.Pattern[str] | None = None
    valid_json: bool = False
    tool_call_args: bool = False

    @classmethod
    def from_config(cls, c: AcceptanceConfig) -> Acceptance:
        return cls(c.min_tokens, c.max_tokens, re.compile(c.regex) if c.regex else None, c.valid_json,
                   c.tool_call_args)

    def check(self, text: str, tokens: int) -> tuple[bool, str | None]:
        """Whether the final output passes; the reason when it does not."""
        if self.min_tokens is not None and tokens < self.min_tokens:
            return False, f"final output has {tokens} tokens, fewer than min_tokens {self.min_tokens}"
        if self.max_tokens is not None and tokens > self.max_tokens:
            return False, f"final output has {tokens} tokens, more than max_tokens {self.max_tokens}"
        if self.regex is not None and self.regex.search(text) is None:
            return False, f"final output does not match regex {self.regex.pattern!r}"
        if self.valid_json:
            try:
                json.loads(text)
            except ValueError:
                return False, "final output is not valid JSON"
        if self.tool_call_args and not _tool_call_ok(text):
            return False, "final output holds no tool call whose arguments parse as a JSON object"
        return True, None


def _tool_call_ok(text: str) -> bool:
    """A JSON object (or list of them) with ``arguments`` that is, or parses to, a JSON object."""
    start = text.find("{")
    if start < 0:
        return False
    try:
        obj = json.loads(text[start:text.rfind("}") + 1])
    except ValueError:
        return False
    calls = obj if isinstance(obj, list) else [obj]
    for call in calls:
        if not isinstance(call, dict):
            return False
        fn = call.get("function", call)
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return False
        if not isinstance(args, dict):
            return False
    return bool(calls)


@dataclass(slots=True)
class Policy:
    max_retries: int = 2
    backoff_s: float = 1.0
    multiplier: float = 2.0
    max_backoff_s: float = 30.0
    jitter: float = 0.0
    correction: bool = False
    deadline_s: float | None = None
    give_up_after: int | None = None

    def backoff(self, retry: int, u: float = 1.0) -> float:
        """Wait before retry number ``retry`` (1-based); ``u`` in [0, 1] applies the jitter."""
        base = min(self.max_backoff_s, self.backoff_s * self.multiplier ** (retry - 1))
        return base * (1.0 - self.jitter * (1.0 - u))


class LivePlan:
    """Live mode: the tools sent with each model request, and how each tool the model calls runs.

    Tool calls are not known in advance, so their draws (duration per attempt, failure, result size) are
    made when a call arrives, from the session's own generator: same session, same answers, same draws.
    """

    __slots__ = ("tools", "max_turns", "fail_at_max", "_specs", "_default", "_draw", "_attempts")

    def __init__(self, cfg: LiveConfig, draw: _Draw, attempts: int) -> None:
        self.tools = cfg.tools
        self.max_turns = cfg.max_turns
        self.fail_at_max = cfg.on_max_turns == "fail"
        self._specs = cfg.tool_results
        self._default = cfg.default_tool
        self._draw = draw
        self._attempts = attempts

    @property
    def real(self) -> bool:
        """Whether some tool runs a real command or url (wall clock only)."""
        return any(t.command or t.url for t in (self._default, *self._specs.values()))

    def action(self, name: str) -> Action:
        """A concrete tool action for one call of ``name`` (an unlisted name runs as ``default_tool``)."""
        t: LiveTool = self._specs.get(name, self._default)
        draw = self._draw
        return Action(
            kind="tool",
            name=name or "tool",
            durations_s=tuple(max(0.0, draw(t.duration_s)) for _ in range(self._attempts)),
            failures=tuple(bool(x) for x in draw.rng.random(self._attempts) < t.failure_prob),
            result_tokens=draw.tokens(t.result_tokens),
            error_tokens=draw.tokens(t.error_tokens),
            timeout_s=t.timeout_s,
            command=tuple(t.command) if t.command else None,
            url=t.url,
            method=t.method,
            body=t.body,
        )


@dataclass(slots=True)
class SessionPlan:
    """Everything one session will do, concrete."""

    session_id: int
    profile: str
    system_tokens: int
    user_tokens: int
    steps: list[PlanStep]
    policy: Policy = field(default_factory=Policy)
    acceptance: Acceptance | None = None
    shared_system: bool = True
    temperature: float = 0.0
    ignore_eos: bool = True
    seed: int = 0  # for runtime draws (backoff jitter)
    live: LivePlan | None = None  # live mode: follow the model's tool calls

    @property
    def model_turns(self) -> int:
        return sum(1 for s in self.steps if isinstance(s, ModelTurn))


class _Draw:
    """Seeded draws from config distributions (one generator per session)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self._samplers: dict[int, object] = {}

    def __call__(self, dist: object) -> float:
        if isinstance(dist, Fixed):
            return float(dist.value)
        s = self._samplers.get(id(dist))
        if s is None:
            from servelab.workload.sampling import make_sampler

            s = make_sampler(dist, self.rng)
            self._samplers[id(dist)] = s
        return float(s.sample())  # type: ignore[attr-defined]

    def tokens(self, dist: object, minimum: int = 0) -> int:
        return max(minimum, int(round(self(dist))))


def build_plan(spec: SessionConfig, session_id: int, seed: int = 0) -> SessionPlan:
    """Sample a concrete plan for session ``session_id`` of ``spec`` (same inputs, same plan)."""
    rng = np.random.default_rng([seed & 0xFFFFFFFF, session_id & 0xFFFFFFFF, 0xA6E7])
    draw = _Draw(rng)
    pol = spec.policy
    policy = Policy(
        max_retries=pol.retry.max_retries, backoff_s=pol.retry.backoff_s, multiplier=pol.retry.multiplier,
        max_backoff_s=pol.retry.max_backoff_s, jitter=pol.retry.jitter, correction=pol.correction.enabled,
        deadline_s=pol.deadline_s, give_up_after=pol.give_up_after,
    )
    steps: list[PlanStep] = []
    _unroll(spec.steps, draw, spec, steps, path="steps")
    live = None
    ignore_eos = spec.ignore_eos
    if spec.live is not None:
        live_rng = np.random.default_rng([seed & 0xFFFFFFFF, session_id & 0xFFFFFFFF, 0x11FE])
        live = LivePlan(spec.live, _Draw(live_rng), 1 + pol.retry.max_retries)
        if "ignore_eos" not in spec.model_fields_set:
            ignore_eos = False  # let the model stop after a tool call
    return SessionPlan(
        session_id=session_id, profile=spec.name, system_tokens=spec.system_tokens,
        user_tokens=draw.tokens(spec.user_tokens, 1), steps=steps, policy=policy,
        acceptance=Acceptance.from_config(spec.acceptance) if spec.acceptance else None,
        shared_system=spec.shared_system, temperature=spec.temperature, ignore_eos=ignore_eos,
        seed=int(rng.integers(0, 2**31)), live=live,
    )


def _unroll(steps: list, draw: _Draw, spec: SessionConfig, out: list[PlanStep], path: str) -> None:
    attempts = 1 + spec.policy.retry.max_retries
    corr = spec.policy.correction
    for i, s in enumerate(steps):
        where = f"{path}.{i}"
        if isinstance(s, ModelStep):
            out.append(ModelTurn(s.name or where, draw.tokens(s.output_tokens, 1), draw.tokens(s.user_tokens),
                                 s.timeout_s))
        elif isinstance(s, ThinkStep):
            out.append(Think(max(0.0, draw(s.duration_s)), s.name or where))
        elif isinstance(s, RepeatStep):
            for _ in range(draw.tokens(s.count)):
                _unroll(s.steps, draw, spec, out, f"{where}.steps")
        else:
            fails = tuple(bool(x) for x in draw.rng.random(attempts) < s.failure_prob)
            out.append(
                Action(
                    kind=s.kind,
                    name=s.name or where,
                    durations_s=tuple(max(0.0, draw(s.duration_s)) for _ in range(attempts)),
                    failures=fails,
                    result_tokens=draw.tokens(s.result_tokens),
                    error_tokens=draw.tokens(s.error_tokens),
                    correction_tokens=tuple(draw.tokens(corr.output_tokens, 1) if f else 0 for f in fails)
                    if corr.enabled
                    else (),
                    timeout_s=s.timeout_s,
                    command=tuple(s.command) if s.command else None,
                    url=s.url,
                    method=s.method,
                    body=s.body,
                )
            )
        if len(out) > MAX_PLAN_STEPS:
            raise ConfigError(
                f"session '{spec.name}' unrolls to more than {MAX_PLAN_STEPS} steps at {where}",
                hint="lower the repeat counts (a repeat's count distribution may be too wide)",
            )


class TextSource(Protocol):
    """Message text of an exact token count; the same ``key`` always gives the same text."""

    def text(self, n_tokens: int, key: int) -> str: ...


class SynthTextSource:
    """A :class:`TextSource` over the workload's calibrated ``PromptSynthesizer``.

    Key -1 is the shared system prompt (built once, identical in every session so a prefix cache can
    share it); other keys are per-session parts, each distinct.
    """

    def __init__(self, synth: object) -> None:
        self.synth = synth
        self._shared: dict[int, str] = {}

    def text(self, n_tokens: int, key: int) -> str:
        if key < 0:
            t = self._shared.get(n_tokens)
            if t is None:
                t = self._shared[n_tokens] = self.synth.build(n_tokens, index=0, kind=2).text  # type: ignore[attr-defined]
            return t
        return self.synth.build(n_tokens, index=key, kind=3, lead=False).text  # type: ignore[attr-defined]


async def synth_text_source(counter: object, seed: int = 0) -> SynthTextSource:
    """Calibrate a ``PromptSynthesizer`` on ``counter`` (a token counter) and wrap it as a text source."""
    from servelab.workload.prompts import PromptSynthesizer

    synth = PromptSynthesizer(counter, seed)  # type: ignore[arg-type]
    await synth.calibrate()
    return SynthTextSource(synth)
