"""The exchange's learned chunk layout never changes what a stream means.

Streams of chat chunks (any text: quotes, backslashes, controls, non-BMP; three serializers; a layout
that mostly repeats, as servers do, with chunks that differ in finish_reason, usage, role or spelling)
are fed through the HTTP path's own :class:`ModelExchange` (``transport.mock.play``). Whatever the
exchange decodes by its learned layout must equal the meaning of the stream by a whole parse of every
chunk: the text, the token count, the finish reason and the usage.
"""

from __future__ import annotations

import asyncio
import json

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.records.schema import OK, RequestRecord
from servelab.transport import mock
from servelab.transport._shape import learn_shape

_text = st.text(max_size=12)  # any code points: quotes, backslashes, controls, non-BMP
_serializers = st.sampled_from(["orjson", "json", "json_ascii"])


def _dump(obj: dict, how: str) -> bytes:
    if how == "orjson":
        return orjson.dumps(obj)
    return json.dumps(obj, ensure_ascii=(how == "json_ascii")).encode()


@st.composite
def _stream(draw) -> list[bytes]:
    """A first plain content chunk (the layout to learn), then chunks that mostly share its layout."""
    cid = draw(st.sampled_from(["chatcmpl-1", 'we"ird\\']))
    model = draw(st.sampled_from(["m", '"content":"x"']))
    how = draw(_serializers)

    def chunk(content: str, finish=None, role=False, usage=None, ser=how) -> bytes:
        delta: dict = {"role": "assistant", "content": content} if role else {"content": content}
        obj = {"id": cid, "object": "chat.completion.chunk", "model": model,
               "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if usage is not None:
            obj["usage"] = usage
        return _dump(obj, ser)

    out = [chunk(draw(_text.filter(bool)))]
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["same"] * 5 + ["finish", "usage", "role", "spelling", "empty"]))
        text = draw(_text)
        if kind == "same":
            out.append(chunk(text))
        elif kind == "finish":
            out.append(chunk(text, finish=draw(st.sampled_from(["stop", "length"]))))
        elif kind == "usage":
            out.append(chunk(text, usage={"prompt_tokens": 1, "completion_tokens": draw(st.integers(0, 9))}))
        elif kind == "role":
            out.append(chunk(text, role=True))
        elif kind == "spelling":
            out.append(chunk(text, ser=draw(_serializers)))
        else:
            out.append(chunk(""))
    return out


def _meaning(chunks: list[bytes]) -> dict:
    """The stream by a whole parse of every chunk (the OpenAI protocol, not the exchange's shortcut)."""
    text, tokens, finish, completion = [], 0, None, None
    for data in chunks:
        obj = orjson.loads(data)
        c = obj["choices"][0]
        if c["delta"]["content"]:
            text.append(c["delta"]["content"])
            tokens += 1
        finish = c["finish_reason"] or finish
        if obj.get("usage"):
            completion = obj["usage"]["completion_tokens"]
    return {"text": "".join(text), "tokens": tokens, "finish": finish, "completion": completion}


def _exchange(chunks: list[bytes]) -> RequestRecord:
    reply = mock.sse([(0.0, c) for c in chunks] + [(0.0, b"[DONE]")])

    async def main() -> RequestRecord:
        at = list(range(len(reply.parts) + 1))
        return mock.play(RequestRecord(request_id=1), reply, at, stream=True)

    return asyncio.run(main())


@settings(max_examples=400, deadline=None)
@given(chunks=_stream())
def test_the_exchange_decodes_every_stream_as_a_whole_parse_does(chunks):
    rec = _exchange(chunks)
    want = _meaning(chunks)
    assert rec.status == OK, rec.error
    assert rec.output_text == want["text"]
    assert len(rec.token_times_ns) == rec.est_completion_tokens == want["tokens"]
    assert rec.finish_reason == want["finish"]
    assert rec.usage_completion_tokens == want["completion"]


@settings(max_examples=200, deadline=None)
@given(a=_text.filter(bool), b=_text.filter(bool), how=_serializers)
def test_same_layout_different_text_is_learned_and_decodes_back(a, b, how):
    base = {"id": "c", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": {"content": a}, "finish_reason": None}]}
    pre, suf = learn_shape(_dump(base, how), a)  # always learned for a plain chunk
    base["choices"][0]["delta"]["content"] = b
    data = _dump(base, how)
    assert data.startswith(pre) and data.endswith(suf)
    assert orjson.loads(data[len(pre) - 1 : len(data) - len(suf) + 1]) == b


def test_ambiguous_layout_is_not_learned():
    data = b'{"model":"\\"content\\":\\"","choices":[{"delta":{"content":"x"}}],"content":"x"}'
    assert learn_shape(data, "x") is None
