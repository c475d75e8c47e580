"""records.stream: a run's Parquet file read back a batch at a time, in memory bounded by one row group."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from servelab.records.stream import iter_tables

GROUPS, ROWS, TOKENS = 32, 256, 256  # 32 row groups of 256 requests x 256 token times


def _write(path):
    schema = pa.schema([("request_id", pa.int64()), ("token_times_ns", pa.list_(pa.int64()))])
    with pq.ParquetWriter(path, schema, use_dictionary=["request_id"]) as w:
        for g in range(GROUPS):
            ids = np.arange(g * ROWS, (g + 1) * ROWS, dtype=np.int64)
            flat = (ids[:, None] * 1_000_000 + np.arange(TOKENS) * 1000).ravel()
            offsets = np.arange(0, ROWS * TOKENS + 1, TOKENS, dtype=np.int32)
            w.write_table(pa.table({"request_id": ids,
                                    "token_times_ns": pa.ListArray.from_arrays(offsets, flat)}, schema))


def test_reading_every_row_back_holds_about_one_row_group_of_token_times(tmp_path):
    # 32 groups x 256 x 256 token times x 8 bytes = 16 MiB over the file, 512 KiB per group. A single
    # reader over the whole file held more and more of it (10.9 MiB of Arrow memory at its peak here);
    # one reader per row group stays near one group's worth (1.15 MiB: the group, one batch, the pages).
    path = tmp_path / "requests.parquet"
    _write(path)
    start = pa.total_allocated_bytes()
    peak, rows, tokens, last = 0, 0, 0, -1
    for t in iter_tables(path, ("request_id", "token_times_ns"), batch_rows=100):
        peak = max(peak, pa.total_allocated_bytes() - start)
        ids = t.column("request_id").to_numpy()
        assert ids[0] == last + 1 and t.num_rows <= 100
        last = int(ids[-1])
        rows += t.num_rows
        tokens += len(t.column("token_times_ns").combine_chunks().flatten())
    assert (rows, tokens) == (GROUPS * ROWS, GROUPS * ROWS * TOKENS)
    assert peak < 2 * 2**20, f"{peak / 2**20:.1f} MiB of Arrow memory while reading"
