"""servelab's documented JSONL trace format, for a user's own logs (see docs/traces.md).

One JSON object a line::

    {"t": 0.125, "input_tokens": 812, "output_tokens": 96}
    {"t": 0.5, "input_tokens": 1400, "output_tokens": 40, "session_id": "u7", "hash_ids": [3, 9, 10],
     "block_tokens": 512, "prompt": "optional real text", "think_time_s": 2.0, "parent_session_id": "u1"}

``t`` is seconds from the trace start (any origin: offsets are taken from the earliest ``t``). Unknown
keys are rejected so a typo (``input_token``) is not silently ignored. Requests of a session are numbered
in time order (ties keep file order).
"""

from __future__ import annotations

from pathlib import Path

from servelab.workload.traces.base import (
    NS_PER_S,
    Trace,
    TraceRequest,
    build_trace,
    fail,
    iter_json_lines,
    want_hash_ids,
    want_int,
    want_number,
)

REQUIRED = ("t", "input_tokens", "output_tokens")
OPTIONAL = ("session_id", "hash_ids", "block_tokens", "prompt", "think_time_s", "parent_session_id", "model",
            "stop")
_KNOWN = frozenset(REQUIRED + OPTIONAL)


def _opt_str(obj: dict, key: str, path: Path, line: int) -> str | None:
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, str | int):
        raise fail(path, line, f"field {key!r} must be a string, got {v!r}")
    return str(v)


def load_jsonl(path: str | Path) -> Trace:
    path = Path(path)
    rows: list[tuple[float, TraceRequest]] = []
    block_sizes: set[int] = set()
    for line, obj in iter_json_lines(path, "JSONL trace"):
        unknown = sorted(set(obj) - _KNOWN)
        if unknown:
            raise fail(
                path, line, f"unknown field(s) {', '.join(unknown)}; expected {', '.join(REQUIRED)} and "
                f"optionally {', '.join(OPTIONAL)}", hint="see docs/traces.md for the JSONL trace format",
            )
        missing = [k for k in REQUIRED if k not in obj]
        if missing:
            raise fail(path, line, f"missing field(s) {', '.join(missing)}; "
                       'expected {"t": seconds, "input_tokens": N, "output_tokens": M, ...}')
        t = want_number(obj["t"], path, line, "t", minimum=float("-inf"))
        hash_ids = obj.get("hash_ids")
        block = None
        if hash_ids is not None:
            hash_ids = want_hash_ids(hash_ids, path, line)
            if "block_tokens" not in obj:
                raise fail(path, line, "field 'hash_ids' needs 'block_tokens' (tokens per hashed block)")
        if obj.get("block_tokens") is not None:
            block = want_int(obj["block_tokens"], path, line, "block_tokens", minimum=1)
            block_sizes.add(block)
        prompt = obj.get("prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise fail(path, line, f"field 'prompt' must be a string, got {type(prompt).__name__}")
        think = obj.get("think_time_s")
        rows.append((t, TraceRequest(
            t_offset_ns=0,
            input_tokens=want_int(obj["input_tokens"], path, line, "input_tokens"),
            output_tokens=want_int(obj["output_tokens"], path, line, "output_tokens"),
            session_id=_opt_str(obj, "session_id", path, line),
            hash_ids=hash_ids,
            block_tokens=block,
            think_time_s=None if think is None else want_number(think, path, line, "think_time_s"),
            stop=_opt_str(obj, "stop", path, line),
            prompt=prompt,
            parent_session_id=_opt_str(obj, "parent_session_id", path, line),
            model=_opt_str(obj, "model", path, line),
        )))
    if not rows:
        raise fail(path, None, "no requests: the file is empty")
    t0 = min(t for t, _ in rows)
    turns: dict[str, int] = {}
    rows.sort(key=lambda tr: tr[0])
    for t, r in rows:
        r.t_offset_ns = round((t - t0) * NS_PER_S)
        if r.session_id is not None:
            r.turn = turns.get(r.session_id, 0)
            turns[r.session_id] = r.turn + 1
    return build_trace(
        (r for _, r in rows), format="jsonl", source=str(path),
        block_tokens=block_sizes.pop() if len(block_sizes) == 1 else None,
    )
