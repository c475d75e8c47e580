"""The terminal table of a sweep: one row per point, and the knee in words."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _get(summary: dict[str, Any] | None, *path: str) -> Any:
    v: Any = summary or {}
    for p in path:
        if not isinstance(v, dict):
            return None
        v = v.get(p)
    return v


def _num(v: Any, fmt: str = "{:,.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def knee_words(knee: dict[str, Any] | None, reason: str | None) -> str:
    if not knee:
        return f"no knee: {reason or 'not enough points'}"
    if knee.get("beyond"):
        last = knee.get("low") or knee.get("high")
        return f"no knee within the grid: throughput still rising at {last:g} or beyond"
    lvl, lo, hi = knee.get("level"), knee.get("low"), knee.get("high")
    if lvl is None:
        return f"no knee: {knee.get('reason') or reason or 'not enough points'}"
    rng = f" (range {lo:g}-{hi:g})" if lo is not None and hi is not None and lo != hi else ""
    conf = knee.get("confidence")
    return f"knee at {lvl:g}{rng}" + (f", confidence {conf}" if conf is not None else "")


def _accuracy_cell(acc: dict[str, Any] | None) -> str:
    a = _get(acc, "summary", "accuracy")
    if not a:
        return "-" if not (acc or {}).get("error") else "error"
    cell = f"{a['value']:.0%} [{a['lo']:.0%}, {a['hi']:.0%}]"
    if _get(acc, "vs_first_setup", "flagged"):
        cell += " DROP"
    return cell


def render_sweep(state: dict[str, Any], console: Console) -> None:
    t = Table(title="servelab sweep", title_justify="left")
    points = state.get("points", [])
    with_acc = any(e.get("accuracy") for e in points)
    cols = ["point", "status", "req/s", "out tok/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "e2e p95 ms",
            "goodput/s", "errors"] + (["accuracy"] if with_acc else [])
    for col in cols:
        t.add_column(col, justify="left" if col in ("point", "status") else "right")
    for e in state.get("points", []):
        s = e.get("summary")
        params = ", ".join(f"{k}={v}" for k, v in e.get("params", {}).items())
        t.add_row(
            params, e.get("status", "?"),
            _num(_get(s, "throughput", "requests_per_s"), "{:,.2f}"),
            _num(_get(s, "throughput", "output_tokens_per_s"), "{:,.0f}"),
            _num(_get(s, "metrics", "ttft_ms", "p50")), _num(_get(s, "metrics", "ttft_ms", "p99")),
            _num(_get(s, "metrics", "itl_ms", "p50"), "{:,.2f}"), _num(_get(s, "metrics", "e2e_ms", "p95")),
            _num(_get(s, "throughput", "goodput_requests_per_s"), "{:,.2f}"),
            _num(_get(s, "errors", "rate"), "{:.1%}"),
            *([_accuracy_cell(e.get("accuracy"))] if with_acc else []),
        )
    console.print(t)
    knees = state.get("knees") or []
    if len(knees) > 1:
        for g in knees:
            label = ", ".join(f"{k}={v}" for k, v in g.get("params", {}).items())
            console.print(f"{label}: {knee_words(g.get('knee'), None)}", highlight=False)
    else:
        console.print(knee_words(state.get("knee"), state.get("knee_reason")), highlight=False)
    scaling = state.get("scaling")
    if scaling:
        for p in scaling.get("peaks", []):
            eff = p.get("efficiency")
            console.print(f"{p['nodes']} node(s): peak {p['peak_throughput']:,.0f} tok/s at level "
                          f"{p['peak_level']:g}, scaling efficiency {'-' if eff is None else f'{eff:.0%}'}",
                          highlight=False)
        console.print(f"scaling: {(scaling.get('bend') or {}).get('reason', '')}", highlight=False)
    for e in state.get("points", []):
        if e.get("status") == "failed":
            console.print(f"[red]failed[/] {e.get('key')}: {e.get('error')}", highlight=False, markup=True)
