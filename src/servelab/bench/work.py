"""What a workload gives a run: its runner job, its own schedule, and what it adds to the summary.

A leaf: the builders (``single``, ``sessions``, ``replay``) import it, and ``workloads`` dispatches to them
by the workload's ``kind``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from servelab.load.runner import Job, RunOutcome, RunPlan
from servelab.records.schema import RequestRecord, SessionRecord

if TYPE_CHECKING:  # a worker process builds Work but never reads Parquet: no pyarrow there
    import pyarrow as pa


class RunRecords(Protocol):
    """A run's records as a summary reads them: Parquet tables (or, in tests, records in memory)."""

    @property
    def requests(self) -> pa.Table | Sequence[RequestRecord]: ...

    @property
    def sessions(self) -> pa.Table | Sequence[SessionRecord] | None: ...


Summarize = Callable[[RunRecords, RunOutcome], dict[str, Any]]


@dataclass
class Work:
    job: Job
    count_hint: int | None = None
    summarize: Summarize | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    offsets_ns: Sequence[int] | None = None  # an open-loop schedule of its own (a trace replay)
    extra_drain_s: float = 0.0  # how long a job may legitimately run after it starts (a replayed session)
    # a plan of its own (a mix: one job per user of every class), else the config's
    plan: RunPlan | None = None
    # what it opened itself (a mix's per-tenant transports)
    aclose: Callable[[], Awaitable[None]] | None = None


def shard_ids(sink: Any) -> tuple[int, int]:
    """(first request id, step) of the shard ``sink`` records: ids stay unique across a run's shards."""
    return int(getattr(sink, "worker", 0)), int(getattr(sink, "workers", 1))
