"""summary.json: every figure of one run, computed from its request records (pure; no I/O).

Contract (keys others read)::

    requests    {sent, ok, failed{http_error, timeout, disconnected, malformed}, cancelled, warmup}
    metrics     {ttft_ms, ttft_content_ms, itl_ms, itl_request_ms, tpot_ms, e2e_ms, ttlt_ms, queue_ms, lag_ms}
                each {mean, p50, p90, p95, p99, [configured pXX], max, n, ci{p50, p95, p99: [lo, hi]}}
    throughput  {requests_per_s, output_tokens_per_s, input_tokens_per_s, total_tokens_per_s,
                 goodput_requests_per_s, duration_s}
    tokens      {input, output, cached, source: usage|estimate|mixed, estimated, mismatch, chunks_over_usage}
    goodput     {requests, fraction, slo, checks}
    errors      {rate, by_status, by_http_status, top}
    valid, invalid_reasons, warnings, units, run

``sent`` counts measured attempts (warm-up excluded, reported apart): sent = ok + failed + cancelled.
Every value is a plain JSON type: no numpy scalars, and NaN or infinity become ``None``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from servelab.analysis.columns import Columns, as_columns
from servelab.analysis.metrics import (
    METRICS,
    UNITS,
    LoadMode,
    latency_start,
    output_tokens,
    per_request,
    scope_mask,
)
from servelab.analysis.stats import bootstrap_ci, percentile_summary
from servelab.analysis.validity import (
    count_reasons,
    lag_reasons,
    runner_reasons,
    verdict_reasons,
    warnings_for,
)
from servelab.records.schema import CANCELLED, CLIENT_ERROR, FAILED_STATUSES, OK, RequestRecord

# SLO field -> the per-request metric it bounds.
SLO_METRICS: dict[str, str] = {"ttft_ms": "ttft_ms", "itl_ms": "itl_request_ms", "tpot_ms": "tpot_ms",
                               "e2e_ms": "e2e_ms"}
# Undefined for a request with fewer than two tokens; such a request cannot violate it.
_VACUOUS_SLOS = frozenset({"itl_ms", "tpot_ms"})
THROUGHPUT_UNITS = {"requests_per_s": "1/s", "output_tokens_per_s": "tokens/s", "input_tokens_per_s": "tokens/s",
                    "total_tokens_per_s": "tokens/s", "goodput_requests_per_s": "1/s", "duration_s": "s"}
_TOP_ERRORS = 5


def jsonable(x: Any) -> Any:
    """A copy of ``x`` with only JSON types: numpy scalars unwrapped, NaN and infinities as ``None``."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple | np.ndarray):
        return [jsonable(v) for v in x]
    if isinstance(x, bool | np.bool_):
        return bool(x)
    if isinstance(x, int | np.integer):
        return int(x)
    if isinstance(x, float | np.floating):
        f = float(x)
        return f if math.isfinite(f) else None
    return x


def _request_counts(cols: Columns) -> tuple[dict[str, Any], dict[str, int]]:
    measured = Counter(cols.status[~cols.warmup].tolist())
    known = {OK, CANCELLED, *FAILED_STATUSES}
    unknown = {str(k): v for k, v in measured.items() if k not in known}
    return {
        "sent": int((~cols.warmup).sum()),
        "ok": measured.get(OK, 0),
        # client_error (an exception inside servelab, recorded, not swallowed) is listed only when it happened
        "failed": {s: measured.get(s, 0) for s in FAILED_STATUSES if s != CLIENT_ERROR or measured.get(s)},
        "cancelled": measured.get(CANCELLED, 0),
        "warmup": int(cols.warmup.sum()),
    }, unknown


def _time_base_s(cols: Columns, start: np.ndarray) -> float | None:
    """Batch-throughput time base: first measured request's start to the last measured one's end."""
    keep = ~cols.warmup
    s, e = start[keep], cols.t("end_ns")[keep]
    s, e = s[np.isfinite(s)], e[np.isfinite(e)]
    if not s.size or not e.size:
        return None
    span = float(e.max() - s.min()) / 1e9
    return span if span > 0 else None


def _tokens(cols: Columns, ok: np.ndarray) -> dict[str, Any]:
    usage = cols.c("usage_completion_tokens")[ok]
    chunks = cols.c("est_completion_tokens")[ok]
    missing = np.isnan(usage)
    over = ~missing & (chunks > usage)
    prompt = cols.c("usage_prompt_tokens")[ok]
    prompt = np.where(np.isnan(prompt), cols.c("est_prompt_tokens")[ok], prompt)
    n_missing = int(missing.sum())
    source = "usage" if n_missing == 0 else "estimate" if n_missing == usage.size else "mixed"
    return {
        "input": int(np.nansum(prompt)),
        "output": int(np.nansum(output_tokens(cols)[ok])),
        "cached": int(np.nansum(cols.c("usage_cached_tokens")[ok])),
        "source": source,
        "estimated": n_missing,
        "mismatch": int((missing | over).sum()),
        "chunks_over_usage": int(over.sum()),
    }


def _goodput(cols: Columns, mode: LoadMode, ok: np.ndarray, slo: Any, requests: Mapping[str, Any]) -> dict:
    good = ok.copy()
    used: dict[str, float] = {}
    for field, metric in SLO_METRICS.items():
        limit = getattr(slo, field, None) if slo is not None else None
        if limit is None:
            continue
        used[field] = float(limit)
        v = per_request(cols, mode, metric)
        meets = v <= limit
        if field in _VACUOUS_SLOS:
            meets |= np.isnan(v)
        good &= meets
    attempted = requests["ok"] + sum(requests["failed"].values())
    n_good = int(good.sum())
    return {"requests": n_good, "fraction": n_good / attempted if attempted else None, "slo": used}


def _slo_checks(metrics: Mapping[str, Mapping[str, Any]], slo: Any) -> dict[str, Any]:
    """Each configured SLO against its metric at ``slo.percentile`` (e.g. p99 TTFT <= 500 ms)."""
    if slo is None:
        return {}
    pct = float(slo.percentile)
    out = {}
    for field, metric in SLO_METRICS.items():
        limit = getattr(slo, field, None)
        if limit is None:
            continue
        vals = metrics[metric]["_values"]
        value = float(np.percentile(vals, pct)) if vals.size else None
        out[field] = {"metric": metric, "percentile": pct, "limit": float(limit), "value": value,
                      "pass": value is not None and value <= limit}
    return out


def _errors(cols: Columns, requests: Mapping[str, Any]) -> dict[str, Any]:
    failed_mask = ~cols.warmup & np.isin(cols.status, FAILED_STATUSES)
    n_failed = sum(requests["failed"].values())
    attempted = requests["ok"] + n_failed
    codes = Counter(int(c) for c in cols.c("http_status")[failed_mask] if not np.isnan(c))
    msgs = Counter(str(e)[:200] for e in cols.error[failed_mask] if e)
    return {
        "rate": n_failed / attempted if attempted else None,
        "by_status": dict(requests["failed"]),
        "by_http_status": {str(k): v for k, v in sorted(codes.items())},
        "top": [[m, c] for m, c in msgs.most_common(_TOP_ERRORS)],
    }


def build_summary(
    records: Sequence[RequestRecord] | pa.Table | Columns,
    config: Any,
    *,
    started_ns: int,
    ended_ns: int,
    extra: Mapping[str, Any] | None = None,
    mode: LoadMode | None = None,
) -> dict[str, Any]:
    """Every figure of one run (``mode`` overrides ``config.load.mode``: a trace replay is open loop). ``config`` is a :class:`servelab.config.RunConfig` (``load.mode``,
    ``percentiles``, ``slo``, ``limits.max_lag_p99_ms``, ``seed`` are read); ``extra`` carries the runner's
    hints (see :mod:`servelab.analysis.validity`)."""
    extra = dict(extra or {})
    cols = as_columns(records)
    mode = mode or config.load.mode
    seed = int(getattr(config, "seed", 0))
    requests, unknown = _request_counts(cols)
    start = latency_start(cols, mode)
    metrics: dict[str, dict[str, Any]] = {}
    for m in METRICS:
        vals = m.values(cols, start)
        metrics[m.name] = {**percentile_summary(vals, config.percentiles), "ci": bootstrap_ci(vals, seed=seed),
                           "_values": vals}
    ok = scope_mask(cols, "ok")
    tokens = _tokens(cols, ok)
    slo = getattr(config, "slo", None)
    goodput = _goodput(cols, mode, ok, slo, requests)
    goodput["checks"] = _slo_checks(metrics, slo)
    for v in metrics.values():
        del v["_values"]
    base = _time_base_s(cols, start)

    def rate(x: float) -> float | None:
        return x / base if base else None

    throughput = {
        "requests_per_s": rate(requests["ok"]),
        "output_tokens_per_s": rate(tokens["output"]),
        "input_tokens_per_s": rate(tokens["input"]),
        "total_tokens_per_s": rate(tokens["input"] + tokens["output"]),
        "goodput_requests_per_s": rate(goodput["requests"]),
        "duration_s": base,
    }
    max_lag = float(config.limits.max_lag_p99_ms)
    reasons = count_reasons(requests, unknown)
    reasons += lag_reasons(mode, metrics["lag_ms"]["p99"], max_lag)
    reasons += runner_reasons(extra, max_lag, cols.n)
    errors = _errors(cols, requests)
    more, load_check = verdict_reasons(cols, config, mode, requests, errors)
    reasons += more
    summary = {
        "requests": requests,
        "metrics": metrics,
        "throughput": throughput,
        "tokens": tokens,
        "goodput": goodput,
        "errors": errors,
        "valid": not reasons,
        "invalid_reasons": reasons,
        "interrupted": extra.get("stopped_by") == "interrupt",
        "offered_vs_achieved": load_check,
        "units": {**UNITS, **{f"throughput.{k}": u for k, u in THROUGHPUT_UNITS.items()}},
        "run": {"mode": mode, "started_ns": int(started_ns), "ended_ns": int(ended_ns),
                "duration_s": (ended_ns - started_ns) / 1e9, "extra": extra},
    }
    summary["warnings"] = warnings_for(summary, extra)
    return jsonable(summary)
