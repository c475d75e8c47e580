"""More report charts: the Pareto chart across deployments, per-request timeline, client metrics over time,
and server metrics (with units people use: KV usage in %, too few samples said in words).

Like :mod:`servelab.report.plots`, each function draws one PNG to ``path`` from plain numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.patches import Patch

from servelab.analysis.pareto import pareto_front
from servelab.report.plots import _save, plt

MIN_SERIES_POINTS = 8  # fewer samples than this are described in words, not drawn as a line
_PHASES = (("client wait", "#c7c7c7"), ("server queue", "#ff7f0e"), ("prefill", "#d62728"),
           ("waiting + prefill", "#e377c2"), ("decode", "#1f77b4"), ("failed", "#7f0000"))


def pareto_chart(series: Sequence[Mapping[str, Any]], path: Path, *, per: str = "GPU") -> Path:
    """Output tokens/s per GPU against tokens/s per user, one marker series per deployment or group, each
    point labelled with its load level; the Pareto front across all of them drawn as a step line.

    ``series``: ``[{"label", "points": [(x, y, level_label), ...]}]``."""
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    cmap = plt.get_cmap("tab10")
    every: list[tuple[float, float]] = []
    labels: list[tuple[float, float, str]] = []
    front: list[tuple[float, float]] = []
    for i, s in enumerate(series):
        pts = sorted(s["points"], key=lambda p: p[0])
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        every += [(x, y) for x, y in zip(xs, ys, strict=True)]
        labels += [(x, y, str(lv)) for x, y, lv in pts]
        ax.plot(xs, ys, "o-", color=cmap(i % 10), lw=1, alpha=0.85, label=s["label"] or "all points")
    if every:
        front = [every[i] for i in pareto_front(every)]
        ax.step([p[0] for p in front], [p[1] for p in front], where="pre", color="black", lw=2, alpha=0.5,
                label="Pareto front")
    xs_all, ys_all = [p[0] for p in every] or [1.0], [p[1] for p in every] or [1.0]
    ax.set_xlim(0, max(xs_all) * 1.2)
    ax.set_ylim(0, max(ys_all) * 1.15)
    ax.set_xlabel("interactivity: tokens/s per user (1000 / median time per output token)")
    ax.set_ylabel(f"output tokens/s per {per}")
    ax.set_title(f"Throughput per {per} against interactivity ({len(every)} points; labels: load level)",
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")  # not over the points: they sit up and right by design
    _label_points(fig, ax, labels, first=set(front))
    return _save(fig, path)


# where a point's label may go, in points from the point (nearest first); a label that fits nowhere is left
# out (a crowded chart labels a readable subset, the Pareto front first)
_OFFSETS = ((5, 4), (5, -11), (-5, 4), (-5, -11), (0, 9), (0, -16), (9, -4), (-9, -4))
_SAME_SPOT_PX = 4.0


def _label_points(fig: Any, ax: Any, labels: Sequence[tuple[float, float, str]], *,
                  first: set[tuple[float, float]]) -> None:
    """Label each point with its level where the label overlaps no other label, marker or the legend and
    stays inside the axes. Points drawn at one spot share one label ('16, 32, 64')."""
    from matplotlib.transforms import Bbox

    if not labels:
        return
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    leg = ax.get_legend()
    taken = []
    if leg is not None:
        taken.append(leg.get_window_extent(r))
        # fix the legend where "best" put it: the labels are placed around it
        box = leg.get_window_extent(r).transformed(ax.transAxes.inverted())
        leg.set_loc((box.x0, box.y0))
    disp = ax.transData.transform([(x, y) for x, y, _ in labels])
    groups: list[tuple[Any, tuple[float, float], list[str]]] = []
    for (x, y, text), d in zip(labels, disp, strict=True):
        taken.append(Bbox.from_extents(d[0] - 4, d[1] - 4, d[0] + 4, d[1] + 4))
        g = next((g for g in groups if abs(g[0][0] - d[0]) <= _SAME_SPOT_PX
                  and abs(g[0][1] - d[1]) <= _SAME_SPOT_PX), None)
        if g is None:
            groups.append((d, (x, y), [text]))
        elif text not in g[2]:
            g[2].append(text)
    inside = ax.get_window_extent(r)
    groups.sort(key=lambda g: (g[1] not in first, -g[1][1]))
    for _, xy, texts in groups:
        text = ", ".join(sorted(texts, key=_level_key))
        for k in (1, 2, 3):
            for ox, oy in _OFFSETS:
                ann = ax.annotate(text, xy, textcoords="offset points", xytext=(ox * k, oy * k), fontsize=7,
                                  color="#444", ha="left" if ox > 0 else "right" if ox < 0 else "center")
                bb = ann.get_window_extent(r)
                if (inside.x0 <= bb.x0 and bb.x1 <= inside.x1 and inside.y0 <= bb.y0 and bb.y1 <= inside.y1
                        and not any(bb.overlaps(t) for t in taken)):
                    taken.append(bb)
                    break
                ann.remove()
            else:
                continue
            break


def _level_key(text: str) -> tuple[int, float, str]:
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def request_timeline(rows: Sequence[Mapping[str, Any]], path: Path, *, total: int) -> Path:
    """Sample requests on one time axis: waiting in the client, queued and prefilling on the server (or
    the two together when the server does not say), decoding; failed requests in dark red.

    ``rows``: ``[{"label", "phases": [(phase, start_s, end_s), ...]}]``."""
    fig, ax = plt.subplots(figsize=(7.5, 0.22 * max(len(rows), 5) + 1.4))
    colors = dict(_PHASES)
    used: set[str] = set()
    for i, r in enumerate(rows):
        for phase, a, b in r["phases"]:
            if b > a:
                ax.barh(i, b - a, left=a, color=colors[phase], height=0.7)
                used.add(phase)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r["label"] for r in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlim(left=0)
    ax.set_xlabel("seconds since the first request shown was due")
    # explicit patches: an empty barh() as a legend entry is drawn in the default colour, not the phase's
    handles = [Patch(facecolor=c, label=phase) for phase, c in _PHASES if phase in used]
    ax.legend(handles=handles, fontsize=7, loc="lower right", ncol=3)
    ax.set_title(f"{len(rows)} sample requests of {total:,}: when each waited, queued, prefilled and decoded",
                 fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    return _save(fig, path)


def over_time(panels: Sequence[Mapping[str, Any]], path: Path, *, xlabel: str) -> Path:
    """Several series against time, one panel each: ``[{"title", "unit", "t", "v", "top"}]`` (``top``:
    a fixed upper limit such as 100 for a percentage, else 10% above the largest value)."""
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(7.5, 1.8 * len(panels) + 0.6), sharex=True, squeeze=False
    )
    for ax, p in zip(axes[:, 0], panels, strict=True):
        t, v = np.asarray(p["t"], dtype=float), np.asarray(p["v"], dtype=float)
        ax.plot(t, v, "-", lw=1.2, marker="." if t.size < 40 else None)
        finite = v[np.isfinite(v)]
        top = p.get("top") or (float(finite.max()) * 1.1 if finite.size and finite.max() > 0 else 1.0)
        ax.set_ylim(0, top)
        ax.set_xlim(left=0)
        ax.set_ylabel(p.get("unit") or "", fontsize=8)
        ax.set_title(f"{p['title']} (n = {t.size} samples)", fontsize=9)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel(xlabel)
    return _save(fig, path)
