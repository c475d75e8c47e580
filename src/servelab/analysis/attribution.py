"""Tail attribution: where the time of the slowest requests (and sessions) went, against the median.

Requests at or above the p95 latency (``end - intended``: what a user waits, schedule lag included) are
compared with the median requests (those between p40 and p60). Each request's time is split into:

    client queueing     sent - intended (the client fell behind its schedule)
    server queueing     srv_queue_ns        \\
    prompt processing   srv_prefill_ns       |  ground truth, when the target reports it
    decode              srv_decode_ns        |  (the simulated engine does)
    KV preemption       srv_preempted_ns     |
    expert exchange     srv_comm_ns         /
    transport/other     what is left of (end - sent)

Against a server that reports no ground truth, server queueing + prompt processing are estimated together
from TTFT (first token - sent) and decode from the rest (end - first token); the result says so.

Sessions (agent tasks) are split the same way over their recorded model, tool, retrieval, code, think,
waiting, context and queue time, with the unaccounted rest as "other".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from servelab.records.schema import OK

MIN_REQUESTS = 20
_SRV = (("server_queue", "server queueing", "srv_queue_ns"), ("prefill", "prompt processing", "srv_prefill_ns"),
        ("decode", "decode", "srv_decode_ns"), ("kv_preemption", "KV preemption", "srv_preempted_ns"),
        ("expert_exchange", "expert exchange", "srv_comm_ns"))
_SESSION_PARTS = (("model", "model turns", "model_ns"), ("tool", "tool calls", "tool_ns"),
                  ("retrieval", "retrieval", "retrieval_ns"), ("code", "code execution", "code_ns"),
                  ("think", "think time", "think_ns"), ("waiting", "waiting", "waiting_ns"),
                  ("context", "context assembly", "context_ns"), ("queue", "queueing", "queue_ns"))


def _raw(data: Any, c: str) -> list[Any]:
    if isinstance(data, pa.Table):
        return data.column(c).to_pylist() if c in data.column_names else [None] * data.num_rows
    if isinstance(data, Mapping):
        n = len(next(iter(data.values()))) if data else 0
        return list(data.get(c, [None] * n))
    return [getattr(r, c, None) for r in data]


def int_columns(data: Any, names: Sequence[str]) -> dict[str, np.ndarray]:
    """Integer columns as int64 arrays (nulls as 0) with their null masks under ``name + '?'``; plus
    ``status`` and ``warmup``. Accepts a pyarrow Table, a list of dataclass records, or a dict of lists."""
    if not isinstance(data, pa.Table | Mapping):
        data = list(data)
    out: dict[str, np.ndarray] = {}
    for c in names:
        vals = _raw(data, c)
        out[c + "?"] = np.array([v is None for v in vals], dtype=bool)
        out[c] = np.array([0 if v is None else int(v) for v in vals], dtype=np.int64)
    out["status"] = np.array(_raw(data, "status"), dtype=object)
    out["warmup"] = np.array([bool(w) for w in _raw(data, "warmup")], dtype=bool)
    return out


def _split(total_ms: np.ndarray, parts: dict[str, np.ndarray], labels: Mapping[str, str], pct: float,
           scope: str) -> dict[str, Any]:
    n = total_ms.size
    thr = float(np.percentile(total_ms, pct))
    lo, hi = np.percentile(total_ms, [40, 60])
    tail = total_ms >= thr
    mid = (total_ms >= lo) & (total_ms <= hi)
    comps = []
    t_tot, m_tot = float(total_ms[tail].mean()), float(total_ms[mid].mean())
    for name, arr in parts.items():
        t, m = float(arr[tail].mean()), float(arr[mid].mean())
        comps.append({"name": name, "label": labels[name], "tail_ms": t, "median_ms": m,
                      "tail_share": t / t_tot if t_tot > 0 else 0.0,
                      "median_share": m / m_tot if m_tot > 0 else 0.0, "excess_ms": t - m})
    dom = max(comps, key=lambda c: c["excess_ms"])
    extra = t_tot - m_tot
    words = (f"The {scope} at or above p{pct:g} ({int(tail.sum())} of {n}, {thr:.0f} ms and more) take "
             f"{t_tot:.0f} ms on average against {m_tot:.0f} ms for the median ones")
    if extra > 0:
        words += (f"; {dom['label']} accounts for {dom['excess_ms']:.0f} ms of the {extra:.0f} ms difference "
                  f"({dom['excess_ms'] / extra:.0%})")
    return {"scope": scope, "percentile": pct, "n": n, "n_tail": int(tail.sum()), "n_median": int(mid.sum()),
            "tail_threshold_ms": thr, "tail_mean_ms": t_tot, "median_mean_ms": m_tot, "components": comps,
            "dominant": dom["name"], "summary": words}


def request_attribution(requests: Any, percentile: float = 95.0) -> dict[str, Any]:
    """Split of the tail requests' time against the median requests'; see the module docstring."""
    names = ("intended_ns", "sent_ns", "first_token_ns", "end_ns", *(c for _, _, c in _SRV))
    c = int_columns(requests, names)
    ok = (c["status"] == OK) & ~c["warmup"] & ~c["sent_ns?"] & ~c["end_ns?"] & ~c["first_token_ns?"]
    n = int(ok.sum())
    if n < MIN_REQUESTS:
        return {"scope": "requests", "n": n, "components": [], "ground_truth": False,
                "summary": f"too few successful requests ({n}) to tell a tail from the median "
                           f"(at least {MIN_REQUESTS} are needed)"}
    ms = 1e-6

    def col(name: str) -> np.ndarray:
        return c[name][ok]

    base = col("intended_ns").min()
    intended, sent, first, end = ((col(k) - base).astype(np.float64) for k in
                                  ("intended_ns", "sent_ns", "first_token_ns", "end_ns"))
    total = (end - intended) * ms
    parts: dict[str, np.ndarray] = {"client_queue": np.clip(sent - intended, 0, None) * ms}
    labels = {"client_queue": "client queueing"}
    truth = all(not c[f"{k}?"][ok].any() for _, _, k in _SRV[:3])
    if truth:
        srv_sum = np.zeros(n)
        for name, label, k in _SRV:
            v = np.where(c[f"{k}?"][ok], 0, col(k)).astype(np.float64) * ms
            parts[name], labels[name] = v, label
            srv_sum += v
        parts["other"] = np.clip((end - sent) * ms - srv_sum, 0, None)
        labels["other"] = "transport and client"
        note = "ground truth reported by the target (srv_* columns)"
    else:
        parts["queue_prefill_est"] = (first - sent) * ms
        labels["queue_prefill_est"] = "server queueing + prompt processing (estimated from TTFT)"
        parts["decode_est"] = (end - first) * ms
        labels["decode_est"] = "decode (estimated: end - first token)"
        note = ("estimate: the target reports no breakdown, so queueing + prompt processing come from TTFT "
                "and decode from the rest")
    out = _split(total, parts, labels, percentile, "requests")
    out.update(ground_truth=truth, note=note)
    return out


def session_attribution(sessions: Any, percentile: float = 95.0) -> dict[str, Any]:
    """Split of the slowest sessions' wall clock (model turns, tools, retrieval...) against the median."""
    names = ("start_ns", "end_ns", *(k for _, _, k in _SESSION_PARTS))
    c = int_columns(sessions, names)
    ok = ~c["warmup"] & ~c["end_ns?"] & (c["status"] != "cancelled")
    n = int(ok.sum())
    if n < MIN_REQUESTS:
        return {"scope": "sessions", "n": n, "components": [],
                "summary": f"too few finished sessions ({n}) to tell a tail from the median "
                           f"(at least {MIN_REQUESTS} are needed)"}
    ms = 1e-6
    total = (c["end_ns"][ok] - c["start_ns"][ok]).astype(np.float64) * ms
    parts, labels = {}, {}
    acc = np.zeros(n)
    for name, label, k in _SESSION_PARTS:
        v = np.where(c[f"{k}?"][ok], 0, c[k][ok]).astype(np.float64) * ms
        if v.any():
            parts[name], labels[name] = v, label
            acc += v
    parts["other"], labels["other"] = np.clip(total - acc, 0, None), "unaccounted"
    out = _split(total, parts, labels, percentile, "sessions")
    tool_like = sum(out_c["tail_ms"] for out_c in out["components"]
                    if out_c["name"] in ("tool", "retrieval", "code"))
    out["tool_share_tail"] = tool_like / out["tail_mean_ms"] if out["tail_mean_ms"] > 0 else 0.0
    return out


def tail_attribution(requests: Any, sessions: Any = None, percentile: float = 95.0) -> dict[str, Any]:
    """``{"requests": request_attribution(...), "sessions": session_attribution(...) or None}``."""
    return {"requests": request_attribution(requests, percentile),
            "sessions": None if sessions is None else session_attribution(sessions, percentile)}
