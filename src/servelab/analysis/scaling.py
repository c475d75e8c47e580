"""Scaling efficiency across topologies.

    efficiency = observed cluster throughput / (single-node throughput x node count)

1.0 is perfectly linear scaling. It is computed per load level (the same level on both topologies), and for
each topology's peak against the base at the SAME level (``peak_vs_peak``, across levels, is kept apart). The
curve bends at the last node count that still scales: the one before the first whose efficiency falls below
``bend_below`` (default 0.8) or, with at least three topologies, Kneedle's knee of peak throughput against
node count, whichever comes first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from servelab.errors import ConfigError

Curve = Mapping[float, float]  # load level -> throughput


def _base(topologies: Mapping[int, Curve]) -> tuple[int, Curve]:
    if not topologies:
        raise ConfigError("scaling efficiency needs at least one topology")
    for nodes in topologies:
        if int(nodes) < 1:
            raise ConfigError(f"scaling efficiency: node count {nodes} is not positive")
    nodes = min(topologies)
    return nodes, topologies[nodes]


def scaling_rows(topologies: Mapping[int, Curve]) -> list[dict[str, Any]]:
    """One row per (node count, load level present on the smallest topology too).

    ``topologies`` maps node count -> {load level: throughput}. The smallest node count is the base (its
    throughput per node is the reference); usually 1.
    """
    base_nodes, base = _base(topologies)
    rows = []
    for nodes in sorted(topologies):
        curve = topologies[nodes]
        for level in sorted(set(curve) & set(base)):
            single = float(base[level]) / base_nodes
            ideal = single * nodes
            obs = float(curve[level])
            eff = obs / ideal if ideal > 0 else None
            rows.append({"nodes": int(nodes), "level": float(level), "throughput": obs,
                         "single_node": single, "ideal": ideal, "efficiency": eff})
    return rows


def peak_scaling(topologies: Mapping[int, Curve]) -> list[dict[str, Any]]:
    """Each topology's peak, and its efficiency at the SAME level: the peak against the base topology's
    throughput at the peak's level x node ratio (None when the base did not measure that level).
    ``peak_vs_peak`` (against the base's own peak, possibly at another level) is kept apart, labelled:
    comparing peaks at different load levels is not a scaling efficiency."""
    base_nodes, base = _base(topologies)
    if not base:
        raise ConfigError(f"scaling efficiency: the {base_nodes}-node topology has no measured level")
    single_peak = max(float(v) for v in base.values()) / base_nodes
    out = []
    for nodes in sorted(topologies):
        curve = topologies[nodes]
        if not curve:
            continue
        level, peak = max(curve.items(), key=lambda kv: float(kv[1]))
        at = base.get(level)
        ideal = None if at is None else float(at) / base_nodes * nodes
        out.append({"nodes": int(nodes), "peak_level": float(level), "peak_throughput": float(peak),
                    "ideal": ideal, "efficiency": float(peak) / ideal if ideal else None,
                    "peak_vs_peak": float(peak) / (single_peak * nodes) if single_peak > 0 else None})
    return out


def scaling_bend(topologies: Mapping[int, Curve], bend_below: float = 0.8) -> dict[str, Any]:
    """Where the peak-throughput scaling curve bends: the node count and why."""
    peaks = peak_scaling(topologies)
    if len(peaks) < 2:
        return {"nodes": None, "reason": "one topology only: nothing to scale against", "peaks": peaks}
    below = next((p for p in peaks if p["efficiency"] is not None and p["efficiency"] < bend_below), None)
    knee_nodes = None
    if len(peaks) >= 3:
        from kneed import KneeLocator

        x = np.log2([p["nodes"] for p in peaks])
        y = np.maximum.accumulate([p["peak_throughput"] for p in peaks])
        if y[-1] > y[0]:
            kl = KneeLocator(x, y, curve="concave", direction="increasing")
            k = int(np.argmax(kl.y_difference))
            if kl.y_difference[k] > 0 and 0 < k < len(peaks) - 1:
                knee_nodes = peaks[k]["nodes"]
    prev = None
    if below is not None:
        i = peaks.index(below)
        prev = peaks[i - 1]["nodes"] if i > 0 else None
    cands = [c for c in (prev, knee_nodes) if c is not None]
    if not cands:
        if below is not None:  # the base itself is already inefficient (cannot happen with base = 1.0)
            return {"nodes": None, "peaks": peaks, "first_poor": below["nodes"],
                    "reason": f"efficiency below {bend_below:.0%} from {below['nodes']} nodes"}
        eff = peaks[-1]["efficiency"]
        return {"nodes": None, "peaks": peaks, "first_poor": None,
                "reason": f"no bend up to {peaks[-1]['nodes']} nodes (efficiency {_pct(eff)} there)"}
    bend = min(cands)
    p = next(p for p in peaks if p["nodes"] == bend)
    nxt = peaks[peaks.index(p) + 1]
    why = (
        f"scaling holds to {bend} nodes (efficiency {_pct(p['efficiency'])}); at {nxt['nodes']} nodes it is "
        f"{_pct(nxt['efficiency'])}"
    )
    if knee_nodes == bend:
        why += " (Kneedle knee of peak throughput against node count)"
    return {"nodes": bend, "efficiency": p["efficiency"], "first_poor": below["nodes"] if below else None,
            "reason": why, "peaks": peaks}


def _pct(v: float | None) -> str:
    return "not measured at the same level" if v is None else f"{v:.0%}"
