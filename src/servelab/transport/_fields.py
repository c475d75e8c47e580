"""What a model exchange takes from a server's JSON: usage counts and finish_reason (type-checked: a bad
value makes the record ``malformed`` and is never stored), a whole non-streamed body, an error body.

A mixin of :class:`~servelab.transport._exchange.ModelExchange`, which holds the state.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from servelab.records.schema import HTTP_ERROR, MALFORMED, OK
from servelab.transport._toolcalls import add_tool_deltas
from servelab.transport._wire import body_preview, error_message, error_text, usage_count

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError


class _Parsed(Protocol):
    """The exchange state the field methods read and write (held by ModelExchange, whose slots they are)."""

    rec: Any
    _bad: str | None
    _usage_seen: bool
    _body: list[bytes]
    _text: list[str]
    _times: list[int]
    _tools: dict[int, list] | None
    _t: int

    def finish(self, status: str, error: str | None) -> None: ...
    def _usage(self, usage: object) -> None: ...
    def _finish_reason(self, fr: object) -> None: ...


class Fields:
    """Usage, finish_reason and whole-body handling of a model exchange (``self`` typed by
    :class:`_Parsed`)."""

    __slots__ = ()
    # State owned by the subclass (declared for readers and type checkers; the slots live there).
    rec: Any
    _bad: str | None
    _usage_seen: bool
    _body: list[bytes]
    _text: list[str]
    _times: list[int]
    _tools: dict[int, list] | None
    _t: int

    def _usage(self: _Parsed, usage: object) -> None:
        """Take the token counts of a ``usage`` block; a wrong type anywhere makes the record malformed
        (the bad value is never stored: one such row would break the run's Parquet file)."""
        if usage.__class__ is not dict:
            self._bad = self._bad or f"usage is {error_text(repr(usage).encode(), 60)}; expected an object"
            return
        rec = self.rec
        self._usage_seen = True
        prompt, why = usage_count(usage, "prompt_tokens")  # type: ignore[arg-type]
        if prompt is not None:
            rec.usage_prompt_tokens = prompt
        done, why2 = usage_count(usage, "completion_tokens")  # type: ignore[arg-type]
        if done is not None:
            rec.usage_completion_tokens = done
        details = usage.get("prompt_tokens_details")  # type: ignore[attr-defined]
        why3 = None
        if details.__class__ is dict:
            cached, why3 = usage_count(details, "cached_tokens")
            if cached is not None:
                rec.usage_cached_tokens = cached
        elif details is not None:
            why3 = "usage.prompt_tokens_details is not an object"
        bad = why or why2 or why3
        if bad and self._bad is None:
            self._bad = bad.replace("usage.cached_tokens", "usage.prompt_tokens_details.cached_tokens")

    def _finish_reason(self: _Parsed, fr: object) -> None:
        if fr.__class__ is str:
            self.rec.finish_reason = fr[:64]  # type: ignore[index]
        elif self._bad is None:
            self._bad = f"finish_reason is {error_text(repr(fr).encode(), 60)}; expected a string"


    def _whole_body(self: _Parsed) -> None:
        """A non-streamed (JSON) completion: every time is when the body was complete."""
        rec = self.rec
        raw = b"".join(self._body)
        try:
            obj = _loads(raw)
        except _JSONDecodeError:
            self.finish(MALFORMED, f"unparseable JSON body: {body_preview(raw)}")
            return
        if obj.__class__ is not dict:
            self.finish(MALFORMED, f"JSON body is not an object: {body_preview(raw)}")
            return
        if "error" in obj or obj.get("object") == "error":
            self.finish(HTTP_ERROR, f"error body: {error_message(obj)}")
            return
        usage = obj.get("usage")
        if usage is not None:
            self._usage(usage)
        choices = obj.get("choices")
        c = choices[0] if choices.__class__ is list and choices and choices[0].__class__ is dict else {}
        msg = c.get("message")
        if isinstance(msg, dict):
            content = msg.get("content")
            reasoning = msg.get("reasoning_content") or msg.get("reasoning")
            tool = msg.get("tool_calls")
        else:
            content, reasoning, tool = c.get("text"), None, None
        fr = c.get("finish_reason")
        if fr is not None:
            self._finish_reason(fr)
        t = self._t
        if content:
            self._text.append(str(content))
            rec.first_content_ns = t
        if reasoning:
            rec.first_reasoning_ns = t
        if tool.__class__ is list:
            self._tools = {}
            add_tool_deltas(
                self._tools, [dict(x, index=i) for i, x in enumerate(tool) if x.__class__ is dict]
            )
        produced = rec.usage_completion_tokens
        if not (content or reasoning or tool) and not produced:
            self.finish(MALFORMED, "response carries no generated text and no completion tokens")
            return
        rec.first_token_ns = rec.last_token_ns = t
        self._times.append(t)
        rec.est_completion_tokens = produced if produced is not None else 1
        self.finish(OK, None)


def error_body(raw: bytes) -> str:
    """An error body as one clean line: the message of an OpenAI-style JSON error, else the text."""
    try:
        obj = _loads(raw)
    except _JSONDecodeError:
        return error_text(raw)
    if obj.__class__ is dict and ("error" in obj or "message" in obj or "detail" in obj):
        return error_message(obj)
    return error_text(raw)
