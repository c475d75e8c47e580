"""Agent-session metrics: per session and aggregated, as pure functions over session records.

Input: a list of :class:`~servelab.records.schema.SessionRecord` (a run in memory) or a pyarrow Table with
:data:`~servelab.records.schema.SESSION_COLUMNS` (``sessions.parquet`` read back). Warm-up sessions are
left out. A task's time splits into model (requests in flight), tool (tool + retrieval + code) and
waiting (everything else: user think time, retry backoff, context building), as fractions of the summed
task time, so the three add up to 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from servelab.analysis.stats import percentile_summary
from servelab.records.schema import SessionRecord

_INT_COLS = (
    "start_ns",
    "end_ns",
    "turns",
    "requests",
    "retries",
    "tool_calls",
    "tool_failures",
    "timeouts",
    "model_ns",
    "tool_ns",
    "retrieval_ns",
    "code_ns",
    "think_ns",
    "waiting_ns",
    "context_ns",
    "queue_ns",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
)
NS_PER_MS = 1e6
# What the agent summary and the cost block read from sessions.parquet (streamed: SessionColumns.from_tables)
SUMMARY_COLUMNS: tuple[str, ...] = (*_INT_COLS, "status", "accepted", "warmup")


@dataclass(frozen=True)
class SessionColumns:
    """Session records as numpy columns (warm-up sessions removed). Missing ``end_ns`` is NaN."""

    n: int
    status: np.ndarray  # str
    accepted: np.ndarray  # bool
    cols: dict[str, np.ndarray]  # float64, the _INT_COLS

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    @classmethod
    def from_records(cls, sessions: Sequence[SessionRecord]) -> SessionColumns:
        keep = [s for s in sessions if not s.warmup]
        cols = {c: np.array([_num(getattr(s, c)) for s in keep], dtype=np.float64) for c in _INT_COLS}
        return cls(len(keep), np.array([s.status for s in keep], dtype=object),
                   np.array([bool(s.accepted) for s in keep], dtype=bool), cols)

    @classmethod
    def from_table(cls, table: pa.Table) -> SessionColumns:
        return cls.from_tables([table])

    @classmethod
    def from_tables(cls, tables: Iterable[pa.Table]) -> SessionColumns:
        """From ``sessions.parquet`` read a batch at a time (:data:`SUMMARY_COLUMNS` are all it reads): each
        batch's non-warm-up rows become numpy (8 bytes a session a column; each status a reference to one
        string per distinct status), never Python objects per row."""
        parts: dict[str, list[np.ndarray]] = {c: [] for c in (*_INT_COLS, "status", "accepted")}
        for table in tables:
            keep = ~_bools(table, "warmup")
            for c in _INT_COLS:
                parts[c].append(_floats(table.column(c))[keep])
            parts["accepted"].append(_bools(table, "accepted")[keep])
            parts["status"].append(_strings(table.column("status"))[keep])

        def cat(c: str, dtype: type) -> np.ndarray:
            return np.concatenate(parts[c]) if parts[c] else np.zeros(0, dtype=dtype)

        status = cat("status", object)
        cols = {c: cat(c, np.float64) for c in _INT_COLS}
        return cls(int(status.size), status, cat("accepted", bool), cols)

    @classmethod
    def of(cls, sessions: Sequence[SessionRecord] | pa.Table | SessionColumns) -> SessionColumns:
        if isinstance(sessions, SessionColumns):
            return sessions
        if isinstance(sessions, pa.Table):
            return cls.from_table(sessions)
        return cls.from_records(list(sessions))


def _num(v: object) -> float:
    return float("nan") if v is None else float(v)  # type: ignore[arg-type]


def _floats(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """An integer column as float64, null as NaN (each value as ``float(v)`` rounds it)."""
    out = pc.fill_null(col, 0).to_numpy(zero_copy_only=False).astype(np.float64)
    if col.null_count:
        out[pc.is_null(col).to_numpy(zero_copy_only=False)] = np.nan
    return out


def _bools(table: pa.Table, name: str) -> np.ndarray:
    """A bool column (null and a missing column: False)."""
    if name not in table.column_names:
        return np.zeros(table.num_rows, dtype=bool)
    return pc.fill_null(table.column(name), False).to_numpy(zero_copy_only=False).astype(bool)


def _strings(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A string column as an object array whose equal values share one str (None stays None)."""
    enc = pc.dictionary_encode(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    values = np.array([*enc.dictionary.to_pylist(), None], dtype=object)
    idx = pc.fill_null(enc.indices, len(enc.dictionary)).to_numpy(zero_copy_only=False)
    return values[idx]


def per_session(sessions: Sequence[SessionRecord] | pa.Table | SessionColumns) -> dict[str, np.ndarray]:
    """Per-session figures (arrays, one entry per non-warm-up session), times in ms."""
    c = SessionColumns.of(sessions)
    task = (c["end_ns"] - c["start_ns"]) / NS_PER_MS
    tool = (c["tool_ns"] + c["retrieval_ns"] + c["code_ns"]) / NS_PER_MS
    model = c["model_ns"] / NS_PER_MS
    return {
        "task_ms": task, "model_ms": model, "tool_ms": tool, "retrieval_ms": c["retrieval_ns"] / NS_PER_MS,
        "code_ms": c["code_ns"] / NS_PER_MS, "think_ms": c["think_ns"] / NS_PER_MS,
        "context_ms": c["context_ns"] / NS_PER_MS, "queue_ms": c["queue_ns"] / NS_PER_MS,
        "waiting_ms": np.maximum(task - model - tool, 0.0), "turns": c["turns"], "retries": c["retries"],
        "timeouts": c["timeouts"], "tool_failures": c["tool_failures"],
        "completed": c.status == "ok", "accepted": c.accepted & (c.status == "ok"),
    }


def time_split(sessions: Sequence[SessionRecord] | pa.Table | SessionColumns) -> dict[str, float | None]:
    """Fractions of the summed task time spent in model requests, tools, and waiting (they add up to 1)."""
    ps = per_session(sessions)
    ok = np.isfinite(ps["task_ms"])
    total = float(ps["task_ms"][ok].sum())
    if total <= 0:
        return {"model": None, "tool": None, "waiting": None}
    model = float(ps["model_ms"][ok].sum()) / total
    tool = float(ps["tool_ms"][ok].sum()) / total
    return {"model": model, "tool": tool, "waiting": max(0.0, 1.0 - model - tool)}


def steady_tasks_per_hour(end_ns: np.ndarray, min_tasks: int = 8) -> float | None:
    """Completions per hour in the middle half of the completions (between the first- and third-quartile
    end times): intervals between consecutive completions there, per hour of that span. Neither the ramp-up
    nor a straggler that ends long after the others stretches it. None under ``min_tasks`` completions."""
    t = np.sort(end_ns[np.isfinite(end_ns)])
    if t.size < min_tasks:
        return None
    q1, q3 = np.percentile(t, [25, 75])
    mid = t[(t >= q1) & (t <= q3)]
    span = float(mid[-1] - mid[0]) / 1e9 if mid.size >= 2 else 0.0
    return (mid.size - 1) / span * 3600.0 if span > 0 else None


def agent_summary(
    sessions: Sequence[SessionRecord] | pa.Table | SessionColumns,
    *,
    duration_s: float | None = None,
    percentiles: Iterable[float] = (),
) -> dict:
    """The agent part of ``summary.json``.

    ``sessions`` {started, completed, accepted, failed, timed_out, cancelled, retries, tool_failures,
    timeouts}, ``tasks_per_hour`` (completed tasks per hour of ``duration_s``, default the span from the
    first session start to the last end), ``tasks_per_hour_steady`` (:func:`steady_tasks_per_hour`: a
    straggler does not dominate it) and ``accepted_per_hour``, ``task_ms`` and the other time
    summaries {mean, p50, p90, p95, p99, max, n} over completed sessions, and ``time_split``.
    """
    c = SessionColumns.of(sessions)
    ps = per_session(c)
    done = ps["completed"]
    span_s = duration_s
    if span_s is None and c.n:
        ends = c["end_ns"][np.isfinite(c["end_ns"])]
        span_s = (float(ends.max()) - float(c["start_ns"].min())) / 1e9 if ends.size else None
    hours = span_s / 3600.0 if span_s else None
    n_done, n_acc = int(done.sum()), int(ps["accepted"].sum())
    pcts = tuple(percentiles)
    out: dict = {
        "sessions": {
            "started": c.n, "completed": n_done, "accepted": n_acc,
            "failed": int((c.status == "failed").sum()), "timed_out": int((c.status == "timed_out").sum()),
            "cancelled": int((c.status == "cancelled").sum()), "retries": int(np.nansum(c["retries"])),
            "tool_failures": int(np.nansum(c["tool_failures"])), "timeouts": int(np.nansum(c["timeouts"])),
            "tool_calls": int(np.nansum(c["tool_calls"])), "requests": int(np.nansum(c["requests"])),
        },
        "tasks_per_hour": n_done / hours if hours else None,
        "tasks_per_hour_steady": steady_tasks_per_hour(c["end_ns"][done]),
        "accepted_per_hour": n_acc / hours if hours else None,
        "acceptance_rate": n_acc / n_done if n_done else None,
        "duration_s": span_s,
        "time_split": time_split(c),
    }
    for name in ("task_ms", "model_ms", "tool_ms", "retrieval_ms", "queue_ms", "waiting_ms",
                 "turns", "retries"):
        out[name] = percentile_summary(ps[name][done], pcts)
    return out
