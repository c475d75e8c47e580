"""The top of a run's report, in reading order: the headline sentence, the VALID/INVALID banner with its
reasons, the answer (agents: the task block; requests: the key figures), and the errors by status and code
with sample messages.

Words come from :mod:`servelab.report.words`: human names, units and three significant figures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from servelab.report.html_page import Page, esc, get, table
from servelab.report.words import (
    count,
    duration_ms,
    load_words,
    money,
    name,
    pct,
    sig,
    target_words,
    workload_words,
)

_LATENCY = ("ttft_ms", "itl_request_ms", "itl_ms", "tpot_ms", "e2e_ms", "queue_ms", "lag_ms")
_MAX_ERROR_ROWS = 12


def headline(summary: Mapping[str, Any], manifest: Mapping[str, Any]) -> str:
    """One sentence a person reads first: what ran, under what load, and the key figures."""
    cfg = manifest.get("config") or {}
    req = summary.get("requests") or {}
    failed = sum((req.get("failed") or {}).values())
    lead = f"{target_words(manifest)}, {load_words(cfg)}, {workload_words(cfg)}: "
    ses = summary.get("sessions")
    if ses:
        task = summary.get("task_ms") or {}
        words = [f"{count(ses.get('completed'))} of {count(ses.get('started'))} tasks completed "
                 f"({count(ses.get('accepted'))} accepted)"]
        if summary.get("tasks_per_hour") is not None:
            words.append(f"{sig(summary['tasks_per_hour'])} tasks/hour")
        if task.get("p50") is not None:
            words.append(f"task time p50 {duration_ms(task['p50'])}, p95 {duration_ms(task.get('p95'))}")
        cost = get(summary, "cost", "per_successful_task")
        if cost is not None:
            words.append(f"{money(cost)} per successful task")
        return lead + "; ".join(words) + "."
    tp = summary.get("throughput") or {}
    ttft, itl = get(summary, "metrics", "ttft_ms") or {}, get(summary, "metrics", "itl_request_ms") or {}
    e2e = get(summary, "metrics", "e2e_ms") or {}
    words = [f"{count(req.get('ok'))} of {count(req.get('sent'))} requests succeeded"
             + (f" ({count(failed)} failed)" if failed else "")]
    if tp.get("output_tokens_per_s") is not None:
        words.append(f"{sig(tp['output_tokens_per_s'])} output tokens/s")
    if ttft.get("p50") is not None:
        words.append(
            f"time to first token p50 {duration_ms(ttft['p50'])}, p99 {duration_ms(ttft.get('p99'))}"
        )
    if itl.get("p50") is not None:
        words.append(f"inter-token latency p50 {duration_ms(itl['p50'])}")
    if e2e.get("p50") is not None:
        words.append(f"end-to-end p50 {duration_ms(e2e['p50'])}")
    good = summary.get("goodput") or {}
    if good.get("slo") and good.get("fraction") is not None:
        words.append(f"{pct(good['fraction'])} met the SLO")
    return lead + "; ".join(words) + "."


def banner(summary: Mapping[str, Any], extra_reasons: list[str] | None = None) -> str:
    """VALID or INVALID, with the reasons (and the warnings beneath)."""
    valid = summary.get("valid", True) is not False
    reasons = [str(r) for r in (summary.get("invalid_reasons") or [])] + list(extra_reasons or [])
    if valid and not reasons:
        body = ("<b>VALID</b>: enough requests succeeded, the client kept to its schedule and the sample is "
                "large enough for the figures below.")
    else:
        valid = False
        body = (
            "<b>INVALID</b>: " + "; ".join(esc(r) for r in reasons) + ". The figures are written, but do not "
            "trust them as a measurement of the server."
        )
    warns = "".join(f"<p class=\"warn\">{esc(w)}</p>" for w in summary.get("warnings") or [])
    return f'<div class="banner {"ok" if valid else "bad"}" id="validity">{body}{warns}</div>'


def key_figures(page: Page, summary: Mapping[str, Any]) -> None:
    page.h2("Key figures")
    rows = []
    for m in _LATENCY:
        s = get(summary, "metrics", m)
        if s:
            rows.append(
                [
                    name(m),
                    *(duration_ms(s.get(k)) for k in ("mean", "p50", "p90", "p95", "p99", "max")),
                    count(s.get("n")),
                ]
            )
    page.add(table(["latency", "mean", "p50", "p90", "p95", "p99", "max", "n"], rows, csv_name="latency"))
    tp = summary.get("throughput") or {}
    from servelab.report.words import UNITS

    no_slo = not (summary.get("goodput") or {}).get("slo")
    rows = []
    for k, v in tp.items():
        if k == "duration_s":  # in the unit that reads best: 3.12 ms, 27.7 s, 17.3 min
            rows.append([name(k), *duration_ms(None if v is None else float(v) * 1000).rsplit(" ", 1)])
        elif k == "goodput_requests_per_s" and no_slo:
            rows.append(["goodput (no SLO set: every ok request)", sig(v), UNITS.get(k, "")])
        else:
            rows.append([name(k), sig(v), UNITS.get(k, "")])
    page.add(table(["throughput", "value", "unit"], [r + [""] * (3 - len(r)) for r in rows],
                   csv_name="throughput"))


def task_block(page: Page, summary: Mapping[str, Any]) -> None:
    """Agents: completed and accepted tasks, task time p50/p95, tasks per hour, cost per task, time split."""
    ses = summary.get("sessions")
    if not ses:
        return
    task = summary.get("task_ms") or {}
    split = summary.get("time_split") or {}
    cost = summary.get("cost") or {}
    page.add('<h2 id="tasks">Tasks</h2>')
    cells = [
        ("completed", f"{count(ses.get('completed'))} of {count(ses.get('started'))}"),
        ("accepted", count(ses.get("accepted"))),
        ("task time p50", duration_ms(task.get("p50"))),
        ("task time p95", duration_ms(task.get("p95"))),
        ("tasks per hour", sig(summary.get("tasks_per_hour"))),
        ("cost per successful task", money(cost.get("per_successful_task")) if cost else "no price given"),
    ]
    page.add(
        '<div class="tiles" id="task-block">'
        + "".join(
            f'<div class="tile"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>'
            for k, v in cells
        )
        + "</div>"
    )
    page.add(table(["outcome", "sessions"], [[k.replace("_", " "), count(ses.get(k))] for k in
                   ("started", "completed", "accepted", "failed", "timed_out", "cancelled", "retries",
                    "tool_failures")], csv_name="sessions"))
    if split:
        page.add(table(["where task time went", "share"], [[name(f"{k}_ms") if f"{k}_ms" in
                                                            ("model_ms", "tool_ms") else k, pct(v)]
                                                           for k, v in split.items()], csv_name="time_split"))


def errors_section(page: Page, summary: Mapping[str, Any], requests: pa.Table | None) -> None:
    """Failed requests by status and HTTP code, with a sample message each (or 'none')."""
    page.add('<h2 id="errors">Errors</h2>')
    rows = error_rows(requests) if requests is not None else []
    if not rows:
        err = summary.get("errors") or {}
        n = sum((get(summary, "requests", "failed") or {}).values())
        if not n:
            page.add("<p>None: every measured request succeeded or was cancelled by the run's end.</p>")
            return
        rows = [[name(k), "-", count(v), ""] for k, v in (err.get("by_status") or {}).items() if v]
    sent = get(summary, "requests", "sent") or 0
    total = sum(int(r[2].replace(",", "")) for r in rows if r[2] != "-")
    page.add(
        f"<p>{count(total)} of {count(sent)} requests failed ({pct(total / sent if sent else None)}).</p>"
    )
    page.add(table(["status", "HTTP code", "requests", "sample message"], rows, left=2, left_last=True,
                   csv_name="errors"))


def error_rows(requests: pa.Table) -> list[list[str]]:
    cols = [c for c in ("status", "http_status", "error", "warmup") if c in requests.column_names]
    if "status" not in cols:
        return []
    done = pc.fill_null(pc.is_in(requests.column("status"), value_set=pa.array(["ok", "cancelled"])), False)
    if "warmup" in cols:
        done = pc.or_(done, pc.fill_null(requests.column("warmup"), False))
    sub = requests.select(cols).filter(pc.invert(done))  # only the failed rows become Python values
    d = sub.to_pydict()
    n = sub.num_rows
    counts: Counter[tuple[str, int | None]] = Counter()
    sample: dict[tuple[str, int | None], str] = {}
    for i in range(n):
        st = d["status"][i]
        if st in ("ok", "cancelled") or (d.get("warmup") or [False] * n)[i]:
            continue
        key = (st, (d.get("http_status") or [None] * n)[i])
        counts[key] += 1
        msg = (d.get("error") or [None] * n)[i]
        if msg and key not in sample:
            sample[key] = str(msg)[:300]
    return [[name(st), "-" if code is None else str(code), count(c), sample.get((st, code), "")]
            for (st, code), c in counts.most_common(_MAX_ERROR_ROWS)]
