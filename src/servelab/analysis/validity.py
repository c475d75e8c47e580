"""Is a run's set of figures trustworthy? Each check returns the reasons it is not, with the numbers.

A run is invalid when its figures would mislead: nothing was measured or nothing succeeded, too many
requests failed (``validity.max_error_rate``), an open-loop server did not keep up with the offered rate
(``validity.min_achieved_fraction``), a closed loop sent fewer requests than it has users (no steady state),
the client fell behind an open-loop schedule (the load offered was not the load asked for), the client's
event loop was saturated (timestamps are late), the record counts do not add up (records were lost), or the
run never finished. Invalid figures are still reported, flagged. docs/exit-codes.md lists every rule.

Hints from the runner come in ``extra`` (all optional):

* ``loop_lag_p99_ms`` (float; ``loop_lag_ms_p99`` is accepted too): p99 lateness of a periodic timer on
  the client's event loop;
* ``loop_saturated`` (bool): the runner's own verdict that its loop could not keep up;
* ``requests_issued`` (int): request attempts the runner started (every one must have a record);
* ``stopped_by`` (str): why sending stopped (``interrupt``, Ctrl-C, and ``incomplete``, a run read back
  from its journals because it never finished, are both invalid: the figures cover only part of the run).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from servelab.records.schema import STATUS_WORDS

# Defaults of the ``validity`` config section (servelab.config.validity); kept here so analysis stays pure.
MAX_ERROR_RATE = 0.05
MIN_ACHIEVED_FRACTION = 0.9
MIN_OPEN_LOOP_SAMPLE = 20  # fewer completions than this: too few to tell offered from achieved
# open loop: send for at least 2 x the median latency, or it is all ramp and drain
MIN_SPAN_OVER_LATENCY = 2.0


def count_reasons(requests: Mapping[str, Any], unknown: Mapping[str, int]) -> list[str]:
    """sent = ok + failed + cancelled, and no record of an unknown status."""
    failed = sum(requests["failed"].values())
    total = requests["ok"] + failed + requests["cancelled"]
    out = []
    if total != requests["sent"]:
        detail = ", ".join(f"{k!r}: {v}" for k, v in sorted(unknown.items())) or "none"
        out.append(
            f"counts do not add up: sent {requests['sent']} != ok {requests['ok']} + failed {failed} + "
            f"cancelled {requests['cancelled']} (records of unknown status: {detail})"
        )
    return out


def lag_reasons(mode: str, lag_p99_ms: float | None, max_lag_p99_ms: float) -> list[str]:
    """Open loop: the client must keep to its schedule."""
    if mode != "open" or lag_p99_ms is None or lag_p99_ms <= max_lag_p99_ms:
        return []
    return [
        f"schedule lag p99 {lag_p99_ms:.3g} ms exceeds limits.max_lag_p99_ms {max_lag_p99_ms:g} ms: the "
        "client "
        "sent later than its open-loop schedule, so the offered rate was lower than asked (lower the rate, "
        "send from several processes with --workers N, or raise limits.max_lag_p99_ms)"
    ]


def runner_reasons(extra: Mapping[str, Any], max_lag_p99_ms: float, records: int) -> list[str]:
    """Hints from the runner: event-loop saturation and records lost."""
    out = []
    loop_lag = extra.get("loop_lag_p99_ms", extra.get("loop_lag_ms_p99"))
    if loop_lag is not None and loop_lag > max_lag_p99_ms:
        out.append(
            f"client event loop saturated: timer lag p99 {loop_lag:.3g} ms exceeds {max_lag_p99_ms:g} ms, so "
            "timestamps were taken late (spread the load over processes with --workers N, or lower it)"
        )
    elif extra.get("loop_saturated"):
        out.append("client event loop saturated (reported by the runner): timestamps may be late")
    issued = extra.get("requests_issued")
    if issued is not None and issued != records:
        out.append(f"records lost: the runner issued {issued} requests but {records} records exist")
    if extra.get("stopped_by") == "incomplete":
        out.append("the run did not finish (no summary.json was written): these figures were recomputed from "
                   "its journal and may miss requests that were in flight")
    return out


def interrupted_reasons(extra: Mapping[str, Any], config: Any, requests: Mapping[str, Any],
                        elapsed_s: float | None) -> list[str]:
    """Ctrl-C: the figures cover only what finished before it, so the run is not valid as planned.
    Says how far it got: of the planned requests (``limits.requests``, warm-up included), of the planned
    sessions (agent runs) or of the planned duration (``limits.duration_s``)."""
    if extra.get("stopped_by") != "interrupt":
        return []
    sent = int(requests.get("sent", 0)) + int(requests.get("warmup", 0))
    limits = getattr(config, "limits", None)
    planned = getattr(limits, "requests", None)
    sessions = getattr(limits, "sessions", None)
    duration = getattr(limits, "duration_s", None)
    if planned and not getattr(config, "is_agent", False):
        how = f"after {sent:,} of {int(planned):,} planned requests"
    elif sessions and getattr(config, "is_agent", False):
        how = f"after {sent:,} requests, before its {int(sessions):,} planned sessions finished"
    elif duration and elapsed_s is not None:
        how = f"after {sent:,} requests, {elapsed_s:.3g} s of the planned {duration:g} s"
    else:
        how = f"after {sent:,} requests"
    return [f"the run was interrupted {how}: the figures cover only what finished (a partial run)"]


def outcome_reasons(
    requests: Mapping[str, Any], errors: Mapping[str, Any], max_error_rate: float
) -> list[str]:
    """Nothing measured, nothing succeeded, or too many failures for the latencies to stand for the run."""
    failed = sum(requests["failed"].values())
    attempted = requests["ok"] + failed
    if requests["sent"] == 0 or attempted == 0:
        return ["no request was measured (every one was warm-up or cancelled): there are no figures to trust"]
    why = _failure_detail(requests, errors)
    if requests["ok"] == 0:
        return [f"no request succeeded: all {attempted} attempts failed ({why})"]
    rate = failed / attempted
    if rate > max_error_rate:
        return [f"error rate {rate:.1%} ({failed} of {attempted} attempts failed: {why}) exceeds "
                f"validity.max_error_rate {max_error_rate:.1%}: latencies describe only the requests that "
                "succeeded"]
    return []


def _failure_detail(requests: Mapping[str, Any], errors: Mapping[str, Any]) -> str:
    parts = [f"{STATUS_WORDS.get(k, k)} {v}" for k, v in requests["failed"].items() if v]
    codes = errors.get("by_http_status") or {}
    if codes:
        parts.append("HTTP " + ", ".join(f"{c} x{n}" for c, n in codes.items()))
    top = errors.get("top") or []
    if top:
        parts.append(f"first error: {str(top[0][0])[:120]}")
    return "; ".join(parts)


def steady_state_reasons(mode: str, sent: int, concurrency: int | None) -> list[str]:
    """Closed loop: with fewer requests than users, no user ever sent a second request."""
    if mode != "closed" or not concurrency or sent == 0 or sent >= concurrency:
        return []
    return [f"only {sent} measured requests at concurrency {concurrency}: fewer requests than users, so the "
            f"run never reached a steady state (send at least {concurrency} requests, ideally many more)"]


def offered_vs_achieved(intended_ns: np.ndarray, end_ns: np.ndarray,
                        scheduled_ns: np.ndarray | None = None) -> dict[str, Any] | None:
    """Open loop: the rate requests were offered and the rate the server completed them, two ways.

    The offered rate is what was scheduled, never what completed: ``scheduled_ns`` holds the intended send
    time of every measured request (cancelled ones included: a request the drain or Ctrl-C cut was offered
    all the same), default ``intended_ns``; offered = (scheduled - 1) / their span (``send_span_s``).
    ``intended_ns`` / ``end_ns`` (the requests that ended) give the latencies below.

    * Latency growth: a server that keeps up answers a request in about the same time whenever it was
      sent; one that falls behind queues them, and the time from intended send to end grows with the send
      time, slope ``offered / capacity - 1`` (least squares over every completed request, with its standard
      error: mixed lengths make latencies vary). Achieved fraction ``1 / (1 + slope)``.
    * Window: with the median latency L, the requests sent in ``[first send, last send - L]`` should end in
      ``[first send + L, last send]``; a server that batches everything and finishes late (a transient, not a
      queue) ends far fewer there. Used when that window is at least a quarter of the sending span.

    ``fraction`` is the lower of the two and ``estimated_rps`` = offered x fraction the rate it implies: an
    estimate, never what completed (:func:`verdict_reasons` adds ``achieved_rps``, the requests that
    completed ok over the measured window, beside it). ``None`` with fewer than 20 completed requests.
    """
    keep = np.isfinite(intended_ns) & np.isfinite(end_ns)
    n = int(keep.sum())
    if n < MIN_OPEN_LOOP_SAMPLE:
        return None
    # The same arithmetic as ever, in fewer live float64 copies (8 bytes a request each; 52-56 bytes a
    # request at the peak before, 35-41 now): results computed in place where an expression made a new
    # array, ``t - mean`` and ``lat - mean`` made once, the median and the window counted before the fit,
    # and each array let go when its last use is done.
    sched = np.asarray(intended_ns if scheduled_ns is None else scheduled_ns, dtype=np.float64)
    sched = sched[np.isfinite(sched)]
    t = intended_ns[keep]
    t0 = min(float(sched.min()), float(t.min())) if sched.size else t.min()
    lat = end_ns[keep]
    del keep
    lat -= t
    lat /= 1e9
    t -= t0
    t /= 1e9
    if sched.size:
        sched -= t0
        sched /= 1e9
    st = sched if sched.size else t
    span = float(max(st.max(), t.max()))
    n_sched = st.size
    lmed = float(np.median(lat))
    window: dict[str, Any] = {}
    if span > 0 and span - lmed >= 0.25 * span:
        sent_w = int((st <= span - lmed).sum())
        ended = t + lat
        done_w = int(((ended >= lmed) & (ended <= span)).sum())
        del ended
        if sent_w >= MIN_OPEN_LOOP_SAMPLE:
            window = {"window_fraction": done_w / sent_w, "window_sent": sent_w, "window_done": done_w}
    del sched, st
    dt = t
    dt -= t.mean()  # t - t.mean(), in t's own buffer
    sxx = float((dt ** 2).sum())
    if span <= 0 or sxx <= 0:
        return None
    dl = lat
    dl -= lat.mean()  # lat - lat.mean()
    slope = float((dt * dl).sum() / sxx)
    dl -= slope * dt  # the residuals
    se = float(np.sqrt((dl ** 2).sum() / (n - 2) / sxx))
    del dt, dl, t, lat
    offered = (max(n_sched, n) - 1) / span
    out: dict[str, Any] = {"offered_rps": offered, "send_span_s": span, "median_latency_s": lmed,
                           "latency_growth": slope, "latency_growth_se": se,
                           "growth_fraction": 1.0 / (1.0 + max(slope, -0.5)), "window_fraction": None}
    out.update(window)
    fractions = [out["growth_fraction"]] + (
        [out["window_fraction"]] if out["window_fraction"] is not None else []
    )
    out["fraction"] = min(fractions)
    out["estimated_rps"] = offered * out["fraction"]
    return out


def _shortfall(load: Mapping[str, Any], min_fraction: float) -> bool:
    """Is the shortfall below ``min_fraction`` more than noise (2 standard errors; Poisson for counts)?"""
    growth = (load["growth_fraction"] < min_fraction
              and load["latency_growth"] - 2 * load["latency_growth_se"] > 1 / min_fraction - 1)
    window = (load["window_fraction"] is not None and load["window_fraction"] < min_fraction
              and load["window_sent"] - load["window_done"] > 2 * np.sqrt(load["window_sent"]))
    return bool(growth or window)


def _rate(load: Mapping[str, Any]) -> str:
    """The offered rate as sent; with the rate asked for beside it when a random draw moved it by > 5%."""
    sent, asked = load["offered_rps"], load.get("asked_rps")
    if asked and abs(sent - asked) > 0.05 * asked:
        return f"{sent:.3g} req/s (asked {asked:.3g}; the arrival draw sent {sent:.3g})"
    return f"{sent:.3g} req/s"


def _estimate(load: Mapping[str, Any]) -> str:
    """How the estimate behind ``fraction`` was made, named as an estimate (the lower of the two)."""
    frac, est = load["fraction"], load["estimated_rps"]
    if load["window_fraction"] is not None and load["window_fraction"] <= load["growth_fraction"]:
        first = load["send_span_s"] - load["median_latency_s"]
        return (f"of the {load['window_sent']} requests sent in the first {first:.3g} s, "
                f"{load['window_done']} ended by {load['send_span_s']:.3g} s ({frac:.0%}; a window estimate "
                f"of {est:.3g} req/s)")
    return (f"latency grew {load['latency_growth']:.3g} s per second of sending, the growth of a server "
            f"serving {frac:.0%} of the offered rate (a fitted {est:.3g} req/s)")


def achieved_reasons(mode: str, load: Mapping[str, Any] | None, min_fraction: float) -> list[str]:
    """Open loop: the server kept up with the offered rate, and the run sent long enough to tell. The
    figures are named for what they are: ``achieved_rps`` the requests that completed ok over the measured
    window (the throughput line's figure), ``estimated_rps`` the rate the verdict's estimate implies."""
    if mode != "open" or load is None:
        return []
    achieved = load.get("achieved_rps")
    if load["fraction"] >= min_fraction or not _shortfall(load, min_fraction):
        if load["send_span_s"] < MIN_SPAN_OVER_LATENCY * load["median_latency_s"]:
            seen = f"; the measured throughput is {achieved:.3g} req/s" if achieved else ""
            return [
                f"open loop at {_rate(load)} sent for only {load['send_span_s']:.3g} s, less "
                f"than {MIN_SPAN_OVER_LATENCY:g} x the median latency ({load['median_latency_s']:.3g} "
                f"s){seen}: "
                "the run is mostly ramp-up and drain, never a steady state (send more requests or for longer)"
            ]
        return []
    done = ""
    if achieved is not None:
        cut = f"; {load['cancelled']} cancelled" if load.get("cancelled") else ""
        done = (f" but {load['completed']} requests completed in {load['window_s']:.3g} s "
                f"({achieved:.3g} req/s{cut});")
    return [f"offered {_rate(load)} over {load['send_span_s']:.3g} s{done or ':'} {_estimate(load)}, below "
            f"validity.min_achieved_fraction {min_fraction:.0%}: the server did not keep up, so latencies "
            "depend on how long the run lasted (lower the rate)"]


def warnings_for(summary: Mapping[str, Any], extra: Mapping[str, Any]) -> list[str]:
    """Things a reader should know that do not invalidate the figures."""
    out = []
    req, tok = summary["requests"], summary["tokens"]
    if req["ok"] == 0:
        out.append("no successful measured requests: latency figures are empty")
    if tok["source"] != "usage":
        out.append(
            f"{tok['estimated']} request(s) had no usage block: their output tokens are the client's count "
            "of "
            "token chunks (a chunk can carry several tokens), so token figures may be low"
        )
    if tok["mismatch"]:
        out.append(f"{tok['mismatch']} request(s) received more token chunks than the server's usage reports")
    return out


def verdict_reasons(cols: Any, config: Any, mode: str, requests: Mapping[str, Any],
                    errors: Mapping[str, Any], window_s: float | None = None,
                    ) -> tuple[list[str], dict[str, Any] | None]:
    """The outcome, steady-state and offered-vs-achieved rules for one run's columns and config.
    ``window_s`` is the measured window the throughput figures are over (default: the first send to the
    last end of the requests that were not cancelled)."""
    v = getattr(config, "validity", None)
    max_err = float(getattr(v, "max_error_rate", MAX_ERROR_RATE))
    min_frac = float(getattr(v, "min_achieved_fraction", MIN_ACHIEVED_FRACTION))
    reasons = outcome_reasons(requests, errors, max_err)
    if not getattr(config, "is_agent", False):
        load = getattr(config, "load", None)
        reasons += steady_state_reasons(mode, requests["sent"], getattr(load, "effective_concurrency", None))
    load_check: dict[str, Any] | None = None
    if mode == "open":
        keep = ~cols.warmup & (cols.status != "cancelled")
        load_check = offered_vs_achieved(cols.t("intended_ns")[keep], cols.t("end_ns")[keep],
                                         cols.t("intended_ns")[~cols.warmup])
        asked = getattr(getattr(config, "load", None), "rate", None)
        if (
            load_check is not None
            and asked
            and getattr(getattr(config, "workload", None), "kind", "") != "replay"
        ):
            load_check["asked_rps"] = float(asked)
        if window_s is None:
            ends, starts = cols.t("end_ns")[keep], cols.t("intended_ns")[keep]
            window_s = (np.nanmax(ends) - np.nanmin(starts)) / 1e9 if np.isfinite(ends).any() else 0.0
        if load_check is not None and window_s and window_s > 0:
            load_check.update(completed=int(requests["ok"]), cancelled=int(requests["cancelled"]),
                              window_s=float(window_s), achieved_rps=requests["ok"] / window_s)
        reasons += achieved_reasons(mode, load_check, min_frac)
    return reasons, load_check
