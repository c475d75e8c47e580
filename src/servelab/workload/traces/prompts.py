"""Prompt text for replaying a trace's prefix reuse.

``block_text(hash_id, block_tokens)`` is a deterministic run of words per hash id: equal ids give
identical blocks, different ids different ones, in every process and every run with the same ``seed``.
``request_prompt(req)`` joins a request's blocks in order and pads past the last block with words unique
to the request, so a server's prefix cache sees exactly the trace's reuse and no accidental extra.

Token counts: servelab's simulator tokenizer counts one token per whitespace-separated word, so the
prompt of a request has exactly ``input_tokens`` tokens there. For a real tokenizer it is an
approximation: the words are short common English words that BPE vocabularies usually hold as one
token with their leading space, but not always, and block boundaries need not fall on the server's
cache-block boundaries; expect a few percent more tokens and a reuse fraction slightly under the trace's.

Word ``j`` of block ``h`` depends only on ``(seed, h, j)`` (a splitmix64 counter hash), so the first
``n`` words of a block are a prefix of the whole block: a partial last block still shares its prefix.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from servelab.workload.traces.base import TraceRequest

_VOCAB = tuple(dict.fromkeys("""
time year people way day man thing woman life child world school state family student group country
problem hand part place case week company system program question work number night point home water
room mother area money story fact month lot right study book eye job word business issue side kind
head house service friend father power hour game line end member law car city name team minute idea
kid body back parent face others level office door health person art war history party result change
morning reason research girl guy moment air teacher force education foot boy age policy music market
sense nation plan college interest death course someone effect class control care field role effort
rate heart drug show leader light voice wife police mind price report decision son view relationship
town road arm difference value building action model season society tax director position player
record paper space ground form event official matter center couple site project activity star table
need court oil situation cost industry figure street image phone data picture practice piece land
product doctor wall patient worker news test movie north love support technology step baby computer
type attention film tree source organization hair window evidence population site red blue green
black white small large long short high low early late young old good new great little big open
free full hard easy clear cold hot warm dark deep far near fast slow real simple strong happy
""".split()))
_V = np.array(_VOCAB, dtype=object)
_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_TAIL_LANE = 0x5EED_7A11  # keeps tail filler from ever equalling a hash-id block


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _key(lane: int, seed: int, ident: int) -> int:
    z = (ident * _GOLDEN + seed * 0xD1B54A32D192ED03 + lane * 0x8CB92BA72F3D8DD7) & _MASK
    return int(_mix(np.array([z], dtype=np.uint64))[0])


def _words(key: int, n: int) -> str:
    if n <= 0:
        return ""
    with np.errstate(over="ignore"):
        z = np.uint64(key) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(_GOLDEN)
        idx = (_mix(z) % np.uint64(len(_VOCAB))).astype(np.intp)
    return " ".join(_V[idx])


@lru_cache(maxsize=8192)
def block_text(hash_id: int, block_tokens: int, seed: int = 0) -> str:
    """``block_tokens`` words for ``hash_id``: identical for equal ids (and seeds), distinct otherwise."""
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
    return _words(_key(0, seed, hash_id), block_tokens)


def _request_key(req: TraceRequest) -> int:
    ident = f"{req.session_id}|{req.turn}|{req.t_offset_ns}|{req.input_tokens}".encode()
    return zlib.crc32(ident) | (len(ident) << 32)


@dataclass(frozen=True, slots=True)
class PromptHead:
    """The costly part of a request's prompt, built ahead of its send: the hash-id blocks joined, and how
    many words of request-unique filler still follow them (:func:`finish_prompt` adds those)."""

    text: str
    tail_words: int


def prompt_head(req: TraceRequest, *, seed: int = 0, block_tokens: int | None = None) -> PromptHead:
    """The hash-id blocks of ``req`` in order (the last one cut to the tokens left) and the words left."""
    parts: list[str] = []
    left = req.input_tokens
    if req.hash_ids:
        b = req.block_tokens or block_tokens
        if not b:
            raise ValueError("request has hash_ids but no block_tokens; pass block_tokens=")
        for h in req.hash_ids:
            if left <= 0:
                break
            if left >= b:
                parts.append(block_text(h, b, seed))
                left -= b
            else:
                parts.append(_words(_key(0, seed, h), left))
                left = 0
    return PromptHead(" ".join(parts), max(0, left))


def finish_prompt(head: PromptHead, req: TraceRequest, *, seed: int = 0, tail_key: int | None = None) -> str:
    """``head`` followed by the filler unique to the request (``tail_key``: as in :func:`request_prompt`)."""
    if head.tail_words <= 0:
        return head.text
    key = _request_key(req) if tail_key is None else tail_key
    tail = _words(_key(_TAIL_LANE, seed, key), head.tail_words)
    return f"{head.text} {tail}" if head.text else tail


def request_prompt(req: TraceRequest, *, seed: int = 0, block_tokens: int | None = None,
                   tail_key: int | None = None) -> str:
    """The prompt to send for ``req``: its real text when the trace has it, else its hash-id blocks in
    order (the last one cut to the tokens left) followed by filler unique to the request up to
    ``input_tokens`` words. ``block_tokens`` is used when the request does not carry its own;
    ``tail_key`` overrides the per-request identity of the filler (pass a unique index when requests may
    coincide in session, turn, time and length). The same text as :func:`finish_prompt` of
    :func:`prompt_head`, which a replay builds in two halves: the blocks ahead of the send time, the
    filler at it."""
    if req.prompt is not None:
        return req.prompt
    return finish_prompt(prompt_head(req, seed=seed, block_tokens=block_tokens), req, seed=seed,
                         tail_key=tail_key)
