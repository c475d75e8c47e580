"""The normalized trace model every importer produces, and the helpers importers share.

A :class:`Trace` is a list of :class:`TraceRequest` sorted by arrival offset, plus the sessions they form.
Plain slotted dataclasses: a 20,000-request trace costs a few megabytes and loads in well under a second.

Conventions:

* ``t_offset_ns`` is integer nanoseconds from the trace start (the first request of the source file is at
  0 unless a window was cut with :func:`~servelab.workload.traces.transform.select`).
* ``session_id`` is ``None`` for independent requests (Azure, Mooncake); requests of one session share an
  id and are numbered by ``turn`` from 0. A sub-agent is its own session whose ``parent_session_id`` names
  the session that spawned it.
* ``hash_ids`` (when the trace has them): one id per ``block_tokens``-token block of the input; equal ids
  at equal positions after equal prefixes mean equal prompt blocks. Importers make ids globally distinct
  across sources whose ids were local (Claude Code sessions).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from servelab.errors import TraceError

NS_PER_S = 1_000_000_000

@dataclass(slots=True)
class TraceRequest:
    """One model request of a trace."""

    t_offset_ns: int
    input_tokens: int
    output_tokens: int
    session_id: str | None = None
    turn: int = 0
    hash_ids: list[int] | None = None
    block_tokens: int | None = None
    think_time_s: float | None = None  # user/tool time before this request (sessions only)
    stop: str | None = None  # why the recorded response ended: tool_use, end_turn, length, stop...
    prompt: str | None = None  # real prompt text when the trace has it (MT-bench, JSONL)
    parent_session_id: str | None = None  # for a sub-agent's requests: the session that spawned it
    model: str | None = None  # the model the trace recorded, if any
    api_time_s: float | None = None  # the service time the trace recorded, if any

    @property
    def t_s(self) -> float:
        return self.t_offset_ns / NS_PER_S


@dataclass(slots=True)
class TraceSession:
    """The requests of one session (an agent task, a conversation), in turn order."""

    session_id: str
    requests: list[TraceRequest]
    parent_session_id: str | None = None
    label: str | None = None  # sub-agent type (Explore, Plan...), MT-bench category...
    spawn_after_turn: int | None = None  # sub-agents: the parent's turn whose tool call started it

    @property
    def start_ns(self) -> int:
        return self.requests[0].t_offset_ns if self.requests else 0


@dataclass(slots=True)
class Trace:
    """A normalized trace: requests sorted by time, the sessions they form, where it came from."""

    requests: list[TraceRequest]
    format: str
    sessions: dict[str, TraceSession] = field(default_factory=dict)
    block_tokens: int | None = None
    timed: bool = True  # False when the source has no timestamps (MT-bench): the load decides arrivals
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def duration_ns(self) -> int:
        if not self.requests:
            return 0
        return self.requests[-1].t_offset_ns - self.requests[0].t_offset_ns

    @property
    def has_hash_ids(self) -> bool:
        return any(r.hash_ids is not None for r in self.requests)


def build_trace(
    requests: Iterable[TraceRequest],
    *,
    format: str,
    block_tokens: int | None = None,
    timed: bool = True,
    source: str = "",
    metadata: dict[str, Any] | None = None,
    session_info: dict[str, TraceSession] | None = None,
) -> Trace:
    """Sort ``requests`` by time (stable) and group them into sessions.

    ``session_info`` carries per-session facts (label, parent, spawn turn) that the requests alone do not;
    its ``requests`` lists are ignored and rebuilt here. Sessions left without requests are dropped.
    """
    reqs = sorted(requests, key=lambda r: r.t_offset_ns)
    _check_bounds(reqs, source)
    sessions: dict[str, TraceSession] = {}
    for r in reqs:
        sid = r.session_id
        if sid is None:
            continue
        s = sessions.get(sid)
        if s is None:
            info = (session_info or {}).get(sid)
            s = TraceSession(
                session_id=sid,
                requests=[],
                parent_session_id=r.parent_session_id if info is None else info.parent_session_id,
                label=None if info is None else info.label,
                spawn_after_turn=None if info is None else info.spawn_after_turn,
            )
            sessions[sid] = s
        s.requests.append(r)
    for s in sessions.values():
        s.requests.sort(key=lambda r: (r.turn, r.t_offset_ns))
    return Trace(
        requests=reqs,
        format=format,
        sessions=sessions,
        block_tokens=block_tokens,
        timed=timed,
        source=source,
        metadata=dict(metadata or {}),
    )


# A trace may span at most ~3 years (int64 nanoseconds hold 292) and ask at most 10M tokens a request.
MAX_SPAN_NS = 10**17
MAX_TRACE_TOKENS = 10_000_000


def _check_bounds(reqs: list[TraceRequest], source: str) -> None:
    where = source or "trace"
    if reqs and (reqs[0].t_offset_ns < 0 or reqs[-1].t_offset_ns > MAX_SPAN_NS):
        raise TraceError(
            f"{where}: its timestamps span {(reqs[-1].t_offset_ns - reqs[0].t_offset_ns) / NS_PER_S:.3g} s,"
            f" more than the {MAX_SPAN_NS / NS_PER_S:.3g} s a replay can schedule",
            hint="check the time field's unit (seconds expected) or cut a window with --start/--duration",
        )
    for i, r in enumerate(reqs):
        if r.input_tokens > MAX_TRACE_TOKENS or r.output_tokens > MAX_TRACE_TOKENS:
            raise TraceError(
                f"{where}: request {i} (at {r.t_offset_ns / NS_PER_S:g} s) asks for {r.input_tokens} input "
                f"and {r.output_tokens} output tokens; at most {MAX_TRACE_TOKENS:,} each are possible"
            )


def fail(path: str | Path, line: int | None, what: str, *, hint: str | None = None) -> TraceError:
    """A TraceError naming the file and line (1-based) and what was expected."""
    where = f"{path}" if line is None else f"{path}:{line}"
    return TraceError(f"{where}: {what}", hint=hint)


def want_int(value: Any, path: str | Path, line: int | None, name: str, *, minimum: int = 0) -> int:
    """``value`` as an int >= ``minimum`` (floats that are whole numbers pass), else a TraceError."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(path, line, f"field {name!r} must be an integer >= {minimum}, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise fail(path, line, f"field {name!r} must be an integer >= {minimum}, got {value!r}")
        value = int(value)
    if value < minimum:
        raise fail(path, line, f"field {name!r} must be an integer >= {minimum}, got {value!r}")
    return value


MAX_SECONDS = 1e12  # a time field beyond this (31,700 years) is a wrong unit, and overflows nanoseconds


def want_number(value: Any, path: str | Path, line: int | None, name: str, *, minimum: float = 0.0) -> float:
    """``value`` as a finite float >= ``minimum``, else a TraceError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < minimum:
        raise fail(path, line, f"field {name!r} must be a number >= {minimum:g}, got {value!r}")
    if abs(value) > MAX_SECONDS:
        raise fail(path, line, f"field {name!r} must be finite and within +-{MAX_SECONDS:g}, got {value!r}")
    return float(value)


def want_hash_ids(value: Any, path: str | Path, line: int | None, name: str = "hash_ids") -> list[int]:
    """A list of non-negative ints, else a TraceError."""
    if not isinstance(value, list):
        raise fail(path, line, f"field {name!r} must be a list of integers, got {type(value).__name__}")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise fail(path, line, f"field {name!r} must hold integers >= 0, found {v!r}")
    return value


def seconds_to_ns(seconds: float) -> int:
    return round(seconds * NS_PER_S)


def iter_json_lines(path: Path, what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line; a TraceError on bad JSON or a non-object."""
    try:
        fh = path.open("rb")
    except OSError as e:
        raise fail(path, None, f"cannot open the {what}: {e.strerror}") from None
    with fh:
        for line, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                raise fail(path, line, f"invalid JSON ({e}); expected one JSON object per line") from None
            if not isinstance(obj, dict):
                raise fail(path, line, f"expected a JSON object, got {type(obj).__name__}")
            yield line, obj
