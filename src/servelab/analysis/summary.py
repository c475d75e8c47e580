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
from collections.abc import Iterable, Mapping, Sequence
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
from servelab.analysis.sketch import EXACT_MAX_VALUES, MetricAccumulator
from servelab.analysis.validity import (
    count_reasons,
    interrupted_reasons,
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
THROUGHPUT_UNITS = {
    "requests_per_s": "1/s",
    "output_tokens_per_s": "tokens/s",
    "input_tokens_per_s": "tokens/s",
    "total_tokens_per_s": "tokens/s",
    "goodput_requests_per_s": "1/s",
    "duration_s": "s",
}
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


def _measured_counts(measured: Counter[str], warmup: int) -> tuple[dict[str, Any], dict[str, int]]:
    known = {OK, CANCELLED, *FAILED_STATUSES}
    unknown = {str(k): v for k, v in measured.items() if k not in known}
    return {
        "sent": sum(measured.values()),
        "ok": measured.get(OK, 0),
        # client_error (an exception inside servelab, recorded, not swallowed) is listed only when it happened
        "failed": {s: measured.get(s, 0) for s in FAILED_STATUSES if s != CLIENT_ERROR or measured.get(s)},
        "cancelled": measured.get(CANCELLED, 0),
        "warmup": warmup,
    }, unknown


def _slo_checks(metrics: Mapping[str, MetricAccumulator], slo: Any) -> dict[str, Any]:
    """Each configured SLO against its metric at ``slo.percentile`` (e.g. p99 TTFT <= 500 ms)."""
    if slo is None:
        return {}
    pct = float(slo.percentile)
    out = {}
    for field, metric in SLO_METRICS.items():
        limit = getattr(slo, field, None)
        if limit is None:
            continue
        value = metrics[metric].percentile(pct)
        out[field] = {"metric": metric, "percentile": pct, "limit": float(limit), "value": value,
                      "pass": value is not None and value <= limit}
    return out


class _Kept:
    """What :func:`verdict_reasons` reads of an open-loop run: the measured requests' intended send and end
    times (ns from one base) and which were cancelled (offered all the same), gathered batch by batch."""

    def __init__(self, intended: np.ndarray, end: np.ndarray, cancelled: np.ndarray | None = None) -> None:
        self._t = {"intended_ns": intended, "end_ns": end}
        self.warmup = np.zeros(intended.size, dtype=bool)
        # 8 bytes a request: one reference to the same two strings (np.where gave '<U9', 36 bytes a request;
        # np.full(..., dtype=object) a new string object per request, 56 bytes)
        self.status = np.empty(intended.size, dtype=object)
        self.status.fill(OK)
        if cancelled is not None:
            self.status[cancelled] = CANCELLED

    def t(self, name: str) -> np.ndarray:
        return self._t[name]


_MAX_ERROR_MESSAGES = 10_000  # distinct error messages counted before the rarest are dropped


class _RunAccumulator:
    """Every figure's running state over batches of request columns (one batch: the old whole-run
    summary, bit for bit; many: the same figures while each metric stays under its exact threshold)."""

    def __init__(self, config: Any, mode: LoadMode, exact_max: int) -> None:
        self.config, self.mode = config, mode
        self.slo = getattr(config, "slo", None)
        self.n = 0
        self.warmup = 0
        self.measured: Counter[str] = Counter()
        self.metrics = {m.name: MetricAccumulator(exact_max) for m in METRICS}
        self.tok = Counter({"input": 0, "output": 0, "cached": 0, "ok": 0, "missing": 0, "mismatch": 0,
                            "over": 0})
        self.good = 0
        self.codes: Counter[int] = Counter()
        self.msgs: Counter[str] = Counter()
        self.first_start: float | None = None
        self.last_end: float | None = None
        self.base_ns: int | None = None
        self.kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, cols: Columns) -> None:
        self.n += cols.n
        if not cols.n:
            return
        warm = cols.warmup
        self.warmup += int(warm.sum())
        self.measured.update(cols.status[~warm].tolist())
        start = latency_start(cols, self.mode)
        for m in METRICS:
            self.metrics[m.name].add(m.values(cols, start))
        ok = scope_mask(cols, "ok")
        self._tokens(cols, ok)
        self.good += self._good(cols, ok)
        failed = ~warm & np.isin(cols.status, FAILED_STATUSES)
        self.codes.update(int(c) for c in cols.c("http_status")[failed] if not np.isnan(c))
        self.msgs.update(str(e)[:200] for e in cols.error[failed] if e)
        if len(self.msgs) > _MAX_ERROR_MESSAGES:
            self.msgs = Counter(dict(self.msgs.most_common(_MAX_ERROR_MESSAGES // 10)))
        # times of every batch from the first batch's base (the shift is 0 for one batch: bit-identical)
        self.base_ns = cols.base_ns if self.base_ns is None else self.base_ns
        shift = float(cols.base_ns - self.base_ns)
        s, e = start[~warm], cols.t("end_ns")[~warm]
        s, e = s[np.isfinite(s)], e[np.isfinite(e)]
        if s.size:
            lo = float(s.min()) + shift
            self.first_start = lo if self.first_start is None else min(self.first_start, lo)
        if e.size:
            hi = float(e.max()) + shift
            self.last_end = hi if self.last_end is None else max(self.last_end, hi)
        if self.mode == "open":
            self.kept.append((cols.t("intended_ns")[~warm] + shift, cols.t("end_ns")[~warm] + shift,
                              (cols.status == CANCELLED)[~warm]))

    def _tokens(self, cols: Columns, ok: np.ndarray) -> None:
        usage = cols.c("usage_completion_tokens")[ok]
        chunks = cols.c("est_completion_tokens")[ok]
        missing = np.isnan(usage)
        over = ~missing & (chunks > usage)
        prompt = cols.c("usage_prompt_tokens")[ok]
        prompt = np.where(np.isnan(prompt), cols.c("est_prompt_tokens")[ok], prompt)
        self.tok.update({
            "input": int(np.nansum(prompt)),
            "output": int(np.nansum(output_tokens(cols)[ok])),
            "cached": int(np.nansum(cols.c("usage_cached_tokens")[ok])),
            "ok": int(usage.size), "missing": int(missing.sum()), "mismatch": int((missing | over).sum()),
            "over": int(over.sum()),
        })

    def _good(self, cols: Columns, ok: np.ndarray) -> int:
        good = ok.copy()
        for field, metric in SLO_METRICS.items():
            limit = getattr(self.slo, field, None) if self.slo is not None else None
            if limit is None:
                continue
            v = per_request(cols, self.mode, metric)
            meets = v <= limit
            if field in _VACUOUS_SLOS:
                meets |= np.isnan(v)
            good &= meets
        return int(good.sum())

    def tokens(self) -> dict[str, Any]:
        t = self.tok
        source = "usage" if t["missing"] == 0 else "estimate" if t["missing"] == t["ok"] else "mixed"
        return {"input": t["input"], "output": t["output"], "cached": t["cached"], "source": source,
                "estimated": t["missing"], "mismatch": t["mismatch"], "chunks_over_usage": t["over"]}

    def goodput(self, requests: Mapping[str, Any]) -> dict[str, Any]:
        used = {f: float(getattr(self.slo, f)) for f in SLO_METRICS
                if self.slo is not None and getattr(self.slo, f, None) is not None}
        attempted = requests["ok"] + sum(requests["failed"].values())
        return {"requests": self.good, "fraction": self.good / attempted if attempted else None, "slo": used}

    def errors(self, requests: Mapping[str, Any]) -> dict[str, Any]:
        n_failed = sum(requests["failed"].values())
        attempted = requests["ok"] + n_failed
        return {
            "rate": n_failed / attempted if attempted else None,
            "by_status": dict(requests["failed"]),
            "by_http_status": {str(k): v for k, v in sorted(self.codes.items())},
            "top": [[m, c] for m, c in self.msgs.most_common(_TOP_ERRORS)],
        }

    def time_base_s(self) -> float | None:
        """Batch-throughput time base: first measured request's start to the last measured one's end."""
        if self.first_start is None or self.last_end is None:
            return None
        span = float(self.last_end - self.first_start) / 1e9
        return span if span > 0 else None

    def kept_columns(self) -> _Kept:
        """The open-loop columns joined, once: each batch's parts are let go as their column is joined
        (holding both doubled the 17 bytes a request these cost)."""
        parts = [list(col) for col in zip(*self.kept, strict=True)]
        self.kept = []
        if not parts:
            return _Kept(np.empty(0), np.empty(0))
        joined = []
        while parts:
            joined.append(np.concatenate(parts.pop(0)))
        return _Kept(*joined)


def build_summary(
    records: Sequence[RequestRecord] | pa.Table | Columns,
    config: Any,
    *,
    started_ns: int,
    ended_ns: int,
    extra: Mapping[str, Any] | None = None,
    mode: LoadMode | None = None,
) -> dict[str, Any]:
    """Every figure of one run (``mode`` overrides ``config.load.mode``: a trace replay is open loop).
    ``config`` is a :class:`servelab.config.RunConfig` (``load.mode``, ``percentiles``, ``slo``,
    ``limits.max_lag_p99_ms``, ``seed`` are read); ``extra`` carries the runner's hints (see
    :mod:`servelab.analysis.validity`)."""
    return summarize_batches([records], config, started_ns=started_ns, ended_ns=ended_ns, extra=extra,
                             mode=mode)


def summarize_batches(
    batches: Iterable[Sequence[RequestRecord] | pa.Table | Columns],
    config: Any,
    *,
    started_ns: int,
    ended_ns: int,
    extra: Mapping[str, Any] | None = None,
    mode: LoadMode | None = None,
    exact_max: int = EXACT_MAX_VALUES,
) -> dict[str, Any]:
    """:func:`build_summary` over a run's records given batch by batch (e.g. the row groups of
    ``requests.parquet``), in memory that does not grow with the run: each metric's figures are exact
    while it has at most ``exact_max`` values, then read from a bounded sketch (0.05 % relative error;
    :mod:`servelab.analysis.sketch`). An open-loop run also keeps two floats per request (its intended
    send and end times) for the offered-vs-achieved check."""
    extra = dict(extra or {})
    mode = mode or config.load.mode
    seed = int(getattr(config, "seed", 0))
    acc = _RunAccumulator(config, mode, exact_max)
    for batch in batches:
        acc.add(as_columns(batch))
    requests, unknown = _measured_counts(acc.measured, acc.warmup)
    metrics = {name: m.summary(config.percentiles, seed) for name, m in acc.metrics.items()}
    tokens = acc.tokens()
    slo = acc.slo
    goodput = acc.goodput(requests)
    goodput["checks"] = _slo_checks(acc.metrics, slo)
    base = acc.time_base_s()

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
    reasons += runner_reasons(extra, max_lag, acc.n)
    reasons += interrupted_reasons(extra, config, requests, (ended_ns - started_ns) / 1e9)
    errors = acc.errors(requests)
    more, load_check = verdict_reasons(acc.kept_columns(), config, mode, requests, errors, base)
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
