"""Record schemas: one row per request attempt, one per session.

Timestamps are integer nanoseconds on the run's clock (monotonic wall clock, or virtual time against the
in-process simulator). ``None`` means "did not happen" (no first token on a failed request, say).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

SCHEMA_VERSION = 3  # 2: the worker column (the run shard that sent the request / ran the session);
# 3: mix_class and tenant (a mixed-traffic run: which workload class and tenant sent it; null elsewhere)


class Status(StrEnum):
    """How a request attempt ended: exactly one per attempt. A ``StrEnum``: each member *is* its string
    (``Status.OK == "ok"``), so records, journals, Parquet and summary.json keep the plain strings."""

    OK = "ok"
    HTTP_ERROR = "http_error"
    TIMEOUT = "timeout"
    DISCONNECTED = "disconnected"
    MALFORMED = "malformed"
    CANCELLED = "cancelled"
    # the client failed on this request (an exception in servelab, not the server)
    CLIENT_ERROR = "client_error"


class SessionStatus(StrEnum):
    """How a session (one agent task, or one closed-loop user) ended."""

    OK = "ok"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"


# The request statuses by name, as the code has always spelled them.
OK = Status.OK
HTTP_ERROR = Status.HTTP_ERROR
TIMEOUT = Status.TIMEOUT
DISCONNECTED = Status.DISCONNECTED
MALFORMED = Status.MALFORMED
CANCELLED = Status.CANCELLED
CLIENT_ERROR = Status.CLIENT_ERROR
STATUSES = (OK, HTTP_ERROR, TIMEOUT, DISCONNECTED, MALFORMED, CLIENT_ERROR, CANCELLED)
FAILED_STATUSES = (HTTP_ERROR, TIMEOUT, DISCONNECTED, MALFORMED, CLIENT_ERROR)
# What a person calls each way a request can fail: the one table (the report's Errors table, the console's
# errors line and the INVALID reasons all read it; report.words.NAMES includes it).
STATUS_WORDS: dict[str, str] = {
    HTTP_ERROR: "HTTP error",
    TIMEOUT: "timed out",
    DISCONNECTED: "connection lost",
    MALFORMED: "malformed response",
    CANCELLED: "cancelled",
    CLIENT_ERROR: "client error",
}


@dataclass(slots=True)
class RequestRecord:
    """One request attempt, as measured by the client (and, for the simulator, its ground truth)."""

    request_id: int
    session_id: int = -1
    turn: int = 0
    attempt: int = 0
    worker: int = 0  # the run shard (worker process or Ray task) that sent it
    warmup: bool = False
    status: str = Status.CANCELLED  # a Status (str-valued: a plain string from a journal compares equal)
    http_status: int | None = None
    error: str | None = None
    # Times, ns. intended: when the schedule wanted the send; sent: when the bytes were written.
    intended_ns: int = 0
    sent_ns: int | None = None
    first_byte_ns: int | None = None
    first_token_ns: int | None = None  # first chunk carrying content or reasoning
    first_content_ns: int | None = None  # first chunk carrying visible content
    first_reasoning_ns: int | None = None  # first chunk carrying reasoning_content
    last_token_ns: int | None = None
    end_ns: int | None = None
    token_times_ns: list[int] = field(default_factory=list)  # arrival of each token-carrying chunk
    # Tokens. usage_* come from the server's usage block; est_* are client-side counts.
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    usage_cached_tokens: int | None = None
    est_prompt_tokens: int | None = None
    est_completion_tokens: int = 0  # token-carrying chunks seen (or 1 for a non-streamed body with text)
    requested_output_tokens: int | None = None
    finish_reason: str | None = None
    # 1 when this attempt was resent once on a fresh connection because the reused keep-alive connection
    # it first went out on closed before any response byte (the server had dropped the idle socket).
    conn_retries: int = 0
    # Ground truth reported by the simulated engine (None against real servers), ns.
    srv_queue_ns: int | None = None
    srv_prefill_ns: int | None = None
    srv_decode_ns: int | None = None
    srv_preempted_ns: int | None = None
    srv_comm_ns: int | None = None
    # Mixed traffic (``mix:``): the workload class and tenant that sent it (None in a single-workload run).
    mix_class: str | None = None
    tenant: str | None = None
    # Not written to Parquet: the generated text, kept in memory for agent acceptance checks.
    output_text: str = ""
    # Not written to Parquet: the tool calls the model returned ({id, type, function: {name, arguments}}),
    # kept in memory for live agent sessions; None when the answer had none.
    tool_calls: list[dict[str, Any]] | None = None

    @property
    def prompt_tokens(self) -> int | None:
        return self.usage_prompt_tokens if self.usage_prompt_tokens is not None else self.est_prompt_tokens

    @property
    def completion_tokens(self) -> int:
        if self.usage_completion_tokens is not None:
            return self.usage_completion_tokens
        return self.est_completion_tokens


_IN_MEMORY_ONLY = ("output_text", "tool_calls")
REQUEST_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in fields(RequestRecord) if f.name not in _IN_MEMORY_ONLY
)


def record_to_row(r: RequestRecord) -> dict[str, Any]:
    return {name: getattr(r, name) for name in REQUEST_COLUMNS}


@dataclass(slots=True)
class SessionRecord:
    """One session (one agent task, or one closed-loop user for single-turn runs)."""

    session_id: int
    profile: str = ""
    worker: int = 0  # the run shard that ran it
    status: str = SessionStatus.CANCELLED  # a SessionStatus: ok | failed | timed_out | cancelled
    accepted: bool | None = None
    start_ns: int = 0
    end_ns: int | None = None
    turns: int = 0
    requests: int = 0
    retries: int = 0
    tool_calls: int = 0
    tool_failures: int = 0
    timeouts: int = 0
    model_ns: int = 0
    tool_ns: int = 0
    retrieval_ns: int = 0
    code_ns: int = 0
    think_ns: int = 0
    waiting_ns: int = 0
    context_ns: int = 0
    queue_ns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    warmup: bool = False
    error: str | None = None
    mix_class: str | None = None  # mixed traffic: the workload class (None in a single-workload run)
    tenant: str | None = None

    def add_request(self, r: RequestRecord, sent_ns: int, now_ns: int) -> None:
        """Count one model request attempt of this session (agent runs and trace replay alike). Its model
        time is the attempt's wait for the model: from its send to the end of its answer (``now_ns`` when
        the record has no end)."""
        self.requests += 1
        self.model_ns += (r.end_ns if r.end_ns is not None else now_ns) - sent_ns
        self.queue_ns += r.srv_queue_ns or 0
        self.input_tokens += r.prompt_tokens or 0
        self.output_tokens += r.completion_tokens
        self.cached_tokens += r.usage_cached_tokens or 0


def started_session(session_id: int, profile: str, start_ns: int, warmup: bool) -> SessionRecord:
    """The record of a session that starts now (an agent task or a replayed conversation): its executor
    counts into it as the session runs and sets its status and end when it ends."""
    return SessionRecord(session_id=session_id, profile=profile, start_ns=start_ns, warmup=warmup)


def lost_session(session_id: int, worker: int, start_ns: int, why: str) -> SessionRecord:
    """The record of a session a dead worker had started and never finished: cancelled, dated at the time
    the worker was last heard from, ``why`` naming the death."""
    return SessionRecord(session_id=session_id, worker=worker, status=SessionStatus.CANCELLED,
                         start_ns=start_ns, error=why)


SESSION_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(SessionRecord))


def session_to_row(s: SessionRecord) -> dict[str, Any]:
    return {name: getattr(s, name) for name in SESSION_COLUMNS}
