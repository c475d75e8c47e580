"""The regression gate behind ``servelab check``: a candidate run or sweep against a baseline.

Pure functions over ``summary.json`` dicts (and manifests for fairness). At every baseline level each gated
figure may move the wrong way by at most its limit; a move inside the practical-significance noise floor
never fails (deterministic simulator runs give exact figures, so a 0.06% change is noise, not a verdict).

Gated figures (each present in the baseline; one the candidate lacks fails), units and directions from the
tables in :mod:`servelab.analysis.metrics`:

* latency, lower is better: TTFT, TPOT, ITL and e2e at p50/p95/p99 (``metrics.*``);
* throughput, higher is better: output tokens/s and goodput requests/s (``throughput.*``);
* agent runs: task time p95 (lower), task success rate = completed / started sessions (higher) and cost
  per successful task (lower, when a price was given).

:func:`refusals` says why a pair must not be gated at all: an INVALID run, or an unfair pair (a different
model or workload, or more than one other dimension differing; see
:func:`servelab.analysis.compare.check_fair`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from servelab.analysis.compare import DEFAULT_NOISE_FLOOR, check_fair
from servelab.analysis.metrics import DERIVED_BY_NAME, METRICS_BY_NAME, lower_is_better, unit_of
from servelab.analysis.stats import pct_key
from servelab.errors import ComparisonError, ConfigError
from servelab.records.summary import dig as _dig

Kind = Literal["latency", "throughput", "cost"]
LATENCY_METRICS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
GATE_PERCENTILES: tuple[float, ...] = (50, 95, 99)
# check compares like with like: these dimensions must match (the model and the work it was given).
MUST_MATCH: tuple[str, ...] = ("model", "tokenizer", "prompts", "outputs")


@dataclass(frozen=True)
class Figure:
    """One gated figure: a request metric at a percentile or a derived figure, and which limit applies.
    Its unit and direction come from the tables in :mod:`servelab.analysis.metrics`."""

    name: str  # a request metric (metrics.METRICS) or a derived figure (metrics.DERIVED)
    label: str
    kind: Kind
    percentile: float | None = None

    @property
    def unit(self) -> str:
        return unit_of(self.name)

    @property
    def lower_is_better(self) -> bool:
        return lower_is_better(self.name)

    def value(self, summary: Mapping[str, Any]) -> float | None:
        sub = () if self.percentile is None else (pct_key(self.percentile),)
        if self.name in METRICS_BY_NAME:
            v = _dig(summary, "metrics", self.name, *sub)
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
        return DERIVED_BY_NAME[self.name].value(summary, *sub)


def figures(metrics: Sequence[str] = LATENCY_METRICS,
            percentiles: Sequence[float] = GATE_PERCENTILES) -> list[Figure]:
    """Every gated figure, latency first."""
    out = [Figure(m, f"{m} p{p:g}", "latency", p) for m in metrics for p in percentiles]
    out += [Figure("output_tokens_per_s", "output tokens/s", "throughput"),
            Figure("goodput_requests_per_s", "goodput", "throughput"),
            Figure("task_ms", "task_ms p95", "latency", 95),
            Figure("task_success_rate", "task success rate", "throughput"),
            Figure("cost_per_successful_task", "cost per successful task", "cost")]
    return out


def _limits(max_regression: float | Mapping[str, float]) -> dict[Kind, float]:
    """``{"latency", "throughput", "cost"}`` limits from one fraction or a mapping (``goodput`` is accepted
    for ``throughput``; ``cost`` defaults to the latency limit)."""
    if isinstance(max_regression, Mapping):
        m = dict(max_regression)
        if "goodput" in m and "throughput" not in m:
            m["throughput"] = m["goodput"]
        for kind in ("latency", "throughput"):
            if kind not in m:
                raise ConfigError(f"check_regression: max_regression has no '{kind}' entry",
                                  hint="give a fraction for 'latency' and 'throughput' (or 'goodput'), "
                                       "e.g. {'latency': 0.1, 'throughput': 0.05}")
        m.setdefault("cost", m["latency"])
        out: dict[Kind, float] = {k: float(m[k]) for k in ("latency", "throughput", "cost")}  # type: ignore[misc]
    else:
        v = float(max_regression)
        out = {"latency": v, "throughput": v, "cost": v}
    for k, v in out.items():
        if not v >= 0:
            raise ConfigError(f"check_regression: the {k} limit must be a non-negative fraction, got {v}")
    return out


def _by_level(x: Mapping[Any, Any]) -> dict[Any, Mapping[str, Any]]:
    if "metrics" in x or "throughput" in x or "requests" in x:
        return {None: x}  # a single summary
    return dict(x)


def _fmt(v: float, unit: str) -> str:
    if unit == "fraction":
        return f"{v:.1%}"
    if unit == "USD":
        return f"${v:,.4g}"
    return f"{v:,.1f} {unit}" if abs(v) >= 10 else f"{v:,.3g} {unit}"


def check_regression(baseline: Mapping[Any, Any], candidate: Mapping[Any, Any],
                     max_regression: float | Mapping[str, float] = 0.1, *,
                     metrics: Sequence[str] = LATENCY_METRICS,
                     percentiles: Sequence[float] = GATE_PERCENTILES,
                     noise_floor: float = DEFAULT_NOISE_FLOOR) -> list[dict[str, Any]]:
    """Failures of ``candidate`` against ``baseline`` (empty list: no regression).

    Both are ``{level: summary}`` (or one summary each). A figure fails when it moves the wrong way by more
    than ``max(limit, noise_floor)`` of the baseline value; each failure is ``{level, metric, baseline,
    candidate, change, limit, message}``, ``message`` a sentence with the numbers.
    """
    if not 0 <= noise_floor < 1:
        raise ConfigError(f"the noise floor must be a fraction in [0, 1), got {noise_floor}")
    base, cand = _by_level(baseline), _by_level(candidate)
    limits = _limits(max_regression)
    fails: list[dict[str, Any]] = []
    for level in sorted(base, key=lambda v: (v is None, v)):
        where = "" if level is None else f" at level {level:g}"
        if level not in cand:
            fails.append({"level": level, "metric": "level", "baseline": None, "candidate": None,
                          "change": None, "limit": 0.0, "message": f"the candidate has no run{where}"})
            continue
        for fig in figures(metrics, percentiles):
            f = _gate_one(fig, base[level], cand[level], limits[fig.kind], noise_floor, where)
            if f is not None:
                fails.append({"level": level, **f})
    return fails


def _gate_one(fig: Figure, bs: Mapping[str, Any], cs: Mapping[str, Any], limit: float, floor: float,
              where: str) -> dict[str, Any] | None:
    b = fig.value(bs)
    if b is None:
        return None
    label = fig.label
    c = fig.value(cs)
    row = {"metric": label, "baseline": b, "candidate": c, "change": None, "limit": limit}
    if c is None:
        return {**row, "message": f"{label}{where}: missing in the candidate (baseline {_fmt(b, fig.unit)})"}
    if b <= 0:
        return None  # no relative change from zero; a zero baseline is not a reference
    change = c / b - 1
    row["change"] = change
    worse = change if fig.lower_is_better else -change
    allowed = max(limit, floor)
    if worse <= allowed:
        return None
    sign = "+" if fig.lower_is_better else "-"
    return {**row, "message": f"{label}{where}: {_fmt(c, fig.unit)} vs {_fmt(b, fig.unit)} "
                              f"({change:+.1%}, limit {sign}{limit:.0%}"
                              f"{'' if limit >= floor else f', noise floor {floor:.0%}'})"}


def invalid_reasons(summary: Mapping[str, Any]) -> list[str] | None:
    """Why a run must not be gated (its own reasons), or None when it is valid. Reads ``valid`` /
    ``invalid_reasons``, ``validity: {valid, reasons}`` where present, and ``interrupted`` (figures that
    cover only what finished before Ctrl-C)."""
    validity = summary.get("validity")
    flags = [summary.get("valid")]
    reasons = list(summary.get("invalid_reasons") or [])
    if summary.get("interrupted") is True:
        flags.append(False)
        if not any("interrupted" in str(r) for r in reasons):  # older summaries: valid, with a warning
            reasons.append("the run was interrupted: its figures cover only what finished")
    if isinstance(validity, Mapping):
        flags.append(validity.get("valid"))
        reasons += [r for r in validity.get("reasons") or [] if r not in reasons]
    if any(f is False for f in flags) or (reasons and not any(f is True for f in flags)):
        return [str(r) for r in reasons] or ["marked invalid (no reason recorded)"]
    return None


def refusals(baseline: Mapping[str, Any], candidate: Mapping[str, Any], *,
             allow_diff: Iterable[str] = ()) -> list[str]:
    """Reasons not to gate this pair at all (empty: gate it). Each side is ``{"name", "manifest",
    "levels": {level: summary}}``."""
    out: list[str] = []
    for role, side in (("baseline", baseline), ("candidate", candidate)):
        for level, summary in side["levels"].items():
            bad = invalid_reasons(summary)
            if bad:
                at = "" if level is None else f" (level {level:g})"
                out.append(f"the {role} {side['name']}{at} is INVALID: {'; '.join(bad)}")
    allowed = {*allow_diff, "concurrency"}  # levels are matched one by one
    try:
        check_fair([baseline["manifest"], candidate["manifest"]], allowed, must_match=MUST_MATCH)
    except ComparisonError as e:
        out.append(e.message + (f" ({e.hint})" if e.hint else ""))
    return out


def split_by_noise(fails: Sequence[Mapping[str, Any]],
                   rows: Mapping[Any, Mapping[str, Mapping[str, Any]]]) -> tuple[list[dict[str, Any]],
                                                                              list[dict[str, Any]]]:
    """``(failures, inconclusive)``: a failure whose figure the raw samples cannot tell from noise (its
    bootstrap row in ``rows[level][label]``, from :func:`servelab.analysis.compare.compare_figures`, says
    "within noise": the 95% interval of the change holds 0) is inconclusive, not a regression. A figure
    without a row (no raw samples, a derived figure, too few samples) stays a failure on its point value.
    Each inconclusive entry gains ``lo``/``hi`` (the interval of candidate - baseline) and a ``message``."""
    kept: list[dict[str, Any]] = []
    unsure: list[dict[str, Any]] = []
    for f in fails:
        row = (rows.get(f.get("level")) or {}).get(str(f.get("metric")))
        if row is None or row.get("verdict") != "within noise" or row.get("lo") is None:
            kept.append(dict(f))
            continue
        unit = str(row.get("unit") or "")
        n = row.get("n") or ("?", "?")
        unsure.append({**f, "lo": row["lo"], "hi": row["hi"],
                       "message": f"{f['message']}: within noise (95% interval of the change "
                                  f"{_fmt(float(row['lo']), unit)} to {_fmt(float(row['hi']), unit)}, "
                                  f"from {n[0]:,} and {n[1]:,} values); more requests would tell"})
    return kept, unsure
