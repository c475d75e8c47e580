"""A shard's run in a worker process that also says which heavy packages that process loaded. Kept apart
from the test module: the spawned worker imports this module to find the function, and a test module's
own imports (pytest, pyarrow for reading results) would otherwise be counted as the worker's."""

from __future__ import annotations

import os
import sys
from typing import Any

from servelab.bench.drive import drive_shard

# what only the coordinator needs (Parquet merge, summary, telemetry parsing, the CLI)
COORDINATOR_ONLY = ("pyarrow", "prometheus_client", "typer", "rich")
IMPORTED_IN = os.getpid()  # the process that imported this module (and servelab.bench.drive with it)


def drive_and_list_modules(spec: Any, shard: int, control: Any) -> Any:
    out = drive_shard(spec, shard, control)
    out.facts["loaded"] = [m for m in COORDINATOR_ONLY if m in sys.modules]
    out.facts["pid"], out.facts["imported_in"] = os.getpid(), IMPORTED_IN
    out.facts["env"] = os.environ.get("SERVELAB_TEST_WORKER_ENV")
    return out
