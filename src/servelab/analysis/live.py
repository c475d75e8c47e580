"""Running statistics for the live progress line: O(1) per finished record, mergeable across workers."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from servelab.analysis.histogram import LogHistogram
from servelab.records.schema import CANCELLED, OK, RequestRecord


@dataclass
class LiveStats:
    """What the progress line shows. ``update`` is called once per finished record (any status)."""

    mode: Literal["open", "closed"] = "closed"
    done: int = 0
    ok: int = 0
    errors: int = 0
    cancelled: int = 0
    warmup: int = 0
    output_tokens: int = 0
    first_start_ns: int | None = None
    last_end_ns: int | None = None
    ttft_ms: LogHistogram = field(default_factory=LogHistogram)
    sessions: int = 0  # agent sessions (tasks) finished, any outcome

    def session_done(self, _s: object) -> None:
        """Called once per finished session record (an agent run's progress is in sessions)."""
        self.sessions += 1

    def update(self, r: RequestRecord) -> None:
        if r.warmup:
            self.warmup += 1
            return
        self.done += 1
        if r.status == OK:
            self.ok += 1
            self.output_tokens += r.completion_tokens
            start = r.intended_ns if self.mode == "open" or r.sent_ns is None else r.sent_ns
            if r.first_token_ns is not None:
                self.ttft_ms.add((r.first_token_ns - start) / 1e6)
            if self.first_start_ns is None or start < self.first_start_ns:
                self.first_start_ns = start
            if r.end_ns is not None and (self.last_end_ns is None or r.end_ns > self.last_end_ns):
                self.last_end_ns = r.end_ns
        elif r.status == CANCELLED:
            self.cancelled += 1
        else:
            self.errors += 1

    def merge(self, other: LiveStats) -> LiveStats:
        """Fold another worker's statistics into these; returns self."""
        self.done += other.done
        self.ok += other.ok
        self.errors += other.errors
        self.cancelled += other.cancelled
        self.warmup += other.warmup
        self.output_tokens += other.output_tokens
        self.sessions += other.sessions
        starts = [t for t in (self.first_start_ns, other.first_start_ns) if t is not None]
        ends = [t for t in (self.last_end_ns, other.last_end_ns) if t is not None]
        self.first_start_ns = min(starts) if starts else None
        self.last_end_ns = max(ends) if ends else None
        self.ttft_ms.merge(other.ttft_ms)
        return self

    def snapshot(self) -> dict[str, Any]:
        """These statistics as plain JSON types (the histogram as sparse bucket counts), for another
        process."""
        h = self.ttft_ms
        nz = np.flatnonzero(h.counts)
        return {
            "mode": self.mode,
            "done": self.done,
            "ok": self.ok,
            "errors": self.errors,
            "cancelled": self.cancelled,
            "warmup": self.warmup,
            "output_tokens": self.output_tokens,
            "first_start_ns": self.first_start_ns,
            "last_end_ns": self.last_end_ns,
            "sessions": self.sessions,
            "ttft_ms": {
                "buckets": nz.tolist(),
                "counts": h.counts[nz].tolist(),
                "n": h.n,
                "total": h.total,
                "min": h.min if h.n else None,
                "max": h.max if h.n else None,
            },
        }

    @classmethod
    def from_snapshot(cls, snap: dict[str, Any]) -> LiveStats:
        out = cls(snap["mode"], snap["done"], snap["ok"], snap["errors"], snap["cancelled"], snap["warmup"],
                  snap["output_tokens"], snap["first_start_ns"], snap["last_end_ns"])
        out.sessions = int(snap.get("sessions", 0))
        h, t = out.ttft_ms, snap["ttft_ms"]
        h.counts[np.asarray(t["buckets"], dtype=np.int64)] = np.asarray(t["counts"], dtype=np.int64)
        h.n, h.total = t["n"], t["total"]
        if t["n"]:
            h.min, h.max = t["min"], t["max"]
        return out

    def take(self) -> dict[str, Any]:
        """Report and reset (a worker's periodic delta): the snapshot so far, then start counting afresh.
        Merging every delta a worker took gives its whole statistics."""
        snap = self.snapshot()
        self.__init__(self.mode)  # type: ignore[misc]
        return snap

    @property
    def elapsed_s(self) -> float | None:
        if self.first_start_ns is None or self.last_end_ns is None or self.last_end_ns <= self.first_start_ns:
            return None
        return (self.last_end_ns - self.first_start_ns) / 1e9

    @property
    def requests_per_s(self) -> float | None:
        """Successful requests per second so far (first start to latest end)."""
        e = self.elapsed_s
        return self.ok / e if e else None

    @property
    def output_tokens_per_s(self) -> float | None:
        e = self.elapsed_s
        return self.output_tokens / e if e else None

    def ttft_p50_ms(self) -> float | None:
        v = self.ttft_ms.percentile(50)
        return None if v is None or math.isnan(v) else v
