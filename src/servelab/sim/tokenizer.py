"""The simulator's tokenizer: one token per whitespace-separated word.

``tokenize(text)`` maps each word to ``crc32(word) % vocab``: stable across processes and Python versions
(unlike ``hash()``), so prefix-cache hits are reproducible. The benchmark side's prompt synthesizer relies
on the rule "1 word == 1 token" for this tokenizer.

``filler_text(n, seed)`` makes deterministic text of exactly ``n`` tokens from a fixed word list;
``filler_ids(n, seed)`` returns the ids that ``tokenize(filler_text(n, seed))`` would, without building the
text (vectorized), which the engine uses to hash the blocks of generated output.
"""

from __future__ import annotations

import zlib

import numpy as np

DEFAULT_VOCAB = 131_072

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "st")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou", "ea")


def _make_words() -> tuple[str, ...]:
    # Two-syllable pseudo-words: 16*8*16*8 = 16,384 distinct words; keep 4,096 for a compact table.
    words = []
    for a in _ONSETS:
        for b in _VOWELS:
            for c in _ONSETS:
                for d in _VOWELS:
                    words.append(a + b + c + d)
    return tuple(words[::4])


WORDS: tuple[str, ...] = _make_words()
_WORDS_ARRAY = np.array(WORDS, dtype=object)  # fancy-indexed by filler_text (no per-word Python loop)
_caches: dict[int, dict[str, int]] = {}
_word_ids: dict[int, np.ndarray] = {}


def token_id(word: str, vocab: int = DEFAULT_VOCAB) -> int:
    """The id of one word."""
    return zlib.crc32(word.encode("utf-8", "surrogatepass")) % vocab


def tokenize(text: str, vocab: int = DEFAULT_VOCAB) -> list[int]:
    """One id per whitespace-separated word of ``text``."""
    cache = _caches.get(vocab)
    if cache is None:
        cache = _caches[vocab] = {}
    words = text.split()
    out = list(map(cache.get, words))  # None where the word is not cached yet
    if None in out:
        for i, tid in enumerate(out):
            if tid is None:
                w = words[i]
                tid = out[i] = token_id(w, vocab)
                if len(cache) < 1_000_000:
                    cache[w] = tid
    return out


def count_tokens(text: str) -> int:
    """How many tokens ``tokenize`` would return (without computing ids)."""
    return len(text.split())


def _indices(n_tokens: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed & 0xFFFF_FFFF_FFFF_FFFF)
    return rng.integers(0, len(WORDS), size=max(0, int(n_tokens)))


def filler_text(n_tokens: int, seed: int = 0) -> str:
    """Deterministic text of exactly ``n_tokens`` tokens (words) for ``seed``."""
    return " ".join(_WORDS_ARRAY[_indices(n_tokens, seed)].tolist())


def filler_ids(n_tokens: int, seed: int = 0, vocab: int = DEFAULT_VOCAB) -> np.ndarray:
    """``np.array(tokenize(filler_text(n_tokens, seed), vocab))``, computed without the text."""
    table = _word_ids.get(vocab)
    if table is None:
        table = np.array([token_id(w, vocab) for w in WORDS], dtype=np.int64)
        _word_ids[vocab] = table
    return table[_indices(n_tokens, seed)]


class IncrementalTokenizer:
    """``tokenize`` for texts that extend an earlier one under the same key (a conversation re-sent every
    turn): only the new suffix is split and looked up. Bounded: the ``max_keys`` most recently used keys are
    kept.

    A suffix is tokenized on its own only when the cut falls on whitespace (then ``tokenize(old + new) ==
    tokenize(old) + tokenize(new)`` exactly); otherwise the whole text is tokenized again.
    """

    def __init__(self, vocab: int = DEFAULT_VOCAB, max_keys: int = 4096) -> None:
        from collections import OrderedDict

        self.vocab = vocab
        self.max_keys = max_keys
        self._last: OrderedDict[object, tuple[str, list[int]]] = OrderedDict()
        self.words_split = 0  # words actually tokenized (for tests and benchmarks)

    def tokenize(self, key: object, text: str) -> list[int]:
        prev = self._last.get(key) if key is not None else None
        if prev is not None:
            old, ids = prev
            n = len(old)
            if len(text) >= n and text.startswith(old) and (
                    n == 0 or len(text) == n or old[-1].isspace() or text[n].isspace()):
                tail = tokenize(text[n:], self.vocab)
                self.words_split += len(tail)
                out = ids + tail if tail else list(ids)
                self._remember(key, text, out)
                return out
        out = tokenize(text, self.vocab)
        self.words_split += len(out)
        if key is not None:
            self._remember(key, text, out)
        return out

    def _remember(self, key: object, text: str, ids: list[int]) -> None:
        last = self._last
        last[key] = (text, ids)
        last.move_to_end(key)
        while len(last) > self.max_keys:
            last.popitem(last=False)
