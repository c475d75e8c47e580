"""One self-contained HTML report for a run or a sweep.

The page reads top to bottom: the verdict in plain words; the knee (sweeps) or the key figures (a run);
TTFT and ITL distributions; sample agent sessions; server metrics over time; where the slow requests spend
their time; deployment advice with its evidence; cost per successful task; a comparison (when given); the
full configuration. CSS is inline, charts are inline base64 PNGs (the PNGs are also written beside the
HTML); no script, no network. Every text that came from a server or a user is escaped.

Entry points: :func:`write_run_report` (a run directory), :func:`write_sweep_report` (a sweep directory),
:func:`write_report` (data already read).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from servelab.analysis.attribution import request_attribution, session_attribution
from servelab.analysis.columns import TABLE_COLUMNS
from servelab.analysis.compare import request_samples
from servelab.analysis.sketch import EXACT_MAX_VALUES
from servelab.errors import RunDirError
from servelab.records.rundir import REQUEST_SCHEMA, RunData, read_run
from servelab.records.stream import iter_tables
from servelab.report import plots
from servelab.report.html_advice import advice_section, comparison_headline, comparison_section, cost_section
from servelab.report.html_charts import (
    client_section,
    pareto_section,
    runs_pareto_series,
    server_section,
    sweep_pareto_series,
    timeline_section,
)
from servelab.report.html_page import Page, esc, get, num, table
from servelab.report.html_run import banner, errors_section, headline, key_figures, task_block
from servelab.report.html_sweep import (
    Group,
    axis_of,
    group_slo,
    knee_section,
    points_table,
    scaling_section,
    sweep_banner,
    sweep_errors,
    sweep_groups,
    sweep_headline,
    sweep_verdict,
    verdict_html,
)
from servelab.report.mix_view import mix_section
from servelab.report.words import duration_ms, run_title

REPORT_NAME = "report.html"
MAX_TIMELINE = 12
MAX_ITL_DRAWN = EXACT_MAX_VALUES  # inter-token gaps the ITL histogram draws at most (every k-th past it)
# the request columns the run report's sections read (timelines, client series, errors, attribution,
# advice facts, evidence); the others are not read (issue 12: the report's memory is its columns)
REPORT_COLUMNS = frozenset({
    "request_id", "session_id", "warmup", "status", "http_status", "error", "intended_ns", "sent_ns",
    "first_token_ns", "end_ns", "usage_prompt_tokens", "usage_completion_tokens", "est_prompt_tokens",
    "est_completion_tokens", "srv_queue_ns", "srv_prefill_ns", "srv_decode_ns", "srv_preempted_ns",
    "srv_comm_ns"})

_e, _n, _get, _table = esc, num, get, table
__all__ = ["SweepData", "load_sweep", "run_verdict", "sweep_verdict", "write_report", "write_run_report",
           "write_sweep_report"]


@dataclass
class SweepData:
    path: Path
    state: dict[str, Any]
    runs: dict[str, RunData] = field(default_factory=dict)  # point key -> its run (readable points only)


# -- words --------------------------------------------------------------------------------------------


def run_verdict(summary: Mapping[str, Any], manifest: Mapping[str, Any]) -> tuple[str, bool]:
    """The headline sentence of one run, and whether the figures are valid."""
    return headline(summary, manifest), summary.get("valid", True) is not False


# -- sections -----------------------------------------------------------------------------------------


def _distributions(page: Page, run: RunData, label: str) -> None:
    if run.requests.num_rows == 0:
        return
    open_loop = _get(run.manifest, "config", "load", "rate") is not None
    mode: Literal["open", "closed"] = "open" if open_loop else "closed"
    if "token_times_ns" in run.dropped:  # the report's own read (write_run_report)
        ttft, itl, itl_total = _streamed_samples(run, mode)
    else:
        s = request_samples(run.requests, mode)
        ttft, itl, itl_total = s["ttft_ms"], s["itl_ms"], len(s["itl_ms"])
    page.h2(f"TTFT and inter-token latency distributions{label}")
    if len(ttft) == 0:
        page.add('<p class="toosmall">No request succeeded: there is no latency to draw.</p>')
        return
    page.image("ttft", "TTFT histogram", lambda p: plots.histogram(ttft, p, title="Time to first token"))
    page.image("itl", "ITL histogram",
               lambda p: plots.histogram(itl, p, title="Inter-token latency", total=itl_total))


def _streamed_samples(run: RunData, mode: Literal["open", "closed"]) -> tuple[np.ndarray, np.ndarray, int]:
    """TTFT of every request and the inter-token gaps, read from ``requests.parquet`` a row group at a time
    (token times are never held whole): every gap while the run has at most ``MAX_ITL_DRAWN`` of them (the
    summary's ``itl_ms.n``), else every k-th gap in file order (k = ceil(n / MAX_ITL_DRAWN)). Returns
    (ttft ms, gaps drawn in ms, how many gaps the run has)."""
    total = _get(run.summary, "metrics", "itl_ms", "n")
    step = max(1, -(-int(total) // MAX_ITL_DRAWN)) if isinstance(total, int) else 1
    ttft: list[np.ndarray] = []
    itl: list[np.ndarray] = []
    seen = 0
    for batch in iter_tables(run.path / "requests.parquet", TABLE_COLUMNS):
        s = request_samples(batch, mode)
        ttft.append(s["ttft_ms"])
        gaps = s["itl_ms"]
        itl.append(gaps[(-seen) % step::step].copy() if step > 1 else gaps)
        seen += len(gaps)
    def join(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0)
    return join(ttft), join(itl), seen


def _timeline_rows(requests: pa.Table, sessions: pa.Table) -> tuple[list[dict[str, Any]], int]:
    sess = [s for s in sessions.to_pylist() if not s.get("warmup") and s.get("end_ns") is not None]
    if not sess:
        return [], 0
    sess.sort(key=lambda s: s["start_ns"])
    step = max(1, len(sess) // MAX_TIMELINE)
    pick = sess[::step][:MAX_TIMELINE]
    ids = {s["session_id"] for s in pick}
    t0 = min(s["start_ns"] for s in pick)
    drawn = pa.array(sorted(i for i in ids if i is not None), pa.int64())
    mine = pc.is_in(requests.column("session_id"), value_set=drawn)
    cols = requests.select(["session_id", "sent_ns", "end_ns"]).filter(mine).to_pydict()  # the drawn only
    model: dict[int, list[tuple[float, float]]] = {i: [] for i in ids}
    for sid, a, b in zip(cols["session_id"], cols["sent_ns"], cols["end_ns"], strict=True):
        if sid in ids and a is not None and b is not None:
            model[sid].append(((a - t0) / 1e9, (b - t0) / 1e9))
    rows = []
    for s in pick:
        wall = s["end_ns"] - s["start_ns"]
        tools = (s.get("tool_ns") or 0) + (s.get("retrieval_ns") or 0) + (s.get("code_ns") or 0)
        rows.append(
            {
                "id": s["session_id"],
                "start_s": (s["start_ns"] - t0) / 1e9,
                "end_s": (s["end_ns"] - t0) / 1e9,
                "model": model[s["session_id"]],
                "tool_share": tools / wall if wall > 0 else None,
            }
        )
    return rows, len(sess)


def _sessions(page: Page, run: RunData) -> None:
    if run.sessions is None or run.sessions.num_rows == 0:
        return
    rows, total = _timeline_rows(run.requests, run.sessions)
    if rows:
        page.h2("Sample sessions: model turns against tool time")
        page.image(
            "sessions", "session timeline", lambda p: plots.session_timeline(rows, p, total_sessions=total)
        )


def _attribution(page: Page, run: RunData) -> None:
    attr = request_attribution(run.requests)
    page.h2("Where the slow requests spend their time")
    page.add(f"<p>{_e(attr['summary'])}.</p>")
    if not attr["components"]:
        return
    page.add(f'<p class="muted">{_e(attr.get("note"))}</p>')
    page.image("attribution", "tail attribution", lambda p: plots.attribution_plot(attr, p))
    if run.sessions is not None and run.sessions.num_rows:
        sa = session_attribution(run.sessions)
        page.add(f"<p>Sessions: {_e(sa['summary'])}.</p>")
        if sa["components"]:
            page.add(
                _table(
                    ["component", "slowest sessions (mean)", "median sessions (mean)", "share of the gap"],
                    [
                        [
                            c["label"],
                            duration_ms(c["tail_ms"]),
                            duration_ms(c["median_ms"]),
                            f"{c['tail_share']:.0%}",
                        ]
                        for c in sa["components"]
                    ],
                    csv_name="session-attribution",
                )
            )


def _config(page: Page, obj: Any) -> None:
    page.h2("Full configuration")
    page.add(f"<pre>{_e(json.dumps(obj, indent=2, sort_keys=True, default=str))}</pre>")


# -- entry points -------------------------------------------------------------------------------------


def _hook(module: str, fn: str) -> Any:
    """A section another module may provide (``report.evidence``, ``report.sweep_table``), or None."""
    import importlib

    try:
        return getattr(importlib.import_module(f"servelab.report.{module}"), fn, None)
    except ImportError:
        return None


def _run_sections(page: Page, run: RunData, label: str = "", sweep: Mapping[str, Any] | None = None) -> None:
    """The evidence under a run's answer: distributions, timelines, metrics over time, attribution, advice."""
    _distributions(page, run, label)
    timeline_section(page, run)
    client_section(page, run)
    _sessions(page, run)
    server_section(page, run.telemetry)
    if (server_evidence := _hook("evidence", "evidence_section")) is not None:
        server_evidence(page, run)
    _attribution(page, run)
    advice_section(page, run, sweep)
    cost_section(page, run.summary)


def _top(page: Page, title: str, words: str, banner_html: str) -> None:
    page.add(f"<h1>{_e(title)}</h1>")
    page.add(f'<p class="headline" id="headline">{_e(words)}</p>')
    page.add(banner_html)


def _write_sweep(page: Page, source: SweepData, title: str, comparison: Mapping[str, Any] | None) -> None:
    groups = sweep_groups(source.state)
    slo_res, sweep_ev = group_slo(source.state, groups)
    _top(page, title, sweep_headline(source.state, source.runs), sweep_banner(source.state))
    page.add(verdict_html(source.state, slo_res))
    comparison_section(page, comparison)
    knee_section(page, source.state, groups)
    if (decision := _hook("sweep_table", "decision_html")) is not None:
        page.add(decision(source.state))
    pareto_section(page, sweep_pareto_series(source.state, source.runs, groups, axis_of(source.state)))
    page.h2("Every point")
    points_table(page, source.state)
    scaling_section(page, source.state)
    sweep_errors(page, source.state)
    run, label = _representative(source, groups)
    if run is not None:
        _run_sections(page, run, label, sweep_ev)
    _config(page, {"sweep": {k: v for k, v in source.state.items() if k != "points"},
                   "representative_run": run.manifest if run else None})


def _write_run(page: Page, source: RunData, title: str, comparison: Mapping[str, Any] | None) -> None:
    extra = [] if source.complete else ["the run did not finish: figures come from its journals"]
    words = headline(source.summary, source.manifest)
    if comparison:
        words = f"{comparison_headline(comparison)} Run {(comparison.get('names') or ['A'])[0]}: {words}"
    _top(page, title, words, banner(source.summary, extra))
    comparison_section(page, comparison)
    if comparison and comparison.get("runs"):
        pareto_section(page, runs_pareto_series(comparison["runs"]))
    if not _get(source.summary, "requests", "ok") and _get(source.summary, "requests", "sent"):
        errors_section(page, source.summary, source.requests)  # nothing succeeded: the errors are the answer
        key_figures(page, source.summary)
    else:
        task_block(page, source.summary)
        key_figures(page, source.summary)
        mix_section(page, source.summary)
        errors_section(page, source.summary, source.requests)
    _run_sections(page, source)
    _config(page, source.manifest)


def write_report(
    source: RunData | SweepData,
    out_path: str | Path,
    *,
    comparison: Mapping[str, Any] | None = None,
    title: str | None = None,
) -> Path:
    """Write the report of a run or a sweep to ``out_path`` (charts inline, PNG copies beside it)."""
    out = Path(out_path)
    page = Page(out)
    if isinstance(source, SweepData):
        title = title or f"servelab sweep: {source.path.name}"
        _write_sweep(page, source, title, comparison)
    else:
        title = title or (f"servelab comparison: {' vs '.join(map(str, comparison['names'][:2]))}"
                          if comparison and comparison.get("names")
                          else run_title(source.manifest.get("config"), source.path.name))
        _write_run(page, source, title, comparison)
    page.footer()
    out.write_text(page.render(title), encoding="utf-8")
    return out


def _representative(source: SweepData, groups: list[Group]) -> tuple[RunData | None, str]:
    """The run whose distributions the sweep report shows: the first group's knee point, else its last
    measured one (then the other groups')."""
    for g in groups:
        want = (g.knee or {}).get("level")
        for p in sorted(g.points, key=lambda p: (p["level"] != want, -p["level"])):
            run = source.runs.get(p.get("key") or p.get("run_dir") or "")
            if run is not None:
                where = f" ({g.label})" if len(groups) > 1 and g.label else ""
                return run, f" at {axis_of(source.state)} {p['level']:g}{where}"
    return None, ""


def load_sweep(sweep_dir: str | Path) -> SweepData:
    d = Path(sweep_dir)
    f = d / "sweep.json"
    if not f.exists():
        raise RunDirError(f"{d} has no sweep.json: not a servelab sweep directory")
    state = json.loads(f.read_text())
    runs: dict[str, RunData] = {}
    for p in state.get("points") or []:
        key = p.get("run_dir")
        if p.get("status") == "ok" and key and (d / key / "manifest.json").exists():
            runs[p.get("key") or key] = read_run(d / key)
    return SweepData(d, state, runs)


def write_run_report(run_dir: str | Path, out_path: str | Path | None = None, *,
                     comparison: Mapping[str, Any] | None = None) -> Path:
    # only the request columns a section reads, a row group at a time; token times (8 bytes a token) are
    # streamed by the ITL histogram alone
    run = read_run(run_dir, without=tuple(c for c in REQUEST_SCHEMA.names if c not in REPORT_COLUMNS))
    return write_report(run, out_path or run.path / REPORT_NAME, comparison=comparison)


def write_sweep_report(sweep_dir: str | Path, out_path: str | Path | None = None) -> Path:
    sw = load_sweep(sweep_dir)
    return write_report(sw, out_path or sw.path / REPORT_NAME)
