"""Request metrics as small declarative units, each defined once.

A :class:`Metric` names a figure, its unit, what it means, which records it applies to (its scope) and
one function over the columns, and which way is better (``better``: ``lower`` or ``higher``). The
function returns ``(values, owner)``: the values and, for each value, the index of the request it came
from. A per-request metric returns one value per request (NaN where
undefined, such as TPOT of a one-token answer); a pooled metric (``itl_ms``: every gap of every request)
returns many values per request. The scope then keeps the values of the requests it applies to.

Figures of the run as a whole (a rate, a share, a price) are :class:`Derived`: read or computed from
``summary.json``, each with its unit and direction too. :func:`lower_is_better` answers for either table;
``servelab compare`` and ``servelab check`` take every direction from here.

Where latency starts: in an open loop at the *intended* send time, so time the client spent behind
schedule counts against the figures instead of hiding; in a closed loop at the actual send time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from servelab.analysis.columns import Columns
from servelab.records.schema import OK
from servelab.records.summary import dig

NS_PER_MS = 1e6
Scope = Literal["ok", "sent"]
LoadMode = Literal["open", "closed"]
MetricFn = Callable[[Columns, np.ndarray], tuple[np.ndarray, np.ndarray]]
Better = Literal["lower", "higher"]


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    description: str
    fn: MetricFn  # (columns, start_ns) -> (values, owner request index)
    scope: Scope = "ok"  # ok: ok and not warm-up; sent: every measured request that was sent
    per_request: bool = True  # one value per request (usable per request, e.g. for goodput)
    better: Better = field(kw_only=True)  # which way is better: every latency is better lower

    def values(self, cols: Columns, start: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """The finite values of the requests in scope (or in ``mask`` when given)."""
        vals, owner = self.fn(cols, start)
        keep = scope_mask(cols, self.scope) if mask is None else mask
        out = vals[keep[owner]]
        del vals, owner  # a pooled metric's arrays hold one entry per token: gone before the next copy
        return out[np.isfinite(out)]


def scope_mask(cols: Columns, scope: Scope) -> np.ndarray:
    measured = ~cols.warmup
    if scope == "ok":
        return measured & (cols.status == OK)
    return measured & ~np.isnan(cols.t("sent_ns"))


def latency_start(cols: Columns, mode: LoadMode) -> np.ndarray:
    """Per-request start of latency: intended send (open loop) or actual send (closed loop)."""
    intended = cols.t("intended_ns")
    if mode == "open":
        return intended
    sent = cols.t("sent_ns")
    return np.where(np.isnan(sent), intended, sent)


def _per_request(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return v, np.arange(v.size)


def _since_start(col: str) -> MetricFn:
    def fn(cols: Columns, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _per_request((cols.t(col) - start) / NS_PER_MS)

    return fn


def _queue(cols: Columns, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return _per_request((cols.t("sent_ns") - cols.t("intended_ns")) / NS_PER_MS)


def _itl_pooled(cols: Columns, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # One entry per token: int32 owners (while they fit) and no copy kept longer than needed.
    owner = np.repeat(np.arange(cols.n, dtype=np.int32 if cols.n < 2**31 else np.int64), cols.token_counts())
    if owner.size < 2:
        return np.empty(0), np.empty(0, dtype=np.int64)
    same = owner[1:] == owner[:-1]  # a gap between two requests' tokens is not a gap
    kept = owner[:-1][same]
    del owner
    gaps = np.diff(cols.token_times)[same]
    gaps /= NS_PER_MS
    return gaps, kept


def _itl_request_mean(cols: Columns, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # The mean of consecutive gaps telescopes to (last arrival - first arrival) / (arrivals - 1).
    k = cols.token_counts()
    out = np.full(cols.n, np.nan)
    has = k >= 2
    if has.any():
        first = cols.token_times[cols.token_offsets[:-1][has]]
        last = cols.token_times[cols.token_offsets[1:][has] - 1]
        out[has] = (last - first) / (k[has] - 1) / NS_PER_MS
    return _per_request(out)


def output_tokens(cols: Columns) -> np.ndarray:
    """Completion tokens per request: the server's usage, else the client's count of token chunks."""
    usage = cols.c("usage_completion_tokens")
    return np.where(np.isnan(usage), cols.c("est_completion_tokens"), usage)


def _tpot(cols: Columns, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    toks = output_tokens(cols)
    span = cols.t("last_token_ns") - cols.t("first_token_ns")
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(toks >= 2, span / (toks - 1), np.nan) / NS_PER_MS
    return _per_request(out)


METRICS: tuple[Metric, ...] = (
    Metric("ttft_ms", "ms", "Time to first token: latency start to the first chunk carrying content or "
           "reasoning.", _since_start("first_token_ns"), better="lower"),
    Metric("ttft_content_ms", "ms", "Time to first visible content token (after any reasoning).",
           _since_start("first_content_ns"), better="lower"),
    Metric("itl_ms", "ms", "Inter-token latency: every gap between consecutive token-carrying chunks, pooled "
           "over all requests.", _itl_pooled, per_request=False, better="lower"),
    Metric("itl_request_ms", "ms", "Per-request mean inter-token latency: the mean of one request's gaps.",
           _itl_request_mean, better="lower"),
    Metric("tpot_ms", "ms", "Time per output token after the first: (last token - first token) / "
           "(completion tokens - 1), tokens from usage.", _tpot, better="lower"),
    Metric("e2e_ms", "ms", "End-to-end latency: latency start to the end of the response.",
           _since_start("end_ns"), better="lower"),
    Metric("ttlt_ms", "ms", "Time to last token: latency start to the last token-carrying chunk.",
           _since_start("last_token_ns"), better="lower"),
    Metric("queue_ms", "ms", "Client queueing of successful requests: actual send - intended send.",
           _queue, better="lower"),
    Metric("lag_ms", "ms", "Schedule lag: actual send - intended send over every measured request sent (any "
           "status); in an open loop, how far the client fell behind its schedule.", _queue, scope="sent",
           better="lower"),
)
METRICS_BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
UNITS: dict[str, str] = {m.name: m.unit for m in METRICS}


@dataclass(frozen=True)
class Derived:
    """A figure of the run as a whole, from ``summary.json``: stored at ``path``, or computed by ``fn``."""

    name: str
    unit: str
    description: str
    path: tuple[str, ...] = ()  # where summary.json holds it (a number, or a percentile summary)
    fn: Callable[[Mapping[str, Any]], Any] | None = None  # summary -> the figure, when it is not stored
    better: Better = field(kw_only=True)

    def value(self, summary: Mapping[str, Any], *sub: str) -> float | None:
        """The figure in ``summary`` (``sub``: a key below ``path``, e.g. ``"p95"``), None when absent."""
        v = self.fn(summary) if self.fn is not None else dig(summary, *self.path, *sub)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _success_rate(summary: Mapping[str, Any]) -> float | None:
    started, done = dig(summary, "sessions", "started"), dig(summary, "sessions", "completed")
    if not isinstance(started, int | float) or not started or done is None:
        return None
    return float(done) / started


def _tokens_per_s_per_user(summary: Mapping[str, Any]) -> float | None:
    tpot = dig(summary, "metrics", "tpot_ms", "p50")
    return 1000.0 / float(tpot) if isinstance(tpot, int | float) and tpot > 0 else None


DERIVED: tuple[Derived, ...] = (
    Derived("output_tokens_per_s", "tok/s", "Output tokens of ok requests over the measured window.",
            ("throughput", "output_tokens_per_s"), better="higher"),
    Derived("requests_per_s", "req/s", "Ok requests over the measured window.",
            ("throughput", "requests_per_s"), better="higher"),
    Derived("goodput_requests_per_s", "req/s", "Requests meeting every SLO over the measured window.",
            ("throughput", "goodput_requests_per_s"), better="higher"),
    Derived("goodput_fraction", "fraction", "Requests meeting every SLO / (ok + failed) measured requests.",
            ("goodput", "fraction"), better="higher"),
    Derived("failure_rate", "fraction", "Failed / (ok + failed) measured requests (cancelled ones aside).",
            ("errors", "rate"), better="lower"),
    Derived("tokens_per_s_per_user", "tok/s", "Interactivity: the decode speed one user sees, 1000 / median "
            "time per output token.", fn=_tokens_per_s_per_user, better="higher"),
    Derived("task_ms", "ms", "Task time: one agent session from start to end (percentiles).", ("task_ms",),
            better="lower"),
    Derived("task_success_rate", "fraction", "Completed / started sessions.", fn=_success_rate,
            better="higher"),
    Derived("cost_per_successful_task", "USD", "Model, tool, orchestration and failure cost per accepted "
            "task.", ("cost", "per_successful_task"), better="lower"),
)
DERIVED_BY_NAME: dict[str, Derived] = {d.name: d for d in DERIVED}


def _entry(name: str) -> Metric | Derived:
    found = METRICS_BY_NAME.get(name) or DERIVED_BY_NAME.get(name)
    if found is None:
        raise KeyError(f"{name!r} is neither a request metric nor a derived figure (analysis.metrics)")
    return found


def lower_is_better(name: str) -> bool:
    """Whether a smaller value of the metric or derived figure ``name`` is better, from the tables."""
    return _entry(name).better == "lower"


def unit_of(name: str) -> str:
    """The unit of the metric or derived figure ``name``."""
    return _entry(name).unit


def metric_values(cols: Columns, mode: LoadMode) -> dict[str, np.ndarray]:
    """Every metric's in-scope finite values, by name."""
    start = latency_start(cols, mode)
    return {m.name: m.values(cols, start) for m in METRICS}


def per_request(cols: Columns, mode: LoadMode, name: str) -> np.ndarray:
    """One per-request metric for every request (length ``n``, NaN where undefined), before scoping."""
    m = METRICS_BY_NAME[name]
    if not m.per_request:
        raise ValueError(f"{name} is pooled (many values per request), not per request")
    return m.fn(cols, latency_start(cols, mode))[0]
