"""The decision table of a sweep: reads each finished point's manifest and sessions, then
:func:`servelab.analysis.decision.decision_table` (the figures and the advice are computed there)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from servelab.analysis.decision import PointData, decision_table
from servelab.records.summary import dig as _get


def target_label(params: dict[str, Any], manifest: dict[str, Any]) -> str:
    """A short name for the point's serving setup: the swept target (``sim:`` and keys dropped) and any
    swept server key."""
    t = str(params.get("target") or _get(manifest, "config", "target", "url") or "target")
    if t.startswith("sim:"):
        t = t[4:].split(",", 1)[0]
    extra = [f"{k}={v}" for k, v in params.items() if k not in ("target", "concurrency", "rate", "sessions",
                                                                "session_rate") and "." not in k]
    return " ".join([t, *extra])


def _task_ends(run_dir: Path, started_ns: int) -> np.ndarray:
    path = run_dir / "sessions.parquet"
    if not path.exists():
        return np.array([])
    t = pq.read_table(path, columns=["status", "accepted", "warmup", "end_ns"]).to_pydict()
    ends = [
        (e - started_ns) / 1e9
        for s, a, w, e in zip(t["status"], t["accepted"], t["warmup"], t["end_ns"], strict=True)
        if s == "ok" and a and not w and e is not None
    ]
    return np.asarray(ends, dtype=np.float64)


def _point(sweep_dir: Path, e: dict[str, Any], cost_gpus: int | None) -> PointData | None:
    run_dir = sweep_dir / e["run_dir"]
    mpath = run_dir / "manifest.json"
    manifest = json.loads(mpath.read_text()) if mpath.exists() else {}
    summary = e.get("summary") or {}
    dep = _get(manifest, "target", "deployment") or {}
    run = summary.get("run") or {}
    window = _get(manifest, "config", "limits", "duration_s") or run.get("duration_s")
    model = (_get(manifest, "target", "models") or [None])[0] or _get(manifest, "config", "target", "model")
    return PointData(target=target_label(e.get("params") or {}, manifest), level=float(e["level"]),
                     summary=summary, model=model, gpus=dep.get("gpus") or cost_gpus, nodes=dep.get("nodes"),
                     window_s=float(window) if window else None,
                     task_ends_s=_task_ends(run_dir, int(run.get("started_ns") or 0)),
                     ready_s=e.get("server_ready_s"))


def decision_for(sweep_dir: Path, state: dict[str, Any]) -> dict[str, Any] | None:
    """The decision table of the sweep's finished points, or None when it has no load levels."""
    base = state.get("base_config") or {}
    m = _get(base, "cost", "model") or {}
    price = m.get("gpu_hour_usd") if m.get("kind", "gpu_hour") == "gpu_hour" else None
    pts = [p for e in state.get("points", []) if e.get("status") == "ok" and e.get("level") is not None
           and e.get("run_dir") and (p := _point(sweep_dir, e, m.get("gpus"))) is not None]
    if not pts:
        return None
    slo = _get(base, "slo", "task_p95_s")
    return decision_table(pts, gpu_hour_usd=price, task_p95_slo_s=slo)
