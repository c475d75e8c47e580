"""Merge the journals of a run's shards into one Parquet file each, streamed in batches.

Memory stays bounded by the batch size, not the run: rows are read from each shard's journal, converted a
batch at a time and appended to the Parquet file. A shard on another host has its own monotonic clock; its
times are shifted onto the coordinator's by ``shifts_ns[shard]`` (0 on one host, where every process reads
the same monotonic clock).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from servelab.records.journal import (
    ISSUED_JOURNAL,
    REQUESTS_JOURNAL,
    SESSIONS_JOURNAL,
    journal_paths,
    read_journal,
    shard_name,
)
from servelab.records.rundir import REQUEST_SCHEMA, SESSION_SCHEMA, rows_to_table

BATCH_ROWS = 4096  # rows per row group of the Parquet file
GROUP_TOKENS = 1 << 21  # ... or this many token times (16 MB as int64), whichever comes first
CHUNK_ROWS, CHUNK_TOKENS = 1024, 1 << 16  # rows converted from Python at a time (bounded transient memory)
_REQUEST_TIMES = ("intended_ns", "sent_ns", "first_byte_ns", "first_token_ns", "first_content_ns",
                  "first_reasoning_ns", "last_token_ns", "end_ns")
_SESSION_TIMES = ("start_ns", "end_ns")


def _shard_of(path: Path, name: str) -> int:
    stem = name.rpartition(".")[0]
    tag = path.name[len(stem):].split(".")[1] if path.name != name else ""
    return int(tag[1:]) if tag.startswith("w") and tag[1:].isdigit() else 0


def _shifted(
    rows: Iterable[dict[str, Any]], shift: int, times: tuple[str, ...], tokens: bool
) -> Iterator[dict]:
    for r in rows:
        if not isinstance(r, dict):
            continue
        for c in times:
            v = r.get(c)
            if v.__class__ is int:
                r[c] = v + shift
        if tokens and isinstance(r.get("token_times_ns"), list):
            r["token_times_ns"] = [t + shift for t in r["token_times_ns"] if t.__class__ is int]
        yield r


def _stream(run_dir: Path, name: str, shifts_ns: Mapping[int, int], times: tuple[str, ...],
            tokens: bool) -> Iterator[dict[str, Any]]:
    for path in journal_paths(run_dir, name):
        shard = _shard_of(path, name)
        shift = int(shifts_ns.get(shard, 0))
        rows: Iterable[dict[str, Any]] = read_journal(path)
        for r in (_shifted(rows, shift, times, tokens) if shift else rows):
            if isinstance(r, dict):
                r.setdefault("worker", shard)
                yield r


def _write(rows: Iterator[dict[str, Any]], schema: pa.Schema, out: Path) -> int:
    """Rows -> Parquet. Python rows are converted a small chunk at a time (``CHUNK_ROWS`` rows or
    ``CHUNK_TOKENS`` token times: their dicts and ints cost ~40 bytes a token), the Arrow chunks (8 bytes a
    token) are gathered into row groups of ``BATCH_ROWS`` rows or ``GROUP_TOKENS`` token times."""
    writer: pq.ParquetWriter | None = None
    n = 0
    batch: list[dict[str, Any]] = []
    group: list[pa.Table] = []
    rows_in_group = tokens = group_tokens = 0

    def convert() -> None:
        nonlocal batch, tokens, rows_in_group, group_tokens
        group.append(rows_to_table(batch, schema).cast(schema))
        rows_in_group += len(batch)
        group_tokens += tokens
        batch, tokens = [], 0

    def flush() -> None:
        nonlocal writer, n, rows_in_group, group_tokens
        # no dictionary for list columns (token times are all distinct: trying one costs ~40 bytes a token)
        writer = writer or pq.ParquetWriter(out, schema, use_dictionary=[
            f.name for f in schema if not pa.types.is_list(f.type)])
        writer.write_table(pa.concat_tables(group) if group else rows_to_table([], schema).cast(schema))
        n += rows_in_group
        group.clear()
        rows_in_group = group_tokens = 0

    try:
        for r in rows:
            batch.append(r)
            tt = r.get("token_times_ns")
            tokens += len(tt) if tt.__class__ is list else 0
            if len(batch) >= CHUNK_ROWS or tokens >= CHUNK_TOKENS:
                convert()
                if rows_in_group >= BATCH_ROWS or group_tokens >= GROUP_TOKENS:
                    flush()
        if batch:
            convert()
        if group or writer is None:
            flush()
    finally:
        if writer is not None:
            writer.close()
    return n


def merge_journals(run_dir: Path, shifts_ns: Mapping[int, int] | None = None) -> tuple[int, int]:
    """Write requests.parquet (and sessions.parquet when any shard journaled sessions) from every shard's
    journals; returns (request rows, session rows)."""
    run_dir = Path(run_dir)
    shifts = shifts_ns or {}
    n_req = _write(_stream(run_dir, REQUESTS_JOURNAL, shifts, _REQUEST_TIMES, True), REQUEST_SCHEMA,
                   run_dir / "requests.parquet")
    n_ses = 0
    if journal_paths(run_dir, SESSIONS_JOURNAL):
        n_ses = _write(_stream(run_dir, SESSIONS_JOURNAL, shifts, _SESSION_TIMES, False), SESSION_SCHEMA,
                       run_dir / "sessions.parquet")
    return n_req, n_ses


def issued_indices(run_dir: Path, shard: int) -> list[int]:
    """The job indices shard ``shard`` started (from its issued journal; a torn last line is skipped)."""
    p = Path(run_dir) / shard_name(ISSUED_JOURNAL, shard)
    if not p.exists():
        return []
    out = []
    with open(p, "rb") as f:
        for line in f:
            if line.endswith(b"\n") and line[:-1].isdigit():
                out.append(int(line))
    return out


def recorded_ids(run_dir: Path, shard: int, name: str, key: str) -> set[int]:
    """The ``key`` values (request_id or session_id) shard ``shard`` journaled."""
    return {r[key] for r in read_journal(Path(run_dir) / shard_name(name, shard))
            if isinstance(r, dict) and isinstance(r.get(key), int)}
