"""The replay section of a summary: the arrivals a replay achieved against the replayed trace's (pure)."""

from __future__ import annotations

from collections.abc import Sequence
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


def _columns(requests: pa.Table | Sequence[RequestRecord]) -> dict[str, np.ndarray]:
    names = ("attempt", "status", "intended_ns", "sent_ns", "usage_prompt_tokens", "usage_cached_tokens")
    if isinstance(requests, pa.Table):
        out = {}
        for n in names:
            col = requests.column(n)
            if n == "status":
                out[n] = np.asarray(col.to_pylist(), dtype=object)
            else:
                out[n + "_null"] = pc.is_null(col).to_numpy(zero_copy_only=False).astype(bool)
                out[n] = pc.fill_null(col, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        return out
    out = {"status": np.asarray([r.status for r in requests], dtype=object)}
    for n in names[2:] + ("attempt",):
        vals = [getattr(r, n) for r in requests]
        out[n + "_null"] = np.asarray([v is None for v in vals], dtype=bool)
        out[n] = np.asarray([0 if v is None else v for v in vals], dtype=np.int64)
    return out


def replay_summary(
    requests: pa.Table | Sequence[RequestRecord],
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
    c = _columns(requests)
    trace_offs = np.sort(np.asarray(trace_offsets_ns, dtype=np.int64))
    sent = (c["attempt"] == 0) & ~c["sent_ns_null"]
    achieved = np.sort(c["sent_ns"][sent])
    lags = (c["sent_ns"][sent] - c["intended_ns"][sent]) / 1e6
    tg, ag = _gaps_s(trace_offs), _gaps_s(achieved)
    ks = _ks(tg, ag) if timed and tg.size and ag.size else None
    ok = (c["status"] == OK) & ~c["usage_prompt_tokens_null"] & (c["usage_prompt_tokens"] > 0)
    prompt = int(c["usage_prompt_tokens"][ok].sum())
    return {
        "format": format,
        "source": source,
        "speed": speed,
        "trace_requests": int(trace_offs.size),
        "requests": int(sent.sum()),
        "trace_rate": _rate(trace_offs) if timed else None,
        "achieved_rate": _rate(achieved),
        "trace_cv": _cv(tg) if timed else None,
        "achieved_cv": _cv(ag),
        "lag_ms_p99": float(np.percentile(lags, 99)) if lags.size else None,
        "ks": ks,
        "trace_prefix_reuse": trace_prefix_reuse,
        "cached_fraction": int(c["usage_cached_tokens"][ok].sum()) / prompt if prompt else None,
    }
