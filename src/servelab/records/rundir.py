"""Run directories: create, write (manifest, Parquet, summary) and read back.

Layout (schema version :data:`servelab.records.schema.SCHEMA_VERSION`)::

    RUN_DIR/manifest.json       what ran: version, command line, resolved config, target, host, seed, times
    RUN_DIR/requests.parquet    one row per request attempt
    RUN_DIR/sessions.parquet    one row per session (agent runs)
    RUN_DIR/telemetry.parquet   server metric series (when scraped)
    RUN_DIR/summary.json        computed figures with units
    RUN_DIR/*.journal.jsonl     the journals the Parquet files were made from
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from servelab.errors import RunDirError
from servelab.records.journal import REQUESTS_JOURNAL, SESSIONS_JOURNAL, journal_paths, read_journal
from servelab.records.schema import MALFORMED, OK, REQUEST_COLUMNS, SCHEMA_VERSION, SESSION_COLUMNS, STATUSES

_I = pa.int64()
_REQUEST_TYPES: dict[str, pa.DataType] = {
    "status": pa.string(),
    "error": pa.string(),
    "finish_reason": pa.string(),
    "warmup": pa.bool_(),
    "token_times_ns": pa.list_(_I),
    "mix_class": pa.string(),
    "tenant": pa.string(),
}
_SESSION_TYPES: dict[str, pa.DataType] = {
    "profile": pa.string(),
    "status": pa.string(),
    "error": pa.string(),
    "accepted": pa.bool_(),
    "warmup": pa.bool_(),
    "mix_class": pa.string(),
    "tenant": pa.string(),
}

REQUEST_SCHEMA = pa.schema([(c, _REQUEST_TYPES.get(c, _I)) for c in REQUEST_COLUMNS])
SESSION_SCHEMA = pa.schema([(c, _SESSION_TYPES.get(c, _I)) for c in SESSION_COLUMNS])


@dataclass
class RunData:
    path: Path
    manifest: dict[str, Any]
    summary: dict[str, Any]
    requests: pa.Table
    sessions: pa.Table | None
    telemetry: pa.Table | None
    complete: bool  # False when read back from journals of a run that did not finish
    # request columns not read (not in ``requests``; ``read_run(without=...)``): read them from the file
    dropped: tuple[str, ...] = ()


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", s).strip("-")[:60]


def create_run_dir(out: str | Path, name: str | None = None) -> Path:
    base = Path(out)
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunDirError(f"cannot create output directory {str(base)!r}: {e.strerror}",
                          hint="pass a writable directory to --out") from None
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%d-%H%M%S")
    stem = f"{stamp}-{_slug(name)}" if name else stamp
    for i in range(1000):
        p = base / (stem if i == 0 else f"{stem}-{i}")
        try:
            p.mkdir()
            return p
        except FileExistsError:
            continue
    raise RunDirError(f"cannot find a free run directory name under {base}")


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(
        orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    )
    tmp.replace(path)


def rows_to_table(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows as a table of ``schema``. Never fails because of a bad row: a value of the wrong type (a
    string token count, a number beyond int64) becomes null, and an ``ok`` row holding one becomes
    ``malformed`` with the reason (counts still add up); a row that is not an object is dropped."""
    rows = [r for r in rows if isinstance(r, dict)]
    cols = {f.name: [r.get(f.name) for r in rows] for f in schema}
    try:
        return pa.table(cols, schema=schema)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        pass
    kinds = [(f.name, _kind(f.type)) for f in schema]
    clean = [_clean_row(r, kinds) for r in rows]
    return pa.table({f.name: [r.get(f.name) for r in clean] for f in schema}, schema=schema)


_INT64 = (-(2**63), 2**63 - 1)


def _kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_string(t):
        return "str"
    if pa.types.is_list(t):
        return "ints"
    return "any"


def _fit(v: Any, kind: str) -> tuple[Any, bool]:
    """(value fitted to ``kind``, ok); null is always ok."""
    if v is None or kind == "any":
        return v, True
    if kind == "int":
        if v.__class__ is float and v.is_integer():
            v = int(v)
        return (v, True) if v.__class__ is int and _INT64[0] <= v <= _INT64[1] else (None, False)
    if kind == "bool":
        return (v, True) if v.__class__ is bool else (None, False)
    if kind == "str":
        return (v, True) if isinstance(v, str) else (None, False)
    if isinstance(v, list) and all(x.__class__ is int and _INT64[0] <= x <= _INT64[1] for x in v):
        return v, True
    return None, False


def _clean_row(row: dict[str, Any], kinds: list[tuple[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    bad: list[str] = []
    for name, kind in kinds:
        v, good = _fit(row.get(name), kind)
        out[name] = v
        if not good:
            bad.append(f"{name}={repr(row.get(name))[:40]}")
    if "status" in out and out["status"] not in STATUSES and out["status"] is not None:
        bad.append(f"status={repr(out['status'])[:40]}")
        out["status"] = MALFORMED
    if bad and "status" in out:  # a request row: a value that could not be stored makes it malformed
        note = "invalid field(s) in the record, not stored: " + ", ".join(bad)
        if out["status"] in (OK, None):
            out["status"] = MALFORMED
        out["error"] = f"{out['error']}; {note}" if out.get("error") else note
    return out


def write_parquet_from_journal(run_dir: Path) -> None:
    """Convert the journals of ``run_dir`` into requests.parquet (and sessions.parquet if any)."""
    rows = list(read_journal(run_dir / REQUESTS_JOURNAL))
    pq.write_table(rows_to_table(rows, REQUEST_SCHEMA), run_dir / "requests.parquet")
    srows = list(read_journal(run_dir / SESSIONS_JOURNAL))
    if srows:
        pq.write_table(rows_to_table(srows, SESSION_SCHEMA), run_dir / "sessions.parquet")


def read_parquet(path: str | Path, columns: Sequence[str] | None = None) -> pa.Table:
    """One Parquet file whole (``columns`` only, when given). Not ``pq.read_table``: that goes through
    ``pyarrow.dataset``, whose libraries cost 13-17 MB of RSS when first loaded, for nothing one file
    needs."""
    return pq.ParquetFile(path).read(columns=None if columns is None else list(columns))


def _read_table(run_dir: Path, parquet: str, journal: str, schema: pa.Schema, without: Sequence[str] = ()
                ) -> tuple[pa.Table | None, bool]:
    """The table, and whether it came from the Parquet file (else from the journals: every column)."""
    p = run_dir / parquet
    if p.exists():
        try:
            if not without:
                return conform(read_parquet(p), schema), True
            return _read_streamed(p, [c for c in schema.names if c not in without], schema), True
        except (OSError, pa.ArrowException) as e:  # a damaged file: fall back to the journal
            if not (run_dir / journal).exists():
                raise RunDirError(
                    f"{p} cannot be read: {e}", hint="the run's journal is missing too"
                ) from None
    paths = journal_paths(run_dir, journal)  # every shard's journal (one per worker process or Ray task)
    rows = [r for path in paths for r in read_journal(path)]
    if rows or paths:
        return rows_to_table(rows, schema), False
    return None, False


def _read_streamed(path: Path, columns: list[str], schema: pa.Schema) -> pa.Table:
    """``columns`` of the file read a row group, a batch at a time (:func:`records.stream.iter_tables`: one
    reader per group, no threads), joined: only what is kept stays, not the whole-file reader's buffers."""
    from servelab.records.stream import iter_tables  # stream imports this module

    parts = list(iter_tables(path, columns, schema=schema))
    sub = pa.schema([schema.field(c) for c in columns])
    return pa.concat_tables(parts) if parts else sub.empty_table()


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns and types: a missing column (an older run) is all null, a column
    that cannot be cast is rebuilt value by value (bad values become null); extra columns are kept."""
    if table.schema.equals(schema):
        return table
    for i, f in enumerate(schema):
        idx = table.schema.get_field_index(f.name)
        if idx < 0:
            col = pa.nulls(table.num_rows, f.type)
            table = table.add_column(min(i, table.num_columns), f.name, col)
        elif not table.schema.field(idx).type.equals(f.type):
            try:
                col = table.column(idx).cast(f.type)
            except (pa.ArrowException, ValueError):
                kind = _kind(f.type)
                col = pa.array([_fit(v, kind)[0] for v in table.column(idx).to_pylist()], type=f.type)
            table = table.set_column(idx, f.name, col)
    return table


def read_run(path: str | Path, *, without: Sequence[str] = ()) -> RunData:
    """Read a run directory back (from Parquet, or from its journals when the run did not finish).
    ``without``: request columns left unread when read from Parquet (absent from ``requests``, named in
    ``RunData.dropped``; the others are read a row group at a time), e.g. ``token_times_ns``, 8 bytes a
    token, which only the ITL histogram reads (streamed)."""
    p = Path(path)
    if not p.is_dir():
        raise RunDirError(f"{str(p)!r} is not a run directory (it does not exist)",
                          hint="pass the directory that `servelab run` printed")
    mpath = p / "manifest.json"
    if not mpath.exists():
        raise RunDirError(f"{p} has no manifest.json: not a servelab run directory")
    try:
        manifest = json.loads(mpath.read_text())
    except json.JSONDecodeError as e:
        raise RunDirError(f"{mpath} is not valid JSON: {e}") from None
    version = manifest.get("schema_version")
    if version is not None and version > SCHEMA_VERSION:
        raise RunDirError(
            f"{p} has schema version {version}; this servelab reads up to {SCHEMA_VERSION}",
            hint="upgrade servelab",
        )
    requests, from_parquet = _read_table(p, "requests.parquet", REQUESTS_JOURNAL, REQUEST_SCHEMA, without)
    dropped = tuple(without) if from_parquet else ()
    if requests is None:
        requests = REQUEST_SCHEMA.empty_table()
    sessions = _read_table(p, "sessions.parquet", SESSIONS_JOURNAL, SESSION_SCHEMA)[0]
    telemetry = read_parquet(p / "telemetry.parquet") if (p / "telemetry.parquet").exists() else None
    spath = p / "summary.json"
    summary = json.loads(spath.read_text()) if spath.exists() else {}
    complete = (p / "requests.parquet").exists() and spath.exists()
    return RunData(p, manifest, summary, requests, sessions, telemetry, complete, dropped)


def is_run_dir(path: str | Path) -> bool:
    return (Path(path) / "manifest.json").exists()
