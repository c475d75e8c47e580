"""Claude Code session traces (callanjfox/kv-cache-tester ``traces/trace_*.json``; Apache-2.0).

Each file is one coding-agent session::

    {"id": "trace_0277", "block_size": 64, "hash_id_scope": "local", "tool_tokens": ..., "system_tokens": ...,
     "requests": [
        {"t": 0.0, "type": "n", "model": ..., "in": 19560, "out": 1017, "hash_ids": [...],
         "stop": "tool_use", "api_time": 18.78, "think_time": 0.0, ...},
        {"t": 79.2, "type": "subagent", "agent_id": "agent_001", "subagent_type": "Explore",
         "requests": [{"t": 0.0, ...}, ...]},   # sub-agent request times are from the sub-agent's start
        ...]}

Each request becomes one step of the session (think time and stop reason kept); each sub-agent becomes
its own session linked to its parent, spawned after the parent's latest turn. ``hash_ids`` are local to a
file (the parent and its sub-agents share one id space: all sub-agents of trace_0277 start with the same
system-prompt blocks), so ids are renumbered per file to be distinct across files, keeping every equality
inside a file.

A directory or a glob loads many sessions, in file-name order; each starts at offset 0 unless
``stagger_s`` spaces the session starts.
"""

from __future__ import annotations

import glob as globlib
from pathlib import Path
from typing import Any

import orjson

from servelab.workload.traces.base import (
    NS_PER_S,
    Trace,
    TraceRequest,
    TraceSession,
    build_trace,
    fail,
    want_hash_ids,
    want_int,
    want_number,
)


def expand_paths(path: str | Path, pattern: str = "*.json") -> list[Path]:
    """A file, every ``pattern`` file of a directory, or the matches of a glob, sorted by name."""
    text = str(path)
    p = Path(text)
    if p.is_dir():
        files = sorted(p.glob(pattern))
    elif p.exists():
        files = [p]
    elif any(ch in text for ch in "*?["):
        files = sorted(Path(f) for f in globlib.glob(text))
    else:
        raise fail(path, None, "no such file or directory")
    files = [f for f in files if f.is_file()]
    if not files:
        raise fail(path, None, f"no trace files found (looked for {pattern})")
    return files


class _Ids:
    """Renumbers hash ids so that ids of different files never collide (equal ids within a file stay
    equal)."""

    __slots__ = ("_map",)

    def __init__(self) -> None:
        self._map: dict[tuple[int, int], int] = {}

    def remap(self, file_index: int, local: list[int]) -> list[int]:
        m = self._map
        out = []
        for h in local:
            key = (file_index, h)
            g = m.get(key)
            if g is None:
                g = len(m)
                m[key] = g
            out.append(g)
        return out


class _SessionReader:
    """Reads one file's request list (recursively for sub-agents)."""

    def __init__(self, path: Path, file_index: int, ids: _Ids, block_tokens: int) -> None:
        self.path = path
        self.file_index = file_index
        self.ids = ids
        self.block_tokens = block_tokens
        self.requests: list[TraceRequest] = []
        self.sessions: dict[str, TraceSession] = {}
        self.subagent_meta: dict[str, dict[str, Any]] = {}

    def read(self, entries: Any, where: str, sid: str, parent: str | None, start_ns: int) -> None:
        if not isinstance(entries, list):
            raise fail(self.path, None, f"{where}: expected a list of requests, got {type(entries).__name__}")
        turn = 0
        n_sub = 0
        for i, e in enumerate(entries):
            at = f"{where}[{i}]"
            if not isinstance(e, dict):
                raise fail(self.path, None, f"{at}: expected an object, got {type(e).__name__}")
            if "t" not in e:
                raise fail(self.path, None, f"{at}: missing field 't' (seconds from the session start)")
            t_ns = start_ns + round(want_number(e["t"], self.path, None, f"{at}.t") * NS_PER_S)
            if e.get("type") == "subagent" or "requests" in e:
                n_sub += 1
                sub_sid = f"{sid}/{e.get('agent_id') or f'subagent_{n_sub:03d}'}"
                if sub_sid in self.sessions:
                    raise fail(self.path, None, f"{at}: duplicate sub-agent id {sub_sid!r}")
                self.sessions[sub_sid] = TraceSession(
                    session_id=sub_sid, requests=[], parent_session_id=sid,
                    label=e.get("subagent_type"), spawn_after_turn=turn - 1 if turn else None,
                )
                self.subagent_meta[sub_sid] = {
                    k: e[k] for k in ("status", "duration_ms", "total_tokens", "tool_use_count") if k in e
                }
                self.read(e.get("requests"), f"{at}.requests", sub_sid, sid, t_ns)
                continue
            self.requests.append(self._request(e, at, sid, parent, turn, t_ns))
            turn += 1

    def _request(self, e: dict[str, Any], at: str, sid: str, parent: str | None, turn: int, t_ns: int
                 ) -> TraceRequest:
        for k in ("in", "out"):
            if k not in e:
                raise fail(self.path, None, f"{at}: missing field {k!r} (token count)")
        hash_ids = e.get("hash_ids")
        if hash_ids is not None:
            hash_ids = self.ids.remap(
                self.file_index, want_hash_ids(hash_ids, self.path, None, f"{at}.hash_ids")
            )
        think = e.get("think_time")
        api = e.get("api_time")
        return TraceRequest(
            t_offset_ns=t_ns,
            input_tokens=want_int(e["in"], self.path, None, f"{at}.in"),
            output_tokens=want_int(e["out"], self.path, None, f"{at}.out"),
            session_id=sid,
            turn=turn,
            hash_ids=hash_ids,
            block_tokens=self.block_tokens if hash_ids is not None else None,
            think_time_s=None if think is None else want_number(think, self.path, None, f"{at}.think_time"),
            stop=e.get("stop"),
            parent_session_id=parent,
            model=e.get("model"),
            api_time_s=None if api is None else want_number(api, self.path, None, f"{at}.api_time"),
        )


def load_claude_code(path: str | Path, *, stagger_s: float = 0.0) -> Trace:
    """Load one session file, a directory of them, or a glob. Session k starts at ``k * stagger_s``."""
    if stagger_s < 0:
        raise fail(path, None, f"stagger_s must be >= 0, got {stagger_s}")
    files = expand_paths(path)
    ids = _Ids()
    requests: list[TraceRequest] = []
    sessions: dict[str, TraceSession] = {}
    meta: dict[str, dict[str, Any]] = {}
    block_sizes: set[int] = set()
    for k, f in enumerate(files):
        try:
            data = orjson.loads(f.read_bytes())
        except orjson.JSONDecodeError as e:
            raise fail(f, None, f"invalid JSON ({e}); expected one Claude Code session object") from None
        except OSError as e:
            raise fail(f, None, f"cannot read the session file: {e.strerror}") from None
        if not isinstance(data, dict) or "requests" not in data:
            raise fail(
                f, None, "expected a session object with a 'requests' list (kv-cache-tester trace format)"
            )
        block = want_int(data.get("block_size", 64), f, None, "block_size", minimum=1)
        block_sizes.add(block)
        sid = str(data.get("id") or f.stem)
        if sid in sessions:
            raise fail(
                f, None, f"session id {sid!r} appears in two files", hint="load each session file once"
            )
        reader = _SessionReader(f, k, ids, block)
        reader.sessions[sid] = TraceSession(session_id=sid, requests=[])
        reader.read(data["requests"], "requests", sid, None, round(k * stagger_s * NS_PER_S))
        requests.extend(reader.requests)
        sessions.update(reader.sessions)
        meta[sid] = {
            "file": str(f),
            **{key: data[key] for key in ("models", "tool_tokens", "system_tokens") if key in data},
        }
        for sub_sid, m in reader.subagent_meta.items():
            meta[sub_sid] = m
    return build_trace(
        requests,
        format="claude-code",
        block_tokens=block_sizes.pop() if len(block_sizes) == 1 else None,
        source=str(path),
        metadata={"sessions": meta, "files": len(files), "stagger_s": stagger_s},
        session_info=sessions,
    )
