"""Read a run's Parquet file a batch of rows at a time, only the columns asked for.

What the end of a run reads (summary, evidence, per-worker lag) goes through here, so memory is bounded by
one row group, not by the run: ``requests.parquet`` is written in row groups of at most 4,096 rows or 2M
token times (:mod:`servelab.records.merge`) and is read back one group, one batch at a time. A column an
older file lacks comes back all null (as :func:`servelab.records.rundir.conform` does for whole tables).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from servelab.records.rundir import REQUEST_SCHEMA, conform

BATCH_ROWS = 1024


def iter_tables(path: str | Path, columns: Sequence[str] | None = None, *, schema: pa.Schema = REQUEST_SCHEMA,
                batch_rows: int = BATCH_ROWS) -> Iterator[pa.Table]:
    """The rows of the Parquet file at ``path`` as tables of at most ``batch_rows`` rows with ``columns``
    (all of ``schema``'s when None), each conformed to ``schema``'s types."""
    f = pq.ParquetFile(path)
    want = list(columns) if columns is not None else list(schema.names)
    have = [c for c in want if c in f.schema_arrow.names]
    sub = pa.schema([schema.field(c) for c in want if c in schema.names])
    # One reader per row group: with one reader over the whole file, Arrow's allocations for a list column
    # (token times) grew with every row read (pyarrow 26: ~1.3 KB a 256-token request, 132 MB at 100k,
    # peak RSS 1.47 GB at 1M); a reader per group frees them when its group ends.
    for group in range(f.metadata.num_row_groups):
        for batch in f.iter_batches(batch_size=batch_rows, row_groups=[group], columns=have,
                                    use_threads=False):
            yield conform(pa.Table.from_batches([batch]), sub)


def read_columns(path: str | Path, columns: Sequence[str], *, schema: pa.Schema = REQUEST_SCHEMA) -> pa.Table:
    """Only ``columns`` of the file, whole (for small per-row columns: 8 bytes a row each)."""
    f = pq.ParquetFile(path)
    have = [c for c in columns if c in f.schema_arrow.names]
    return conform(f.read(columns=have), pa.schema([schema.field(c) for c in columns if c in schema.names]))


@contextmanager
def arrow_pool_restored() -> Iterator[None]:
    """Arrow's default memory pool put back as it was when the block ends (:func:`use_system_arrow_pool`)."""
    before = pa.default_memory_pool()
    try:
        yield
    finally:
        pa.set_memory_pool(before)


def use_system_arrow_pool() -> None:
    """From here on Arrow allocates from the C library's allocator; what the pool before holds free goes
    back to the system first. For the end of a run after the merge: Arrow's default pool (mimalloc in
    pyarrow 26) keeps what the batch reads free, so the summary grew on top of the merge's leftovers (the end
    of a 10,000 x 256-token run, ``memory.py --finish 10000``: 174 MB with it, 150 with this). The merge
    itself stays on the default pool: on the C library's allocator its peak grew with the run (1M requests:
    186 MB against 135)."""
    pa.default_memory_pool().release_unused()
    pa.set_memory_pool(pa.system_memory_pool())
