"""The sweep part of the HTML report: the verdict, one knee per group of points, scaling across node counts,
and the per-point table with accuracy.

A group is the set of points that differ only in their load level (e.g. one per ``max_num_seqs`` value);
``sweep.json`` carries one knee per group in ``knees`` (``knee`` is the first group's; older sweeps carry
only ``knee``). ``scaling`` is present when points ran on different node counts. A point's ``accuracy``
is present when the sweep ran with ``--accuracy``; ``vs_first_setup.flagged`` marks a quality drop against
the first serving setup, which the verdict raises as a warning when the point gained throughput.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servelab.analysis.knee import max_load_meeting_slo
from servelab.report import plots
from servelab.report.html_page import Page, esc, get, num, pct, table
from servelab.report.words import duration_ms, sig

LEVEL_AXES = ("concurrency", "rate", "sessions", "session_rate")


@dataclass
class Group:
    """Points that differ only in their load level, sorted by level, and their knee."""

    params: dict[str, Any]
    points: list[dict[str, Any]]
    knee: dict[str, Any] | None

    @property
    def label(self) -> str:
        return params_words(self.params)


def params_words(params: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in (params or {}).items())


def axis_of(state: Mapping[str, Any]) -> str:
    for p in state.get("points") or []:
        for a in LEVEL_AXES:
            if a in (p.get("params") or {}):
                return a
    return "load level"


def _fixed(params: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (params or {}).items() if k not in LEVEL_AXES}


def _tput(p: Mapping[str, Any]) -> float | None:
    return get(p, "summary", "throughput", "output_tokens_per_s")


def sweep_groups(state: Mapping[str, Any]) -> list[Group]:
    """The groups of finished points with a load level, in grid order, each with its knee."""
    by: dict[str, Group] = {}
    for p in state.get("points") or []:
        if p.get("status") != "ok" or p.get("level") is None:
            continue
        fixed = _fixed(p.get("params"))
        by.setdefault(repr(sorted(fixed.items())), Group(fixed, [], None)).points.append(p)
    groups = list(by.values())
    for g in groups:
        g.points.sort(key=lambda p: p["level"])
    knees = state.get("knees") or []
    for g in groups:
        g.knee = next((k.get("knee") for k in knees if (k.get("params") or {}) == g.params), None)
    if not knees and groups:  # a sweep.json from before per-group knees
        groups[0].knee = state.get("knee")
    return groups


# -- verdict ------------------------------------------------------------------------------------------


def knee_sentence(
    knee: Mapping[str, Any] | None, axis: str, label: str = "", reason: str | None = None, *, why: bool = True
) -> str:
    """The knee in words; ``why=False`` leaves the detector's reasons out (the knee table shows them)."""
    lead = f"{label}: the" if label else "The"
    if knee and knee.get("level") is not None:
        rng = (f" (between {knee['low']:g} and {knee['high']:g})" if knee.get("low") is not None
               and knee.get("high") is not None else "")
        because = f" ({knee.get('reason', '')})" if why and knee.get("reason") else ""
        return (f"{lead} knee is at {axis} {knee['level']:g}{rng}, confidence {knee.get('confidence')}: "
                f"past it, more load buys little throughput{because}.")
    if knee and knee.get("beyond"):
        where = f"{label}: no" if label else "No"
        return (
            f"{where} knee within the grid: throughput still grows at {axis} {knee['low']:g}, so the knee "
            f"is at {knee['low']:g} or beyond; extend the grid."
        )
    where = f"{label}: no" if label else "No"
    return f"{where} knee: {(knee or {}).get('reason') or reason or 'not enough points'}."


def scaling_sentence(scaling: Mapping[str, Any] | None) -> str | None:
    if not scaling:
        return None
    peaks = scaling.get("peaks") or []
    words = [f"Scaling across node counts: {get(scaling, 'bend', 'reason') or 'no bend computed'}."]
    if len(peaks) >= 2:
        base = peaks[0]
        at = "; ".join(
            f"{p['nodes']} nodes reach {pct(p.get('efficiency'))} of linear "
            f"({num(p['peak_throughput'], '{:,.0f}')} vs ideal {num(p['ideal'], '{:,.0f}')} tokens/s)"
            for p in peaks[1:]
        )
        words.append(f"At peak, against {base['nodes']} node(s): {at}.")
    return " ".join(words)


def sweep_verdict(
    state: Mapping[str, Any], slo_results: Sequence[tuple[str, Mapping[str, Any]]] | None = None
) -> str:
    """The sweep in plain words: each group's knee, the peak, the SLO, scaling, the point counts."""
    axis, groups = axis_of(state), sweep_groups(state)
    pts = [p for p in state.get("points") or [] if p.get("status") == "ok"]
    n_failed = sum(1 for p in state.get("points") or [] if p.get("status") == "failed")
    if len(groups) <= 1:
        g = groups[0] if groups else None
        words = [knee_sentence(g.knee if g else state.get("knee"), axis, g.label if g else "",
                               state.get("knee_reason"))]
    else:
        words = [f"{len(groups)} groups of points, one knee each."]
        words += [knee_sentence(g.knee, axis, g.label, state.get("knee_reason"), why=False) for g in groups]
    tps = [(t, p) for p in pts if (t := _tput(p)) is not None and p.get("level") is not None]
    if tps:
        best, bp = max(tps, key=lambda t: t[0])
        where = f" ({params_words(_fixed(bp.get('params')))})" if len(groups) > 1 else ""
        words.append(f"Peak output throughput {sig(best)} tokens/s at {axis} {bp['level']:g}{where}.")
    for label, res in slo_results or []:
        words.append(f"SLO{f' ({label})' if label else ''}: {res['reason']}.")
    if (s := scaling_sentence(state.get("scaling"))) is not None:
        words.append(s)
    words.append(f"{len(pts)} point{'' if len(pts) == 1 else 's'} measured"
                 + (f", {n_failed} failed." if n_failed else "."))
    return " ".join(words)


def _drop_words(vs: Mapping[str, Any]) -> str:
    d, lo, hi = vs.get("diff"), vs.get("lo"), vs.get("hi")
    if d is None:
        return str(vs.get("verdict") or "")
    rng = f" [{lo * 100:+.1f}, {hi * 100:+.1f}]" if lo is not None and hi is not None else ""
    return f"{d * 100:+.1f} points{rng}, {vs.get('verdict')}"


def quality_alarms(state: Mapping[str, Any]) -> list[str]:
    """One warning per point whose accuracy dropped against the first serving setup (``flagged``), saying
    whether the drop came with a throughput gain over the first setup at the same load level."""
    axis = axis_of(state)
    pts = [p for p in state.get("points") or [] if p.get("status") == "ok" and p.get("accuracy")]
    base = next((p["accuracy"].get("setup") for p in pts if get(p, "accuracy", "summary") is not None
                 and not get(p, "accuracy", "vs_first_setup")), None)
    out = []
    for p in pts:
        vs = get(p, "accuracy", "vs_first_setup") or {}
        if not vs.get("flagged"):
            continue
        acc = get(p, "accuracy", "summary", "accuracy", "value")
        ref = next((q for q in pts if q["accuracy"].get("setup") == base and q.get("level") == p.get("level")
                    and _tput(q) is not None), None)
        name, tp = params_words(p.get("params")), _tput(p)
        drop = f"accuracy {pct(acc)} ({_drop_words(vs)} against the first setup)"
        ref_tp = _tput(ref) if ref is not None else None
        if tp is not None and ref_tp:
            gain = tp / ref_tp - 1
            lvl = f"{axis} {p['level']:g}" if p.get("level") is not None else "the same level"
            if gain > 0:
                out.append(
                    f"Quality warning: {name} gains {gain:+.0%} output throughput over the first serving "
                    f"setup at {lvl} ({num(tp, '{:,.0f}')} vs {num(ref_tp, '{:,.0f}')} tokens/s), but "
                    f"its answers are worse: {drop}. The gain is bought with quality."
                )
            else:
                out.append(f"Quality warning: {name} loses quality with no throughput gain at {lvl} "
                           f"({gain:+.0%}): {drop}.")
        else:
            out.append(f"Quality warning: {name}: {drop}; no point of the first setup at the same level to "
                       "compare throughput with.")
    return out


# -- sections -----------------------------------------------------------------------------------------


def group_slo(state: Mapping[str, Any], groups: Sequence[Group]) -> tuple[list[tuple[str, dict[str, Any]]],
                                                                           dict[str, Any] | None]:
    """The highest level meeting the SLO in each group, and the first group's evidence for the advice."""
    slo = get(state, "base_config", "slo") or {}
    if not any(slo.get(k) for k in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "min_goodput_fraction")):
        return [], None
    out, evidence = [], None
    for g in groups:
        failed = [
            p
            for p in state.get("points") or []
            if p.get("status") == "failed"
            and p.get("level") is not None
            and _fixed(p.get("params")) == g.params
        ]
        pts = sorted([*g.points, *failed], key=lambda p: p["level"])
        res = max_load_meeting_slo([p["level"] for p in pts], [p.get("summary") for p in pts], slo)
        out.append((g.label if len(groups) > 1 else "", res))
        if evidence is None:
            evidence = {"levels": [p["level"] for p in pts], "throughput": [_tput(p) or 0.0 for p in pts],
                        "slo_level": res["level"]}
    return out, evidence


def knee_section(page: Page, state: Mapping[str, Any], groups: Sequence[Group]) -> None:
    axis = axis_of(state)
    page.h2("Throughput and latency against load")
    if not groups:
        return

    def col(g: Group, *path: str) -> list[Any]:
        return [get(p, "summary", *path) for p in g.points]

    data = [
        {
            "label": g.label,
            "levels": [float(p["level"]) for p in g.points],
            "throughput": col(g, "throughput", "output_tokens_per_s"),
            "p50": col(g, "metrics", "e2e_ms", "p50"),
            "p95": col(g, "metrics", "e2e_ms", "p95"),
            "p99": col(g, "metrics", "e2e_ms", "p99"),
            "goodput": col(g, "throughput", "goodput_requests_per_s"),
            "knee": g.knee,
            "counts": [int(get(p, "summary", "requests", "ok") or 0) for p in g.points],
        }
        for g in groups
    ]
    page.image("knee", f"knee plot: throughput and latency against load, {len(groups)} group(s)",
               lambda path: plots.knee_groups_plot(data, path, level_label=axis,
                                                   latency_label="end-to-end latency (ms)"))
    if len(groups) > 1:
        rows = []
        for g in groups:
            k = g.knee or {}
            best = max(g.points, key=lambda p: _tput(p) or 0.0)
            rows.append(
                [
                    g.label,
                    num(k.get("level"), "{:g}"),
                    _range(k),
                    k.get("confidence") or "-",
                    sig(_tput(best)),
                    num(best.get("level"), "{:g}"),
                    len(g.points),
                    k.get("reason") or "",
                ]
            )
        page.add(table(["group", f"knee ({axis})", "range", "confidence", "peak out tok/s", "at", "points",
                        "reason"], rows, left_last=True))


def _range(knee: Mapping[str, Any]) -> str:
    lo, hi = knee.get("low"), knee.get("high")
    if lo is None and hi is None:
        return "-"
    if lo is None:
        return f"below {hi:g}"
    return f"{lo:g} or beyond" if hi is None else f"{lo:g} to {hi:g}"


def _accuracy_cells(acc: Mapping[str, Any] | None) -> list[str]:
    if not acc:
        return ["-", "-"]
    if acc.get("error"):
        return [f"error: {acc['error']}", "-"]
    a = get(acc, "summary", "accuracy") or {}
    n = get(acc, "summary", "answered")
    cell = (f"{pct(a.get('value'))} [{pct(a.get('lo'))}, {pct(a.get('hi'))}]"
            + (f" n={n}" if n is not None else "")) if a.get("value") is not None else "-"
    vs = acc.get("vs_first_setup")
    return [cell, (("DROP: " if vs.get("flagged") else "") + _drop_words(vs)) if vs else "first setup"]


def points_table(page: Page, state: Mapping[str, Any]) -> None:
    points = state.get("points") or []
    with_acc = any(p.get("accuracy") for p in points)
    rows, classes = [], []
    for p in points:
        s = p.get("summary")
        rows.append(
            [
                params_words(p.get("params")),
                p.get("status"),
                num(get(s, "requests", "ok"), "{:,}"),
                sig(get(s, "throughput", "output_tokens_per_s")),
                duration_ms(get(s, "metrics", "ttft_ms", "p50")),
                duration_ms(get(s, "metrics", "ttft_ms", "p99")),
                duration_ms(get(s, "metrics", "e2e_ms", "p95")),
                sig(get(s, "throughput", "goodput_requests_per_s")),
                *(_accuracy_cells(p.get("accuracy")) if with_acc else []),
                p.get("error") or "",
            ]
        )
        classes.append("flagged" if get(p, "accuracy", "vs_first_setup", "flagged") else "")
    head = ["point", "status", "ok", "output tokens/s", "time to first token p50", "p99", "end-to-end p95",
            "goodput req/s",
            *(["accuracy [95% CI]", "vs first setup"] if with_acc else []), "error"]
    page.add(table(head, rows, row_classes=classes, left_last=True))


def scaling_section(page: Page, state: Mapping[str, Any]) -> None:
    sc = state.get("scaling")
    if not sc or not sc.get("peaks"):
        return
    axis, rows, peaks, bend = axis_of(state), sc.get("rows") or [], sc["peaks"], sc.get("bend") or {}
    page.h2("Scaling efficiency across node counts")
    page.add(f"<p>{esc(scaling_sentence(sc))}</p>")
    page.add(
        '<p class="muted">efficiency = throughput / (throughput per node of the smallest topology x nodes); '
        "1.0 is linear scaling.</p>"
    )
    page.image("scaling", "scaling efficiency per node count",
               lambda path: plots.scaling_plot(rows, peaks, bend.get("nodes"), path, level_label=axis))
    page.add(
        table(
            ["nodes", "peak at", "peak out tok/s", "ideal tok/s", "efficiency", ""],
            [
                [
                    p["nodes"],
                    num(p["peak_level"], "{:g}"),
                    sig(p["peak_throughput"]),
                    sig(p["ideal"]),
                    pct(p.get("efficiency")),
                    "bend" if p["nodes"] == bend.get("nodes") else "",
                ]
                for p in peaks
            ],
        )
    )
    page.add(table(["nodes", axis, "out tok/s", "ideal tok/s", "efficiency"],
                   [[r["nodes"], num(r["level"], "{:g}"), sig(r["throughput"]), sig(r["ideal"]),
                     pct(r.get("efficiency"))] for r in rows]))


def verdict_html(state: Mapping[str, Any], slo_results: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    alarms = quality_alarms(state)
    inner = f"<p>{esc(sweep_verdict(state, slo_results))}</p>" + "".join(
        f'<p class="alarm"><b>{esc(a)}</b></p>' for a in alarms)
    return f'<div class="verdict{" bad" if alarms else ""}" id="verdict">{inner}</div>'


# -- headline, banner, errors (the top of the sweep report) ---------------------------------------------


def sweep_headline(state: Mapping[str, Any], runs: Mapping[str, Any]) -> str:
    """What was swept, on what, and the answer: '<target>, <workload>: swept concurrency 1-256 (9 points);
    knee at 64; peak 12,300 output tokens/s at 128.'"""
    from servelab.report.words import target_words, workload_words

    axis, groups = axis_of(state), sweep_groups(state)
    first = next(iter(runs.values()), None)
    cfg = get(first.manifest, "config") or {} if first is not None else state.get("base_config") or {}
    what = (
        target_words(first.manifest)
        if first is not None
        else str(get(state, "base_config", "target", "url") or "the target")
    )
    levels = sorted({p["level"] for g in groups for p in g.points})
    span = f"{levels[0]:g} to {levels[-1]:g}" if levels else "-"
    pts = state.get("points") or []
    ok = sum(1 for p in pts if p.get("status") == "ok")
    words = [f"{what}, {workload_words(cfg)}: swept {axis} {span} ({ok} of {len(pts)} points measured"
             + (f", {len(groups)} groups" if len(groups) > 1 else "") + ")"]
    for g in groups[:4]:
        k = g.knee or {}
        lead = f"{g.label}: " if len(groups) > 1 and g.label else ""
        if k.get("level") is not None:
            words.append(f"{lead}knee at {axis} {k['level']:g}")
        elif k.get("beyond"):
            words.append(f"{lead}no knee up to {axis} {k['low']:g} (still scaling)")
        else:
            words.append(f"{lead}no knee found")
    tps = [(t, p) for g in groups for p in g.points if (t := _tput(p)) is not None]
    if tps:
        best, bp = max(tps, key=lambda t: t[0])
        from servelab.report.words import sig

        words.append(f"peak {sig(best)} output tokens/s at {axis} {bp['level']:g}")
    return "; ".join(words) + "."


def sweep_banner(state: Mapping[str, Any]) -> str:
    """VALID when every point ran and its figures are valid; else INVALID, naming the points and why."""
    bad = []
    for p in state.get("points") or []:
        label = params_words(p.get("params")) or str(p.get("key"))
        if p.get("status") == "failed":
            bad.append(f"{label}: failed ({p.get('error') or 'no reason recorded'})")
        elif p.get("status") == "ok" and get(p, "summary", "valid") is False:
            why = "; ".join(map(str, get(p, "summary", "invalid_reasons") or [])) or "invalid"
            bad.append(f"{label}: {why}")
    n = len(state.get("points") or [])
    if not bad:
        return (
            f'<div class="banner ok" id="validity"><b>VALID</b>: all {n} points ran and each one\'s figures '
            "are valid.</div>"
        )
    items = "".join(f"<li>{esc(b)}</li>" for b in bad[:20])
    more = f"<li>... and {len(bad) - 20} more</li>" if len(bad) > 20 else ""
    return (f'<div class="banner bad" id="validity"><b>INVALID</b>: {len(bad)} of {n} points are failed or '
            f"invalid; the knee and peak use the valid ones.<ul>{items}{more}</ul></div>")


def sweep_errors(page: Page, state: Mapping[str, Any]) -> None:
    """Failed requests of every point by status and HTTP code, with a sample message."""
    from servelab.report.words import count, name

    rows = []
    for p in state.get("points") or []:
        err = get(p, "summary", "errors") or {}
        codes = ", ".join(f"HTTP {k}: {count(v)}" for k, v in (err.get("by_http_status") or {}).items())
        by = ", ".join(f"{name(k)} {count(v)}" for k, v in (err.get("by_status") or {}).items() if v)
        top = (err.get("top") or [[""]])[0]
        if by:
            rows.append([params_words(p.get("params")), by, codes or "-", str(top[0])[:200] if top else ""])
    page.add('<h2 id="errors">Errors</h2>')
    if not rows:
        page.add(
            "<p>None: every measured request of every point succeeded or was cancelled by the run's end.</p>"
        )
        return
    page.add(table(["point", "by status", "HTTP codes", "sample message"], rows, left=3, left_last=True,
                   csv_name="errors"))
