"""The terminal summary (rich) of one run's summary.json, and the live progress line."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from servelab.analysis.live import LiveStats
from servelab.report.words import duration_ms
from servelab.report.words import name as key_name

_METRIC_LABELS = {
    "ttft_ms": "TTFT",
    "ttft_content_ms": "TTFT (content)",
    "itl_ms": "ITL (all gaps)",
    "itl_request_ms": "ITL (per request)",
    "tpot_ms": "TPOT",
    "e2e_ms": "E2E latency",
    "ttlt_ms": "Time to last token",
    "queue_ms": "Client queue",
    "lag_ms": "Schedule lag",
}
_PCT = re.compile(r"^p\d+(\.\d+)?$")


def fmt(v: Any, digits: int = 3) -> str:
    """A number for people: 3 significant digits under 1000, whole numbers above; '-' for none."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return f"{v:,}"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def _pct_columns(metrics: Mapping[str, Mapping[str, Any]]) -> list[str]:
    keys: set[str] = set()
    for m in metrics.values():
        keys.update(k for k in m if _PCT.match(k))
    return sorted(keys, key=lambda k: float(k[1:]))


def metrics_table(summary: Mapping[str, Any], title: str | None = None) -> Table:
    metrics = summary.get("metrics", {})
    units = summary.get("units", {})
    pcts = _pct_columns(metrics)
    t = Table(title=title, title_justify="left", header_style="bold")
    t.add_column("metric")
    t.add_column("unit", style="dim")
    for c in ["mean", *pcts, "max"]:
        t.add_column(c, justify="right")
    t.add_column("p99 95% CI", justify="right", style="dim")
    t.add_column("n", justify="right")
    for name, m in metrics.items():
        ci = (m.get("ci") or {}).get("p99")
        ci_s = f"{fmt(ci[0])}-{fmt(ci[1])}" if ci else "-"
        t.add_row(_METRIC_LABELS.get(name, name), units.get(name, ""), fmt(m.get("mean")),
                  *(fmt(m.get(p)) for p in pcts), fmt(m.get("max")), ci_s, fmt(m.get("n")))
    return t


def _kv_table(rows: list[tuple[str, str | Text]]) -> Table:
    """Label/value rows; plain strings are shown as they are (never parsed as rich markup)."""
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    for k, v in rows:
        t.add_row(Text(k), v if isinstance(v, Text) else Text(v))
    return t


def _overview(summary: Mapping[str, Any]) -> Table:
    rows: list[tuple[str, str | Text]]
    req, thr = summary.get("requests", {}), summary.get("throughput", {})
    tok, gp, err = summary.get("tokens", {}), summary.get("goodput", {}), summary.get("errors", {})
    failed = req.get("failed", {})
    n_failed = sum(failed.values())
    rows = [
        (
            "requests",
            f"{fmt(req.get('sent'))} sent, {fmt(req.get('ok'))} ok, {fmt(n_failed)} failed, "
            f"{fmt(req.get('cancelled'))} cancelled (+{fmt(req.get('warmup'))} warm-up)",
        ),
        (
            "throughput",
            f"{fmt(thr.get('requests_per_s'))} req/s, {fmt(thr.get('output_tokens_per_s'))} output "
            f"tok/s, {fmt(thr.get('input_tokens_per_s'))} input tok/s, "
            f"{fmt(thr.get('total_tokens_per_s'))} total tok/s over {fmt(thr.get('duration_s'))} s",
        ),
        (
            "tokens",
            f"{fmt(tok.get('input'))} input, {fmt(tok.get('output'))} output, {fmt(tok.get('cached'))} "
            f"cached (source: {tok.get('source', '-')}, mismatch: {fmt(tok.get('mismatch'))})",
        ),
    ]
    # a prediction: which step-cost backend priced it, and how far to trust it
    if sim := summary.get("simulator"):
        rows.append(
            (
                "simulator",
                f"{sim.get('serving_engine', '-')} steps priced by {sim.get('backend', '-')} "
                f"(fidelity: {sim.get('fidelity', '-')}{_fidelity_check(sim.get('fidelity_check'))})",
            )
        )
    by_status = err.get("by_status", {})
    if n_failed:
        detail = ", ".join(f"{key_name(k)} {v}" for k, v in by_status.items() if v)
        codes = ", ".join(f"HTTP {k}: {v}" for k, v in err.get("by_http_status", {}).items())
        rows.append(
            ("errors", f"rate {fmt_pct(err.get('rate'))}: {detail}" + (f" ({codes})" if codes else ""))
        )
        for msg, count in err.get("top", [])[:3]:
            rows.append(("", f"{count} x {msg}"))
    else:
        rows.append(("errors", "none"))
    slo = gp.get("slo") or {}
    slo_s = ", ".join(f"{k} <= {fmt(v)}" for k, v in slo.items()) or "no SLO set: every ok request counts"
    rows.append(("goodput", f"{fmt(gp.get('requests'))} requests ({fmt_pct(gp.get('fraction'))}), "
                            f"{fmt(thr.get('goodput_requests_per_s'))} req/s [{slo_s}]"))
    for name, c in (gp.get("checks") or {}).items():
        verdict = ("pass", "green") if c.get("pass") else ("FAIL", "bold red")
        rows.append(("", Text.assemble(f"SLO {name}: p{c.get('percentile'):g} {c.get('metric')} = "
                                       f"{fmt(c.get('value'))} (limit {fmt(c.get('limit'))}) ", verdict)))
    return _kv_table(rows)


def _agents(summary: Mapping[str, Any]) -> Table | None:
    """Tasks, not requests: sessions, tasks per hour, task time, where the time went, cost per task."""
    ses = summary.get("sessions")
    if not ses:
        return None
    task, split = summary.get("task_ms") or {}, summary.get("time_split") or {}
    rows: list[tuple[str, str | Text]] = [
        (
            "sessions",
            f"{fmt(ses.get('started'))} started, {fmt(ses.get('completed'))} completed, "
            f"{fmt(ses.get('accepted'))} accepted, {fmt(ses.get('failed'))} failed, "
            f"{fmt(ses.get('timed_out'))} timed out; {fmt(ses.get('retries'))} retries, "
            f"{fmt(ses.get('tool_failures'))} tool failures",
        ),
        (
            "tasks",
            f"{fmt(summary.get('tasks_per_hour'))} per hour; task time p50 {duration_ms(task.get('p50'))}, "
            f"p95 {duration_ms(task.get('p95'))}, p99 {duration_ms(task.get('p99'))} (n "
            f"{fmt(task.get('n'))})",
        ),
        ("time split", ", ".join(f"{k} {fmt_pct(v)}" for k, v in split.items()) or "-"),
    ]
    cost = summary.get("cost")
    if cost:
        rows.append(
            (
                "cost",
                f"${fmt(cost.get('per_successful_task'))} per successful task, "
                f"${fmt(cost.get('per_million_output_tokens'))} per million output tokens "
                f"(model ${fmt(cost.get('model'))}, tool ${fmt(cost.get('tool'))}, orchestration "
                f"${fmt(cost.get('orchestration'))}, failures ${fmt(cost.get('failure'))})",
            )
        )
    return _kv_table(rows)


def fmt_pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def render_summary(summary: Mapping[str, Any], console: Console, title: str = "servelab run") -> None:
    """Print the run's figures: a metric table, throughput, tokens, errors, goodput, warnings, validity."""
    console.print(metrics_table(summary, title=title))
    console.print(_overview(summary))
    agents = _agents(summary)
    if agents is not None:
        console.print(agents)
    from servelab.report import mix_view  # mixed traffic: per-class figures and interference

    for t in (mix_view.classes_table(summary), mix_view.interference_table(summary)):
        if t is not None:
            console.print(t)
    from servelab.report.evidence import evidence_table  # server evidence (issue 10)

    if (ev := evidence_table(summary)) is not None:
        console.print(ev)
    for w in summary.get("warnings", []):
        console.print(Text(f"warning: {w}", style="yellow"))
    if summary.get("valid", True):
        console.print(Text("valid: yes", style="green"))
    else:
        reasons = "; ".join(summary.get("invalid_reasons", [])) or "unknown reason"
        console.print(Text(f"INVALID: {reasons}", style="bold red"))


def progress_line(stats: LiveStats) -> str:
    """One line for the live progress display."""
    parts = [f"{stats.done:,} done", f"{stats.errors:,} errors"]
    if stats.cancelled:
        parts.append(f"{stats.cancelled:,} cancelled")
    parts.append(f"{fmt(stats.requests_per_s)} req/s")
    parts.append(f"{fmt(stats.output_tokens_per_s)} tok/s")
    parts.append(f"p50 TTFT {fmt(stats.ttft_p50_ms())} ms")
    if stats.warmup:
        parts.append(f"(+{stats.warmup:,} warm-up)")
    return " | ".join(parts)


def _fidelity_check(check: dict | None) -> str:
    """'; 12.6% median error on 12 published results (TensorRT-LLM throughput)', or '' without a check."""
    if not isinstance(check, dict) or check.get("median_abs_error_pct") is None:
        return ""
    other = "" if check.get("same_engine", True) else ", another engine"
    return (f"; {check['median_abs_error_pct']:g}% median error on {check.get('published_rows', '?')} "
            f"published results: {check.get('slice', '-')}{other}")
