"""The knee of a load sweep, and the highest load that still meets an SLO.

The knee is the load level past which more load stops buying throughput. It is found with Kneedle
(``kneed.KneeLocator``: concave, increasing) on the running maximum of throughput against log2 of the
load (sweep grids are powers of two, so each grid step weighs the same), then checked against two
independent signals: the growth of throughput per doubling of load before and after the knee, and
queueing (TTFT or queue time rising sharply once throughput flattens).

Result of :func:`find_knee` (always a dict, never ``None``)::

    level       the knee, a level of the grid; None when there is no knee in range or too little data
    low, high   the grid neighbours between which the saturation point lies (None at the ends)
    beyond      True when throughput still grows at the last level: the knee is "LAST or beyond"
    confidence  "high" | "medium" | "low" (None when level is None and beyond is False):
                  the share of the available signals that agree (see ``score``): >= 0.8 with at least
                  two levels past the knee is high, >= 0.5 medium, else low
    score       0..1, that share
    metric      the curve the knee was found on ("throughput")
    reason      plain words: what was seen
    signals     the figures behind the verdict (growth per doubling before/after, latency growth...)
    goodput_peak_level   when goodput is given: the level with the most goodput

:func:`bootstrap_knee` adds a resampled confidence: each level's throughput is redrawn from its counting
noise (a rate measured from ``n`` completions has a relative standard error of ``1 / sqrt(n)``), the knee
found again, and ``share`` is the fraction of redraws that land on the same level, ``range`` the 5th-95th
percentile of the levels they land on.

Growth per doubling is the elasticity ``log(T2/T1) / log(L2/L1)``: 1 when throughput doubles with the
load, 0 when it is flat.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, overload

import numpy as np

from servelab.errors import ConfigError

STILL_SCALING = 0.5  # elasticity at or above which the curve is still rising
FLAT = 0.3  # mean elasticity below which the curve has flattened
QUEUE_RISE = 0.5  # latency elasticity after the knee that counts as queueing
MIN_LEVELS = 3


def _elasticity(y0: float, y1: float, x0: float, x1: float) -> float:
    if y0 <= 0 or y1 <= 0 or x1 <= x0:
        return 0.0 if y1 <= y0 else 1.0
    return math.log(y1 / y0) / math.log(x1 / x0)


def _elasticities(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.array([_elasticity(y[i - 1], y[i], x[i - 1], x[i]) for i in range(1, len(x))])


@overload
def _as_array(name: str, values: Sequence[float], n: int) -> np.ndarray: ...
@overload
def _as_array(name: str, values: Sequence[float] | None, n: int) -> np.ndarray | None: ...


def _as_array(name: str, values: Sequence[float] | None, n: int) -> np.ndarray | None:
    if values is None:
        return None
    a = np.asarray(values, dtype=float)
    if a.shape != (n,):
        raise ConfigError(f"find_knee: {name} has {a.size} values but there are {n} levels",
                          hint="give one value per load level (NaN for a failed point)")
    return a


def _no_knee(reason: str, n: int) -> dict[str, Any]:
    return {"level": None, "low": None, "high": None, "beyond": False, "confidence": None, "score": 0.0,
            "metric": "throughput", "reason": reason, "signals": {}, "levels": n}


def _fmt(level: float) -> str:
    return f"{level:g}"


def _kneedle_index(x: np.ndarray, y: np.ndarray) -> tuple[int, int | None]:
    """Index of the maximum of Kneedle's difference curve, and the index kneed itself picks."""
    from kneed import KneeLocator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kneed warns when it finds no knee; we decide ourselves
        kl = KneeLocator(x, y, curve="concave", direction="increasing", S=1.0)
    k = int(np.argmax(kl.y_difference))
    own = None if kl.knee is None else int(np.argmin(np.abs(x - kl.knee)))
    return k, own


def _latency_signal(levels: np.ndarray, lat: np.ndarray | None, k: int, name: str) -> dict[str, Any] | None:
    if lat is None:
        return None
    ok = np.isfinite(lat) & (lat > 0)
    if ok.sum() < 3 or k >= len(levels) - 1:
        return None
    e = _elasticities(levels[ok], lat[ok])
    lv = levels[ok][1:]
    knee_level = levels[k]
    before = e[lv <= knee_level]
    after = e[lv > knee_level]
    if after.size == 0:
        return None
    b = float(before.mean()) if before.size else 0.0
    a = float(after.mean())
    return {"metric": name, "growth_before": round(b, 3), "growth_after": round(a, 3),
            "agrees": bool(a >= QUEUE_RISE and a - b >= 0.3)}


def find_knee(
    levels: Sequence[float],
    throughput: Sequence[float],
    latency_p50: Sequence[float] | None = None,
    latency_p95: Sequence[float] | None = None,
    queue: Sequence[float] | None = None,
    goodput: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Find the knee of throughput against load; see the module docstring for the result."""
    lv = np.asarray(levels, dtype=float)
    n_all = lv.size
    tp = _as_array("throughput", throughput, n_all)
    extra = {
        k: _as_array(k, v, n_all)
        for k, v in (
            ("latency_p50", latency_p50),
            ("latency_p95", latency_p95),
            ("queue", queue),
            ("goodput", goodput),
        )
    }
    if np.any(~np.isfinite(lv)) or np.any(lv <= 0):
        raise ConfigError("find_knee: load levels must be positive numbers", hint="check the sweep grid")
    order = np.argsort(lv, kind="stable")
    keep = order[np.isfinite(tp[order]) & (tp[order] >= 0)]
    lv, tp = lv[keep], tp[keep]
    if np.unique(lv).size != lv.size:
        raise ConfigError("find_knee: a load level appears twice", hint="give each level once")
    extra = {k: (None if v is None else v[keep]) for k, v in extra.items()}
    n = lv.size
    if n < MIN_LEVELS:
        return _no_knee(f"too little data: {n} usable level(s), at least {MIN_LEVELS} are needed", n)
    ym = np.maximum.accumulate(tp)
    el = _elasticities(lv, ym)
    out: dict[str, Any]
    if ym[-1] <= 0:
        return _no_knee("no throughput at any level", n)
    if ym[-1] <= ym[0] * 1.1:
        out = {"level": float(lv[0]), "low": None, "high": float(lv[1]), "beyond": False,
               "reason": f"throughput does not grow across the grid: saturated at or below {_fmt(lv[0])}"}
        k, own = 0, None
    elif el[-1] >= STILL_SCALING:
        out = {"level": None, "low": float(lv[-1]), "high": None, "beyond": True,
               "reason": f"{_fmt(lv[-1])} or beyond: throughput still grows with load at the last level "
                         f"(elasticity {el[-1]:.2f}; 1 = it doubles when load doubles)"}
        k, own = n - 1, None
    else:
        k, own = _kneedle_index(np.log2(lv), ym)
        if k < n - 1 and el[k] >= STILL_SCALING:
            # Kneedle's pick is a level where throughput still scales (the curve accelerates on log load,
            # so its difference curve has no concave bend): take the first level after which it flattens.
            k = next(j for j in range(n - 1) if el[j] < STILL_SCALING)
            why = (
                f"throughput flattens at {_fmt(lv[k])}: the first level after which it grows with elasticity "
                f"below {STILL_SCALING} ({el[k]:.2f}; Kneedle found no concave bend)"
            )
        else:
            why = ""
        out = {"level": float(lv[k]), "low": float(lv[k - 1]) if k > 0 else None,
               "high": float(lv[k + 1]) if k + 1 < n else None, "beyond": False, "reason": why}
    _corroborate(out, lv, el, k, own, extra)
    return out


def _corroborate(out: dict[str, Any], lv: np.ndarray, el: np.ndarray, k: int, own: int | None,
                 extra: Mapping[str, np.ndarray | None]) -> None:
    """Score the knee against growth before/after it and queueing; fill confidence and reason."""
    n = lv.size
    signals: dict[str, Any] = {}
    votes: list[bool] = []
    if not out["beyond"]:
        after = el[k:]
        before = el[k - 1] if k > 0 else None
        signals["growth_after"] = round(float(after.mean()), 3) if after.size else None
        signals["growth_into_knee"] = None if before is None else round(float(before), 3)
        if after.size:
            votes.append(bool(after.mean() < FLAT))
        if before is not None:
            votes.append(bool(before >= STILL_SCALING))
        if out["level"] is not None and k > 0:
            signals["kneed_level"] = None if own is None else float(lv[own])
            votes.append(own == k)
    else:
        signals["growth_last_step"] = round(float(el[-1]), 3)
        votes.append(bool(el[-1] >= STILL_SCALING))
    # The first latency signal that can vote: server queue, then p95 and p50 latency (a closed loop's client
    # queue is always 0 and carries no signal, so an all-zero series falls through to the next).
    lat_sig = None
    if not out["beyond"]:
        for nm in ("queue", "latency_p95", "latency_p50"):
            lat_sig = _latency_signal(lv, extra.get(nm), k, nm)
            if lat_sig is not None:
                break
    if lat_sig is not None:
        signals["latency"] = lat_sig
        votes.append(lat_sig["agrees"])
    score = sum(votes) / len(votes) if votes else 0.0
    past = n - 1 - k
    conf = "high" if score >= 0.8 and (past >= 2 or out["beyond"]) else "medium" if score >= 0.5 else "low"
    parts = [out["reason"]] if out["reason"] else []
    if out["level"] is not None and not parts:
        parts.append(f"throughput flattens at {_fmt(out['level'])} (Kneedle on log2 load)")
        if signals.get("growth_into_knee") is not None:
            parts.append(f"throughput elasticity {signals['growth_into_knee']:.2f} into it, "
                         f"{signals['growth_after']:.2f} after (1 = doubles with load)")
    if lat_sig is not None:
        verb = "confirms" if lat_sig["agrees"] else "does not confirm"
        parts.append(f"{lat_sig['metric']} elasticity {lat_sig['growth_after']:.2f} after the knee vs "
                     f"{lat_sig['growth_before']:.2f} before: queueing {verb}")
    gp = extra.get("goodput")
    if gp is not None and np.isfinite(gp).any():
        g = int(np.nanargmax(gp))
        out["goodput_peak_level"] = float(lv[g])
        if out["level"] is not None and lv[g] < out["level"]:
            parts.append(f"goodput peaks earlier, at {_fmt(lv[g])}: past it, added throughput misses the SLO")
    out.update({"confidence": conf, "score": round(score, 3), "metric": "throughput",
                "reason": "; ".join(parts), "signals": signals, "levels": n})


def _slo_targets(slo: Any) -> tuple[dict[str, float], str, float | None]:
    get = slo.get if isinstance(slo, Mapping) else (lambda k, d=None: getattr(slo, k, d))
    given = {m: get(m) for m in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")}
    targets = {m: float(v) for m, v in given.items() if v is not None}
    pct = float(get("percentile", 99) or 99)
    key = f"p{pct:g}"
    return targets, key, get("min_goodput_fraction", None)


def _goodput_fraction(summary: Mapping[str, Any]) -> float | None:
    g = summary.get("goodput")
    if isinstance(g, Mapping):
        v = g.get("fraction")
        return None if v is None else float(v)
    return None


def _check_point(summary: Mapping[str, Any] | None, targets: Mapping[str, float], key: str,
                 min_good: float | None) -> tuple[bool, list[str]]:
    if not summary:
        return False, ["point failed or has no summary"]
    misses: list[str] = []
    metrics = summary.get("metrics") or {}
    for m, limit in targets.items():
        v = (metrics.get(m) or {}).get(key)
        if v is None:
            misses.append(f"{m} {key} not measured")
        elif float(v) > limit:
            misses.append(f"{m} {key} {float(v):.1f} > {limit:g}")
    if min_good is not None:
        gf = _goodput_fraction(summary)
        if gf is None or gf < float(min_good):
            misses.append(f"goodput fraction {gf if gf is None else round(gf, 3)} < {float(min_good):g}")
    return not misses, misses


def _midpoint(a: float, b: float, integer: bool) -> float | None:
    m = math.sqrt(a * b) if a > 0 and b / a >= 2 else (a + b) / 2
    if integer:
        m = float(round(m))
    return m if a < m < b else None


def max_load_meeting_slo(levels: Sequence[float], summaries: Sequence[Mapping[str, Any] | None],
                         slo: Any) -> dict[str, Any]:
    """The highest level at which the SLO holds (and holds at every lower level).

    ``slo``: a mapping or an ``SLOConfig`` (ttft_ms, itl_ms, tpot_ms, e2e_ms, percentile,
    min_goodput_fraction). Returns ``{"level", "first_failing", "refine", "checks", "reason"}``; ``refine``
    is the midpoint (geometric on power grids) to test next, between the last passing and first failing
    level, or None when no level lies between them.
    """
    if len(levels) != len(summaries):
        raise ConfigError(f"max_load_meeting_slo: {len(levels)} levels but {len(summaries)} summaries")
    targets, key, min_good = _slo_targets(slo)
    if not targets and min_good is None:
        raise ConfigError(
            "max_load_meeting_slo: the SLO sets no target",
            hint="set at least one of slo.ttft_ms, itl_ms, tpot_ms, e2e_ms, min_goodput_fraction",
        )
    pairs = sorted(zip((float(x) for x in levels), summaries, strict=True), key=lambda p: p[0])
    integer = all(float(x).is_integer() for x, _ in pairs)
    checks: list[dict[str, Any]] = []
    best: float | None = None
    first_fail: float | None = None
    for lvl, s in pairs:
        ok, misses = _check_point(s, targets, key, min_good)
        checks.append({"level": lvl, "meets": ok, "misses": misses})
        if first_fail is None:
            if ok:
                best = lvl
            else:
                first_fail = lvl
    later_pass = [
        c["level"] for c in checks if c["meets"] and first_fail is not None and c["level"] > first_fail
    ]
    refine = _midpoint(best, first_fail, integer) if best is not None and first_fail is not None else None
    if best is None:
        reason = f"the SLO fails already at the lowest level, {_fmt(pairs[0][0])}" if pairs else "no levels"
    elif first_fail is None:
        reason = f"the SLO holds at every level up to {_fmt(best)}: the limit is {_fmt(best)} or beyond"
    else:
        reason = f"the SLO holds up to {_fmt(best)} and fails at {_fmt(first_fail)}"
        if refine is not None:
            reason += f"; test {_fmt(refine)} next to narrow it"
    if later_pass:
        reason += f" (it holds again at {', '.join(_fmt(x) for x in later_pass)}: noise, rerun those)"
    return {"level": best, "first_failing": first_fail, "refine": refine, "checks": checks,
            "percentile": key, "reason": reason}


def bootstrap_knee(levels: Sequence[float], throughput: Sequence[float], counts: Sequence[float | None],
                   knee_level: float | None, *, draws: int = 200, seed: int = 0) -> dict[str, Any] | None:
    """Resampled confidence of ``knee_level`` (see the module docstring); None without counts or a knee."""
    lv = np.asarray(levels, dtype=float)
    tp = np.asarray(throughput, dtype=float)
    n = np.asarray([np.nan if c is None else float(c) for c in counts], dtype=float)
    ok = np.isfinite(tp) & (tp >= 0) & np.isfinite(n) & (n > 0)
    if knee_level is None or ok.sum() < MIN_LEVELS:
        return None
    lv, tp, n = lv[ok], tp[ok], n[ok]
    rng = np.random.default_rng(seed)
    found = []
    for _ in range(draws):
        y = np.maximum(tp * (1.0 + rng.standard_normal(tp.size) / np.sqrt(n)), 0.0)
        k = find_knee(lv, y)
        if k.get("level") is not None:
            found.append(k["level"])
        elif k.get("beyond"):
            found.append(float(lv.max()))
    if not found:
        return None
    arr = np.asarray(found)
    lo, hi = np.percentile(arr, [5, 95], method="nearest")
    return {"share": float((arr == knee_level).mean()), "range": [float(lo), float(hi)], "draws": draws,
            "noise": "relative SE 1/sqrt(completions) per level"}


def split_endpoints(values: Sequence[float], summaries: Sequence[Mapping[str, Any] | None], slo: Any,
                    knee_level: float | None, axis: str = "max_num_seqs") -> dict[str, Any] | None:
    """Numbers for splitting interactive and bulk traffic from a sweep over ``axis`` (max-num-seqs):

    interactive   the largest value whose TTFT (and any other SLO target) meets the SLO
    bulk          the throughput knee over the axis (``knee_level``)

    with the throughput at each and ``throughput_share`` = interactive / bulk throughput. ``split_helps``
    only when the interactive value is below the bulk one and the bulk one misses the SLO; otherwise the
    answer is one endpoint (``interactive`` = ``bulk``: the knee when it meets the SLO, else the largest
    value meeting it) and the text says no split is needed. None when the SLO sets no target or no value
    meets it."""
    targets, key, min_good = _slo_targets(slo)
    if (not targets and min_good is None) or knee_level is None:
        return None
    # Not monotone in max-num-seqs (too few sequences queue requests, too many slow every step): the largest
    # value that meets the SLO, whichever lower values fail.
    checks = [
        (float(v), *_check_point(s, targets, key, min_good)) for v, s in zip(values, summaries, strict=True)
    ]
    meeting = [v for v, ok, _ in checks if ok]
    if not meeting:
        return None
    failing = ", ".join(f"{v:g}" for v, ok, _ in checks if not ok)
    res: dict[str, Any] = {
        "level": max(meeting),
        "reason": f"meets the SLO at {', '.join(f'{v:g}' for v in meeting)}"
        + (f"; misses at {failing}" if failing else ""),
    }
    by = {float(v): s for v, s in zip(values, summaries, strict=True)}

    def tput(v: float) -> float | None:
        t = ((by.get(float(v)) or {}).get("throughput") or {}).get("output_tokens_per_s")
        return None if t is None else float(t)

    inter, bulk = float(res["level"]), float(knee_level)
    ti, tb = tput(inter), tput(bulk)
    share = ti / tb if ti is not None and tb else None
    slo_words = ", ".join(f"{m} {key} <= {v:g}" for m, v in targets.items())
    bulk_meets = bulk in meeting
    # A split helps only when the interactive endpoint must run fewer sequences than the bulk one: the
    # throughput knee misses the SLO and a smaller setting meets it. Otherwise one endpoint serves both, and
    # naming an "interactive" setting above the bulk one would advise the wrong direction.
    helps = inter < bulk and not bulk_meets
    if not helps:
        one = bulk if bulk_meets else inter
        why = (f"the throughput knee {axis} {bulk:g} meets {slo_words} too" if bulk_meets else
               f"the largest {axis} meeting {slo_words} ({inter:g}) is not below the throughput knee "
               f"({bulk:g})")
        t1 = tput(one)
        words = (f"no split needed: {why}; one endpoint at {axis} {one:g}"
                 + (f" ({t1:,.0f} tok/s)" if t1 is not None else "") + " serves interactive and bulk traffic")
        return {"axis": axis, "interactive": one, "bulk": one, "interactive_throughput": t1,
                "bulk_throughput": t1, "throughput_share": 1.0 if t1 else None, "split_helps": False,
                "slo_check": res["reason"], "text": words}
    words = (f"interactive endpoint: {axis} {inter:g} (the largest meeting {slo_words}"
             + f"; {ti:,.0f} tok/s)" if ti is not None else f"interactive endpoint: {axis} {inter:g}")
    words += f"; bulk endpoint: {axis} {bulk:g} (throughput knee" + (f", {tb:,.0f} tok/s)" if tb else ")")
    if share is not None:
        words += f"; the interactive setting keeps {share:.0%} of the bulk throughput"
    return {"axis": axis, "interactive": inter, "bulk": bulk, "interactive_throughput": ti,
            "bulk_throughput": tb, "throughput_share": share, "split_helps": True,
            "slo_check": res["reason"], "text": words}
