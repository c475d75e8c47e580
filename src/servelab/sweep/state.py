"""sweep.json: the sweep's parameters, each point's status and summary, and the knee. Written after
every point, so a killed sweep can resume where it stopped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servelab.errors import ConfigError, RunDirError
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
    """A point counts as done when it was recorded ok and its run directory is complete (a point cut by
    Ctrl-C is recorded ``interrupted`` and runs again on resume)."""
    if entry.get("status") != "ok" or not entry.get("run_dir"):
        return False
    rd = sweep_dir / entry["run_dir"]
    if not is_run_dir(rd):
        return False
    data = read_run(rd)
    return data.complete and data.manifest.get("status") != "interrupted"


# What a resumed sweep must share with the one it resumes: the same target, workload and grid.
RESUME_KEYS = ("target", "workload")


def resume_differences(
    state: dict[str, Any], axes: dict[str, list[Any]], base_config: dict[str, Any]
) -> list[str]:
    """What differs between a stored sweep and the one asked for now (both redacted), as readable lines."""
    out = []
    old_base = state.get("base_config") or {}
    for key in RESUME_KEYS:
        if old_base.get(key) != base_config.get(key):
            out.append(f"{key}: was {_short(old_base.get(key))}, now {_short(base_config.get(key))}")
    old_axes = state.get("axes") or {}
    if _jsonish(old_axes) != _jsonish(axes):
        out.append(f"grid: was {_short(old_axes)}, now {_short(axes)}")
    return out


def check_resume(state: dict[str, Any], axes: dict[str, list[Any]], base_config: dict[str, Any], *,
                 force: bool, sweep_dir: Path) -> None:
    """Refuse to resume a different sweep into ``sweep_dir`` (its finished points would be mixed in)."""
    diffs = resume_differences(state, axes, base_config)
    if diffs and not force:
        raise ConfigError(
            f"--resume {sweep_dir}: this sweep differs from the one stored there: " + "; ".join(diffs),
            hint="give the same target, workload and grid as before, or --force to resume anyway "
            "(finished points are kept as they are)",
        )


def _jsonish(x: Any) -> Any:
    return json.loads(json.dumps(x, default=str))


def _short(x: Any, limit: int = 200) -> str:
    text = json.dumps(x, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."
