"""Cost per successful task, beside the serving-side dollars per million output tokens.

    per_successful_task = (model + tool + orchestration + failure) / accepted tasks

* model: self-hosted, ``gpu_hour_usd x gpus x run hours``; or an API, token prices per million
  (uncached input, cached input, output) times the tokens the sessions used;
* tool: ``tool_call_usd`` per tool / retrieval / code call (failed attempts included);
* orchestration: ``orchestration_usd_per_session_s`` per second a session ran;
* failure: per task that did not succeed (failed, timed out, or rejected by the acceptance check):
  ``failure_usd + rework_minutes / 60 x rework_hourly_usd``. Cancelled sessions (cut at drain) count
  neither as successes nor as failures.

``per_million_output_tokens`` is the model cost over output tokens: the figure serving benchmarks quote,
which ignores every failed task and tool. ``prices`` is a ``servelab.config.agent.CostConfig`` (read by
attribute; analysis does not import config).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from servelab.analysis.agents import SessionColumns
from servelab.records.schema import SessionRecord

_M = 1_000_000


def model_cost_usd(prices: Any, *, duration_s: float, input_tokens: float, cached_tokens: float,
                   output_tokens: float) -> float:
    """Model serving cost of a run: GPU hours, or tokens at API prices."""
    m = prices.model
    if m.kind == "gpu_hour":
        return m.gpu_hour_usd * m.gpus * duration_s / 3600.0
    cached_price = m.input_per_million if m.cached_input_per_million is None else m.cached_input_per_million
    uncached = max(0.0, input_tokens - cached_tokens)
    return (
        uncached * m.input_per_million + cached_tokens * cached_price + output_tokens * m.output_per_million
    ) / _M


def cost_summary(
    prices: Any,
    sessions: Sequence[SessionRecord] | pa.Table | SessionColumns,
    *,
    duration_s: float | None = None,
) -> dict[str, float | int | None]:
    """The ``cost`` block of ``summary.json`` (USD): per_successful_task, per_million_output_tokens, total,
    model, tool, orchestration, failure, plus the counts they rest on.

    ``duration_s`` is how long the deployment was held (GPU-hour pricing); default: first session start to
    last session end.
    """
    c = SessionColumns.of(sessions)
    ended = np.isfinite(c["end_ns"])
    if duration_s is None:
        duration_s = (
            (float(c["end_ns"][ended].max()) - float(c["start_ns"].min())) / 1e9 if ended.any() else 0.0
        )
    inp, cached, out = (float(np.nansum(c[k])) for k in ("input_tokens", "cached_tokens", "output_tokens"))
    model = model_cost_usd(
        prices, duration_s=duration_s, input_tokens=inp, cached_tokens=cached, output_tokens=out
    )
    tool = float(np.nansum(c["tool_calls"])) * prices.tool_call_usd
    session_s = float(((c["end_ns"] - c["start_ns"])[ended]).sum()) / 1e9
    orchestration = session_s * prices.orchestration_usd_per_session_s
    success = c.accepted & (c.status == "ok")
    unsuccessful = int((~success & (c.status != "cancelled")).sum())
    per_failure = prices.failure_usd + prices.rework_minutes / 60.0 * prices.rework_hourly_usd
    failure = unsuccessful * per_failure
    total = model + tool + orchestration + failure
    n_ok = int(success.sum())
    return {
        "per_successful_task": total / n_ok if n_ok else None,
        "per_million_output_tokens": model / out * _M if out else None,
        "total": total,
        "model": model,
        "tool": tool,
        "orchestration": orchestration,
        "failure": failure,
        "successful_tasks": n_ok,
        "unsuccessful_tasks": unsuccessful,
        "output_tokens": int(out),
        "duration_s": duration_s,
    }
