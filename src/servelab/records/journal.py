"""Append-only journals: each record is written (and flushed to the OS) the moment it finishes.

A crash, SIGKILL or Ctrl-C therefore loses at most the requests still in flight. At the end of a run the
journals are converted to Parquet (:mod:`servelab.records.rundir`); a run that never reached its end can
still be read back from its journals.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from servelab.records.schema import RequestRecord, SessionRecord, record_to_row, session_to_row

REQUESTS_JOURNAL = "requests.journal.jsonl"
SESSIONS_JOURNAL = "sessions.journal.jsonl"
ISSUED_JOURNAL = "issued.journal.txt"  # one job index per line, written as each job starts (W > 1)


def shard_name(name: str, shard: int) -> str:
    """The journal file of run shard ``shard``: shard 0 keeps the plain name (a one-shard run is unchanged),
    shard w > 0 adds ``.w{w}`` before the extension (``requests.journal.w1.jsonl``)."""
    if shard == 0:
        return name
    stem, dot, ext = name.rpartition(".")
    return f"{stem}.w{shard}{dot}{ext}"


def journal_paths(run_dir: Path, name: str) -> list[Path]:
    """Every shard's journal ``name`` in ``run_dir``, shard 0 first then by shard number."""
    stem, dot, ext = name.rpartition(".")
    found = []
    for p in Path(run_dir).glob(f"{stem}*{dot}{ext}"):
        tag = p.name[len(stem):len(p.name) - len(dot + ext)]
        if tag == "":
            found.append((0, p))
        elif tag.startswith(".w") and tag[2:].isdigit():
            found.append((int(tag[2:]), p))
    return [p for _, p in sorted(found)]


class Journal:
    """Line-delimited JSON journal of request and session records in a run directory (one per run shard)."""

    def __init__(self, run_dir: Path, shard: int = 0) -> None:
        self.run_dir = Path(run_dir)
        self.shard = shard
        self._req = open(self.run_dir / shard_name(REQUESTS_JOURNAL, shard), "ab", buffering=0)  # noqa: SIM115
        self._ses: Any = None
        self._issued: Any = None
        self.requests_written = 0
        self.sessions_written = 0

    def write_request(self, r: RequestRecord) -> None:
        row = record_to_row(r)
        try:
            line = orjson.dumps(row)
        except TypeError:  # a value orjson refuses (an int beyond 64 bits): keep the row, Parquet cleans it
            line = json.dumps(row, default=repr).encode()
        self._req.write(line + b"\n")
        self.requests_written += 1

    def write_session(self, s: SessionRecord) -> None:
        if self._ses is None:
            self._ses = open(self.run_dir / shard_name(SESSIONS_JOURNAL, self.shard), "ab", buffering=0)  # noqa: SIM115
        self._ses.write(orjson.dumps(session_to_row(s)) + b"\n")
        self.sessions_written += 1

    def write_issued(self, index: int) -> None:
        """Note that job ``index`` started: if this shard's process dies, what it had in flight is known."""
        if self._issued is None:
            self._issued = open(self.run_dir / shard_name(ISSUED_JOURNAL, self.shard), "ab", buffering=0)  # noqa: SIM115
        self._issued.write(b"%d\n" % index)

    def close(self) -> None:
        self._req.close()
        if self._ses is not None:
            self._ses.close()
        if self._issued is not None:
            self._issued.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_journal(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a journal; a torn last line (the process died mid-write) is skipped."""
    if not path.exists():
        return
    with open(path, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
