"""The throughput-per-GPU vs interactivity trade-off across deployments and load levels.

Each measured point is (tokens/s per user, output tokens/s per GPU): interactivity is the decode speed one
user sees (1000 / median time per output token), throughput per GPU is the point's output tokens/s divided
by the GPUs serving it. A point is on the Pareto front when no other point is at least as good on both
axes and better on one. Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servelab.analysis.metrics import DERIVED_BY_NAME


def point_of(summary: Mapping[str, Any] | None, gpus: int | None) -> tuple[float, float] | None:
    """(tokens/s per user, output tokens/s per GPU) of one run's summary, or None when not measurable."""
    if not summary:
        return None
    per_user = DERIVED_BY_NAME["tokens_per_s_per_user"].value(summary)
    tp = DERIVED_BY_NAME["output_tokens_per_s"].value(summary)
    if per_user is None or tp is None:
        return None
    return per_user, tp / max(1, int(gpus or 1))


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points on the front (maximising both coordinates), ordered by the first coordinate."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    front, best_y = [], float("-inf")
    for i in order:
        if points[i][1] > best_y:
            front.append(i)
            best_y = points[i][1]
    return sorted(front, key=lambda i: points[i][0])
