"""Is a run's set of figures trustworthy? Each check returns the reasons it is not, with the numbers.

A run is invalid when its figures would mislead: the client fell behind an open-loop schedule (the load
offered was not the load asked for), the client's event loop was saturated (timestamps are late), or the
record counts do not add up (records were lost). Invalid figures are still reported, flagged.

Hints from the runner come in ``extra`` (all optional):

* ``loop_lag_p99_ms`` (float; ``loop_lag_ms_p99`` is accepted too): p99 lateness of a periodic timer on
  the client's event loop;
* ``loop_saturated`` (bool): the runner's own verdict that its loop could not keep up;
* ``requests_issued`` (int): request attempts the runner started (every one must have a record);
* ``stopped_by`` (str): why sending stopped (``interrupt`` is reported as a warning).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
        f"schedule lag p99 {lag_p99_ms:.3g} ms exceeds limits.max_lag_p99_ms {max_lag_p99_ms:g} ms: the client "
        "sent later than its open-loop schedule, so the offered rate was lower than asked (lower the rate, "
        "use more worker processes, or raise limits.max_lag_p99_ms)"
    ]


def runner_reasons(extra: Mapping[str, Any], max_lag_p99_ms: float, records: int) -> list[str]:
    """Hints from the runner: event-loop saturation and records lost."""
    out = []
    loop_lag = extra.get("loop_lag_p99_ms", extra.get("loop_lag_ms_p99"))
    if loop_lag is not None and loop_lag > max_lag_p99_ms:
        out.append(
            f"client event loop saturated: timer lag p99 {loop_lag:.3g} ms exceeds {max_lag_p99_ms:g} ms, so "
            "timestamps were taken late (use more worker processes or less concurrency per process)"
        )
    elif extra.get("loop_saturated"):
        out.append("client event loop saturated (reported by the runner): timestamps may be late")
    issued = extra.get("requests_issued")
    if issued is not None and issued != records:
        out.append(f"records lost: the runner issued {issued} requests but {records} records exist")
    return out


def warnings_for(summary: Mapping[str, Any], extra: Mapping[str, Any]) -> list[str]:
    """Things a reader should know that do not invalidate the figures."""
    out = []
    req, tok = summary["requests"], summary["tokens"]
    if req["ok"] == 0:
        out.append("no successful measured requests: latency figures are empty")
    if tok["source"] != "usage":
        out.append(
            f"{tok['estimated']} request(s) had no usage block: their output tokens are the client's count of "
            "token chunks (a chunk can carry several tokens), so token figures may be low"
        )
    if tok["mismatch"]:
        out.append(f"{tok['mismatch']} request(s) received more token chunks than the server's usage reports")
    if extra.get("stopped_by") == "interrupt":
        out.append("the run was interrupted: figures cover only what finished")
    return out
