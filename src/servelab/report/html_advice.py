"""Report sections in plain words: the comparison (first, when the report is a comparison), deployment
advice with its evidence, and the cost table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servelab.analysis.advice import advise, collect_evidence
from servelab.records.rundir import RunData
from servelab.report.html_page import Page, esc, get, table
from servelab.report.words import NAMES, money, name, sig

# a model this small (active parameters, billions) gains nothing from "try a smaller dense model"
SMALL_MODEL_B = 10.0
_VERDICT_WORDS = {"recommended": "Recommended", "required": "Required", "not possible": "Not possible",
                  "mixed": "Worth considering", "not indicated": "Not indicated",
                  "not enough evidence": "Not enough evidence"}
_COST_KEYS = ("per_successful_task", "per_million_output_tokens", "model", "tool", "orchestration", "failure")


def _value(v: Any, unit: str = "") -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float):
        return f"{sig(v)} {unit}".strip()
    return "-" if v is None else str(v)


def _active_params_b(manifest: Mapping[str, Any]) -> float | None:
    m = get(manifest, "target", "model")
    if isinstance(m, Mapping):
        v = m.get("active_params_b") or m.get("total_params_b")
        return float(v) if v is not None else None
    return None


def advice_section(page: Page, run: RunData, sweep: Mapping[str, Any] | None) -> None:
    facts = collect_evidence(run.manifest, run.summary, run.requests, run.sessions, sweep)
    items = advise(facts)
    size = _active_params_b(run.manifest)
    if size is not None and size <= SMALL_MODEL_B:
        items = [a for a in items if a["rule"] != "smaller dense model"]
    page.h2("Advice, with its evidence")
    page.add('<p class="muted">Each piece of advice is a rule tested on figures this run measured; the table '
             "under it shows each figure, the rule's test and whether it holds.</p>")
    quiet = []
    for a in items:
        verdict = _VERDICT_WORDS.get(a["verdict"], a["verdict"])
        if a["verdict"] in ("not indicated", "not enough evidence"):
            quiet.append(f"{a['rule']}: {verdict.lower()} ({a['why']})")
            continue
        cls = a["verdict"].replace(" ", "-")
        page.add(f'<p><span class="tag {esc(cls)}">{esc(verdict)}</span> <b>{esc(a["why"])}</b>.</p>')
        page.add(table(["measured fact", "value", "rule's test", "holds", "from"],
                       [[e["label"], _value(e["value"], e.get("unit") or ""), e["test"],
                         {True: "yes", False: "no", None: "not measured"}[e["holds"]], e["source"]]
                        for e in a["evidence"]], csv_name=f"advice-{a['rule']}"))
    if quiet:
        page.add('<p class="muted">Not advised on this evidence: ' + esc("; ".join(quiet)) + ".</p>")
    if size is not None and size <= SMALL_MODEL_B:
        page.add(
            f'<p class="muted">The model has {sig(size)} B active parameters: a smaller dense model is not '
            "advice that applies.</p>"
        )


def cost_section(page: Page, summary: Mapping[str, Any]) -> None:
    cost = summary.get("cost")
    if not isinstance(cost, Mapping) or not cost:
        return
    page.h2("Cost per successful task")
    rows = [
        [name(k) if k.startswith("per_") else f"{k} cost", money(cost[k])] for k in _COST_KEYS if k in cost
    ]
    rows += [[k.replace("_", " "), _value(v)] for k, v in cost.items() if k not in _COST_KEYS]
    page.add(table(["item", "value"], rows, csv_name="cost"))


def comparison_section(page: Page, comparison: Mapping[str, Any] | None) -> None:
    """What differs between the runs, then each figure with its difference, interval and verdict."""
    if not comparison:
        return
    names = comparison.get("names") or ["A", "B"]
    page.add('<h2 id="comparison">Comparison</h2>')
    figs = comparison.get("figures") or []
    if figs:
        page.add(f"<p>{esc(comparison_headline(comparison))}</p>")
        page.add(
            table(
                ["figure", names[0], names[1], "difference", "95% interval", "verdict"],
                [
                    [
                        _figure(r["figure"]) + (" (%)" if r.get("unit") == "fraction" else ""),
                        sig(_pct_of(r, "a")),
                        sig(_pct_of(r, "b")),
                        _signed(_pct_of(r, "diff")),
                        f"{_signed(_pct_of(r, 'lo'))} to {_signed(_pct_of(r, 'hi'))}",
                        r.get("verdict"),
                    ]
                    for r in figs
                ],
                left_last=True,
                csv_name="comparison",
            )
        )
    if comparison.get("diff"):
        rows = [[r["label"], *[v if v is not None else "not recorded" for v in r["values"]], r["status"]]
                for r in comparison["diff"]]
        differ = [r for r in rows if r[-1] not in ("same", "not recorded")]
        unknown = [r[0] for r in rows if r[-1] == "not recorded"]
        if differ:
            page.add("<p>What differs between the runs (everything else recorded is the same):</p>")
            page.add(table(["dimension", *names, "status"], differ, csv_name="what-differs"))
        else:
            page.add("<p>No recorded dimension differs between the runs.</p>")
        if unknown:
            page.add(f'<p class="muted">Not recorded for these runs: {esc(", ".join(unknown))}.</p>')


def comparison_headline(comparison: Mapping[str, Any]) -> str:
    """'B against A: time to first token p99 (ms) worse; ... (3 of 16 figures beyond the noise).'"""
    names = comparison.get("names") or ["A", "B"]
    figs = comparison.get("figures") or []
    moved = [r for r in figs if r.get("verdict") not in (None, "within noise", "no difference")]
    if not figs:
        return f"{names[1]} against {names[0]}: no figure could be compared."
    if not moved:
        return f"{names[1]} against {names[0]}: no figure differs beyond the noise ({len(figs)} compared)."
    words = "; ".join(f"{_figure(r['figure'])} {r['verdict']}" for r in moved[:6])
    return f"{names[1]} against {names[0]}: {words} ({len(moved)} of {len(figs)} figures beyond the noise)."


def _pct_of(row: Mapping[str, Any], key: str) -> Any:
    """A comparison row's figure as shown: a fraction (the failure rate) in percent."""
    v = row.get(key)
    return v if v is None or row.get("unit") != "fraction" else 100 * float(v)


def _signed(v: Any) -> str:
    if v is None:
        return "-"
    s = sig(v)
    return s if s.startswith("-") or s == "0" else f"+{s}"


def _figure(text: str) -> str:
    """'ttft_ms p50' -> 'time to first token p50 (ms)'."""
    key, _, rest = str(text).partition(" ")
    if key in NAMES:
        unit = " (ms)" if key.endswith("_ms") else ""
        return f"{NAMES[key]} {rest}".strip() + unit
    return str(text)
