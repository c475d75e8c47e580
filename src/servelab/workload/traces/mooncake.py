"""Mooncake traces (kvcache-ai/Mooncake, FAST'25; Apache-2.0).

JSONL, one request a line: ``timestamp`` (ms from the trace start), ``input_length``, ``output_length``,
``hash_ids`` (one id per 512-token block of the input; the last block may be partial). Ids are global to
the file, so they are kept as they are.
"""

from __future__ import annotations

from pathlib import Path

from servelab.workload.traces.base import (
    Trace,
    TraceRequest,
    build_trace,
    fail,
    iter_json_lines,
    want_hash_ids,
    want_int,
    want_number,
)

BLOCK_TOKENS = 512
_REQUIRED = ("timestamp", "input_length", "output_length")


def load_mooncake(path: str | Path, *, block_tokens: int = BLOCK_TOKENS) -> Trace:
    path = Path(path)
    reqs: list[TraceRequest] = []
    for line, obj in iter_json_lines(path, "Mooncake trace"):
        missing = [k for k in _REQUIRED if k not in obj]
        if missing:
            raise fail(
                path, line, f"missing field(s) {', '.join(missing)}; expected "
                '{"timestamp": ms, "input_length": N, "output_length": M, "hash_ids": [...]}',
            )
        t_ms = want_number(obj["timestamp"], path, line, "timestamp")
        hash_ids = obj.get("hash_ids")
        if hash_ids is not None:
            hash_ids = want_hash_ids(hash_ids, path, line)
        reqs.append(
            TraceRequest(
                t_offset_ns=round(t_ms * 1_000_000),
                input_tokens=want_int(obj["input_length"], path, line, "input_length"),
                output_tokens=want_int(obj["output_length"], path, line, "output_length"),
                hash_ids=hash_ids,
                block_tokens=block_tokens if hash_ids is not None else None,
            )
        )
    if not reqs:
        raise fail(path, None, "no requests: the file is empty")
    return build_trace(reqs, format="mooncake", block_tokens=block_tokens, source=str(path))
