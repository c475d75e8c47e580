"""Streamed tool-call pieces put back together (servelab.transport._toolcalls)."""

from __future__ import annotations

from servelab.transport._toolcalls import add_tool_deltas, tool_call_list


def test_pieces_by_index_join_into_whole_calls_in_index_order():
    acc: dict = {}
    add_tool_deltas(
        acc, [{"index": 1, "id": "b", "type": "function", "function": {"name": "read", "arguments": ""}}]
    )
    add_tool_deltas(acc, [{"index": 0, "id": "a", "function": {"name": "search", "arguments": '{"q":'}}])
    add_tool_deltas(
        acc, [{"index": 0, "function": {"arguments": ' "x"}'}}, {"index": 1, "function": {"arguments": "{}"}}]
    )
    assert tool_call_list(acc) == [
        {"id": "a", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}},
        {"id": "b", "type": "function", "function": {"name": "read", "arguments": "{}"}},
    ]


def test_missing_index_id_and_object_arguments_are_tolerated():
    acc: dict = {}
    add_tool_deltas(acc, [{"id": "a", "function": {"name": "f", "arguments": {"k": 1}}}])
    add_tool_deltas(acc, [{"function": {"arguments": ""}}])  # no id: continues the last call
    add_tool_deltas(acc, [{"function": {"name": "g"}}, "junk"])
    add_tool_deltas(acc, "not a list")
    calls = tool_call_list(acc)
    assert len(calls) == 1 and calls[0]["function"] == {"name": "fg", "arguments": '{"k":1}'}
    add_tool_deltas(acc, [{"id": "z", "function": {"name": "h"}}])  # a new id: a new call
    assert [c["id"] for c in tool_call_list(acc)] == ["a", "z"]
    assert tool_call_list({3: [None, None, ["h"], []]})[0]["id"] == "call_3"
