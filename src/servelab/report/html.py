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
from typing import Any

import numpy as np
import pyarrow as pa

from servelab.analysis.advice import advise, collect_evidence
from servelab.analysis.attribution import request_attribution, session_attribution
from servelab.analysis.compare import request_samples
from servelab.errors import RunDirError
from servelab.records.rundir import RunData, read_run
from servelab.report import plots
from servelab.report.html_page import Page, esc, get, num, table
from servelab.report.html_sweep import (
    Group,
    axis_of,
    group_slo,
    knee_section,
    points_table,
    scaling_section,
    sweep_groups,
    sweep_verdict,
    verdict_html,
)

REPORT_NAME = "report.html"
MAX_TIMELINE = 12

_e, _n, _get, _table, _Page = esc, num, get, table, Page
__all__ = ["SweepData", "load_sweep", "run_verdict", "sweep_verdict", "write_report", "write_run_report",
           "write_sweep_report"]


@dataclass
class SweepData:
    path: Path
    state: dict[str, Any]
    runs: dict[str, RunData] = field(default_factory=dict)  # point key -> its run (readable points only)


# -- words --------------------------------------------------------------------------------------------


def _target_words(manifest: Mapping[str, Any]) -> str:
    t = manifest.get("target") or {}
    model = t.get("model") or _get(manifest, "config", "target", "model") or "the model"
    where = t.get("engine") or _get(manifest, "config", "target", "url") or "the target"
    ver = f" {t['version']}" if t.get("version") else ""
    hw = _get(t, "deployment", "hardware") or t.get("hardware")
    gpus = _get(t, "deployment", "gpus")
    on = f" on {gpus} x {hw}" if hw and gpus else f" on {hw}" if hw else ""
    return f"{model} served by {where}{ver}{on}"


def run_verdict(summary: Mapping[str, Any], manifest: Mapping[str, Any]) -> tuple[str, bool]:
    """Plain-words verdict of one run, and whether the figures are valid."""
    req = summary.get("requests") or {}
    failed = sum((req.get("failed") or {}).values())
    tp = _get(summary, "throughput", "output_tokens_per_s")
    ttft = _get(summary, "metrics", "ttft_ms") or {}
    e2e = _get(summary, "metrics", "e2e_ms") or {}
    load = _get(manifest, "config", "load") or {}
    how = (f"at {load['rate']:g} requests/s" if load.get("rate") else
           f"with {load['concurrency']} concurrent users" if load.get("concurrency") else "")
    words = [f"{_target_words(manifest)} {how}: {req.get('ok', 0):,} of {req.get('sent', 0):,} requests "
             f"succeeded" + (f", {failed:,} failed" if failed else "") + "."]
    if tp is not None:
        words.append(f"Output throughput {_n(tp)} tokens/s.")
    if ttft.get("p50") is not None:
        words.append(f"Time to first token: median {_n(ttft['p50'])} ms, p99 {_n(ttft.get('p99'))} ms; "
                     f"end-to-end median {_n(e2e.get('p50'))} ms, p99 {_n(e2e.get('p99'))} ms.")
    good = summary.get("goodput") or {}
    if good.get("slo") and good.get("fraction") is not None:
        words.append(f"{good['fraction']:.1%} of requests met the SLO.")
    cost = _get(summary, "cost", "per_successful_task")
    if cost is not None:
        words.append(f"Cost per successful task: ${cost:,.4f}.")
    valid = summary.get("valid", True) is not False
    if not valid:
        words.append("These figures are not valid: " + "; ".join(map(str, summary.get("invalid_reasons") or [])) + ".")
    return " ".join(words), valid


# -- sections -----------------------------------------------------------------------------------------


def _key_figures(page: _Page, summary: Mapping[str, Any]) -> None:
    page.h2("Key figures")
    rows = []
    for m in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "queue_ms"):
        s = _get(summary, "metrics", m)
        if s:
            rows.append([m, _n(s.get("mean")), _n(s.get("p50")), _n(s.get("p90")), _n(s.get("p95")),
                         _n(s.get("p99")), _n(s.get("max")), _n(s.get("n"), "{:,}")])
    page.add(_table(["metric (ms)", "mean", "p50", "p90", "p95", "p99", "max", "n"], rows))
    tp = summary.get("throughput") or {}
    page.add(_table(["throughput", "value"], [[k, _n(v, "{:,.2f}")] for k, v in tp.items()]))


def _distributions(page: _Page, run: RunData, label: str) -> None:
    if run.requests.num_rows == 0:
        return
    mode = "open" if _get(run.manifest, "config", "load", "rate") is not None else "closed"
    s = request_samples(run.requests, mode)
    page.h2(f"TTFT and inter-token latency distributions{label}")
    page.image("ttft", "TTFT histogram", lambda p: plots.histogram(s["ttft_ms"], p, title="Time to first token"))
    page.image("itl", "ITL histogram", lambda p: plots.histogram(s["itl_ms"], p, title="Inter-token latency"))


def _timeline_rows(requests: pa.Table, sessions: pa.Table) -> tuple[list[dict[str, Any]], int]:
    sess = [s for s in sessions.to_pylist() if not s.get("warmup") and s.get("end_ns") is not None]
    if not sess:
        return [], 0
    sess.sort(key=lambda s: s["start_ns"])
    step = max(1, len(sess) // MAX_TIMELINE)
    pick = sess[::step][:MAX_TIMELINE]
    ids = {s["session_id"] for s in pick}
    t0 = min(s["start_ns"] for s in pick)
    cols = requests.select(["session_id", "sent_ns", "end_ns"]).to_pydict()
    model: dict[int, list[tuple[float, float]]] = {i: [] for i in ids}
    for sid, a, b in zip(cols["session_id"], cols["sent_ns"], cols["end_ns"], strict=True):
        if sid in ids and a is not None and b is not None:
            model[sid].append(((a - t0) / 1e9, (b - t0) / 1e9))
    rows = []
    for s in pick:
        wall = s["end_ns"] - s["start_ns"]
        tools = (s.get("tool_ns") or 0) + (s.get("retrieval_ns") or 0) + (s.get("code_ns") or 0)
        rows.append({"id": s["session_id"], "start_s": (s["start_ns"] - t0) / 1e9, "end_s": (s["end_ns"] - t0) / 1e9,
                     "model": model[s["session_id"]], "tool_share": tools / wall if wall > 0 else None})
    return rows, len(sess)


def _sessions(page: _Page, run: RunData) -> None:
    if run.sessions is None or run.sessions.num_rows == 0:
        return
    rows, total = _timeline_rows(run.requests, run.sessions)
    if rows:
        page.h2("Sample sessions: model turns against tool time")
        page.image("sessions", "session timeline", lambda p: plots.session_timeline(rows, p, total_sessions=total))


def _telemetry(page: _Page, tel: pa.Table | None) -> None:
    if tel is None or tel.num_rows == 0:
        return
    d = tel.select(["t_ns", "name", "value"]).to_pydict()
    by: dict[str, dict[int, float]] = {}
    for t, name, v in zip(d["t_ns"], d["name"], d["value"], strict=True):
        if name is not None and v is not None:
            by.setdefault(name, {}).setdefault(t, 0.0)
            by[name][t] += float(v)  # several label sets (GPUs, engines): the total at each instant
    prefer = ("requests_running", "requests_waiting", "kv_cache_usage", "gpu_utilization")
    names = [n for n in prefer if n in by] or sorted(by)[:4]
    if not names:
        return
    t_min = min(min(by[n]) for n in names)
    series = {}
    for n in names:
        ts = sorted(by[n])
        series[n] = (np.array([(t - t_min) / 1e9 for t in ts]), np.array([by[n][t] for t in ts]))
    page.h2("Server metrics over time")
    page.image("telemetry", "server metrics over time", lambda p: plots.telemetry_plot(series, p))


def _attribution(page: _Page, run: RunData) -> None:
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
            page.add(_table(["component", "tail ms", "median ms", "tail share"],
                            [[c["label"], _n(c["tail_ms"]), _n(c["median_ms"]), f"{c['tail_share']:.0%}"]
                             for c in sa["components"]]))


def _advice(page: _Page, run: RunData, sweep: Mapping[str, Any] | None) -> None:
    facts = collect_evidence(run.manifest, run.summary, run.requests, run.sessions, sweep)
    page.h2("Advice, with its evidence")
    for a in advise(facts):
        cls = a["verdict"].replace(" ", "-")
        page.add(f'<p><b>{_e(a["rule"])}</b> <span class="tag {_e(cls)}">{_e(a["verdict"])}</span> '
                 f'<span class="muted">{_e(a["why"])}</span></p>')
        page.add(_table(["fact", "value", "test", "holds", "source"],
                        [[e["label"], _n(e["value"], "{:,.3g}") if isinstance(e["value"], float) else e["value"],
                          e["test"], {True: "yes", False: "no", None: "-"}[e["holds"]], e["source"]]
                         for e in a["evidence"]]))


def _cost(page: _Page, summary: Mapping[str, Any]) -> None:
    cost = summary.get("cost")
    if not isinstance(cost, Mapping) or not cost:
        return
    page.h2("Cost per successful task")
    page.add(_table(["item", "value"], [[k, _n(v, "{:,.4f}") if isinstance(v, float) else v]
                                        for k, v in cost.items()]))


def _comparison(page: _Page, comparison: Mapping[str, Any] | None) -> None:
    if not comparison:
        return
    names = comparison.get("names") or ["A", "B"]
    page.h2("Comparison")
    if comparison.get("diff"):
        page.add(_table(["dimension", *names, "status"],
                        [[r["label"], *[v if v is not None else "not recorded" for v in r["values"]], r["status"]]
                         for r in comparison["diff"]]))
    if comparison.get("figures"):
        page.add(_table(["figure", names[0], names[1], "difference", "95% CI", "verdict"],
                        [[r["figure"], _n(r["a"], "{:,.2f}"), _n(r["b"], "{:,.2f}"), _n(r["diff"], "{:+,.2f}"),
                          f"[{_n(r['lo'], '{:+,.2f}')}, {_n(r['hi'], '{:+,.2f}')}]", r["verdict"]]
                         for r in comparison["figures"]]))


def _config(page: _Page, obj: Any) -> None:
    page.h2("Full configuration")
    page.add(f"<pre>{_e(json.dumps(obj, indent=2, sort_keys=True, default=str))}</pre>")


# -- entry points -------------------------------------------------------------------------------------


def _run_sections(page: _Page, run: RunData, label: str = "", sweep: Mapping[str, Any] | None = None) -> None:
    _distributions(page, run, label)
    _sessions(page, run)
    _telemetry(page, run.telemetry)
    _attribution(page, run)
    _advice(page, run, sweep)
    _cost(page, run.summary)


def write_report(source: RunData | SweepData, out_path: str | Path, *, comparison: Mapping[str, Any] | None = None,
                 title: str | None = None) -> Path:
    """Write the report of a run or a sweep to ``out_path`` (PNGs beside it); returns the path."""
    out = Path(out_path)
    page = _Page(out)
    if isinstance(source, SweepData):
        title = title or f"servelab sweep: {source.path.name}"
        page.add(f"<h1>{_e(title)}</h1>")
        groups = sweep_groups(source.state)
        slo_res, sweep_ev = group_slo(source.state, groups)
        page.add(verdict_html(source.state, slo_res))
        knee_section(page, source.state, groups)
        points_table(page, source.state)
        scaling_section(page, source.state)
        run, label = _representative(source, groups)
        if run is not None:
            _run_sections(page, run, label, sweep_ev)
        _comparison(page, comparison)
        _config(page, {"sweep": {k: v for k, v in source.state.items() if k != "points"},
                       "representative_run": run.manifest if run else None})
    else:
        title = title or f"servelab run: {source.path.name}"
        words, valid = run_verdict(source.summary, source.manifest)
        page.add(f"<h1>{_e(title)}</h1>")
        page.add(f'<div class="verdict{"" if valid else " bad"}" id="verdict">{_e(words)}</div>')
        for w in source.summary.get("warnings") or []:
            page.add(f'<p class="warn">{_e(w)}</p>')
        if not source.complete:
            page.add('<p class="warn">This run did not finish: figures come from its journals.</p>')
        _key_figures(page, source.summary)
        _run_sections(page, source)
        _comparison(page, comparison)
        _config(page, source.manifest)
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
    run = read_run(run_dir)
    return write_report(run, out_path or run.path / REPORT_NAME, comparison=comparison)


def write_sweep_report(sweep_dir: str | Path, out_path: str | Path | None = None) -> Path:
    sw = load_sweep(sweep_dir)
    return write_report(sw, out_path or sw.path / REPORT_NAME)
