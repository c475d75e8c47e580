"""Run directory hygiene: the crash journals exist so that nothing is lost while a run is measuring; once
the Parquet files are written and read back whole, they are removed (a run that failed keeps them).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from servelab.records.journal import ISSUED_JOURNAL, REQUESTS_JOURNAL, SESSIONS_JOURNAL, journal_paths

_JOURNALS = (REQUESTS_JOURNAL, SESSIONS_JOURNAL, ISSUED_JOURNAL)


def _rows(path: Path) -> int | None:
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except Exception:  # noqa: BLE001 - unreadable: not safely written
        return None


def retire_journals(run_dir: str | Path, requests: int, sessions: int) -> list[Path]:
    """Delete every shard's journals when requests.parquet holds ``requests`` rows and, if any session was
    journaled, sessions.parquet holds ``sessions`` rows; returns what was deleted (nothing when a file is
    missing, unreadable or short)."""
    d = Path(run_dir)
    if _rows(d / "requests.parquet") != requests:
        return []
    if journal_paths(d, SESSIONS_JOURNAL) and _rows(d / "sessions.parquet") != sessions:
        return []
    gone = []
    for name in _JOURNALS:
        for p in journal_paths(d, name):
            p.unlink(missing_ok=True)
            gone.append(p)
    return gone
