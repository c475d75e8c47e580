"""The OpenAI request side of the simulator's HTTP front: validation, chat rendering, response bodies.

Pure functions and small classes, no I/O: :func:`parse_completion` turns a decoded JSON body into a
:class:`Parsed` request or raises :class:`BadRequest` (which the server answers with an OpenAI error JSON);
:class:`ChunkWriter` pre-builds the bytes of a streamed response so that each token chunk costs one
``orjson.dumps`` of the text piece and two concatenations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


class BadRequest(Exception):
    """A request the server refuses; rendered as ``{"error": {...}}`` with ``status``."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 400,
                 kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.kind = kind


def error_body(message: str, kind: str, status: int, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": status}})


def render_chat(messages: list[dict[str, Any]]) -> str:
    """The simulator's chat template: a role tag (one token) before each message, then the assistant tag.

    Public so that every front (HTTP, in-process transport, /tokenize) counts chat prompts the same way.
    """
    parts = []
    for m in messages:
        parts.append(f"<|{m.get('role')}|>")
        parts.append(_content_text(m.get("content")))
    parts.append("<|assistant|>")
    return " ".join(p for p in parts if p)


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content)


def check_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise BadRequest(f"'messages' must be a non-empty list of messages, got {_short(messages)}",
                         param="messages")
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise BadRequest(
                f"{where} must be an object with 'role' and 'content', got {_short(m)}", param=where
            )
        role = m.get("role")
        if role not in ROLES:
            raise BadRequest(f"{where}.role must be one of {sorted(ROLES)}, got {_short(role)}",
                             param=f"{where}.role")
        content = m.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise BadRequest(f"{where}.content must be a string or a list of content parts, "
                             f"got {_short(content)}", param=f"{where}.content")
        for j, part in enumerate(content):
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise BadRequest(f"{where}.content[{j}]: the simulator accepts only text parts "
                                 f"({{'type': 'text', 'text': ...}}), got {_short(part)}",
                                 param=f"{where}.content[{j}]")
    return messages


def _short(v: Any, n: int = 80) -> str:
    s = repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def _opt_int(body: dict[str, Any], key: str, lo: int) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"'{key}' must be an integer, got {_short(v)}", param=key)
    if v < lo:
        raise BadRequest(f"'{key}' must be at least {lo}, got {v}", param=key)
    return v


def _opt_bool(body: dict[str, Any], key: str) -> bool:
    v = body.get(key, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise BadRequest(f"'{key}' must be true or false, got {_short(v)}", param=key)
    return v


def _opt_number(body: dict[str, Any], key: str, lo: float, hi: float) -> None:
    v = body.get(key)
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, int | float) or not lo <= v <= hi:
        raise BadRequest(f"'{key}' must be a number in [{lo}, {hi}], got {_short(v)}", param=key)


def _stops(body: dict[str, Any]) -> tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) and s for s in v):
        raise BadRequest(
            f"'stop' must be a non-empty string or a list of them, got {_short(v)}", param="stop"
        )
    return tuple(v)


@dataclass(slots=True)
class Parsed:
    api: str  # "chat" | "completions"
    prompt_ids: list[int]
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    stream: bool = False
    include_usage: bool = False
    stop: tuple[str, ...] = ()
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def prompt_ids_of(body: dict[str, Any], api: str, tokenize: Callable[[str], list[int]]) -> list[int]:
    """Token ids of the prompt of a chat (``messages``) or completions (``prompt``) body."""
    if api == "chat":
        return tokenize(render_chat(check_messages(body.get("messages"))))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return tokenize(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                                   for t in prompt):
        return list(prompt)
    if isinstance(prompt, list) and len(prompt) > 1:
        raise BadRequest("batched prompts are not supported by the simulator; send one prompt per request",
                         param="prompt")
    raise BadRequest(
        f"'prompt' must be a string or a list of token ids, got {_short(prompt)}", param="prompt"
    )


def parse_completion(body: Any, api: str, tokenize: Callable[[str], list[int]], max_model_len: int,
                     served: str) -> Parsed:
    """Validate a /v1/chat/completions or /v1/completions body (unknown fields are ignored, as vLLM does)."""
    if not isinstance(body, dict):
        raise BadRequest(f"the request body must be a JSON object, got {_short(body)}")
    model = body.get("model")
    if model is not None and model != served:
        raise BadRequest(f"The model `{model}` does not exist; this server serves `{served}`.",
                         param="model", status=404, kind="NotFoundError")
    ids = prompt_ids_of(body, api, tokenize)
    n = _opt_int(body, "n", 1)
    if n is not None and n != 1:
        raise BadRequest(f"'n' must be 1 on the simulator, got {n}", param="n")
    _opt_number(body, "temperature", 0.0, 2.0)
    _opt_number(body, "top_p", 0.0, 1.0)
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _opt_int(body, key, 1)
    room = max_model_len - len(ids)
    if room < 1 or (max_tokens is not None and max_tokens > room):
        asked = max_tokens if max_tokens is not None else 1
        raise BadRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{len(ids) + asked} tokens ({len(ids)} in the prompt, {asked} in the completion). Please reduce "
            "the length of the prompt or completion.", param=key)
    if max_tokens is None:
        max_tokens = room
    min_tokens = _opt_int(body, "min_tokens", 0) or 0
    if min_tokens > max_tokens:
        raise BadRequest(f"'min_tokens' ({min_tokens}) must not exceed '{key}' ({max_tokens})",
                         param="min_tokens")
    stream = _opt_bool(body, "stream")
    opts = body.get("stream_options")
    if opts is not None and (not isinstance(opts, dict) or not stream):
        raise BadRequest("'stream_options' must be an object and is allowed only with stream=true",
                         param="stream_options")
    include_usage = bool(opts and opts.get("include_usage"))
    return Parsed(api=api, prompt_ids=ids, max_tokens=max_tokens, min_tokens=min_tokens,
                  ignore_eos=_opt_bool(body, "ignore_eos"), stream=stream, include_usage=include_usage,
                  stop=_stops(body), seed=_opt_int(body, "seed", -(2**63)))


def usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


class ChunkWriter:
    """Bytes of one streamed response: token chunks from a template, the rest from dicts."""

    __slots__ = ("api", "rid", "created", "model", "_head", "_tail", "include_usage")

    def __init__(self, api: str, rid: str, created: int, model: str, include_usage: bool) -> None:
        self.api, self.rid, self.created, self.model = api, rid, created, model
        self.include_usage = include_usage
        obj = "chat.completion.chunk" if api == "chat" else "text_completion"
        head = f'data: {{"id":"{rid}","object":"{obj}","created":{created},"model":'.encode() + orjson.dumps(
            model
        )
        if api == "chat":
            self._head = head + b',"choices":[{"index":0,"delta":{"content":'
            self._tail = b'},"logprobs":null,"finish_reason":null}]'
        else:
            self._head = head + b',"choices":[{"index":0,"text":'
            self._tail = b',"logprobs":null,"finish_reason":null}]'
        self._tail += (b',"usage":null}\n\n' if include_usage else b"}\n\n")

    def token(self, text: str) -> bytes:
        return self._head + orjson.dumps(text) + self._tail

    def _event(self, choices: list[dict[str, Any]], usage_block: dict[str, Any] | None) -> bytes:
        obj = "chat.completion.chunk" if self.api == "chat" else "text_completion"
        d: dict[str, Any] = {"id": self.rid, "object": obj, "created": self.created, "model": self.model,
                             "choices": choices}
        if self.include_usage:
            d["usage"] = usage_block
        return b"data: " + orjson.dumps(d) + b"\n\n"

    def role(self) -> bytes:
        if self.api != "chat":
            return b""
        return self._event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                             "finish_reason": None}], None)

    def finish(self, reason: str) -> bytes:
        if self.api == "chat":
            choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason}
        else:
            choice = {"index": 0, "text": "", "logprobs": None, "finish_reason": reason}
        return self._event([choice], None)

    def usage(self, block: dict[str, Any]) -> bytes:
        return self._event([], block) if self.include_usage else b""

    def error(self, message: str, status: int = 500) -> bytes:
        return b"data: " + error_body(message, "InternalServerError", status) + b"\n\n"

    @staticmethod
    def done() -> bytes:
        return b"data: [DONE]\n\n"

    def garbage(self) -> bytes:
        """A malformed event: starts like a chunk, is not JSON."""
        return f'data: {{"id":"{self.rid}","choices":[{{"delta":{{"content":"\\u00'.encode() + b"\x00}\n\n"


def full_response(api: str, rid: str, created: int, model: str, text: str, reason: str,
                  usage_block: dict[str, Any]) -> bytes:
    """The body of a non-streamed response."""
    if api == "chat":
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "logprobs": None, "finish_reason": reason}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
        obj = "text_completion"
    return orjson.dumps({"id": rid, "object": obj, "created": created, "model": model, "choices": [choice],
                         "usage": usage_block})
