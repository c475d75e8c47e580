"""Tool calls in a chat answer: streamed ``delta.tool_calls`` pieces put back together.

A streamed call arrives in pieces keyed by ``index``: the id, type and function name once (usually in the
first piece), the JSON ``arguments`` string in fragments. A whole (non-streamed) answer is the same thing
in one piece per call. Only tool-call chunks come here, never plain content chunks (the hot path).
"""

from __future__ import annotations

from typing import Any

import orjson


def add_tool_deltas(acc: dict[int, list[Any]], deltas: object) -> None:
    """Fold one chunk's ``tool_calls`` list into ``acc`` (index -> [id, type, name parts, argument parts])."""
    if deltas.__class__ is not list:
        return
    for d in deltas:  # type: ignore[attr-defined]
        if d.__class__ is not dict:
            continue
        i = d.get("index")
        if i.__class__ is not int:  # no index (non-standard): a piece with an id starts a new call
            i = max(acc, default=-1) + (1 if d.get("id") or not acc else 0)
        entry = acc.get(i)
        if entry is None:
            entry = acc[i] = [None, None, [], []]
        if d.get("id"):
            entry[0] = d["id"]
        if d.get("type"):
            entry[1] = d["type"]
        fn = d.get("function")
        if fn.__class__ is dict:
            name, args = fn.get("name"), fn.get("arguments")
            if name.__class__ is str:
                entry[2].append(name)
            if args.__class__ is str:
                entry[3].append(args)
            elif args is not None:  # some servers send the arguments as an object
                entry[3].append(orjson.dumps(args).decode())


def tool_call_list(acc: dict[int, list[Any]]) -> list[dict[str, Any]]:
    """The calls in index order, as the OpenAI API writes them back in an assistant message."""
    return [
        {"id": e[0] or f"call_{i}", "type": e[1] or "function",
         "function": {"name": "".join(e[2]), "arguments": "".join(e[3])}}
        for i, e in sorted(acc.items())
    ]
