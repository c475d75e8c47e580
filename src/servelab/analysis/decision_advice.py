"""Advice read off the decision table (:mod:`servelab.analysis.decision`): every threshold it states is a
load level of the table, every comparison two cells of it. Nothing here is a constant presented as a fact.

Items (``{"kind", "text", "levels"}``):

    choice       per level, the cheapest HEALTHY target ($/successful task, in a plain sweep $/request;
                 without prices the highest tasks/h), compressed into ranges: "A up to ~N sessions; B from M"
    collapse     a target that collapses, from which level and why
    latency      levels where another healthy target has a lower task p95 (plain sweep: TTFT p95) than the
                 choice, with both p95s and both prices ("only when task p95 matters more than cost"); the
                 prices to 3 significant figures per task, in a plain sweep per 1M output tokens
    crossover    the level from which a larger topology of the same model wins on tasks/h and on $/task
    other_model  a different (e.g. smaller dense) model in the sweep: where it is the choice, where not
    choice_within_model  with several models, the choice among each model's topologies
    sample       cells with fewer than MIN_TASKS tasks inside the window (noisy)
    ready        time to ready of the servers the sweep started
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from servelab.analysis.decision import MIN_TASKS

# what the cost column is per: an agent sweep's successful task, a plain sweep's request
_COST_WORDS = {"usd_per_task": "$ per successful task", "usd_per_request": "$ per request"}


def _levels_word(rows: Sequence[Mapping[str, Any]]) -> str:
    return "sessions" if any(r.get("tasks_per_hour") is not None for r in rows) else "level"


def _at(levels: str, word: str) -> str:
    """'16' -> 'level 16' ('32-64' -> 'levels 32-64'); with sessions, '16 sessions'."""
    if word != "level":
        return f"{levels} {word}"
    many = "-" in levels or "," in levels
    return f"level{'s' if many else ''} {levels}"


def _pick(cands: list[Mapping[str, Any]], col: str, cost: str) -> Mapping[str, Any] | None:
    if not cands:
        return None
    priced = [r for r in cands if r.get(cost) is not None]
    if priced:
        return min(priced, key=lambda r: (r[cost], -(r.get(col) or 0.0)))
    return max(cands, key=lambda r: r.get(col) or 0.0)


def _ranges(picks: list[tuple[float, str | None]]) -> list[tuple[str | None, float, float]]:
    out: list[tuple[str | None, float, float]] = []
    for lv, t in picks:
        if out and out[-1][0] == t:
            out[-1] = (t, out[-1][1], lv)
        else:
            out.append((t, lv, lv))
    return out


def _choice(table: Mapping[str, Any], word: str) -> tuple[dict[str, Any], dict[float, Mapping[str, Any]]]:
    rows, col, cost = table["rows"], table["goal"]["throughput"], table["goal"]["cost"]
    levels = sorted({r["level"] for r in rows})
    chosen: dict[float, Mapping[str, Any]] = {}
    picks: list[tuple[float, str | None]] = []
    for lv in levels:
        p = _pick([r for r in rows if r["level"] == lv and r["healthy"]], col, cost)
        if p is not None:
            chosen[lv] = p
        picks.append((lv, None if p is None else p["target"]))
    parts = []
    rng = _ranges(picks)
    for i, (t, lo, hi) in enumerate(rng):
        name = t or "no target healthy"
        if len(rng) == 1:
            parts.append(f"{name} at every level measured ({_at(f'{lo:g}-{hi:g}', word)})")
        elif i == 0:
            parts.append(f"{name} up to {_at(f'~{hi:g}', word)}")
        elif i == len(rng) - 1:
            parts.append(f"{name} beyond ({_at(f'{lo:g}' + ('' if lo == hi else f'-{hi:g}'), word)})")
        else:
            parts.append(f"{name} from {_at(f'{lo:g}', word)} to {hi:g}")
    basis = f"lowest {_cost_words(cost)}" if any(r.get(cost) is not None for r in rows) else \
        f"highest {col.replace('_', ' ')}"
    text = f"Choice by {basis} among healthy targets: " + "; ".join(parts) + "."
    return {"kind": "choice", "text": text, "levels": [[t, lo, hi] for t, lo, hi in rng]}, chosen


def _collapses(rows: Sequence[Mapping[str, Any]], word: str) -> list[dict[str, Any]]:
    out = []
    for t in dict.fromkeys(r["target"] for r in rows):
        bad = sorted((r for r in rows if r["target"] == t and r["collapsed"]), key=lambda r: r["level"])
        if bad:
            r = bad[0]
            extra = ""
            if r.get("timeouts") and r.get("started"):
                extra = f" ({r['timeouts']} of {r['started']} tasks timed out)"
            out.append({"kind": "collapse", "levels": [b["level"] for b in bad],
                        "text": f"{t} collapses from {_at(format(r['level'], 'g'), word)}: "
                                f"{r['collapse_reason']}{extra}."})
    return out


def _latency(table: Mapping[str, Any], chosen: Mapping[float, Mapping[str, Any]], word: str) -> list[dict]:
    rows, cost = table["rows"], table["goal"]["cost"]
    key = "task_p95_s" if any(r.get("task_p95_s") is not None for r in rows) else "ttft_p95_ms"
    unit, what = ("s", "task p95") if key == "task_p95_s" else ("ms", "TTFT p95")
    by_target: dict[str, list[tuple[float, Mapping[str, Any], Mapping[str, Any]]]] = {}
    for lv, c in chosen.items():
        cands = [r for r in rows if r["level"] == lv and r["healthy"] and r.get(key) is not None]
        if not cands or c.get(key) is None:
            continue
        fast = min(cands, key=lambda r: r[key])
        if fast["target"] != c["target"] and fast[key] < 0.9 * c[key]:
            by_target.setdefault(fast["target"], []).append((lv, fast, c))
    out = []
    for t, items in by_target.items():
        lv, fast, c = items[-1]
        price = _price(fast, c, cost)
        lvls = ", ".join(f"{x[0]:g}" for x in items)
        out.append(
            {
                "kind": "latency",
                "levels": [x[0] for x in items],
                "text": f"{t} only when {what} matters more than cost: lower {what} at "
                f"{_at(lvls, word)} (at {lv:g}: {_v(fast[key])} {unit} vs {_v(c[key])} {unit} for "
                f"{c['target']}{price}).",
            }
        )
    return out


def _crossovers(table: Mapping[str, Any], word: str) -> list[dict[str, Any]]:
    out = []
    for x in table["crossovers"]:
        def w(v: float | None, at: list[float]) -> str:
            if v is not None:
                return f"from {_at(f'{v:g}', word)}"
            if at:
                return f"at {_at(', '.join(f'{lv:g}' for lv in at), word)} only, not for good"
            return "at no level measured"

        out.append(
            {
                "kind": "crossover",
                "levels": [x["on_throughput"], x["on_cost"]],
                "text": f"{x['larger']} beats {x['smaller']} on "
                f"{table['goal']['throughput'].replace('_', ' ')} "
                f"{w(x['on_throughput'], x.get('wins_throughput_at') or [])}, and on "
                f"{_cost_words(table['goal']['cost'])} {w(x['on_cost'], x.get('wins_cost_at') or [])}.",
            }
        )
    return out


def _other_models(
    table: Mapping[str, Any], chosen: Mapping[float, Mapping[str, Any]], word: str
) -> list[dict]:
    targets = table["targets"]
    models = {t["model"] for t in targets}
    if len(models) < 2:
        return []
    main = max(targets, key=lambda t: t["gpus"] or 0)["model"]
    out = []
    for t in targets:
        if t["model"] == main:
            continue
        wins = [lv for lv, c in chosen.items() if c["target"] == t["target"]]
        if wins:
            text = (f"The {t['model']} option ({t['target']}, {t['gpus']} GPUs) is the choice at "
                    f"{_at(', '.join(f'{v:g}' for v in wins), word)}.")
        else:
            text = f"The {t['model']} option ({t['target']}) is the choice at no level measured."
        out.append({"kind": "other_model", "levels": wins, "text": text})
    return out


def _per_model(table: Mapping[str, Any], word: str) -> list[dict[str, Any]]:
    """With several models, the topology choice (and latency option) within each model of 2+ targets."""
    models = list(dict.fromkeys(t["model"] for t in table["targets"]))
    if len(models) < 2:
        return []
    out = []
    for m in models:
        rows = [r for r in table["rows"] if r["model"] == m]
        if len({r["target"] for r in rows}) < 2:
            continue
        sub = {**table, "rows": rows}
        c, chosen = _choice(sub, word)
        out.append({**c, "kind": "choice_within_model", "text": f"Among {m} topologies: " + c["text"]})
        out += [{**x, "text": f"Among {m} topologies: " + x["text"]} for x in _latency(sub, chosen, word)]
    return out


def advice_from_table(table: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = table["rows"]
    if not rows:
        return []
    word = _levels_word(rows)
    choice, chosen = _choice(table, word)
    out = [choice, *_collapses(rows, word), *_latency(table, chosen, word), *_crossovers(table, word),
           *_other_models(table, chosen, word), *_per_model(table, word)]
    few = sorted({(r["target"], r["level"]) for r in rows if r.get("low_sample")})
    if few:
        out.append(
            {
                "kind": "sample",
                "levels": [lv for _, lv in few],
                "text": "Few tasks ended inside the window at "
                + ", ".join(f"{t} {lv:g}" for t, lv in few)
                + f" (under {MIN_TASKS}): those cells are noisy; run longer to confirm them.",
            }
        )
    backends = table.get("backends") or {}
    if len(set(backends.values())) > 1:
        out.append({"kind": "backend", "levels": [],
                    "text": "Unfair comparison: the simulator priced these targets with different step-cost "
                            "backends (" + "; ".join(f"{t} {b}" for t, b in backends.items()) + "); compare "
                            "topologies on one backend (e.g. backend=roofline on every target)."})
    ready = {r["target"]: r["ready_s"] for r in rows if r.get("ready_s") is not None}
    if ready:
        out.append({"kind": "ready", "levels": [],
                    "text": "Time to ready (server start to healthy, part of a topology's cost): "
                            + "; ".join(f"{t} {v:,.1f} s" for t, v in ready.items()) + "."})
    return out


def _v(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.3g}"


def _cost_words(cost: str) -> str:
    return _COST_WORDS.get(cost, cost.replace("_", " "))


def _price(a: Mapping[str, Any], b: Mapping[str, Any], cost: str) -> str:
    """' at $A vs $B per <unit>' for two rows: per task in an agent sweep; in a plain sweep per 1M output
    tokens (the table's column), else per 1M requests ('$0.0000406 per request' reads badly); '' unpriced."""
    if cost == "usd_per_request" and all(r.get("usd_per_1m_output_tokens") is not None for r in (a, b)):
        key, scale, per = "usd_per_1m_output_tokens", 1.0, "per 1M output tokens"
    elif cost == "usd_per_request":
        key, scale, per = cost, 1e6, "per 1M requests"
    else:
        key, scale, per = cost, 1.0, "per task" if cost == "usd_per_task" else f"({cost})"
    if a.get(key) is None or b.get(key) is None:
        return ""
    return f" at {_usd(a[key] * scale)} vs {_usd(b[key] * scale)} {per}"


def _usd(x: float) -> str:
    """Dollars to three significant figures, never in exponent form: $0.0000406, $0.231, $40.6, $1,230."""
    x = float(f"{float(x):.2e}")  # rounded first: 0.099996 -> 0.1 (one more figure otherwise)
    if x == 0 or not math.isfinite(x):
        return f"${x:g}"
    mag = math.floor(math.log10(abs(x)))
    if mag >= 2:
        return f"${round(x, 2 - mag):,.0f}"
    return f"${x:,.{2 - mag}f}"
