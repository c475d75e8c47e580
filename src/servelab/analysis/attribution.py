"""Attribution that adds up: where each request's (and session's) time went, and where the tail's went.

Per request, the time a user waits (``end - intended``: schedule lag included) is cut into DISJOINT parts,
each >= 0, that sum to it exactly (integer nanoseconds):

    client_lag      sent - intended (the client fell behind its own schedule)
    server_queue    srv_queue_ns: arrival to first scheduling                       \\
    prefill         srv_prefill_ns less any preemption in it: first scheduling to     |
                    first token, waiting between chunks included                      | ground truth,
    preemption      srv_preempted_ns: evicted (KV full) and waiting to be rescheduled | when the target
    decode          srv_decode_ns less any preemption in it: first token to end       | reports it
    transport       what is left of (end - sent): network, HTTP, client parsing      /

The server's own figures nest: ``queue + prefill + decode`` spans arrival to finish and the preempted time
lies inside prefill or decode, so preemption is carved out of decode first (where a growing KV cache
evicts), then prefill. Communication inside steps (expert all-to-all, KV transfer: ``srv_comm_ns``) is
time the request's steps spent exchanging data, so it is shown NESTED inside prefill + decode
(``nested`` components), never added to the sum. The recompute after a preemption is a re-prefill and is
counted in prefill/decode where it happens.

If the server's figures exceed what the client saw (clocks of two machines), each part is fitted in order
into ``end - sent``, so the sum still holds. Against a server that reports no ground truth, queue + prefill
are estimated together from TTFT and decode from the rest; the result says so.

Sessions (agent tasks): wall clock = server queueing inside model turns (``queue_ns``, taken OUT of the
model time that contains it) + model turns + tool + retrieval + code + think + retry backoff
(``waiting_ns``) + client overhead (the rest: building context, bookkeeping). Context assembly is not
timed as its own part: the client builds messages in memory with no clock advance, so the recorded
``context_ns`` (kept in the schema) is folded into client overhead.

Tail vs median: requests at or above the p95 against those between p40 and p60, mean ms per part. Because
the parts sum to the total, their excesses sum to the total excess; ``excess_share`` is each part's share
of the GROWTH (positive excesses only), so the shares lie in [0, 1] and sum to 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from servelab.records.schema import OK

MIN_REQUESTS = 20
REQUEST_PARTS = (("client_lag", "client schedule lag"), ("server_queue", "server queueing"),
                 ("prefill", "prefill (incl. waiting between chunks)"),
                 ("preemption", "preemption (evicted, waiting to resume)"), ("decode", "decode"),
                 ("transport", "transport and client"))
NESTED_PARTS = (("expert_exchange", "of which communication / expert exchange (inside prefill + decode)"),)
ESTIMATE_PARTS = (("client_lag", "client schedule lag"),
                  ("queue_prefill_est", "server queueing + prefill (estimated from TTFT)"),
                  ("decode_est", "decode + transport (estimated: end - first token)"))
SESSION_PARTS = (("server_queue", "server queueing (inside model turns)"),
                 ("model", "model turns (excluding server queueing)"), ("tool", "tool calls"),
                 ("retrieval", "retrieval"), ("code", "code execution"), ("think", "think time"),
                 ("backoff", "retry backoff"), ("other", "client overhead (context assembly, bookkeeping)"))
_SRV = ("srv_queue_ns", "srv_prefill_ns", "srv_decode_ns", "srv_preempted_ns", "srv_comm_ns")


def _raw(data: Any, c: str) -> list[Any]:
    if isinstance(data, pa.Table):
        return data.column(c).to_pylist() if c in data.column_names else [None] * data.num_rows
    if isinstance(data, Mapping):
        n = len(next(iter(data.values()))) if data else 0
        return list(data.get(c, [None] * n))
    return [getattr(r, c, None) for r in data]


def _arrow_ints(data: Any, c: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(null mask, int64 values with nulls as 0) of an integer column of a table, else None."""
    if not isinstance(data, pa.Table) or c not in data.column_names:
        return None
    col = data.column(c)
    if not pa.types.is_signed_integer(col.type) or col.num_chunks == 0:
        return None
    return (np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool),
            np.asarray(col.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64))


def int_columns(data: Any, names: Sequence[str]) -> dict[str, np.ndarray]:
    """Integer columns as int64 arrays (nulls as 0) with their null masks under ``name + '?'``; plus
    ``status`` and ``warmup``. Accepts a pyarrow Table, a list of dataclass records, or a dict of lists."""
    if not isinstance(data, pa.Table | Mapping):
        data = list(data)
    out: dict[str, np.ndarray] = {}
    for c in names:
        if (got := _arrow_ints(data, c)) is not None:  # no Python int per value (the report's memory)
            out[c + "?"], out[c] = got
            continue
        vals = _raw(data, c)
        out[c + "?"] = np.array([v is None for v in vals], dtype=bool)
        out[c] = np.array([0 if v is None else int(v) for v in vals], dtype=np.int64)
    out["status"] = np.array(_raw(data, "status"), dtype=object)
    out["warmup"] = np.array([bool(w) for w in _raw(data, "warmup")], dtype=bool)
    return out


def _fit(parts: Sequence[np.ndarray], room: np.ndarray) -> list[np.ndarray]:
    """Clip each part to >= 0 and fit them in order into ``room``; the last entry is what is left."""
    left = np.maximum(room, 0)
    out = []
    for p in parts:
        v = np.minimum(np.maximum(p, 0), left)
        out.append(v)
        left = left - v
    out.append(left)
    return out


def request_parts(requests: Any) -> dict[str, Any]:
    """Per-request decomposition (int64 ns arrays over the successful, non-warm-up requests).

    ``{"n", "total", "parts": {name: array}, "nested": {name: array}, "ground_truth", "request_id"}``
    with ``sum(parts) == total`` exactly and every part >= 0."""
    names = ("request_id", "intended_ns", "sent_ns", "first_token_ns", "end_ns", *_SRV)
    c = int_columns(requests, names)
    ok = (c["status"] == OK) & ~c["warmup"] & ~c["sent_ns?"] & ~c["end_ns?"] & ~c["first_token_ns?"]

    def col(k: str) -> np.ndarray:
        return c[k][ok]

    intended, sent, first, end = col("intended_ns"), col("sent_ns"), col("first_token_ns"), col("end_ns")
    start = np.minimum(intended, end)
    total = end - start
    lag, seen = _fit([sent - start], total)  # seen = end - sent (or 0)
    truth = bool(ok.any()) and not any(c[f"{k}?"][ok].any() for k in _SRV[:3])
    parts: dict[str, np.ndarray] = {"client_lag": lag}
    nested: dict[str, np.ndarray] = {}
    if truth:
        q, p, d = col("srv_queue_ns"), col("srv_prefill_ns"), col("srv_decode_ns")
        pre = np.where(c["srv_preempted_ns?"][ok], 0, col("srv_preempted_ns"))
        pre_d = np.clip(pre, 0, np.maximum(d, 0))
        pre_p = np.clip(pre - pre_d, 0, np.maximum(p, 0))
        queue, prefill, preempt, decode, rest = _fit([q, p - pre_p, pre_d + pre_p, d - pre_d], seen)
        parts.update(server_queue=queue, prefill=prefill, preemption=preempt, decode=decode, transport=rest)
        comm = np.where(c["srv_comm_ns?"][ok], 0, col("srv_comm_ns"))
        nested["expert_exchange"] = np.clip(comm, 0, prefill + decode)
    else:
        qp, dec = _fit([first - np.maximum(sent, start)], seen)
        parts.update(queue_prefill_est=qp, decode_est=dec)
    return {"n": int(ok.sum()), "total": total, "parts": parts, "nested": nested, "ground_truth": truth,
            "request_id": col("request_id")}


def session_parts(sessions: Any) -> dict[str, Any]:
    """Per-session decomposition of the wall clock (ns arrays over finished, non-warm-up sessions);
    ``sum(parts) == total`` exactly, every part >= 0."""
    names = ("session_id", "start_ns", "end_ns", "model_ns", "queue_ns", "tool_ns", "retrieval_ns", "code_ns",
             "think_ns", "waiting_ns")
    c = int_columns(sessions, names)
    ok = ~c["warmup"] & ~c["end_ns?"] & (c["status"] != "cancelled")

    def col(k: str) -> np.ndarray:
        return c[k][ok]

    total = np.maximum(col("end_ns") - col("start_ns"), 0)
    model = col("model_ns")
    queue = np.clip(col("queue_ns"), 0, np.maximum(model, 0))
    fitted = _fit([queue, model - queue, col("tool_ns"), col("retrieval_ns"), col("code_ns"), col("think_ns"),
                   col("waiting_ns")], total)
    parts = dict(zip([k for k, _ in SESSION_PARTS], fitted, strict=True))
    return {"n": int(ok.sum()), "total": total, "parts": parts, "nested": {}, "session_id": col("session_id")}


def _component(name: str, label: str, arr: np.ndarray, tail: np.ndarray, mid: np.ndarray, t_tot: float,
               m_tot: float, nested: str | None = None) -> dict[str, Any]:
    t, m = float(arr[tail].mean()), float(arr[mid].mean())
    out = {"name": name, "label": label, "tail_ms": t, "median_ms": m,
           "tail_share": t / t_tot if t_tot > 0 else 0.0, "median_share": m / m_tot if m_tot > 0 else 0.0,
           "excess_ms": t - m}
    if nested:
        out["nested_in"] = nested
    return out


def _split(dec: dict[str, Any], labels: Sequence[tuple[str, str]], pct: float, scope: str) -> dict[str, Any]:
    ms = 1e-6
    total_ms = dec["total"].astype(np.float64) * ms
    n = total_ms.size
    thr = float(np.percentile(total_ms, pct))
    lo, hi = np.percentile(total_ms, [40, 60])
    tail = total_ms >= thr
    mid = (total_ms >= lo) & (total_ms <= hi)
    t_tot, m_tot = float(total_ms[tail].mean()), float(total_ms[mid].mean())
    comps = [_component(k, lab, dec["parts"][k].astype(np.float64) * ms, tail, mid, t_tot, m_tot)
             for k, lab in labels if k in dec["parts"]]
    grow = sum(max(c["excess_ms"], 0.0) for c in comps)
    for c in comps:
        c["excess_share"] = max(c["excess_ms"], 0.0) / grow if grow > 0 else 0.0
    for k, lab in NESTED_PARTS:
        if k in dec["nested"]:
            nc = _component(k, lab, dec["nested"][k].astype(np.float64) * ms, tail, mid, t_tot, m_tot,
                            nested="prefill+decode")
            nc["excess_share"] = None  # inside prefill/decode: not a share of the growth on its own
            comps.append(nc)
    top = [c for c in comps if "nested_in" not in c]
    dom = max(top, key=lambda c: c["excess_ms"])
    extra = t_tot - m_tot
    words = (f"The {scope} at or above p{pct:g} ({int(tail.sum()):,} of {n:,}, {_dur(thr)} and more) take "
             f"{_dur(t_tot)} on average against {_dur(m_tot)} for the median ones")
    if extra > 0 and dom["excess_ms"] > 0:
        words += (f"; {dom['label']} accounts for {_dur(dom['excess_ms'])} of the {_dur(extra)} difference "
                  f"({dom['excess_share']:.0%} of the growth)")
    return {"scope": scope, "percentile": pct, "n": n, "n_tail": int(tail.sum()), "n_median": int(mid.sum()),
            "tail_threshold_ms": thr, "tail_mean_ms": t_tot, "median_mean_ms": m_tot, "excess_ms": extra,
            "components": comps, "dominant": dom["name"], "summary": words}


def _dur(ms: float) -> str:
    """A duration for the summary sentence, 3 significant figures: 12.7 ms, 400 ms, 2.80 s, 1,234 s."""
    value, unit = (ms / 1000.0, "s") if abs(ms) >= 1000.0 else (ms, "ms")
    if value == 0:
        return f"0 {unit}"
    if abs(value) >= 1000.0:
        return f"{value:,.0f} {unit}"
    return f"{value:#.3g}".rstrip(".") + f" {unit}"


def request_attribution(requests: Any, percentile: float = 95.0) -> dict[str, Any]:
    """Split of the tail requests' time against the median requests'; see the module docstring."""
    dec = request_parts(requests)
    n = dec["n"]
    if n < MIN_REQUESTS:
        return {"scope": "requests", "n": n, "components": [], "ground_truth": dec["ground_truth"],
                "summary": f"too few successful requests ({n}) to tell a tail from the median "
                           f"(at least {MIN_REQUESTS} are needed)"}
    if dec["ground_truth"]:
        out = _split(dec, REQUEST_PARTS, percentile, "requests")
        note = ("ground truth reported by the target (srv_* columns); disjoint parts sum to the latency, "
                "communication is nested inside prefill + decode")
    else:
        out = _split(dec, ESTIMATE_PARTS, percentile, "requests")
        note = ("estimate: the target reports no breakdown, so queueing + prefill come from TTFT and decode "
                "from the rest")
    out.update(ground_truth=dec["ground_truth"], note=note)
    return out


def session_attribution(sessions: Any, percentile: float = 95.0) -> dict[str, Any]:
    """Split of the slowest sessions' wall clock (model turns, tools, retrieval...) against the median."""
    dec = session_parts(sessions)
    n = dec["n"]
    if n < MIN_REQUESTS:
        return {"scope": "sessions", "n": n, "components": [],
                "summary": f"too few finished sessions ({n}) to tell a tail from the median "
                           f"(at least {MIN_REQUESTS} are needed)"}
    keep = [(k, lab) for k, lab in SESSION_PARTS if k == "other" or dec["parts"][k].any()]
    out = _split(dec, keep, percentile, "sessions")
    tool_like = sum(c["tail_ms"] for c in out["components"] if c["name"] in ("tool", "retrieval", "code"))
    out["tool_share_tail"] = tool_like / out["tail_mean_ms"] if out["tail_mean_ms"] > 0 else 0.0
    return out


def tail_attribution(requests: Any, sessions: Any = None, percentile: float = 95.0) -> dict[str, Any]:
    """``{"requests": request_attribution(...), "sessions": session_attribution(...) or None}``."""
    return {"requests": request_attribution(requests, percentile),
            "sessions": None if sessions is None else session_attribution(sessions, percentile)}
