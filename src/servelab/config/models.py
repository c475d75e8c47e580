"""Config models for a run: target, workload, load, limits, SLOs.

Every field carries a description; ``servelab run`` flags override file values, which override defaults.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from servelab.config import bounds as B
from servelab.config.agent import AgentWorkloadConfig, CostConfig
from servelab.config.base import Strict
from servelab.config.distributions import Distribution, Fixed, as_distribution
from servelab.config.mix import MixClassConfig, check_mix, default_sessions
from servelab.config.trace_formats import TraceFormat, options_text
from servelab.config.validity import ValidityConfig

# The first run: a real model on real (simulated) hardware with a chat-sized workload, finishing in seconds.
DEFAULT_TARGET = "sim:llama-3.1-8b@1xh100"
DEFAULT_CONCURRENCY = 16


class TimeoutsConfig(Strict):
    connect_s: float = Field(
        default=10.0, gt=0, le=B.MAX_TIMEOUT_S, description="TCP/TLS connect timeout, seconds."
    )
    first_token_s: float = Field(
        default=120.0, gt=0, le=B.MAX_TIMEOUT_S, description="Send to first token, seconds."
    )
    total_s: float = Field(
        default=600.0, gt=0, le=B.MAX_TIMEOUT_S, description="Send to end of response, seconds."
    )
    idle_s: float = Field(
        default=60.0,
        gt=0,
        le=86_400,
        description="Inter-token idle timeout: a stream quiet "
        "this long after a token ends as `timeout`, seconds.",
    )


class TargetConfig(Strict):
    url: str = Field(
        default=DEFAULT_TARGET,
        description="OpenAI-compatible base URL (http://127.0.0.1:8000/v1) or a simulator deployment "
        "(sim:MODEL@COUNTxHARDWARE[,key=value...], sim:FILE.yaml; plain `sim` is the tiny test model).",
    )
    model: str | None = Field(default=None, description="Model name sent in requests; default: the first "
                              "model the server lists.")
    api: Literal["chat", "completions"] = Field(default="chat", description="Which endpoint to call.")
    stream: bool = Field(default=True, description="Stream responses (SSE) with usage in the last chunk.")
    api_key_env: str | None = Field(
        default=None, description="Name of the environment variable that holds the bearer key (never stored)."
    )
    headers: dict[str, str] = Field(default_factory=dict, description="Extra HTTP headers on every request.")
    verify_tls: bool = Field(default=True, description="Verify TLS certificates for https URLs.")
    allow_over_context: bool = Field(
        default=False, description="Send requests longer than the served context (max_model_len) anyway; by "
        "default the run refuses to start (exit 2).")
    timeouts: TimeoutsConfig = Field(default_factory=TimeoutsConfig, description="Per-request timeouts.")
    max_response_bytes: int = Field(
        default=64 * 1024 * 1024, ge=1024, le=2**40, description="Per-response byte cap: a response that "
        "grows past it is cut and recorded `malformed` (bounds memory against an endless stream).")
    tokenizer: str | None = Field(
        default=None,
        description="Local tokenizer to calibrate prompt lengths when the server has no /tokenize "
        "(a tokenizer.json path or an installed tokenizer name).",
    )
    extra_body: dict[str, object] = Field(
        default_factory=dict, description="Extra JSON fields merged into every request body."
    )

    @model_validator(mode="before")
    @classmethod
    def _userinfo_to_header(cls, data: Any) -> Any:
        return B.move_userinfo(data)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if v == "sim" or v.startswith("sim:"):
            return v
        if not (v.startswith("http://") or v.startswith("https://")):
            raise ValueError(
                f"'{v}' is neither an http(s) URL nor a simulator target; expected e.g. "
                "http://127.0.0.1:8000/v1 or sim:llama-3.1-8b@1xh100"
            )
        return B.check_http_url(v.rstrip("/"))

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            B.check_header(name, value)
        return v

    @property
    def is_sim(self) -> bool:
        return self.url == "sim" or self.url.startswith("sim:")


class SharedPrefixConfig(Strict):
    tokens: int = Field(
        gt=0, le=B.MAX_TOKENS, description="Length of the prefix common to every request of a group, tokens."
    )
    groups: int = Field(
        default=1, ge=1, le=B.MAX_COUNT, description="Number of distinct prefixes (requests spread evenly)."
    )


class WorkloadConfig(Strict):
    kind: Literal["requests"] = Field(default="requests", description="Single-turn requests.")
    input_tokens: Distribution = Field(
        default_factory=lambda: Fixed(value=1024),
        description="Prompt length, tokens (beyond any shared prefix).",
    )
    output_tokens: Distribution = Field(
        default_factory=lambda: Fixed(value=256), description="Requested output length (max_tokens), tokens."
    )
    shared_prefix: SharedPrefixConfig | None = Field(
        default=None, description="A prefix of N tokens shared by each of K groups of requests."
    )
    ignore_eos: bool = Field(
        default=False,
        description="Ask the server to ignore EOS (and set min_tokens) to force output lengths.",
    )
    temperature: float = Field(default=0.0, ge=0, le=2, description="Sampling temperature.")
    system_prompt: str | None = Field(default=None, description="Optional system message (chat API).")

    @field_validator("input_tokens", "output_tokens", mode="before")
    @classmethod
    def _bare_number(cls, v: object) -> object:
        return as_distribution(v)

    @field_validator("input_tokens", "output_tokens", mode="after")
    @classmethod
    def _token_bounds(cls, d: object) -> object:
        return B.check_token_distribution(d)

    @field_validator("output_tokens", mode="after")
    @classmethod
    def _positive_output(cls, d: object) -> object:
        if isinstance(d, Fixed) and d.value < 1:
            raise ValueError("must be at least 1 (max_tokens 0 asks for nothing)")
        return d


class LoadConfig(Strict):
    concurrency: int | None = Field(
        default=None,
        ge=1,
        le=B.MAX_CONCURRENCY,
        description="Closed loop: number of users each sending the next request when the "
        f"last finishes (default {DEFAULT_CONCURRENCY} when no rate is given).",
    )
    rate: float | None = Field(default=None, ge=B.MIN_RATE, le=B.MAX_RATE,
                               description="Open loop: request rate, requests per second.")
    arrival: Literal["poisson", "gamma", "constant"] = Field(
        default="poisson", description="Open-loop inter-arrival distribution."
    )
    burstiness: float = Field(
        default=1.0,
        ge=B.MIN_BURSTINESS,
        le=B.MAX_BURSTINESS,
        description="Gamma shape: 1 is Poisson, below 1 burstier, above 1 smoother.",
    )
    think_time_s: float = Field(default=0.0, ge=0, le=B.MAX_DURATION_S,
                                description="Closed loop: pause between a user's requests.")

    @model_validator(mode="after")
    def _one_mode(self) -> LoadConfig:
        if self.concurrency is not None and self.rate is not None:
            raise ValueError("give either concurrency (closed loop) or rate (open loop), not both")
        return self

    @property
    def mode(self) -> Literal["closed", "open"]:
        return "open" if self.rate is not None else "closed"

    @property
    def effective_concurrency(self) -> int:
        return self.concurrency if self.concurrency is not None else DEFAULT_CONCURRENCY


class LimitsConfig(Strict):
    requests: int | None = Field(default=None, ge=1, le=B.MAX_COUNT,
                                 description="Stop after this many requests were sent.")
    sessions: int | None = Field(
        default=None, ge=1, le=B.MAX_COUNT, description="Agent workloads: stop after this many sessions were "
        "started."
    )
    duration_s: float | None = Field(default=None, gt=0, le=B.MAX_DURATION_S,
                                     description="Stop sending after this many seconds.")
    warmup_requests: int = Field(
        default=0, ge=0, le=B.MAX_COUNT, description="First N requests excluded from figures."
    )
    warmup_s: float = Field(default=0.0, ge=0, le=B.MAX_DURATION_S,
                            description="Requests sent in the first S seconds excluded.")
    drain_timeout_s: float = Field(
        default=60.0,
        ge=0,
        le=B.MAX_TIMEOUT_S,
        description="After the last send, wait this long for requests in flight, then cancel.",
    )
    max_lag_p99_ms: float = Field(
        default=10.0, gt=0, description="Open loop: schedule lag p99 above this marks the figures invalid."
    )

    @model_validator(mode="after")
    def _some_limit(self) -> LimitsConfig:
        if self.requests is not None and self.warmup_requests >= self.requests:
            raise ValueError(
                f"warmup_requests ({self.warmup_requests}) must be smaller than requests ({self.requests})"
            )
        return self


class SLOConfig(Strict):
    ttft_ms: float | None = Field(default=None, gt=0, description="Time to first token must be at most this.")
    itl_ms: float | None = Field(default=None, gt=0, description="Mean inter-token latency at most this.")
    tpot_ms: float | None = Field(default=None, gt=0, description="Time per output token at most this.")
    e2e_ms: float | None = Field(default=None, gt=0, description="End-to-end latency at most this.")
    percentile: float = Field(
        default=99,
        gt=0,
        le=100,
        description="The percentile the SLO check applies to (goodput is per request).",
    )
    min_goodput_fraction: float | None = Field(
        default=None, ge=0, le=1, description="servelab run exits 1 when goodput fraction is below this."
    )


class TelemetryConfig(Strict):
    enabled: bool = Field(default=True, description="Scrape the target's Prometheus /metrics during the run.")
    interval_s: float | None = Field(
        default=None, gt=0,
        description="Seconds between scrapes on the run's clock; default 1 against real servers, 5 (virtual) "
        "against the in-process simulator, where each scrape costs wall time.",
    )
    metrics_url: str | None = Field(
        default=None, description="Metrics URL; default: the target's base URL with /v1 replaced by /metrics."
    )
    dcgm_url: str | None = Field(default=None, description="A DCGM exporter's /metrics URL for GPU counters.")
    nvml: bool = Field(default=True, description="Sample local NVIDIA GPUs through NVML when available.")


class ReplayWorkloadConfig(Strict):
    kind: Literal["replay"] = Field(default="replay", description="Replay a recorded trace.")
    path: str = Field(description="The trace: a file (claude-code: also a directory or glob; servelab: a run "
                      "directory).")
    format: TraceFormat = Field(description="The trace's format (see docs/traces.md).")
    speed: float | None = Field(
        default=None,
        ge=B.MIN_SPEED,
        le=B.MAX_SPEED,
        description="Play the trace this many times faster (2 = twice as fast). Default 1.",
    )
    rate: float | None = Field(
        default=None,
        ge=B.MIN_RATE,
        le=B.MAX_RATE,
        description="Compress or stretch time so the mean arrival "
        "rate is this, req/s (untimed traces: Poisson session starts at this rate).",
    )
    start_s: float | None = Field(
        default=None, ge=0, le=B.MAX_DURATION_S * 1000, description="Window start in the trace, seconds."
    )
    duration_s: float | None = Field(
        default=None, gt=0, le=B.MAX_DURATION_S * 1000, description="Window length in the trace, seconds."
    )
    sample: float | None = Field(default=None, gt=0, le=1, description="Keep this seeded random fraction of "
                                 "the requests (whole sessions), arrival times kept.")
    max_requests: int | None = Field(
        default=None,
        ge=1,
        le=B.MAX_COUNT,
        description="Keep at most this many requests (whole sessions, in time order).",
    )
    ignore_eos: bool = Field(default=True, description="Force each response to the trace's output length.")
    scale_think: bool = Field(default=True, description="Scale session think times with speed/rate too.")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description=f"Options for the format's loader ({options_text()}).",
    )

    @model_validator(mode="after")
    def _one_speed(self) -> ReplayWorkloadConfig:
        if self.speed is not None and self.rate is not None:
            raise ValueError("give either speed or rate, not both")
        return self


def _workload_kind(v: Any) -> str:
    if isinstance(v, dict):
        return str(v.get("kind", "requests"))
    return str(getattr(v, "kind", "requests"))


AnyWorkload = Annotated[
    Annotated[WorkloadConfig, Tag("requests")] | Annotated[AgentWorkloadConfig, Tag("agent")]
    | Annotated[ReplayWorkloadConfig, Tag("replay")],
    Discriminator(_workload_kind),
]


class RunConfig(Strict):
    target: TargetConfig = Field(default_factory=TargetConfig, description="Where requests go.")
    workload: AnyWorkload = Field(
        default_factory=WorkloadConfig,
        description="What is sent: single-turn requests (kind: requests) or agent sessions (kind: agent).",
    )
    cost: CostConfig | None = Field(default=None, description="Prices for cost per successful task.")
    load: LoadConfig = Field(default_factory=LoadConfig, description="When requests are sent.")
    limits: LimitsConfig = Field(default_factory=LimitsConfig, description="When the run stops.")
    slo: SLOConfig = Field(default_factory=SLOConfig, description="Service-level objectives for goodput.")
    telemetry: TelemetryConfig = Field(
        default_factory=TelemetryConfig, description="Server metrics scraping."
    )
    validity: ValidityConfig = Field(default_factory=ValidityConfig, description="When a run's figures are "
                                     "marked INVALID (see docs/exit-codes.md).")
    percentiles: list[float] = Field(
        default_factory=lambda: [50, 90, 95, 99], description="Percentiles reported for every metric."
    )
    mix: list[MixClassConfig] | None = Field(
        default=None,
        description="Mixed traffic on one endpoint: workload classes run at once, each with its "
        "own load and tenant (replaces workload and load; see docs/mixed-traffic.md).",
    )
    mix_baseline: bool = Field(
        default=True, description="With a mix of two or more classes, also run the first (interactive) class "
        "alone, same seed and load, and report its p95 with and without the others (interference).")
    seed: int = Field(default=0, description="Seed for every random choice; same seed, same requests.")
    out: str = Field(default="runs", description="Directory in which the run directory is created.")
    name: str | None = Field(default=None, description="Optional run name (part of the run directory name).")

    @field_validator("percentiles")
    @classmethod
    def _pcts(cls, v: list[float]) -> list[float]:
        for p in v:
            if not 0 < p <= 100:
                raise ValueError(f"percentile {p} is outside (0, 100]")
        return v

    @property
    def is_agent(self) -> bool:
        return self.workload.kind == "agent" or bool(self.mix)

    @field_validator("mix")
    @classmethod
    def _mix(cls, v: list[MixClassConfig] | None) -> list[MixClassConfig] | None:
        return None if v is None else check_mix(v)

    @model_validator(mode="after")
    def _mix_alone(self) -> RunConfig:
        if not self.mix:
            return self
        if self.workload.kind != "requests":
            raise ValueError("give either mix (its classes name their workloads) or a workload of kind "
                             f"{self.workload.kind}, not both")
        if self.load.concurrency is not None or self.load.rate is not None:
            raise ValueError("with mix, each class sets its own load (concurrency or rate); remove "
                             "load.concurrency / load.rate (--concurrency / --rate)")
        if self.limits.requests is not None or self.limits.sessions is not None:
            raise ValueError("with mix, limit the run with limits.duration_s or each class's sessions, not "
                             "limits.requests / limits.sessions")
        return self

    @model_validator(mode="after")
    def _schedule_fits(self) -> RunConfig:
        n, rate = self.limits.requests or self.limits.sessions, self.load.rate
        if n is not None and rate is not None and n / rate > B.MAX_DURATION_S:
            raise ValueError(f"{n} requests at {rate:g}/s would take {n / rate:.3g} s, more than the "
                             f"{B.MAX_DURATION_S:.0f} s (30 days) a run may last; raise load.rate or lower "
                             "limits.requests")
        return self

    @model_validator(mode="after")
    def _bounded(self) -> RunConfig:
        lim = self.limits
        if self.mix:  # a mix ends when its first class has run its sessions (or at duration_s)
            first = self.mix[0]
            if lim.duration_s is None and first.sessions is None:
                first = first.model_copy(update={"sessions": default_sessions(first)})
                object.__setattr__(self, "mix", [first, *self.mix[1:]])
            return self
        if lim.duration_s is not None or self.workload.kind == "replay":  # a trace ends by itself
            return self
        # A run must stop by itself: default to a modest count of requests or sessions.
        if self.is_agent and lim.sessions is None:
            n = max(16, 2 * (self.load.concurrency or 8))
            object.__setattr__(self, "limits", lim.model_copy(update={"sessions": n}))
        elif not self.is_agent and lim.requests is None:
            # enough for every user to send a few (a run with fewer requests than users is INVALID)
            n = max(200, 4 * (self.load.concurrency or 0))
            object.__setattr__(self, "limits", lim.model_copy(update={"requests": n}))
        return self
