"""The learned chunk layout never disagrees with a whole parse."""

from __future__ import annotations

import json

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.transport._shape import learn_shape

_text = st.text(max_size=12)  # any code points: quotes, backslashes, controls, non-BMP
_serializers = st.sampled_from(["orjson", "json", "json_ascii"])


def _dump(obj: dict, how: str) -> bytes:
    if how == "orjson":
        return orjson.dumps(obj)
    return json.dumps(obj, ensure_ascii=(how == "json_ascii")).encode()


@st.composite
def _chunk(draw, content=None) -> dict:
    delta: dict = {"content": draw(_text) if content is None else content}
    if draw(st.integers(0, 5)) == 0:
        delta["role"] = "assistant"
    choice = {"index": 0, "delta": delta, "logprobs": None,
              "finish_reason": draw(st.sampled_from([None, None, None, "stop", "length"]))}
    obj = {"id": draw(st.sampled_from(["chatcmpl-1", "chatcmpl-2", 'we"ird\\'])), "object": "chat.completion.chunk",
           "model": draw(st.sampled_from(["m", '"content":"x"'])), "choices": [choice]}
    if draw(st.integers(0, 5)) == 0:
        obj["usage"] = {"prompt_tokens": 1, "completion_tokens": draw(st.integers(0, 9))}
    return obj


def _fast(shape: tuple[bytes, bytes], data: bytes) -> str | None:
    """What the exchange's hot path decodes from ``data`` (None: falls back to a whole parse)."""
    pre, suf = shape
    if not (data.startswith(pre) and data.endswith(suf)):
        return None
    try:
        value = orjson.loads(data[len(pre) - 1 : len(data) - len(suf) + 1])
    except orjson.JSONDecodeError:
        return None
    return value or None


@settings(max_examples=400, deadline=None)
@given(first=_chunk(), second=_chunk(), how1=_serializers, how2=_serializers)
def test_fast_path_agrees_with_a_whole_parse(first, second, how1, how2):
    data1 = _dump(first, how1)
    shape = learn_shape(data1, first["choices"][0]["delta"]["content"])
    if shape is None:
        return
    data2 = _dump(second, how2)
    got = _fast(shape, data2)
    if got is None:
        return
    whole = orjson.loads(data2)
    choice = whole["choices"][0]
    assert choice["delta"]["content"] == got
    # The match also proves nothing else changed: same finish_reason, same usage, same keys.
    assert choice["finish_reason"] == first["choices"][0]["finish_reason"]
    assert whole.get("usage") == first.get("usage")


@settings(max_examples=200, deadline=None)
@given(a=_text.filter(bool), b=_text.filter(bool), how=_serializers)
def test_same_layout_different_text_takes_the_fast_path(a, b, how):
    base = {"id": "c", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": {"content": a}, "finish_reason": None}]}
    shape = learn_shape(_dump(base, how), a)
    assert shape is not None
    base["choices"][0]["delta"]["content"] = b
    assert _fast(shape, _dump(base, how)) == b


def test_ambiguous_layout_is_not_learned():
    data = b'{"model":"\\"content\\":\\"","choices":[{"delta":{"content":"x"}}],"content":"x"}'
    assert learn_shape(data, "x") is None
