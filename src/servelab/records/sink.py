"""Where finished records go: the journal on disk first, then the live statistics. Nothing is kept in
memory: figures are computed afterwards from the Parquet files the journals become."""

from __future__ import annotations

from collections.abc import Callable

from servelab.records.journal import Journal
from servelab.records.schema import RequestRecord, SessionRecord


class RecordSink:
    """The records of one run shard (``worker`` of ``workers``): each is stamped with its shard, journaled,
    and passed to ``on_request`` / ``on_session`` (the live statistics)."""

    def __init__(self, journal: Journal, on_request: Callable[[RequestRecord], None] | None = None, *,
                 worker: int = 0, workers: int = 1,
                 on_session: Callable[[SessionRecord], None] | None = None) -> None:
        self.journal = journal
        self.worker, self.workers = worker, workers
        self.requests_written = 0
        self.sessions_written = 0
        self._on_request = on_request
        self._on_session = on_session

    def request(self, r: RequestRecord) -> None:
        r.worker = self.worker
        self.journal.write_request(r)
        self.requests_written += 1
        if self._on_request is not None:
            self._on_request(r)

    def session(self, s: SessionRecord) -> None:
        s.worker = self.worker
        self.journal.write_session(s)
        self.sessions_written += 1
        if self._on_session is not None:
            self._on_session(s)
