"""Where finished records go: the journal on disk first, then memory and the live statistics."""

from __future__ import annotations

from collections.abc import Callable

from servelab.records.journal import Journal
from servelab.records.schema import RequestRecord, SessionRecord


class RecordSink:
    def __init__(self, journal: Journal, on_request: Callable[[RequestRecord], None] | None = None) -> None:
        self.journal = journal
        self.requests: list[RequestRecord] = []
        self.sessions: list[SessionRecord] = []
        self._on_request = on_request

    def request(self, r: RequestRecord) -> None:
        self.journal.write_request(r)
        self.requests.append(r)
        if self._on_request is not None:
            self._on_request(r)

    def session(self, s: SessionRecord) -> None:
        self.journal.write_session(s)
        self.sessions.append(s)
