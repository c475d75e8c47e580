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

import base64
import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from servelab.analysis.advice import advise, collect_evidence
from servelab.analysis.attribution import request_attribution, session_attribution
from servelab.analysis.compare import request_samples
from servelab.analysis.knee import max_load_meeting_slo
from servelab.errors import RunDirError
from servelab.records.rundir import RunData, read_run
from servelab.report import plots

REPORT_NAME = "report.html"
LEVEL_AXES = ("concurrency", "rate", "sessions", "session_rate")
MAX_TIMELINE = 12

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1000px;
padding:16px 24px;color:#1d1d1f;background:#fff}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.verdict{background:#f0f6ff;border-left:5px solid #2a6fdb;padding:10px 14px;font-size:15px}
.verdict.bad{background:#fff3f0;border-left-color:#d62728}
.warn{color:#a33}.muted{color:#666;font-size:12px}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f6f6f6}
td.l,th.l{text-align:left}
img{max-width:100%;height:auto;display:block;margin:6px 0}
pre{background:#f7f7f7;padding:8px;overflow:auto;font-size:12px;max-height:480px}
.tag{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px;background:#eee}
.tag.recommended,.tag.required,.tag.better{background:#d9f2d9}.tag.worse,.tag.not-possible{background:#f8d7d2}
"""


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _n(v: Any, fmt: str = "{:,.1f}") -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    return fmt.format(v)


def _get(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, Mapping):
            return None
        d = d.get(p)
    return d


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1) -> str:
    th = "".join(f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{_e(c)}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


@dataclass
class SweepData:
    path: Path
    state: dict[str, Any]
    runs: dict[str, RunData] = field(default_factory=dict)  # point key -> its run (readable points only)


class _Page:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.parts: list[str] = []
        self.images: list[Path] = []

    def add(self, s: str) -> None:
        self.parts.append(s)

    def h2(self, title: str) -> None:
        self.add(f"<h2>{_e(title)}</h2>")

    def image(self, name: str, alt: str, draw: Any) -> None:
        """Draw a PNG beside the report (``draw(path)``) and inline it."""
        path = self.out.parent / f"{self.out.stem}-{name}.png"
        draw(path)
        self.images.append(path)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        self.add(f'<img id="{_e(name)}" alt="{_e(alt)}" src="data:image/png;base64,{data}">')

    def render(self, title: str) -> str:
        return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
                f'<meta name="viewport" content="width=device-width, initial-scale=1">'
                f"<style>{_CSS}</style></head><body>{''.join(self.parts)}</body></html>")


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


def _axis(state: Mapping[str, Any]) -> str:
    for p in state.get("points") or []:
        for a in LEVEL_AXES:
            if a in (p.get("params") or {}):
                return a
    return "load level"


def sweep_verdict(state: Mapping[str, Any], slo_result: Mapping[str, Any] | None) -> str:
    knee, axis = state.get("knee"), _axis(state)
    pts = [p for p in state.get("points") or [] if p.get("status") == "ok"]
    n_failed = sum(1 for p in state.get("points") or [] if p.get("status") == "failed")
    if knee and knee.get("level") is not None:
        rng = (f" (between {knee['low']:g} and {knee['high']:g})" if knee.get("low") is not None
               and knee.get("high") is not None else "")
        words = [f"The knee is at {axis} {knee['level']:g}{rng}, confidence {knee.get('confidence')}: "
                 f"past it, more load buys little throughput ({knee.get('reason', '')})."]
    elif knee and knee.get("beyond"):
        words = [f"No knee within the grid: throughput still grows at {axis} {knee['low']:g}, so the knee is at "
                 f"{knee['low']:g} or beyond; extend the grid."]
    else:
        words = [f"No knee: {(knee or {}).get('reason') or state.get('knee_reason') or 'not enough points'}."]
    tps = [(_get(p, "summary", "throughput", "output_tokens_per_s"), p.get("level")) for p in pts]
    tps = [t for t in tps if t[0] is not None]
    if tps:
        best = max(tps, key=lambda t: t[0])
        words.append(f"Peak output throughput {_n(best[0])} tokens/s at {axis} {best[1]:g}.")
    if slo_result is not None:
        words.append(f"SLO: {slo_result['reason']}.")
    words.append(f"{len(pts)} point(s) measured" + (f", {n_failed} failed." if n_failed else "."))
    return " ".join(words)


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


def _sweep_section(page: _Page, state: Mapping[str, Any]) -> list[dict[str, Any]]:
    axis = _axis(state)
    pts = sorted((p for p in state.get("points") or [] if p.get("status") == "ok" and p.get("level") is not None),
                 key=lambda p: p["level"])
    page.h2("Throughput and latency against load")
    if len(pts) >= 1:
        lv = [float(p["level"]) for p in pts]

        def col(*path: str) -> list[Any]:
            return [_get(p, "summary", *path) for p in pts]

        page.image("knee", "knee plot: throughput and latency against load", lambda path: plots.knee_plot(
            lv, col("throughput", "output_tokens_per_s"), col("metrics", "e2e_ms", "p50"),
            col("metrics", "e2e_ms", "p95"), col("metrics", "e2e_ms", "p99"), state.get("knee"),
            [int(_get(p, "summary", "requests", "ok") or 0) for p in pts], path, level_label=axis,
            latency_label="end-to-end latency (ms)", goodput=col("throughput", "goodput_requests_per_s")))
    rows = [[_e_params(p.get("params")), p.get("status"), _n(_get(p, "summary", "requests", "ok"), "{:,}"),
             _n(_get(p, "summary", "throughput", "output_tokens_per_s")),
             _n(_get(p, "summary", "metrics", "ttft_ms", "p50")), _n(_get(p, "summary", "metrics", "ttft_ms", "p99")),
             _n(_get(p, "summary", "metrics", "e2e_ms", "p95")),
             _n(_get(p, "summary", "throughput", "goodput_requests_per_s"), "{:,.2f}"), p.get("error") or ""]
            for p in state.get("points") or []]
    page.add(_table(["point", "status", "ok", "out tok/s", "TTFT p50", "TTFT p99", "E2E p95", "goodput/s",
                     "error"], rows))
    return pts


def _e_params(params: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in (params or {}).items())


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
        slo_res, sweep_ev = _sweep_slo(source.state)
        verdict_at = len(page.parts)
        pts = _sweep_section(page, source.state)
        page.parts.insert(verdict_at, f'<div class="verdict" id="verdict">{_e(sweep_verdict(source.state, slo_res))}'
                                      "</div>")
        run, label = _representative(source, pts)
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


def _sweep_slo(state: Mapping[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    slo = _get(state, "base_config", "slo") or {}
    pts = sorted((p for p in state.get("points") or [] if p.get("level") is not None
                  and p.get("status") in ("ok", "failed")), key=lambda p: p["level"])
    if not pts or not any(slo.get(k) for k in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "min_goodput_fraction")):
        return None, None
    res = max_load_meeting_slo([p["level"] for p in pts], [p.get("summary") for p in pts], slo)
    tp = [_get(p, "summary", "throughput", "output_tokens_per_s") or 0.0 for p in pts]
    return res, {"levels": [p["level"] for p in pts], "throughput": tp, "slo_level": res["level"]}


def _representative(source: SweepData, pts: list[dict[str, Any]]) -> tuple[RunData | None, str]:
    """The run whose distributions the sweep report shows: the knee point, else the last measured one."""
    knee = source.state.get("knee") or {}
    want = knee.get("level")
    order = sorted(pts, key=lambda p: (p["level"] != want, -p["level"]))
    for p in order:
        run = source.runs.get(p.get("key") or p.get("run_dir") or "")
        if run is not None:
            return run, f" at {_axis(source.state)} {p['level']:g}"
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
