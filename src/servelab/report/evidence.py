"""Server evidence (KV cache, evictions, preemptions, prefix cache, queueing, MoE imbalance and
communication) for the terminal and the HTML report: small functions the report modules call by hook."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table
from rich.text import Text

from servelab.analysis.evidence import run_evidence
from servelab.report.words import duration_ms, pct, sig


def summary_evidence(
    summary: Mapping[str, Any], requests: Any = None, manifest: Any = None
) -> dict[str, Any]:
    """The run's ``evidence`` block: from summary.json when it has one, else computed now."""
    ev = summary.get("evidence")
    if isinstance(ev, Mapping) and ev:
        return dict(ev)
    return run_evidence(requests, summary, manifest)


def evidence_table(summary: Mapping[str, Any]) -> Table | None:
    """Terminal: a label/value grid, or None when the run measured none of it."""
    rows = evidence_rows(summary_evidence(summary))
    if not rows:
        return None
    t = Table(title="server evidence", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    for k, v in rows:
        t.add_row(Text(k), Text(v))
    return t


def evidence_section(page: Any, run: Any) -> None:
    """HTML: the server-evidence table of one run (``page`` is a :class:`report.html_page.Page`)."""
    from servelab.report.html_page import table

    rows = evidence_rows(summary_evidence(run.summary, run.requests, run.manifest))
    if not rows:
        return
    page.h2("Server evidence: KV cache, preemption, queueing, experts")
    page.add(table(["figure", "value"], [list(r) for r in rows], left=2, csv_name="server-evidence"))


def evidence_rows(ev: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows for terminal and HTML, only for what was measured: three significant figures,
    every duration with its unit."""
    rows: list[tuple[str, str]] = []
    kv = ev.get("kv")
    if kv and kv.get("unsampled"):
        rows.append(("KV-cache usage", f"not sampled under load: {kv.get('scrapes', '?')} scrapes in "
                                       f"{_secs(kv.get('window_s'))}, none between the one before the load "
                                       "and the one after it (a run shorter than the scrape interval)"))
    elif kv:
        rows.append(
            (
                "KV-cache usage",
                f"peak {pct(kv.get('peak'))}, mean {pct(kv.get('mean'))}, above 90% for "
                f"{_secs(kv.get('seconds_above_90'))} ({pct(kv.get('share_above_90'))} of samples)",
            )
        )
    if "kv_evicted_blocks" in ev:
        rows.append(("KV blocks evicted", f"{ev['kv_evicted_blocks']:,.0f}"))
    pr = ev.get("preempted_requests")
    if "preemptions" in ev or pr:
        words = f"{ev['preemptions']:,.0f} by the server" if "preemptions" in ev else ""
        if pr:
            words += (", " if words else "") + f"{pr['count']:,} requests ({pct(pr['share'])}) preempted, " \
                                               f"{duration_ms(pr['waiting_ms_total'])} waiting to resume"
        rows.append(("preemptions", words))
    if ev.get("prefix_cache_hit_rate") is not None:
        rows.append(("prefix-cache hit rate",
                     f"{pct(ev['prefix_cache_hit_rate'])} ({_source(ev.get('prefix_cache_source'))})"))
    q, lag = ev.get("server_queue_ms"), ev.get("client_lag_ms")
    if q or lag:
        sq = f"server queue p50 {duration_ms(q.get('p50'))} / p95 {duration_ms(q.get('p95'))}" \
            if q and "p50" in q else \
            f"server queue mean {duration_ms(q.get('mean'))}" if q else "server queue not reported"
        cl = f"client lag p50 {duration_ms(lag.get('p50'))} / p95 {duration_ms(lag.get('p95'))}" if lag \
            else "client lag -"
        rows.append(("queueing", f"{sq}; {cl}"))
    moe = ev.get("moe") or {}
    if "imbalance_p50" in moe:
        rows.append(
            (
                "expert-load imbalance",
                f"p50 {sig(moe['imbalance_p50'])}, p95 {sig(moe['imbalance_p95'])} "
                f"(max/mean tokens per EP rank over {moe['steps']:,} steps; "
                + (f"at most ep = {moe['ep']})" if moe.get("ep") else "ep not known for this target)"),
            )
        )
    if "communication_share" in moe:
        rows.append(("communication share of step time", pct(moe["communication_share"])))
    return rows


def _secs(v: Any) -> str:
    return "-" if v is None else "0 s" if float(v) == 0 else duration_ms(float(v) * 1000)


def _source(src: Any) -> str:
    """'telemetry (hit / query tokens)' -> 'telemetry: hit / query tokens' (no parentheses in parentheses)."""
    s = str(src)
    head, sep, rest = s.partition(" (")
    return f"{head}: {rest[:-1]}" if sep and rest.endswith(")") else s
