"""sweep.json: the sweep's parameters, each point's status and summary, and the knee. Written after
every point, so a killed sweep can resume where it stopped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servelab.errors import RunDirError
from servelab.records.rundir import is_run_dir, read_run, write_json
from servelab.records.schema import SCHEMA_VERSION

SWEEP_FILE = "sweep.json"


def new_state(axes: dict[str, list[Any]], base_config: dict[str, Any], argv: list[str],
              started_at: str, budget_s: float | None) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "sweep",
        "command_line": argv,
        "axes": axes,
        "base_config": base_config,
        "budget_s": budget_s,
        "started_at": started_at,
        "ended_at": None,
        "complete": False,
        "points": [],
        "knee": None,
        "knee_reason": None,
    }


def save(sweep_dir: Path, state: dict[str, Any]) -> None:
    write_json(sweep_dir / SWEEP_FILE, state)


def load(sweep_dir: Path) -> dict[str, Any]:
    p = Path(sweep_dir) / SWEEP_FILE
    if not p.exists():
        raise RunDirError(f"{sweep_dir} has no {SWEEP_FILE}: not a sweep directory",
                          hint="pass the directory that `servelab sweep` printed")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise RunDirError(f"{p} is not valid JSON: {e}") from None


def is_sweep_dir(path: str | Path) -> bool:
    return (Path(path) / SWEEP_FILE).exists()


def finished_point(sweep_dir: Path, entry: dict[str, Any]) -> bool:
    """A point counts as done when it was recorded ok and its run directory is complete."""
    if entry.get("status") != "ok" or not entry.get("run_dir"):
        return False
    rd = sweep_dir / entry["run_dir"]
    return is_run_dir(rd) and read_run(rd).complete
