"""The byte layout of a server's content chunks, learned once per response.

Within one streamed response a server sends hundreds of chunks that differ only in the content string::

    {"id":"chatcmpl-1","object":"chat.completion.chunk",...,"delta":{"content":"TEXT"},...,"finish_reason":null}]}

After one such chunk was fully parsed, :func:`learn_shape` splits it into the bytes before the content
string (ending with its opening quote) and the bytes after it (starting with its closing quote). A later
chunk that starts with the same prefix and ends with the same suffix has the same structure, so only
the middle needs decoding: ``orjson.loads`` of the quoted string alone. That is exact, not a guess: if
the middle held an unescaped quote (the structure differs), it is not a valid JSON string, the decode
fails and the caller parses the whole chunk. Any chunk that differs elsewhere (a finish_reason, a usage
block, another key) does not match and is parsed whole too.
"""

from __future__ import annotations

import orjson

_KEYS = (b'"content":"', b'"content": "')
_TEXT_KEYS = (b'"text":"', b'"text": "')  # /v1/completions chunks: choices[0].text


def learn_shape(data: bytes, content: str, text: bool = False) -> tuple[bytes, bytes] | None:
    """(prefix, suffix) of ``data`` around the one ``"content"`` (``"text"`` when ``text``) string whose
    value is ``content``.

    None when the layout is ambiguous (the key appears twice, or in another form) or does not decode
    back to ``content``: the caller then keeps parsing whole chunks, which is always correct.
    """
    for key in _TEXT_KEYS if text else _KEYS:
        i = data.find(key)
        if i < 0:
            continue
        if data.find(key, i + 1) >= 0:
            return None
        start = i + len(key)  # first byte of the string body
        end = _closing_quote(data, start)
        if end < 0:
            return None
        try:
            if orjson.loads(data[start - 1 : end + 1]) != content:
                return None
        except orjson.JSONDecodeError:
            return None
        return data[:start], data[end:]
    return None


def _closing_quote(data: bytes, start: int) -> int:
    """Index of the first quote at or after ``start`` that no backslash escapes, or -1."""
    j = start
    while True:
        j = data.find(b'"', j)
        if j < 0:
            return -1
        k = j
        while k > start and data[k - 1] == 92:  # b"\\"
            k -= 1
        if (j - k) % 2 == 0:
            return j
        j += 1
