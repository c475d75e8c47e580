"""A runner job that raised something other than a ServelabError becomes a failed request record.

The job did not record its request (it never got that far), so the record says what happened: status
``client_error`` with the exception's type and message. Nothing is swallowed and counts still add up.
"""

from __future__ import annotations

from collections.abc import Callable

from servelab.clock import Clock
from servelab.load.runner import JobErrorHandler
from servelab.records.schema import RequestRecord
from servelab.transport.base import client_error_record


def record_job_errors(clock: Clock, write: Callable[[RequestRecord], None]) -> JobErrorHandler:
    """A handler for :class:`servelab.load.runner.Runner` that writes one failed record per failed job."""

    def on_error(index: int, intended_ns: int, warmup: bool, exc: BaseException) -> None:
        write(client_error_record(index, intended_ns, warmup, clock.now(), exc))

    return on_error
