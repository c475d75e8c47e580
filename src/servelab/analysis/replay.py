"""The replay section of a summary: the arrivals a replay achieved against the replayed trace's (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from servelab.records.schema import OK, RequestRecord

NS_PER_S = 1_000_000_000
_KS_EXACT_MAX = 1000  # exact p-values up to this sample size, the asymptotic distribution beyond


def _gaps_s(sorted_ns: np.ndarray) -> np.ndarray:
    return np.diff(sorted_ns).astype(np.float64) / NS_PER_S


def _cv(gaps: np.ndarray) -> float | None:
    if gaps.size < 2 or gaps.mean() <= 0:
        return None
    return float(gaps.std() / gaps.mean())


def _rate(offsets: np.ndarray) -> float | None:
    if offsets.size < 2:
        return None
    span = float(offsets.max() - offsets.min())
    return (offsets.size - 1) * NS_PER_S / span if span > 0 else None


def _ks(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    from scipy.stats import ks_2samp  # imported here: scipy.stats costs ~0.3 s to import

    res = ks_2samp(a, b, method="exact" if max(a.size, b.size) <= _KS_EXACT_MAX else "asymp")
    return {"statistic": float(res.statistic), "pvalue": float(res.pvalue), "n_trace": int(a.size),
            "n_achieved": int(b.size)}


# What the replay section reads of requests.parquet (streamed: replay_summary takes the batches).
REPLAY_COLUMNS: tuple[str, ...] = ("attempt", "status", "intended_ns", "sent_ns", "usage_prompt_tokens",
                                   "usage_cached_tokens")


def _ints(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values with null as 0, int64; is-null mask)."""
    null = pc.is_null(col).to_numpy(zero_copy_only=False).astype(bool)
    return pc.fill_null(col, 0).to_numpy(zero_copy_only=False).astype(np.int64), null


@dataclass
class _Sends:
    """What the replay section keeps of the requests: each first attempt's send time and schedule lag (16
    bytes a sent request), and the ok requests' prompt and cached token sums."""

    sent_ns: np.ndarray
    lag_ms: np.ndarray
    prompt: int
    cached: int


def _sends_of(tables: Iterable[pa.Table]) -> _Sends:
    sent_parts, lag_parts, prompt, cached = [], [], 0, 0
    for t in tables:
        attempt, _ = _ints(t.column("attempt"))
        sent_ns, sent_null = _ints(t.column("sent_ns"))
        intended, _ = _ints(t.column("intended_ns"))
        sent = (attempt == 0) & ~sent_null
        sent_parts.append(sent_ns[sent])
        lag_parts.append((sent_ns[sent] - intended[sent]) / 1e6)
        p, p_null = _ints(t.column("usage_prompt_tokens"))
        ok = pc.fill_null(pc.equal(t.column("status"), OK), False).to_numpy(zero_copy_only=False).astype(bool)
        ok &= ~p_null & (p > 0)
        prompt += int(p[ok].sum())
        cached += int(_ints(t.column("usage_cached_tokens"))[0][ok].sum())

    def cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

    return _Sends(cat(sent_parts, np.int64), cat(lag_parts, np.float64), prompt, cached)


def _sends_of_records(requests: Sequence[RequestRecord]) -> _Sends:
    sent = [r for r in requests if r.attempt == 0 and r.sent_ns is not None]
    ok = [r for r in requests if r.status == OK and (r.usage_prompt_tokens or 0) > 0]
    return _Sends(np.asarray([r.sent_ns for r in sent], dtype=np.int64),
                  np.asarray([(r.sent_ns or 0) - (r.intended_ns or 0) for r in sent], dtype=np.int64) / 1e6,
                  sum(r.usage_prompt_tokens or 0 for r in ok), sum(r.usage_cached_tokens or 0 for r in ok))


def replay_summary(
    requests: pa.Table | Sequence[RequestRecord] | Iterable[pa.Table],
    *,
    trace_offsets_ns: Sequence[int] | np.ndarray,
    timed: bool,
    format: str,
    source: str,
    trace_prefix_reuse: float | None,
    speed: float | None,
) -> dict[str, Any]:
    """The replayed trace's arrivals (the issued units' request offsets) against the achieved sends.

    Rates are (n - 1) / span, CVs population std / mean of consecutive gaps, lag the send time minus the
    intended time (p99, ms), ``ks`` the two-sample KS test of trace against achieved gaps (timed traces);
    ``cached_fraction`` is the server-reported cached share of prompt tokens over ok requests, beside the
    trace's reusable fraction under an unbounded cache (``trace_prefix_reuse``)."""
    if isinstance(requests, pa.Table):
        c = _sends_of([requests])
    elif isinstance(requests, Sequence):
        c = _sends_of_records(requests)
    else:
        c = _sends_of(requests)
    trace_offs = np.sort(np.asarray(trace_offsets_ns, dtype=np.int64))
    achieved = np.sort(c.sent_ns)
    lags = c.lag_ms
    tg, ag = _gaps_s(trace_offs), _gaps_s(achieved)
    ks = _ks(tg, ag) if timed and tg.size and ag.size else None
    prompt = c.prompt
    return {
        "format": format,
        "source": source,
        "speed": speed,
        "trace_requests": int(trace_offs.size),
        "requests": int(c.sent_ns.size),
        "trace_rate": _rate(trace_offs) if timed else None,
        "achieved_rate": _rate(achieved),
        "trace_cv": _cv(tg) if timed else None,
        "achieved_cv": _cv(ag),
        "lag_ms_p99": float(np.percentile(lags, 99)) if lags.size else None,
        "ks": ks,
        "trace_prefix_reuse": trace_prefix_reuse,
        "cached_fraction": c.cached / prompt if prompt else None,
    }
