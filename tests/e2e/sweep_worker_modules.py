"""A sweep point run in a worker process that also says which process imported the point's code. Kept apart
from the test module, like worker_modules.py: the worker imports this module to find the function."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from servelab.sweep.runner import run_point_task

IMPORTED_IN = os.getpid()  # the process that imported this module (and servelab.sweep.runner with it)


def point_and_pids(sweep_dir: Path, spec: Any, p: Any, cfg: Any, slot: int) -> dict[str, Any]:
    entry = run_point_task(sweep_dir, spec, p, cfg, slot)
    return {**entry, "pid": os.getpid(), "imported_in": IMPORTED_IN}
