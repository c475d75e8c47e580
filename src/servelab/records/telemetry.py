"""The telemetry table of a run directory: one row per scraped sample (``telemetry.parquet``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

TELEMETRY_FILE = "telemetry.parquet"
TELEMETRY_SCHEMA = pa.schema([("t_ns", pa.int64()), ("source", pa.string()), ("name", pa.string()),
                              ("raw_name", pa.string()), ("labels", pa.string()), ("value", pa.float64())])


def write_telemetry(run_dir: Path, columns: dict[str, list[Any]]) -> None:
    """Write the scraped samples (columns named as in :data:`TELEMETRY_SCHEMA`); nothing when there are
    none."""
    if columns and any(len(v) for v in columns.values()):
        pq.write_table(pa.table(columns, schema=TELEMETRY_SCHEMA), Path(run_dir) / TELEMETRY_FILE)
