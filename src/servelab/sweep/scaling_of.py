"""Scaling efficiency of a sweep whose points ran on different node counts (targets or simulator keys)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servelab.analysis.scaling import peak_scaling, scaling_bend, scaling_rows


def _nodes(manifest: dict[str, Any]) -> int | None:
    target = manifest.get("target") or {}
    for holder in (target.get("deployment") or {}, target):
        n = holder.get("nodes")
        if isinstance(n, int) and n >= 1:
            return n
    return None


def scaling_for(sweep_dir: Path, points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """{rows, peaks, bend} over node counts, or None when every point ran on the same number of nodes."""
    topologies: dict[int, dict[float, float]] = {}
    for e in points:
        if e.get("status") != "ok" or e.get("level") is None or not e.get("run_dir"):
            continue
        mpath = sweep_dir / e["run_dir"] / "manifest.json"
        if not mpath.exists():
            continue
        nodes = _nodes(json.loads(mpath.read_text()))
        tput = ((e.get("summary") or {}).get("throughput") or {}).get("output_tokens_per_s")
        if nodes is None or tput is None:
            continue
        curve = topologies.setdefault(nodes, {})
        curve[float(e["level"])] = max(float(tput), curve.get(float(e["level"]), 0.0))
    if len(topologies) < 2:
        return None
    return {
        "rows": scaling_rows(topologies),
        "peaks": peak_scaling(topologies),
        "bend": scaling_bend(topologies),
    }
