"""The one-method transport: a model request in, a timed :class:`RequestRecord` out.

Implementations never raise for server faults: errors, resets, stalls and garbage become records with a
status. They raise only for programming errors or bad configuration (``TargetError``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from servelab.records.schema import CANCELLED, CLIENT_ERROR, RequestRecord


@dataclass(slots=True)
class ModelRequest:
    """What the load side asks a transport to send."""

    request_id: int
    api: Literal["chat", "completions"] = "chat"
    messages: list[dict[str, Any]] | None = None  # chat API
    prompt: str | None = None  # completions API
    max_tokens: int = 128
    min_tokens: int | None = None
    ignore_eos: bool = False
    temperature: float = 0.0
    stream: bool = True
    stop: list[str] | None = None
    est_prompt_tokens: int | None = None  # the workload's own count of the prompt
    session_id: int = -1
    turn: int = 0
    attempt: int = 0
    warmup: bool = False
    intended_ns: int = 0  # when the schedule wanted the send; latency counts from here in open loop
    extra_body: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """The prompt as one string (messages joined), for token counting."""
        if self.prompt is not None:
            return self.prompt
        return "\n".join(str(m.get("content") or "") for m in (self.messages or []))


def new_record(req: ModelRequest) -> RequestRecord:
    """The record of one attempt at ``req``, before it is sent: the one place records of a request start."""
    return RequestRecord(
        request_id=req.request_id, session_id=req.session_id, turn=req.turn, attempt=req.attempt,
        warmup=req.warmup, intended_ns=req.intended_ns, requested_output_tokens=req.max_tokens,
        est_prompt_tokens=req.est_prompt_tokens,
    )


def ended_record(req: ModelRequest, status: str, *, end_ns: int | None = None, error: str | None = None,
                 sent_ns: int | None = None) -> RequestRecord:
    """The record of an attempt at ``req`` that the client ended (cancelled, or cut by a session's timeout)
    rather than the transport: :func:`new_record` with how and when it ended."""
    r = new_record(req)
    r.status, r.end_ns, r.error, r.sent_ns = status, end_ns, error, sent_ns
    return r


def client_error_record(request_id: int, intended_ns: int, warmup: bool, end_ns: int, exc: BaseException, *,
                        session_id: int = -1) -> RequestRecord:
    """The record of a job that raised in the client before or around its request (a bug, a bad plan): the
    run goes on and the failure is counted as ``client_error``."""
    return RequestRecord(request_id=request_id, session_id=session_id, warmup=warmup, status=CLIENT_ERROR,
                         intended_ns=intended_ns, end_ns=end_ns,
                         error=f"client error: {type(exc).__name__}: {exc}"[:500])


def lost_record(request_id: int, worker: int, last_seen_ns: int, error: str) -> RequestRecord:
    """The record of an attempt whose worker died with it in flight (killed, crashed): counted cancelled,
    nothing measured. Only its id, its worker and when that worker was last heard from are known: that time
    is its intended send (on the run's clock, like every other record's; never 0), and its send, end and
    lengths stay unknown rather than made up."""
    return RequestRecord(request_id=request_id, worker=worker, status=CANCELLED, intended_ns=last_seen_ns,
                         error=error)


class Transport(Protocol):
    """One model request in, a timed response out: the data path only. What a target is and how it counts
    tokens is asked of its :class:`~servelab.transport.probe.TargetProbe`."""

    async def send(self, req: ModelRequest) -> RequestRecord:
        """Send ``req`` and return its record (never raises for server faults)."""

    async def aclose(self) -> None:
        """Release connections and background tasks."""
