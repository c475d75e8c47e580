"""Server evidence (KV cache, evictions, preemptions, prefix cache, queueing, MoE imbalance and
communication) for the terminal and the HTML report: small functions the report modules call by hook."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table
from rich.text import Text

from servelab.analysis.evidence import evidence_rows, run_evidence


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
