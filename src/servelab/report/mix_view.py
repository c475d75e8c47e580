"""Mixed traffic in the terminal and the report: a table of each workload class's figures, and the
interference (the first class's percentiles alone vs in the mix)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table

from servelab.report.html_page import Page, esc, table
from servelab.report.words import count, duration_ms, pct, sig

CLASS_HEAD = ["class", "tenant", "load", "requests ok/sent", "TTFT p50", "TTFT p95", "ITL p95", "E2E p50",
              "E2E p95", "req/s", "out tok/s", "tasks"]
INTERFERENCE_HEAD = ["metric", "pct", "alone", "mixed", "delta", "ratio"]
_NAMES = {"ttft_ms": "TTFT", "e2e_ms": "E2E latency", "itl_ms": "ITL"}


def _m(c: Mapping[str, Any], metric: str, p: str) -> Any:
    return ((c.get("metrics") or {}).get(metric) or {}).get(p)


def class_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    """One row per class, in the mix's order."""
    rows = []
    for name, c in (summary.get("classes") or {}).items():
        req, thr, ses = c.get("requests") or {}, c.get("throughput") or {}, c.get("sessions") or {}
        load = (
            f"{count(c['users'])} users" if c.get("users") is not None else f"{sig(c.get('rate'))} sessions/s"
        )
        rows.append(
            [
                name,
                c.get("tenant") or "-",
                load,
                f"{count(req.get('ok'))}/{count(req.get('sent'))}",
                duration_ms(_m(c, "ttft_ms", "p50")),
                duration_ms(_m(c, "ttft_ms", "p95")),
                duration_ms(_m(c, "itl_ms", "p95")),
                duration_ms(_m(c, "e2e_ms", "p50")),
                duration_ms(_m(c, "e2e_ms", "p95")),
                sig(thr.get("requests_per_s")),
                sig(thr.get("output_tokens_per_s")),
                f"{count(ses.get('completed'))}/{count(ses.get('started'))}",
            ]
        )
    return rows


def interference_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    inter = summary.get("interference") or {}
    rows = []
    for metric, by_p in (inter.get("metrics") or {}).items():
        for p in ("p50", "p95"):
            v = by_p.get(p) or {}
            d = v.get("delta")
            rows.append(
                [
                    _NAMES.get(metric, metric),
                    p,
                    duration_ms(v.get("alone")),
                    duration_ms(v.get("mixed")),
                    "-" if d is None else ("+" if d >= 0 else "-") + duration_ms(abs(d)),
                    "-" if v.get("ratio") is None else f"{sig(v['ratio'])}x",
                ]
            )
    return rows


def interference_sentence(summary: Mapping[str, Any]) -> str | None:
    """'chat TTFT p95: 77.4 ms alone, 532 ms with batch-summarize (6.88x, +455 ms).'"""
    inter = summary.get("interference")
    if not inter:
        return None
    v = ((inter.get("metrics") or {}).get("ttft_ms") or {}).get("p95") or {}
    e = ((inter.get("metrics") or {}).get("e2e_ms") or {}).get("p95") or {}
    others = ", ".join(inter.get("with") or []) or "the others"
    ratio = "-" if v.get("ratio") is None else f"{sig(v['ratio'])}x"
    e_ratio = "-" if e.get("ratio") is None else f"{sig(e['ratio'])}x"
    return (
        f"interference: {inter.get('class')} TTFT p95 {duration_ms(v.get('alone'))} alone, "
        f"{duration_ms(v.get('mixed'))} with {others} ({ratio}); E2E p95 {duration_ms(e.get('alone'))} -> "
        f"{duration_ms(e.get('mixed'))} ({e_ratio})"
    )


def classes_table(summary: Mapping[str, Any]) -> Table | None:
    """The terminal's per-class table (None for a run without classes)."""
    rows = class_rows(summary)
    if not rows:
        return None
    t = Table(title="workload classes (mixed traffic)", title_justify="left")
    for i, h in enumerate(CLASS_HEAD):
        t.add_column(h, justify="left" if i < 3 else "right")
    for r in rows:
        t.add_row(*r)
    return t


def interference_table(summary: Mapping[str, Any]) -> Table | None:
    rows = interference_rows(summary)
    if not rows:
        return None
    inter = summary["interference"]
    t = Table(title=f"interference: {inter.get('class')} alone vs with {', '.join(inter.get('with') or [])}",
              title_justify="left")
    for i, h in enumerate(INTERFERENCE_HEAD):
        t.add_column(h, justify="left" if i < 2 else "right")
    for r in rows:
        t.add_row(*r)
    return t


def mix_section(page: Page, summary: Mapping[str, Any]) -> None:
    """The report's section: per-class figures, then the interference (when measured)."""
    rows = class_rows(summary)
    if not rows:
        return
    page.add('<h2 id="classes">Workload classes</h2>')
    page.add(table(CLASS_HEAD, rows, left=3, csv_name="classes"))
    sentence = interference_sentence(summary)
    if sentence:
        page.add(f"<p>{esc(sentence)}.</p>")
        page.add(table(INTERFERENCE_HEAD, interference_rows(summary), left=2, csv_name="interference"))
    else:
        page.add("<p>" + esc("No interference baseline: the first class was not run alone (one class, or "
                             "--no-mix-baseline).") + "</p>")
    share = [
        (n, (c.get("requests") or {}).get("sent") or 0) for n, c in (summary.get("classes") or {}).items()
    ]
    total = sum(s for _, s in share)
    if total:
        page.add(
            "<p>" + esc("Share of requests: " + ", ".join(f"{n} {pct(s / total)}" for n, s in share)) + "</p>"
        )
