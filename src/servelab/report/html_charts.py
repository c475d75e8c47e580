"""Evidence sections of the report drawn from records: a per-request timeline, client metrics over time,
server metrics over time, and the Pareto chart across sweep points or compared runs.

A series with fewer than :data:`charts.MIN_SERIES_POINTS` samples is described in words ("too few
samples"), never drawn as a ramp between three or four points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from servelab.analysis.pareto import point_of
from servelab.records.rundir import RunData
from servelab.report import charts
from servelab.report.html_page import Page, esc, get, table
from servelab.report.words import name, sig

MAX_REQUESTS_SHOWN = 40
_TIME_BINS = 30
# server metric -> (title, unit, scale, fixed top); fractions become percentages
_SERVER = {"requests_running": ("requests running", "requests", 1.0, None),
           "requests_waiting": ("requests waiting", "requests", 1.0, None),
           "kv_cache_usage": ("KV cache usage", "%", 100.0, 100.0),
           "gpu_utilization": ("GPU utilisation", "%", 1.0, 100.0)}


def _too_few(page: Page, what: str, n: int) -> None:
    page.add(f'<p class="toosmall">{esc(what)}: too few samples to draw ({n}; a chart needs at least '
             f"{charts.MIN_SERIES_POINTS}).</p>")


def _col(t: pa.Table, c: str) -> list[Any]:
    return t.column(c).to_pylist() if c in t.column_names else [None] * t.num_rows


def _ints(t: pa.Table, c: str) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values with nulls as 0, null mask) of a column; a missing column is all null. No Python object
    per value: the report's memory stays the columns' own."""
    if c not in t.column_names:
        return np.zeros(t.num_rows, dtype=np.int64), np.ones(t.num_rows, dtype=bool)
    col = t.column(c)
    return (np.asarray(col.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64),
            np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool))


def _flags(t: pa.Table, c: str) -> np.ndarray:
    """A boolean column as a mask, null as False (``bool(None)``)."""
    if c not in t.column_names:
        return np.zeros(t.num_rows, dtype=bool)
    return np.asarray(t.column(c).fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _floats(t: pa.Table, c: str) -> np.ndarray:
    """An integer column as float64, null as NaN (``float(x)`` of each value)."""
    v, null = _ints(t, c)
    return np.where(null, np.nan, v.astype(np.float64))


def timeline_rows(requests: pa.Table, limit: int = MAX_REQUESTS_SHOWN) -> tuple[list[dict[str, Any]], int]:
    """Up to ``limit`` measured requests, evenly spaced by due time, split into phases (seconds from the
    first shown request's due time)."""
    sent_v, no_sent = _ints(requests, "sent_ns")
    due_v, _ = _ints(requests, "intended_ns")
    keep = np.flatnonzero(~_flags(requests, "warmup") & ~no_sent)
    if not keep.size:
        return [], 0
    key = np.where(due_v != 0, due_v, sent_v)[keep]  # due or, when null (0), sent
    keep = keep[np.argsort(key, kind="stable")]
    chosen = keep[:: max(1, len(keep) // limit)][:limit]
    sub = requests.take(pa.array(chosen, pa.int64()))  # only the rows drawn become Python values
    due, sent = _col(sub, "intended_ns"), _col(sub, "sent_ns")
    first, end, status = _col(sub, "first_token_ns"), _col(sub, "end_ns"), _col(sub, "status")
    q, pf, rid = _col(sub, "srv_queue_ns"), _col(sub, "srv_prefill_ns"), _col(sub, "request_id")
    pick = range(len(chosen))
    t0 = min(due[i] or sent[i] for i in pick)
    rows = []
    for i in pick:
        s = lambda ns: (ns - t0) / 1e9  # noqa: E731
        phases = [("client wait", s(due[i] or sent[i]), s(sent[i]))]
        fin = end[i] if end[i] is not None else sent[i]
        if status[i] != "ok":
            phases.append(("failed", s(sent[i]), s(fin)))
        else:
            ft = first[i] if first[i] is not None else fin
            if q[i] is not None and pf[i] is not None:
                phases += [("server queue", s(sent[i]), s(sent[i] + q[i])),
                           ("prefill", s(sent[i] + q[i]), s(min(ft, sent[i] + q[i] + pf[i])))]
                phases.append(("decode", s(min(ft, sent[i] + q[i] + pf[i])), s(fin)))
            else:
                phases += [("waiting + prefill", s(sent[i]), s(ft)), ("decode", s(ft), s(fin))]
        rows.append({"label": f"#{rid[i]}", "phases": phases})
    return rows, len(keep)


def timeline_section(page: Page, run: RunData) -> None:
    if run.requests.num_rows == 0:
        return
    rows, total = timeline_rows(run.requests)
    page.h2("Request timeline: when each request waited, queued, prefilled and decoded")
    if len(rows) < 3:
        _too_few(page, "request timeline", len(rows))
        return
    split = (
        "server queue and prefill as the server reported them"
        if any(p[0] == "prefill" for r in rows for p in r["phases"])
        else "queueing and prefill together (the server does not report the split)"
    )
    any_failed = any(p[0] == "failed" for r in rows for p in r["phases"])
    failed = "; dark red: failed (from send to the error)" if any_failed else ""
    page.add(f'<p class="muted">Grey: due but not yet sent (client); then {esc(split)}; blue: decoding'
             f"{esc(failed)}.</p>")
    page.image("timeline", "per-request timeline", lambda p: charts.request_timeline(rows, p, total=total))


def client_series(requests: pa.Table, bins: int = _TIME_BINS) -> list[dict[str, Any]]:
    """Completed requests/s, output tokens/s, median TTFT and errors per time bin (by end time)."""
    w = _flags(requests, "warmup")
    end = _floats(requests, "end_ns")
    ok = np.zeros(requests.num_rows, dtype=bool)
    if "status" in requests.column_names:
        ok = np.asarray(pc.equal(requests.column("status"), "ok").fill_null(False)
                        .to_numpy(zero_copy_only=False), dtype=bool)
    use = ~w & np.isfinite(end)
    if use.sum() < 2:
        return []
    t0, t1 = float(np.nanmin(end[use])), float(np.nanmax(end[use]))
    sent_v, no_sent = _ints(requests, "sent_ns")
    t_start = float(np.nanmin(sent_v[~no_sent].astype(np.float64) if (~no_sent).any() else [t0]))
    span = max(t1 - t_start, 1.0)
    nb = max(1, min(bins, int(use.sum() // 4)))
    edges = np.linspace(t_start, t_start + span, nb + 1)
    idx = np.clip(np.searchsorted(edges, end, side="right") - 1, 0, nb - 1)
    width_s = span / nb / 1e9
    toks = _ints(requests, "usage_completion_tokens")[0].astype(np.float64)
    est = _ints(requests, "est_completion_tokens")[0].astype(np.float64)
    toks = np.where(toks > 0, toks, est)
    first_v, no_first = _ints(requests, "first_token_ns")
    ttft = np.where(no_sent | no_first, np.nan, (first_v - sent_v) / 1e6)
    rps, tps, p50, errs = [], [], [], []
    for b in range(nb):
        m = use & (idx == b)
        rps.append(float((m & ok).sum()) / width_s)
        tps.append(float(toks[m & ok].sum()) / width_s)
        good = ttft[m & ok]
        p50.append(float(np.median(good[np.isfinite(good)])) if np.isfinite(good).any() else np.nan)
        errs.append(float((m & ~ok).sum()))
    t = ((edges[:-1] + edges[1:]) / 2 - t_start) / 1e9
    out = [{"title": "completed requests/s", "unit": "req/s", "t": t, "v": np.array(rps)},
           {"title": "output tokens/s", "unit": "tokens/s", "t": t, "v": np.array(tps)},
           {"title": "median time to first token", "unit": "ms", "t": t, "v": np.array(p50)}]
    if any(errs):
        out.append({"title": "failed requests per bin", "unit": "requests", "t": t, "v": np.array(errs)})
    return out


def client_section(page: Page, run: RunData) -> None:
    if run.requests.num_rows == 0:
        return
    panels = client_series(run.requests)
    page.h2("Client metrics over time")
    n = len(panels[0]["t"]) if panels else 0
    if n < charts.MIN_SERIES_POINTS:
        _too_few(page, "client metrics over time", n)
        return
    page.image("client", "client metrics over time",
               lambda p: charts.over_time(panels, p, xlabel="seconds since the first request was sent"))


def server_series(tel: pa.Table) -> dict[str, dict[int, float]]:
    """name -> {t_ns: value}: at each instant the total over label sets (GPUs, engines), except KV cache
    usage, a fraction per engine, which is their mean. One metric under two raw names (vLLM's
    kv_cache_usage_perc and its deprecated gpu_cache_usage_perc) counts once: the first name seen."""
    t_ns, names, values = _col(tel, "t_ns"), _col(tel, "name"), _col(tel, "value")
    raws, labels = _col(tel, "raw_name"), _col(tel, "labels")
    first_raw: dict[tuple[str, Any], Any] = {}
    cells: dict[str, dict[int, dict[Any, float]]] = {}
    for t, nm, v, raw, lab in zip(t_ns, names, values, raws, labels, strict=True):
        if nm is None or v is None or t is None:
            continue
        if first_raw.setdefault((nm, lab), raw) != raw:
            continue  # an alias of a series already read
        cells.setdefault(nm, {}).setdefault(t, {})[lab] = float(v)
    out: dict[str, dict[int, float]] = {}
    for nm, per_t in cells.items():
        agg = (lambda xs: sum(xs) / len(xs)) if nm == "kv_cache_usage" else sum
        out[nm] = {t: agg(list(vals.values())) for t, vals in per_t.items()}
    return out


def server_section(page: Page, tel: pa.Table | None) -> None:
    if tel is None or tel.num_rows == 0:
        return
    by = server_series(tel)
    names = [n for n in _SERVER if n in by]
    if not names:
        return
    page.h2("Server metrics over time")
    t_min, t_max = min(min(by[n]) for n in names), max(max(by[n]) for n in names)
    panels, small = [], []
    for n in names:
        title, unit, scale, top = _SERVER[n]
        ts = sorted(by[n])
        if not any(t_min < t < t_max for t in ts):  # only the scrapes before and after the load (idle)
            small.append(f"{title}: not sampled under load ({len(ts)} scrape(s), none between the first and "
                         "the last)")
            continue
        if len(ts) < charts.MIN_SERIES_POINTS:
            vals = [by[n][t] * scale for t in ts]
            small.append(f"{title}: {len(ts)} sample(s), mean {sig(float(np.mean(vals)))} {unit}, max "
                         f"{sig(max(vals))} {unit}")
            continue
        panels.append({"title": title, "unit": unit, "top": top, "t": [(t - t_min) / 1e9 for t in ts],
                       "v": [by[n][t] * scale for t in ts]})
    if small:
        page.add('<p class="toosmall">Too few samples to draw: ' + esc("; ".join(small)) + ".</p>")
    if panels:
        page.image("telemetry", "server metrics over time",
                   lambda p: charts.over_time(panels, p, xlabel="seconds since the first sample"))


# -- Pareto ---------------------------------------------------------------------------------------------


def _gpus(manifest: Mapping[str, Any] | None) -> int | None:
    return get(manifest, "target", "deployment", "gpus")


def pareto_section(page: Page, series: Sequence[Mapping[str, Any]]) -> None:
    """The Pareto chart and its table; ``series``: ``[{"label", "points": [(x, y, level_label, gpus)]}]``."""
    pts = [p for s in series for p in s["points"]]
    page.add('<h2 id="pareto-head">Throughput per GPU against interactivity</h2>')
    if len(pts) < 2:
        page.add('<p class="toosmall">Needs at least two measured points with a time per output token.</p>')
        return
    known = all(p[3] for p in pts)
    per = "GPU" if known else "endpoint (GPU count unknown for a real server)"
    page.add(
        '<p class="muted">Up and to the right is better: more tokens per GPU while each user still reads '
        "fast. The black step line joins the points no other point beats on both axes.</p>"
    )
    page.image("pareto", "Pareto chart: output tokens/s per GPU against tokens/s per user",
               lambda p: charts.pareto_chart([{"label": s["label"], "points": [q[:3] for q in s["points"]]}
                                              for s in series], p, per="GPU" if known else "endpoint"))
    page.add(table(["series", "load", "tokens/s per user", f"output tokens/s per {per}", "GPUs"],
                   [[s["label"] or "all", q[2], sig(q[0]), sig(q[1]), q[3] or "-"] for s in series
                    for q in s["points"]], left=2, csv_name="pareto"))


def sweep_pareto_series(state: Mapping[str, Any], runs: Mapping[str, RunData], groups: Sequence[Any],
                        axis: str) -> list[dict[str, Any]]:
    """One series per group of sweep points (a target, a server setting), each point at its load level."""
    out = []
    for g in groups:
        pts = []
        for p in g.points:
            run = runs.get(p.get("key") or p.get("run_dir") or "")
            gpus = _gpus(run.manifest) if run is not None else None
            xy = point_of(p.get("summary"), gpus)
            if xy is not None:
                pts.append((xy[0], xy[1], f"{p['level']:g}", gpus))
        if pts:
            out.append({"label": g.label or name(axis), "points": pts})
    return out


def runs_pareto_series(runs: Sequence[tuple[str, RunData]]) -> list[dict[str, Any]]:
    """One point per compared run (its label: the run's name)."""
    out = []
    for label, run in runs:
        gpus = _gpus(run.manifest)
        xy = point_of(run.summary, gpus)
        if xy is not None:
            out.append({"label": label, "points": [(xy[0], xy[1], label, gpus)]})
    return out
