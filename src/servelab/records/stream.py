"""Read a run's Parquet file a batch of rows at a time, only the columns asked for.

What the end of a run reads (summary, evidence, per-worker lag) goes through here, so memory is bounded by
one row group, not by the run: ``requests.parquet`` is written in row groups of at most 4,096 rows or 2M
token times (:mod:`servelab.records.merge`) and is read back one group, one batch at a time. A column an
older file lacks comes back all null (as :func:`servelab.records.rundir.conform` does for whole tables).
"""

from __future__ import annotations

import ctypes
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
    """From here on Arrow allocates from the C library's allocator, whose big blocks go back to the system
    when freed (:func:`map_big_blocks`); what the pool before holds free goes back to the system first. For
    the end of a run after the merge: Arrow's default pool (mimalloc in pyarrow 26) keeps what the batch
    reads free, so the summary grew on top of the merge's leftovers (the end of a 10,000 x 256-token run,
    ``memory.py --finish 10000``: 174 MB with it, 150 with this). The merge itself stays on the default
    pool: on the C library's allocator its peak grew with the run (1M requests: 186 MB against 135)."""
    pa.default_memory_pool().release_unused()
    pa.set_memory_pool(pa.system_memory_pool())
    map_big_blocks()


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
BIG_BLOCK = 128 * 1024


def map_big_blocks(threshold: int = BIG_BLOCK) -> bool:
    """From here on (in the whole process) the C library maps every block of ``threshold`` bytes or more on
    its own and unmaps it when it is freed. glibc does that from 128 KiB but raises the threshold to the
    biggest mapped block freed so far (up to 32 MiB): after the first row group's decoded token times
    (8 MB) were freed, the next ones and numpy's arrays came from the heap, which kept them after they were
    freed, and each phase of the end of a run (summary, evidence, report) started above the last one's
    peak. A fixed threshold keeps glibc from raising it. Returns whether the setting was taken (False where
    the C library has no ``mallopt``, e.g. macOS: nothing changes there)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))
