"""What a trace looks like: arrival rate and burstiness, token lengths, sessions, prefix reuse; and a
two-sample KS test for checking that a replay reproduced the trace's arrival process."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servelab.workload.traces.base import NS_PER_S, Trace
from servelab.workload.traces.transform import mean_rate

PERCENTILES = (50, 90, 99)


def _summary(values: Sequence[float]) -> dict[str, float] | None:
    if len(values) == 0:
        return None
    a = np.asarray(values, dtype=np.float64)
    p = np.percentile(a, PERCENTILES)
    out = {"mean": float(a.mean())}
    out.update({f"p{q}": float(v) for q, v in zip(PERCENTILES, p, strict=True)})
    out["max"] = float(a.max())
    out["total"] = float(a.sum())
    return out


def interarrival_gaps(offsets_ns: Sequence[int] | np.ndarray) -> np.ndarray:
    """Gaps in seconds between consecutive arrivals (sorted first)."""
    a = np.sort(np.asarray(offsets_ns, dtype=np.int64))
    return np.diff(a).astype(np.float64) / NS_PER_S


def _cv(gaps: np.ndarray) -> float | None:
    if gaps.size < 2 or gaps.mean() <= 0:
        return None
    return float(gaps.std() / gaps.mean())


def prefix_reuse(trace: Trace, *, scope: str = "global") -> dict[str, float] | None:
    """Reusable prefix under an unbounded cache, walking requests in time order.

    Block ``i`` of a request is reusable iff ``hash_ids[:i+1]`` was the prefix of an earlier request
    (with ``scope="session"`` only an earlier request of the same root session counts). A block holds
    ``block_tokens`` tokens, the last one possibly fewer (``input_tokens - i * block_tokens``); tokens past
    the last hashed block are never reusable. ``fraction`` is reusable / all input tokens.
    None when no request carries hash ids.
    """
    if scope not in ("global", "session"):
        raise ValueError(f"scope must be 'global' or 'session', got {scope!r}")
    if not trace.has_hash_ids:
        return None
    parents = {sid: s.parent_session_id for sid, s in trace.sessions.items()}

    def root_of(sid: str | None) -> str | None:
        hops = 0
        while sid is not None and parents.get(sid) is not None and hops < 64:
            sid = parents[sid]
            hops += 1
        return sid

    trie: dict[tuple[int, int], int] = {}  # (node, hash id) -> child node; node ids: roots < 0, others >= 0
    roots: dict[str | None, int] = {}
    reusable = hashed = total = 0
    for r in trace.requests:
        total += r.input_tokens
        ids = r.hash_ids
        if not ids:
            continue
        b = r.block_tokens or trace.block_tokens
        if not b:
            raise ValueError("a request has hash_ids but no block_tokens")
        key = root_of(r.session_id) if scope == "session" else None
        node = roots.get(key)
        if node is None:
            node = roots[key] = -1 - len(roots)
        left = r.input_tokens
        for h in ids:  # every id enters the cache, even one past input_tokens (then it holds 0 tokens)
            n = b if left >= b else (left if left > 0 else 0)
            child = trie.get((node, h))
            if child is None:
                child = trie[(node, h)] = len(trie)
            else:
                reusable += n
            hashed += n
            left -= n
            node = child
    return {
        "reusable_tokens": float(reusable),
        "hashed_tokens": float(hashed),
        "input_tokens": float(total),
        "fraction": reusable / total if total else 0.0,
    }


def trace_stats(trace: Trace) -> dict[str, Any]:
    """Figures describing ``trace``; every key's unit is in its name or documented in docs/traces.md."""
    reqs = trace.requests
    gaps = interarrival_gaps([r.t_offset_ns for r in reqs]) if trace.timed else np.empty(0)
    subagents = sum(1 for s in trace.sessions.values() if s.parent_session_id is not None)
    think = [r.think_time_s for r in reqs if r.think_time_s is not None and r.turn > 0]
    reuse = prefix_reuse(trace)
    reuse_session = prefix_reuse(trace, scope="session") if reuse is not None and trace.sessions else None
    stops = Counter(r.stop for r in reqs if r.stop is not None)
    return {
        "format": trace.format,
        "requests": len(reqs),
        "sessions": len(trace.sessions) - subagents,
        "subagent_sessions": subagents,
        "timed": trace.timed,
        "duration_s": trace.duration_ns / NS_PER_S if trace.timed else None,
        "rate_rps": mean_rate(trace) if trace.timed else None,
        "interarrival_cv": _cv(gaps),
        "input_tokens": _summary([r.input_tokens for r in reqs]),
        "output_tokens": _summary([r.output_tokens for r in reqs]),
        "think_time_s": _summary(think),
        "block_tokens": trace.block_tokens,
        "prefix_reuse": None if reuse is None else reuse["fraction"],
        "prefix_reuse_within_session": None if reuse_session is None else reuse_session["fraction"],
        "stop_reasons": dict(stops.most_common()),
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def stats_rows(stats: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows for printing ``trace_stats`` output as a two-column table."""
    rows = [("format", stats["format"]), ("requests", _fmt(stats["requests"]))]
    if stats["sessions"] or stats["subagent_sessions"]:
        rows.append(("sessions (sub-agents)", f"{stats['sessions']:,} ({stats['subagent_sessions']:,})"))
    if stats["timed"]:
        rows += [("duration", f"{_fmt(stats['duration_s'])} s"), ("rate", f"{_fmt(stats['rate_rps'])} req/s"),
                 ("inter-arrival CV", _fmt(stats["interarrival_cv"]))]
    else:
        rows.append(("timestamps", "none (arrivals come from the load)"))
    for key, label in (("input_tokens", "input tokens"), ("output_tokens", "output tokens"),
                       ("think_time_s", "think time s")):
        s = stats[key]
        if s is not None:
            rows.append((f"{label} mean / p50 / p90 / p99",
                         " / ".join(_fmt(s[k]) for k in ("mean", "p50", "p90", "p99"))))
    if stats["prefix_reuse"] is not None:
        rows.append((f"prefix reuse (unbounded cache, {_fmt(stats['block_tokens'])}-token blocks)",
                     f"{stats['prefix_reuse']:.1%}"))
    if stats["prefix_reuse_within_session"] is not None:
        rows.append(("prefix reuse within session", f"{stats['prefix_reuse_within_session']:.1%}"))
    if stats["stop_reasons"]:
        n = sum(stats["stop_reasons"].values())
        rows.append(("stop reasons", ", ".join(f"{k} {v / n:.0%}" for k, v in stats["stop_reasons"].items())))
    return rows


@dataclass(frozen=True, slots=True)
class KSResult:
    """Two-sample Kolmogorov-Smirnov comparison of inter-arrival gaps."""

    statistic: float  # sup |F_a - F_b|, 0 = identical empirical distributions
    pvalue: float
    n_a: int
    n_b: int


def ks_interarrival(gaps_a: Sequence[float] | np.ndarray, gaps_b: Sequence[float] | np.ndarray, *,
                    normalize: bool = False) -> KSResult:
    """KS test between two inter-arrival samples (seconds), e.g. the trace's and the replay's achieved
    gaps. ``normalize`` divides each sample by its mean first, comparing shape only (a replay at another
    rate)."""
    from scipy.stats import ks_2samp  # imported here: scipy.stats costs ~0.3 s to import

    a = np.asarray(gaps_a, dtype=np.float64)
    b = np.asarray(gaps_b, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError(f"both gap samples need at least one value, got {a.size} and {b.size}")
    if normalize:
        if a.mean() <= 0 or b.mean() <= 0:
            raise ValueError("cannot normalize a gap sample whose mean is 0")
        a = a / a.mean()
        b = b / b.mean()
    # exact p-values for small samples; the asymptotic distribution beyond (exact is slow and may not
    # converge)
    res = ks_2samp(a, b, method="exact" if max(a.size, b.size) <= 1000 else "asymp")
    return KSResult(
        statistic=float(res.statistic), pvalue=float(res.pvalue), n_a=int(a.size), n_b=int(b.size)
    )
