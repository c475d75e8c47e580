"""How a run ends: Ctrl-C noted while the results are written, the status the manifest records.

While a run's loop runs, SIGINT stops it gracefully (the runner's handler). Once the loop is done, the
records are written to Parquet and summarised; a Ctrl-C then must not lose them: :func:`finishing` notes it,
says once that the results are still being written, and the run ends as interrupted (exit 130) with its
summary on disk. :func:`run_status` is what the manifest says about how the run ended.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def finishing() -> Iterator[list[int]]:
    """Defer SIGINT while the body runs; yields a list that gets one entry per Ctrl-C seen."""
    hits: list[int] = []

    def note(signum: int, _frame: Any) -> None:
        hits.append(signum)
        if len(hits) == 1:
            sys.stderr.write("\ninterrupt noted: still writing what was measured (the summary comes first)\n")

    try:
        previous = signal.signal(signal.SIGINT, note)
    except ValueError:  # not the main thread (a worker): signals are the main thread's business
        yield hits
        return
    try:
        yield hits
    finally:
        signal.signal(signal.SIGINT, previous)


def run_status(stopped_by: str) -> dict[str, Any]:
    """Manifest keys saying how the run ended: ``status`` complete | interrupted, ``interrupted``."""
    interrupted = stopped_by == "interrupt"
    return {"status": "interrupted" if interrupted else "complete", "interrupted": interrupted}


def requests_issued(is_agent: bool, facts: dict[str, Any], issued: int) -> int | None:
    """Requests the runner issued, when each of its jobs is one request (else None: a job is a session).

    A replayed trace with sessions runs one job per session (its turns are requests of that job), so the
    records cannot equal the jobs issued; comparing them would call every session replay "records lost".
    """
    if is_agent:
        return None
    trace = facts.get("trace") or {}
    if trace and trace.get("units") != trace.get("requests"):
        return None
    return issued
