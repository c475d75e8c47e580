"""Replay a past servelab run: its ``requests.parquet`` (or the run directory holding it).

One request per first attempt (``attempt == 0``; retries were the run's reaction, not its workload),
warm-up requests left out unless asked for. Offsets come from ``intended_ns`` (when the schedule wanted
the send, not when the client managed to send it), so a replay reproduces the intended arrival process.
Token counts: the server's ``usage`` when it reported them, else the client's estimate; output is what
was generated for ``ok`` rows, else what was asked for (``requested_output_tokens``).

The columns are read by name (the record schema's names) so this module needs nothing from ``records``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from servelab.workload.traces.base import Trace, TraceRequest, build_trace, fail

REQUIRED = ("intended_ns",)
OPTIONAL = (
    "session_id", "turn", "attempt", "warmup", "status", "finish_reason", "usage_prompt_tokens",
    "est_prompt_tokens", "usage_completion_tokens", "est_completion_tokens", "requested_output_tokens",
)


def _column(table: pa.Table, name: str, n: int) -> list:
    return table.column(name).to_pylist() if name in table.column_names else [None] * n


def load_servelab(path: str | Path, *, include_warmup: bool = False) -> Trace:
    path = Path(path)
    if path.is_dir():
        path = path / "requests.parquet"
    try:
        schema = pq.read_schema(path)
    except FileNotFoundError:
        raise fail(path, None, "no such file", hint="pass a run directory or its requests.parquet") from None
    except (OSError, pa.ArrowInvalid) as e:
        raise fail(path, None, f"not a readable Parquet file ({e})") from None
    missing = [c for c in REQUIRED if c not in schema.names]
    if "usage_prompt_tokens" not in schema.names and "est_prompt_tokens" not in schema.names:
        missing.append("usage_prompt_tokens or est_prompt_tokens")
    if missing:
        raise fail(
            path, None, f"missing column(s) {', '.join(missing)}; expected a servelab requests.parquet"
        )
    table = pq.read_table(path, columns=[c for c in REQUIRED + OPTIONAL if c in schema.names])
    n = table.num_rows
    col = {name: _column(table, name, n) for name in REQUIRED + OPTIONAL}
    keep: list[int] = []
    dropped_warmup = 0
    for i in range(n):
        if (col["attempt"][i] or 0) != 0:
            continue
        if col["warmup"][i] and not include_warmup:
            dropped_warmup += 1
            continue
        keep.append(i)
    if not keep:
        raise fail(path, None, f"no first-attempt requests to replay ({n} rows, {dropped_warmup} warm-up)")
    t0 = min(col["intended_ns"][i] for i in keep)
    reqs: list[TraceRequest] = []
    for i in keep:
        row = i + 1
        prompt = col["usage_prompt_tokens"][i]
        if prompt is None:
            prompt = col["est_prompt_tokens"][i]
        if prompt is None:
            raise fail(
                path,
                None,
                f"row {row}: no prompt token count (usage_prompt_tokens and est_prompt_tokens are both null)",
            )
        done = col["usage_completion_tokens"][i]
        if done is None:
            done = col["est_completion_tokens"][i]
        asked = col["requested_output_tokens"][i]
        out = done if (col["status"][i] in (None, "ok") and done is not None) else asked
        if out is None:
            out = done or 0
        sid = col["session_id"][i]
        reqs.append(TraceRequest(
            t_offset_ns=int(col["intended_ns"][i]) - t0,
            input_tokens=int(prompt),
            output_tokens=int(out),
            session_id=None if sid is None or sid < 0 else str(sid),
            turn=int(col["turn"][i] or 0),
            stop=col["finish_reason"][i],
        ))
    return build_trace(
        reqs, format="servelab", source=str(path),
        metadata={"rows": n, "replayed": len(reqs), "dropped_warmup": dropped_warmup},
    )
