"""Report charts (matplotlib, Agg backend, PNG). Every chart states its sample counts; axes start at zero.

Each function draws one figure, writes it to ``path`` and returns the path. They take plain numbers and
never read files, so the HTML report and tests can call them on anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

DPI = 100
_COLORS = {"p50": "#1f77b4", "p95": "#ff7f0e", "p99": "#d62728", "tp": "#2ca02c", "good": "#9467bd",
           "model": "#1f77b4", "tool": "#ff7f0e", "other": "#c7c7c7"}


def _save(fig: Any, path: Path) -> Path:
    path = Path(path)
    fig.savefig(path, dpi=DPI, format="png", bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return path


def _f(xs: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if x is None else float(x) for x in xs])


def _level_axis(ax: Any, levels: Sequence[float], label: str, counts: Sequence[int] | None = None) -> None:
    lo = min(levels) if len(levels) else 1.0
    # log-like for power grids, yet the axis starts at 0 (a short linear stretch below the first level)
    ax.set_xscale("symlog", linthresh=lo, linscale=0.25)
    ax.set_xlim(left=0, right=max(levels) * 1.3 if len(levels) else 1)
    ax.set_xticks(list(levels))
    names = [f"{v:g}" if counts is None else f"{v:g}\nn={n:,}" for v, n in zip(levels, counts or levels,
                                                                              strict=True)]
    ax.set_xticklabels(names, fontsize=8)
    ax.set_xlabel(label)


def knee_plot(levels: Sequence[float], throughput: Sequence[float | None], p50: Sequence[float | None],
              p95: Sequence[float | None], p99: Sequence[float | None], knee: Mapping[str, Any] | None,
              counts: Sequence[int], path: Path, *, level_label: str = "load level",
              throughput_label: str = "output tokens/s", latency_label: str = "latency (ms)",
              goodput: Sequence[float | None] | None = None) -> Path:
    """Throughput (top) and p50/p95/p99 latency (bottom) against load, the knee marked."""
    lv = np.asarray(levels, dtype=float)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7.5, 6.2), sharex=True)
    ax1.plot(lv, _f(throughput), "o-", color=_COLORS["tp"], label=throughput_label)
    if goodput is not None and any(g is not None for g in goodput):
        ax3 = ax1.twinx()
        ax3.plot(lv, _f(goodput), "s--", color=_COLORS["good"], label="goodput req/s")
        ax3.set_ylim(bottom=0)
        ax3.set_ylabel("goodput (requests/s)", color=_COLORS["good"])
        ax3.legend(loc="lower right", fontsize=8, framealpha=0.9)
    for name, vals in (("p50", p50), ("p95", p95), ("p99", p99)):
        ax2.plot(lv, _f(vals), "o-", color=_COLORS[name], label=name)
    for ax in (ax1, ax2):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if knee and knee.get("level") is not None:
            lo, hi = knee.get("low"), knee.get("high")
            if lo is not None and hi is not None:
                ax.axvspan(lo, hi, color="#ffd700", alpha=0.15)
            ax.axvline(knee["level"], color="#b8860b", ls="--", lw=1.5)
        elif knee and knee.get("beyond"):
            ax.axvline(knee["low"], color="#b8860b", ls=":", lw=1.5)
    title = (
        "knee"
        if not knee
        else (
            f"knee at {knee['level']:g}"
            if knee.get("level") is not None
            else f"no knee: {knee['low']:g} or beyond"
            if knee.get("beyond")
            else "no knee"
        )
    )
    ax1.set_title(
        f"Throughput and latency against load ({title}; n = successful requests per level)", fontsize=10
    )
    ax1.set_ylabel(throughput_label)
    ax2.set_ylabel(latency_label)
    ax1.legend(loc="upper left", fontsize=8)
    ax2.legend(loc="upper left", fontsize=8)
    _level_axis(ax2, list(lv), level_label, list(counts))
    return _save(fig, path)


def _amount(v: float, unit: str) -> str:
    """3 significant figures; a duration in ms in the unit that reads best (310 µs, 1.99 s)."""
    from servelab.report.words import duration_ms, sig

    return duration_ms(v) if unit == "ms" else f"{sig(v)} {unit}"


def histogram(values: np.ndarray, path: Path, *, title: str, unit: str = "ms", bins: int = 60,
              total: int | None = None) -> Path:
    """Distribution of one metric with p50/p95/p99 marked; the last 0.1% beyond the axis are counted.
    ``total``: how many values there are when ``values`` is an even sample of them (said in the title)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    fig, ax = plt.subplots(figsize=(6.2, 3.2))
    if v.size == 0:
        ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(f"{title} (n = 0)", fontsize=10)
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        return _save(fig, path)
    top = float(np.percentile(v, 99.9)) if v.size >= 1000 else float(v.max())
    top = top if top > 0 else 1.0
    beyond = int((v > top).sum())
    ax.hist(np.clip(v, 0, top), bins=bins, range=(0, top), color="#4c72b0", alpha=0.85)
    for p, c in ((50, "p50"), (95, "p95"), (99, "p99")):
        q = float(np.percentile(v, p))
        ax.axvline(q, color=_COLORS[c], ls="--", lw=1.2, label=f"p{p} {_amount(q, unit)}")
    extra = f"; {beyond} beyond {_amount(top, unit)} in the last bin" if beyond else ""
    n = f"{v.size:,}" if total is None or total <= v.size else f"{v.size:,} drawn of {total:,}"
    ax.set_title(f"{title} (n = {n}{extra})", fontsize=10)
    ax.set_xlabel(unit)
    ax.set_ylabel("count")
    ax.set_xlim(left=0, right=top * 1.02)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def session_timeline(sessions: Sequence[Mapping[str, Any]], path: Path, *, total_sessions: int) -> Path:
    """Sample sessions on one time axis: model requests in flight (blue) against the rest of the session
    (tools, retrieval, think and waiting; grey, with the recorded tool share in the label).

    ``sessions``: ``[{"id", "start_s", "end_s", "model": [(start_s, end_s), ...], "tool_share"}]``, times
    relative to the earliest start shown."""
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * max(len(sessions), 3) + 1.2))
    for row, s in enumerate(sessions):
        ax.barh(row, s["end_s"] - s["start_s"], left=s["start_s"], color=_COLORS["other"], height=0.6)
        for a, b in s["model"]:
            ax.barh(row, b - a, left=a, color=_COLORS["model"], height=0.6)
    ax.set_yticks(range(len(sessions)))
    ax.set_yticklabels([f"#{s['id']} tools {s['tool_share']:.0%}" if s.get("tool_share") is not None
                        else f"#{s['id']}" for s in sessions], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(left=0)
    ax.set_xlabel("seconds since the first session shown started")
    ax.set_title(f"{len(sessions)} sample sessions of {total_sessions}: model turns (blue) vs tool and other "
                 "time (grey)", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    return _save(fig, path)


def telemetry_plot(series: Mapping[str, tuple[np.ndarray, np.ndarray]], path: Path) -> Path:
    """Server metrics over time, one panel each: ``{name: (t_s, values)}``."""
    names = list(series)
    fig, axes = plt.subplots(len(names), 1, figsize=(7.5, 1.9 * len(names) + 0.6), sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], names, strict=True):
        t, v = series[name]
        ax.plot(t, v, "-", lw=1.2)
        ax.set_ylabel(name, fontsize=8)
        ax.set_ylim(bottom=0, top=max(float(np.nanmax(v)) * 1.1, 1e-9) if v.size else 1)
        ax.set_xlim(left=0)
        ax.set_title(f"{name} (n = {v.size} samples)", fontsize=9)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("seconds since the first sample")
    return _save(fig, path)


def attribution_plot(attr: Mapping[str, Any], path: Path) -> Path:
    """Mean time per component: requests at or above the tail percentile vs the median requests."""
    comps = attr["components"]
    labels = [c["label"] for c in comps]
    y = np.arange(len(comps))
    fig, ax = plt.subplots(figsize=(7.5, 0.42 * len(comps) + 1.4))
    ax.barh(y - 0.2, [c["tail_ms"] for c in comps], height=0.4, color=_COLORS["p99"],
            label=f"tail: at or above p{attr['percentile']:g} (n = {attr['n_tail']})")
    ax.barh(y + 0.2, [c["median_ms"] for c in comps], height=0.4, color=_COLORS["p50"],
            label=f"median: p40-p60 (n = {attr['n_median']})")
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(left=0)
    ax.set_xlabel("mean time per " + ("request" if attr.get("scope") == "requests" else "session") + " (ms)")
    est = "" if attr.get("ground_truth", True) else " (estimated split)"
    ax.set_title(f"Where the slow {attr.get('scope', 'requests')} spend their time{est}; n = {attr['n']}",
                 fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="x")
    return _save(fig, path)


def _knee_title(knee: Mapping[str, Any] | None) -> str:
    if not knee:
        return "no knee"
    if knee.get("level") is not None:
        return f"knee at {knee['level']:g}"
    return f"{knee['low']:g} or beyond" if knee.get("beyond") else "no knee"


def counts_labels(groups: Sequence[Mapping[str, Any]], levels: Sequence[float]) -> list[str]:
    """Tick labels: the level and its sample count per group (``n=a/b`` in legend order, ``-`` where a
    group has no point at that level); one ``n=`` when every group measured the same count."""
    out = []
    for lv in levels:
        ns = []
        for g in groups:
            at = dict(zip(g["levels"], g["counts"], strict=True))
            ns.append(f"{at[lv]:,}" if lv in at else "-")
        if len(groups) > 3:
            out.append(f"{lv:g}")
        else:
            out.append(f"{lv:g}\nn={ns[0] if len(set(ns)) == 1 else '/'.join(ns)}")
    return out


def knee_groups_plot(groups: Sequence[Mapping[str, Any]], path: Path, *, level_label: str = "load level",
                     throughput_label: str = "output tokens/s", latency_label: str = "latency (ms)") -> Path:
    """Knee plot of one or more groups of points on the same axes: throughput (top) and latency (bottom)
    per group, each group's knee marked on its own curve.

    ``groups``: ``[{"label", "levels", "throughput", "p50", "p95", "p99", "knee", "counts", "goodput"}]``.
    One group is drawn by :func:`knee_plot` (p50/p95/p99 and goodput); several get one colour each, with
    p50 solid and p99 dashed, and the sample counts per level in the tick labels (more than three groups:
    in the legend)."""
    if len(groups) == 1:
        g = groups[0]
        return knee_plot(
            g["levels"],
            g["throughput"],
            g["p50"],
            g["p95"],
            g["p99"],
            g["knee"],
            g["counts"],
            path,
            level_label=level_label,
            throughput_label=throughput_label,
            latency_label=latency_label,
            goodput=g.get("goodput"),
        )
    cmap = plt.get_cmap("tab10")
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8.5, 7.0), sharex=True)
    for i, g in enumerate(groups):
        c = cmap(i % 10)
        lv, tp = np.asarray(g["levels"], dtype=float), _f(g["throughput"])
        ns = list(g["counts"]) or [0]
        n_words = "" if len(groups) <= 3 else f" (n={min(ns):,}-{max(ns):,})"
        ax1.plot(lv, tp, "o-", color=c, label=f"{g['label'] or 'all'}: {_knee_title(g['knee'])}{n_words}")
        ax2.plot(lv, _f(g["p50"]), "o-", color=c, lw=1.3)
        ax2.plot(lv, _f(g["p99"]), "^--", color=c, lw=1.0, alpha=0.8)
        knee = g["knee"] or {}
        if knee.get("level") is not None:
            k = float(knee["level"])
            y = tp[np.flatnonzero(lv == k)[0]] if np.any(lv == k) else np.nan
            ax1.plot([k], [y], marker="*", ms=16, color=c, mec="black", zorder=5)
            for ax in (ax1, ax2):
                ax.axvline(k, color=c, ls=":", lw=1.2)
        elif knee.get("beyond"):
            ax1.annotate(
                "knee beyond",
                (float(knee["low"]), tp[-1]),
                textcoords="offset points",
                xytext=(4, -12),
                fontsize=8,
                color=c,
            )
    for ax in (ax1, ax2):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    ax1.set_title(
        "Throughput and latency against load, one curve per group (star: the group's knee)", fontsize=10
    )
    ax1.set_ylabel(throughput_label)
    ax2.set_ylabel(latency_label)
    ax1.legend(loc="upper left", fontsize=8)
    ax2.plot([], [], "o-", color="#444", label="p50 (colour: group)")
    ax2.plot([], [], "^--", color="#444", label="p99")
    ax2.legend(loc="upper left", fontsize=8)
    top = max([float(np.nanmax(_f(g[k]))) for g in groups for k in ("p50", "p99")
               if any(v is not None for v in g[k])] or [1.0])
    ax2.set_ylim(0, top * 1.12)
    levels = sorted({float(v) for g in groups for v in g["levels"]})
    _level_axis(ax2, levels, level_label)
    ax2.set_xticklabels(counts_labels(groups, levels), fontsize=8)
    if len(groups) <= 3:
        ax2.set_xlabel(f"{level_label} (n = successful requests per group, in legend order)")
    return _save(fig, path)


def scaling_plot(
    rows: Sequence[Mapping[str, Any]],
    peaks: Sequence[Mapping[str, Any]],
    bend_nodes: int | None,
    path: Path,
    *,
    level_label: str = "load level",
) -> Path:
    """Scaling efficiency against node count: one line per load level (``rows``) and the peaks (bold);
    linear scaling (1.0) and the bend marked. Beside it: peak throughput against the linear ideal."""
    nodes = sorted({int(p["nodes"]) for p in peaks} | {int(r["nodes"]) for r in rows})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.9), gridspec_kw={"width_ratios": [3, 2]})
    levels = sorted({float(r["level"]) for r in rows})
    cmap = plt.get_cmap("viridis")
    for i, lv in enumerate(levels):
        pts = sorted((r for r in rows if float(r["level"]) == lv and r.get("efficiency") is not None),
                     key=lambda r: r["nodes"])
        ax1.plot([r["nodes"] for r in pts], [r["efficiency"] for r in pts], "o-", lw=1, ms=4,
                 color=cmap(i / max(len(levels) - 1, 1)), alpha=0.8, label=f"{level_label} {lv:g}")
    pk = [p for p in peaks if p.get("efficiency") is not None]
    ax1.plot(
        [p["nodes"] for p in pk], [p["efficiency"] for p in pk], "s-", color="black", lw=2.2, label="at peak"
    )
    for p in pk:
        ax1.annotate(f"{p['efficiency']:.0%}", (p["nodes"], p["efficiency"]), textcoords="offset points",
                     xytext=(5, 4), fontsize=8)
    ax1.axhline(1.0, color="#888", ls="--", lw=1, label="linear")
    if bend_nodes is not None:
        ax1.axvline(bend_nodes, color="#d62728", ls=":", lw=1.5, label=f"bend: scales to {bend_nodes} nodes")
    effs = [r["efficiency"] for r in rows if r.get("efficiency") is not None] + [p["efficiency"] for p in pk]
    ax1.set_ylim(0, max([1.15, *(e * 1.1 for e in effs)]))
    counts = {n: sum(1 for r in rows if int(r["nodes"]) == n) for n in nodes}
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlim(min(nodes) / 1.5, max(nodes) * 1.5)
        ax.set_xticks(nodes)
        ax.set_xticklabels([f"{n}\nn={counts[n]}" for n in nodes], fontsize=8)
        ax.set_xlabel("nodes (n = load levels measured)")
        ax.grid(alpha=0.3)
    ax1.set_ylabel("scaling efficiency")
    ax1.set_title(f"Scaling efficiency per node count ({len(rows)} points)", fontsize=10)
    ax1.legend(fontsize=7, loc="lower left", ncol=2)
    w = [n * 0.18 for n in nodes]
    ideal = {int(p["nodes"]): p["ideal"] for p in peaks}
    ax2.bar(
        [n / 1.1 for n in nodes], [ideal.get(n, 0.0) for n in nodes], width=w, color="#c7c7c7", label="linear"
    )
    ax2.bar(
        [n * 1.1 for n in nodes],
        [next((p["peak_throughput"] for p in peaks if int(p["nodes"]) == n), 0.0) for n in nodes],
        width=w,
        color=_COLORS["tp"],
        label="measured peak",
    )
    ax2.set_ylim(bottom=0)
    ax2.set_ylabel("output tokens/s")
    ax2.set_title("Peak throughput vs linear", fontsize=10)
    ax2.legend(fontsize=7, loc="upper left")
    return _save(fig, path)
