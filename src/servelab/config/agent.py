"""Agent sessions as data: ordered steps, policies, an acceptance check, and a cost model.

A session (one task) is a list of steps a user writes in YAML, each chosen by ``kind``:

* ``model`` - one model request. Its prompt is the whole conversation so far (system prefix, user
  request, every earlier model output and tool result), as a real agent resends it.
* ``tool``, ``retrieval``, ``code`` - an action that takes time, may fail or time out, and whose result
  (``result_tokens``) joins the context. Optionally executed for real: a local ``command`` or a ``url``.
* ``think`` - the user's think time.
* ``repeat`` - a block of steps run N times (N from a distribution).

With ``live`` set, model steps send OpenAI ``tools`` and follow the ``tool_calls`` the model returns (each
call "runs" as a simulated or real tool from ``live.tool_results``) until it answers without one.

Sampling and execution live in ``servelab.workload.agent`` and ``servelab.load.session``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from servelab.config.base import Strict
from servelab.config.bounds import MAX_REPEAT, check_distribution_max, check_token_distribution
from servelab.config.distributions import Distribution, Fixed, as_distribution

_DIST_FIELDS = ("output_tokens", "user_tokens", "duration_s", "result_tokens", "count", "error_tokens")


class _Step(Strict):
    name: str = Field(default="", description="Optional label shown in records and errors.")

    @field_validator(*_DIST_FIELDS, mode="before", check_fields=False)
    @classmethod
    def _bare_number(cls, v: object) -> object:
        return as_distribution(v)

    @field_validator("output_tokens", "user_tokens", "result_tokens", "error_tokens", mode="after",
                     check_fields=False)
    @classmethod
    def _bounded_tokens(cls, d: object) -> object:
        return check_token_distribution(d)


class ModelStep(_Step):
    kind: Literal["model"] = Field(default="model", description="A model request over the whole context.")
    output_tokens: Distribution = Field(
        default_factory=lambda: Fixed(value=256), description="Requested output length (max_tokens), tokens."
    )
    user_tokens: Distribution = Field(
        default_factory=lambda: Fixed(value=0),
        description="A new user message of this many tokens is appended before the request (0: none).",
    )
    timeout_s: float | None = Field(
        default=None, gt=0, description="Per-attempt deadline for the request, seconds (None: transport's)."
    )

    @field_validator("output_tokens", mode="after")
    @classmethod
    def _positive(cls, d: object) -> object:
        if isinstance(d, Fixed) and d.value < 1:
            raise ValueError("must be at least 1 (max_tokens 0 asks for nothing)")
        return d


class _ActionStep(_Step):
    duration_s: Distribution = Field(
        default_factory=lambda: Fixed(value=0.5),
        description="Simulated duration of one attempt, seconds (ignored when command or url runs for real).",
    )
    failure_prob: float = Field(default=0.0, ge=0, le=1, description="Probability that one attempt fails.")
    timeout_s: float | None = Field(
        default=None, gt=0, description="Per-attempt deadline, seconds; a longer attempt counts as a timeout."
    )
    result_tokens: Distribution = Field(
        default_factory=lambda: Fixed(value=200),
        description="Size of the result that joins the context, tokens.",
    )
    error_tokens: Distribution = Field(
        default_factory=lambda: Fixed(value=40),
        description="Size of the error message that joins the context after a failed attempt, tokens.",
    )
    command: list[str] | None = Field(
        default=None,
        description="Run this local command (argv list, no shell) for real and time it; exit status 0 is "
        "success. Needs a wall clock.",
    )
    url: str | None = Field(
        default=None, description="GET/POST this HTTP URL for real and time it; status < 400 is success."
    )
    method: Literal["GET", "POST"] = Field(default="GET", description="HTTP method for url.")
    body: str | None = Field(default=None, description="Request body for a POST to url.")

    @model_validator(mode="after")
    def _one_real(self) -> _ActionStep:
        if self.command is not None and self.url is not None:
            raise ValueError("give either command or url, not both")
        if self.command is not None and not self.command:
            raise ValueError("command must name a program, e.g. [python, tool.py]")
        if self.url is not None and urlsplit(self.url).scheme not in ("http", "https"):
            raise ValueError(f"url '{self.url}' must start with http:// or https://")
        return self


class ToolStep(_ActionStep):
    kind: Literal["tool"] = Field(default="tool", description="A tool call (search, API, file read...).")


class RetrievalStep(_ActionStep):
    kind: Literal["retrieval"] = Field(default="retrieval", description="A retrieval (vector search...).")


class CodeStep(_ActionStep):
    kind: Literal["code"] = Field(default="code", description="Code execution (tests, a build, a script).")


class ThinkStep(_Step):
    kind: Literal["think"] = Field(default="think", description="The user's think time before the next step.")
    duration_s: Distribution = Field(description="Think time, seconds.")


class RepeatStep(_Step):
    kind: Literal["repeat"] = Field(default="repeat", description="Run a block of steps N times.")
    count: Distribution = Field(description="How many times the block runs (rounded to an integer).")
    steps: list[Step] = Field(min_length=1, description="The block.")

    @field_validator("count", mode="after")
    @classmethod
    def _bounded_count(cls, d: object) -> object:
        return check_distribution_max(d, MAX_REPEAT, "repeats")


Step = Annotated[
    ModelStep | ToolStep | RetrievalStep | CodeStep | ThinkStep | RepeatStep, Field(discriminator="kind")
]
RepeatStep.model_rebuild()

ACTION_KINDS = ("tool", "retrieval", "code")


class RetryPolicy(Strict):
    max_retries: int = Field(default=2, ge=0, description="Retries of a failed step (attempts = 1 + this).")
    backoff_s: float = Field(default=1.0, ge=0, description="Wait before the first retry, seconds.")
    multiplier: float = Field(default=2.0, ge=1, description="Each further retry waits this much longer.")
    max_backoff_s: float = Field(default=30.0, ge=0, description="Upper bound of one wait, seconds.")
    jitter: float = Field(
        default=0.0, ge=0, le=1, description="Each wait is scaled by a seeded factor in [1 - jitter, 1]."
    )


class CorrectionPolicy(Strict):
    enabled: bool = Field(default=True, description="After a failed tool/retrieval/code attempt, the model "
                          "reads the error in a correction turn before the retry.")
    output_tokens: Distribution = Field(
        default_factory=lambda: Fixed(value=96), description="Output of a correction turn, tokens."
    )

    @field_validator("output_tokens", mode="before")
    @classmethod
    def _bare_number(cls, v: object) -> object:
        return as_distribution(v)


class SessionPolicy(Strict):
    retry: RetryPolicy = Field(default_factory=RetryPolicy, description="Retries with backoff.")
    correction: CorrectionPolicy = Field(
        default_factory=lambda: CorrectionPolicy(enabled=False),
        description="Correction turns after failures.",
    )
    deadline_s: float | None = Field(
        default=None, gt=0, description="The whole session must finish within this, seconds (else timed_out)."
    )
    give_up_after: int | None = Field(
        default=None,
        ge=1,
        description="Give up (status failed) after this many failed attempts in the session.",
    )


class AcceptanceConfig(Strict):
    min_tokens: int | None = Field(
        default=None, ge=0, description="Final output has at least this many tokens."
    )
    max_tokens: int | None = Field(
        default=None, ge=0, description="Final output has at most this many tokens."
    )
    regex: str | None = Field(default=None, description="The final output text must contain a match.")
    valid_json: bool = Field(default=False, description="The final output text must be valid JSON.")
    tool_call_args: bool = Field(
        default=False,
        description="The final output must hold a JSON tool call whose 'arguments' parse as a JSON object.",
    )

    @field_validator("regex")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"regex does not compile: {e}") from None
        return v

    @model_validator(mode="after")
    def _bounds(self) -> AcceptanceConfig:
        if self.min_tokens is not None and self.max_tokens is not None and self.max_tokens < self.min_tokens:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be >= min_tokens ({self.min_tokens})")
        return self


class LiveTool(_ActionStep):
    """How one tool the model may call "runs" in live mode: simulated (duration, size) or for real."""


class LiveConfig(Strict):
    """Live mode: model steps send ``tools`` and follow the ``tool_calls`` the model returns."""

    tools: list[dict[str, Any]] = Field(
        min_length=1,
        description="OpenAI tool definitions sent with every model request, e.g. {type: function, function: "
        "{name: search, description: ..., parameters: {type: object, properties: {...}}}}.",
    )
    max_turns: int = Field(
        default=8, ge=1, description="Model requests per model step at most (the first one included)."
    )
    on_max_turns: Literal["fail", "stop"] = Field(
        default="fail",
        description="When the model still calls tools on its last allowed turn: fail the session, or stop "
        "(drop those calls, keep that answer as the step's output and go on).",
    )
    tool_results: dict[str, LiveTool] = Field(
        default_factory=dict,
        description="Per tool name: duration, result size, failures, or a real command/url.",
    )
    default_tool: LiveTool = Field(
        default_factory=LiveTool, description="For a called tool not listed in tool_results."
    )

    @field_validator("tools")
    @classmethod
    def _openai_tools(cls, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, t in enumerate(tools):
            fn = t.get("function")
            if (
                t.get("type") != "function"
                or not isinstance(fn, dict)
                or not isinstance(fn.get("name"), str)
                or not fn["name"]
            ):
                raise ValueError(
                    f"tools.{i} must be an OpenAI tool: {{type: function, function: {{name: ..., "
                    f"parameters: {{...}}}}}}; got {t!r}"
                )
        return tools

    @model_validator(mode="after")
    def _known_names(self) -> LiveConfig:
        names = self.tool_names
        for name in self.tool_results:
            if name not in names:
                raise ValueError(f"tool_results names '{name}', which is not among tools {sorted(names)}")
        return self

    @property
    def tool_names(self) -> set[str]:
        return {t["function"]["name"] for t in self.tools}


class SessionConfig(Strict):
    """One agent task (a session): what it sends, step by step, and how it copes with failures."""

    name: str = Field(default="agent", description="Profile/session name, stored in each session record.")
    description: str = Field(default="", description="One line: what this session models.")
    system_tokens: int = Field(default=0, ge=0, description="System prompt length, tokens.")
    shared_system: bool = Field(
        default=True, description="Every session uses the same system prompt (a cacheable shared prefix)."
    )
    user_tokens: Distribution = Field(
        default_factory=lambda: Fixed(value=200), description="The initial user request, tokens."
    )
    temperature: float = Field(default=0.0, ge=0, le=2, description="Sampling temperature of model steps.")
    ignore_eos: bool = Field(
        default=True, description="Ask the server to ignore EOS so outputs have the sampled lengths."
    )
    steps: list[Step] = Field(min_length=1, description="The ordered steps of the task.")
    policy: SessionPolicy = Field(default_factory=SessionPolicy, description="Retries, deadlines, give-up.")
    acceptance: AcceptanceConfig | None = Field(
        default=None, description="Check on the final model output; None accepts every completed session."
    )
    live: LiveConfig | None = Field(
        default=None,
        description="Live mode: model steps send these tools and follow the model's tool calls (None: "
        "scripted). "
        "ignore_eos then defaults to false so the model can stop after a tool call.",
    )

    @field_validator("user_tokens", mode="before")
    @classmethod
    def _bare_number(cls, v: object) -> object:
        return as_distribution(v)

    @model_validator(mode="after")
    def _has_model_step(self) -> SessionConfig:
        if not _any_model(self.steps):
            raise ValueError("steps must contain at least one model step (kind: model)")
        return self


def _any_model(steps: list) -> bool:
    for s in steps:
        if isinstance(s, ModelStep) or (isinstance(s, RepeatStep) and _any_model(s.steps)):
            return True
    return False


class ProfileConfig(Strict):
    """A shipped or user-written workload profile: a session plus where its numbers come from."""

    name: str = Field(description="Profile name (the file name without .yaml).")
    description: str = Field(description="One line: what the profile models.")
    source: str = Field(default="", description="Where the numbers come from (traces, measurements).")
    session: SessionConfig = Field(description="The session every user/task of this profile runs.")


class AgentWorkloadConfig(Strict):
    """``workload: {kind: agent, ...}``: every session runs a profile or an inline session."""

    kind: Literal["agent"] = Field(default="agent", description="Multi-step agent sessions.")
    profile: str | None = Field(
        default=None, description="A shipped profile name (servelab profiles) or a path to a profile YAML."
    )
    session: SessionConfig | None = Field(default=None, description="An inline session (instead of profile).")

    @model_validator(mode="after")
    def _one_source(self) -> AgentWorkloadConfig:
        if (self.profile is None) == (self.session is None):
            raise ValueError("give exactly one of profile (a name or a file) or session (inline steps)")
        return self


# ---- cost ---------------------------------------------------------------------------------------------


class GpuHourCost(Strict):
    kind: Literal["gpu_hour"] = Field(default="gpu_hour", description="Self-hosted: pay for GPU time.")
    gpu_hour_usd: float = Field(gt=0, description="Price of one GPU for one hour, USD.")
    gpus: int = Field(default=1, ge=1, description="GPUs the deployment holds for the whole run.")


class TokenPriceCost(Strict):
    kind: Literal["tokens"] = Field(default="tokens", description="An API: pay per token.")
    input_per_million: float = Field(ge=0, description="USD per million uncached input tokens.")
    cached_input_per_million: float | None = Field(
        default=None, ge=0, description="USD per million cached input tokens (None: the input price)."
    )
    output_per_million: float = Field(ge=0, description="USD per million output tokens.")


ModelCost = Annotated[GpuHourCost | TokenPriceCost, Field(discriminator="kind")]


class CostConfig(Strict):
    model: ModelCost = Field(description="How model serving is paid for: GPU hours or token prices.")
    tool_call_usd: float = Field(default=0.0, ge=0, description="Cost of one tool/retrieval/code call, USD.")
    orchestration_usd_per_session_s: float = Field(
        default=0.0, ge=0, description="Agent runtime cost per second a session runs, USD."
    )
    failure_usd: float = Field(
        default=0.0, ge=0, description="Cost of each task that fails or is rejected, USD."
    )
    rework_minutes: float = Field(default=0.0, ge=0, description="Human minutes to redo a failed task.")
    rework_hourly_usd: float = Field(default=0.0, ge=0, description="Hourly rate of that human rework, USD.")
