"""The terminal table of a sweep: one row per point, and the knee in words."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from servelab.records.summary import dig as _get
from servelab.report.words import count, pct, sig


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
    axis = f" of {knee['axis']}" if knee.get("axis") else ""
    words = f"knee{axis} at {lvl:g}{rng}" + (f", confidence {conf}" if conf is not None else "")
    boot = knee.get("bootstrap")
    if boot:
        words += (f"; bootstrap: {boot['share']:.0%} of {boot['draws']} redraws land on {lvl:g}, 90% within "
                  f"{boot['range'][0]:g}-{boot['range'][1]:g}")
    return words


def _accuracy_cell(acc: dict[str, Any] | None) -> str:
    if _get(acc, "summary", "measurable") is False:
        return str(_get(acc, "summary", "note") or "not measurable (simulated text)")
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
            sig(_get(s, "throughput", "requests_per_s")), sig(_get(s, "throughput", "output_tokens_per_s")),
            sig(_get(s, "metrics", "ttft_ms", "p50")), sig(_get(s, "metrics", "ttft_ms", "p99")),
            sig(_get(s, "metrics", "itl_ms", "p50")), sig(_get(s, "metrics", "e2e_ms", "p95")),
            sig(_get(s, "throughput", "goodput_requests_per_s")), pct(_get(s, "errors", "rate")),
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
    for sp in state.get("split") or []:
        console.print(f"split traffic: {sp['text']}", highlight=False, markup=False)
    if state.get("decision"):
        render_decision(state["decision"], console)
    scaling = state.get("scaling")
    if scaling and not state.get("decision"):
        for p in scaling.get("peaks", []):
            eff = p.get("efficiency")
            console.print(f"{p['nodes']} node(s): peak {p['peak_throughput']:,.0f} tok/s at level "
                          f"{p['peak_level']:g}, scaling efficiency {'-' if eff is None else f'{eff:.0%}'}",
                          highlight=False)
        console.print(f"scaling: {(scaling.get('bend') or {}).get('reason', '')}", highlight=False)
    for e in state.get("points", []):
        if e.get("status") == "failed":
            console.print(f"[red]failed[/] {e.get('key')}: {e.get('error')}", highlight=False, markup=True)


# -- the decision table (issue 10) ---------------------------------------------------------------------

# the cost columns: $/task (an agent sweep: per successful task in the window) and, in a plain sweep where
# there are no tasks, $/request (what the advice's choice ranks on) and $/1M out tok (what serving prices
# are quoted in); each holds only what its head says, empty otherwise
DECISION_HEAD = ["target", "GPUs", "level", "out tok/s", "tasks/h", "task p50 s", "task p95 s", "TTFT p50 ms",
                 "TTFT p95 ms", "timeouts", "success", "$/task", "$/request", "$/1M out tok", "scaling eff.",
                 "note"]
# the terminal, `show` and the report leave $/request out: 0.0000541 reads worse than its $/1M out tok
_HIDDEN = ("$/request",)


def _per_1m_output_tokens(decision: dict[str, Any], r: dict[str, Any]) -> float | None:
    """$/1M output tokens of a plain-sweep row (from the price when an older sweep.json lacks the key)."""
    if r.get("usd_per_1m_output_tokens") is not None:
        return float(r["usd_per_1m_output_tokens"])
    price, gpus, tok = decision.get("gpu_hour_usd"), r.get("gpus"), r.get("output_tokens_per_s")
    if r.get("usd_per_request") is None or not (price and gpus and tok):
        return None
    return float(price) * gpus / 3600.0 / tok * 1e6


def decision_values(decision: dict[str, Any]) -> list[list[Any]]:
    """One row per target x level, the figures as measured (None where not measured): decision.csv's rows,
    full precision, rates as fractions."""
    col = decision["goal"]["throughput"]
    rows = []
    for r in decision.get("rows", []):
        tp = r.get(col) if col == "tasks_per_hour" else None
        note = "collapsed" if r.get("collapsed") else ("" if r.get("healthy") else "unhealthy")  # why: advice
        rows.append([str(r["target"]), r.get("gpus"), r["level"], r.get("output_tokens_per_s"), tp,
                     r.get("task_p50_s"), r.get("task_p95_s"), r.get("ttft_p50_ms"), r.get("ttft_p95_ms"),
                     r.get("timeouts"), r.get("success_rate"), r.get("usd_per_task"),
                     r.get("usd_per_request"), _per_1m_output_tokens(decision, r),
                     r.get("scaling_efficiency"), note])
    return rows


# how people read each column of DECISION_HEAD: figures to three significant figures (as the sweep table),
# counts whole, rates as percent; the level as it was asked for
_HUMAN: list[Callable[[Any], str]] = [str, count, lambda v: f"{v:g}", sig, sig, sig, sig, sig, sig, count,
                                      pct, sig, sig, sig, pct, str]


def decision_rows(decision: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The head and one row per target x level, as text (the same cells for the terminal and the HTML),
    without the columns people are not shown (``_HIDDEN``)."""
    keep = [i for i, c in enumerate(DECISION_HEAD) if c not in _HIDDEN]
    rows = [[f(v) for f, v in zip(_HUMAN, row, strict=True)] for row in decision_values(decision)]
    return [DECISION_HEAD[i] for i in keep], [[row[i] for i in keep] for row in rows]


def render_decision(decision: dict[str, Any], console: Console) -> None:
    head, rows = decision_rows(decision)
    # columns with nothing measured (tasks, $/task in a plain sweep) are left out here (the CSV keeps
    # them), so the rest fit; no cell is cut short with an ellipsis: a long one folds onto a second line
    keep = [i for i, c in enumerate(head) if c == "target" or any(r[i] not in ("-", "") for r in rows)]
    win = decision.get("window_s")
    tasks = head.index("tasks/h") in keep  # the window is the tasks/h column's
    title = "decision table"
    if win and tasks:
        title += f" (tasks/h over the common window {win[0]:,.0f}-{win[1]:,.0f} s of every run)"
    t = Table(title=title, title_justify="left")
    for i in keep:
        c = head[i]
        words = c in ("target", "note")  # these wrap; the figures stay whole, headers on two lines
        t.add_column(c if words else c.replace(" ", "\n", 1), justify="left" if words else "right",
                     overflow="fold", no_wrap=not words)
    for row in rows:
        t.add_row(*[row[i] for i in keep])
    console.print(t)
    for a in decision.get("advice", []):
        kind = "" if a["text"].lower().startswith(a["kind"]) else f" ({a['kind']})"  # not "(choice): Choice"
        console.print(f"advice{kind}: {a['text']}", highlight=False, markup=False)


def decision_csv(decision: dict[str, Any]) -> str:
    """decision.csv: DECISION_HEAD, then :func:`decision_values` (full precision, rates as fractions, empty
    where not measured), for a spreadsheet or pandas rather than a person."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(DECISION_HEAD)
    w.writerows([["" if v is None else v for v in row] for row in decision_values(decision)])
    return buf.getvalue()


def decision_html(state: dict[str, Any]) -> str:
    """The decision table and its advice for the sweep report ('' when the sweep has none)."""
    from servelab.report.html_page import esc, table

    d = state.get("decision")
    split = [f"<p><b>split traffic</b>: {esc(sp['text'])}</p>" for sp in state.get("split") or []]
    if not d or not d.get("rows"):
        return "".join(split)
    head, rows = decision_rows(d)
    # targets on the same GPUs: no scaling to show; a plain sweep: no $/task, an agent sweep: no $/1M out
    # tok (the CSV keeps both)
    for c in ("scaling eff.", "$/task", "$/1M out tok"):
        i = head.index(c)
        if all(r[i] == "-" for r in rows):
            head, rows = head[:i] + head[i + 1:], [r[:i] + r[i + 1:] for r in rows]
    parts = [*split, "<h2>Decision table: which topology, at which load</h2>",
             table(head, rows, left=1, left_last=True, csv_name="decision")]
    parts += [f"<p><b>{esc(a['kind'])}</b>: {esc(a['text'])}</p>" for a in d.get("advice", [])]
    return "".join(parts)
