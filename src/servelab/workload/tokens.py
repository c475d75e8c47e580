"""Token counters: how the workload counts the tokens of a prompt it writes.

Three sources, tried in this order by :func:`resolve_counter`:

1. ``server``: the target's own tokenizer (``/tokenize``), given as an async callable such as
   ``TargetProbe.count_tokens``. Exact for that target; one round trip per call, so the synthesizer uses it
   only to calibrate.
2. ``local``: a tokenizer the user names (``target.tokenizer``): a ``tokenizer.json`` file, a folder
   holding one, or a model name already in the Hugging Face cache (never downloaded). Needs the optional
   ``tokenizers`` package (``pip install 'servelab[tokenizers]'``).
3. ``estimate``: a recorded heuristic, about 0.75 words per token (4 tokens per 3 words).

Every counter has ``source`` (recorded with the counts it produced) and ``async count(text)``; local and
estimate counters also have a synchronous ``count_now(text)``, cheap enough to check each prompt. The
estimate counts whitespace-separated words only, so it also has ``count_words(n)``: the count of any text
of ``n`` such words, which the synthesizer uses to check a prompt without joining and re-splitting it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from servelab.errors import ConfigError

Source = Literal["server", "local", "estimate"]
CountFn = Callable[[str], Awaitable[int | None]]

_PROBE = "The quick brown fox jumps over the lazy dog."


class TokenCounter(Protocol):
    source: Source

    async def count(self, text: str) -> int | None:
        """Tokens in ``text``, or None when this counter cannot say."""


@runtime_checkable
class SyncTokenCounter(Protocol):
    source: Source

    async def count(self, text: str) -> int | None: ...

    def count_now(self, text: str) -> int:
        """Tokens in ``text``, computed in process (cheap)."""


@runtime_checkable
class WordCounter(Protocol):
    """A counter whose count depends only on the number of whitespace-separated words of a text."""

    def count_words(self, n: int) -> int:
        """Tokens in any text of ``n`` whitespace-separated words (``count_now(text)`` for such a text)."""


class ServerCounter:
    """Counts with the target's tokenizer through an async callable (one round trip per new text)."""

    source: Source = "server"

    def __init__(self, count_fn: CountFn) -> None:
        self._fn = count_fn
        self._cache: dict[str, int | None] = {}
        self.calls = 0

    async def count(self, text: str) -> int | None:
        if text in self._cache:
            return self._cache[text]
        self.calls += 1
        n = await self._fn(text)
        n = None if n is None else int(n)
        if len(self._cache) < 4096:
            self._cache[text] = n
        return n


class EstimateCounter:
    """A heuristic when nothing better is available: ceil(words / 0.75), i.e. 4 tokens per 3 words."""

    source: Source = "estimate"
    words_per_token = 0.75

    async def count(self, text: str) -> int:
        return self.count_now(text)

    def count_now(self, text: str) -> int:
        return self.count_words(len(text.split()))

    def count_words(self, n: int) -> int:
        return math.ceil(n / self.words_per_token)


class LocalTokenizerCounter:
    """Counts with a Hugging Face ``tokenizers`` tokenizer loaded from a local ``tokenizer.json``."""

    source: Source = "local"

    def __init__(self, tokenizer: object, name: str = "") -> None:
        self._tok = tokenizer
        self.name = name

    @classmethod
    def load(cls, spec: str) -> LocalTokenizerCounter:
        path = find_tokenizer_file(spec)
        try:
            from tokenizers import Tokenizer
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ConfigError(
                f"target.tokenizer: '{spec}' needs the 'tokenizers' package, which is not installed",
                hint="pip install 'servelab[tokenizers]' (or drop target.tokenizer to use an estimate)",
            ) from e
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:  # the library raises a bare Exception for malformed files
            raise ConfigError(
                f"target.tokenizer: '{path}' is not a readable tokenizer.json ({e})",
                hint="point target.tokenizer at the tokenizer.json shipped with the model",
            ) from e
        return cls(tok, str(path))

    async def count(self, text: str) -> int:
        return self.count_now(text)

    def count_now(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=True).ids)  # type: ignore[attr-defined]


def _hf_cache_dirs() -> list[Path]:
    env = os.environ
    dirs = []
    if env.get("HF_HUB_CACHE"):
        dirs.append(Path(env["HF_HUB_CACHE"]))
    if env.get("HF_HOME"):
        dirs.append(Path(env["HF_HOME"]) / "hub")
    dirs.append(Path.home() / ".cache" / "huggingface" / "hub")
    return dirs


def find_tokenizer_file(spec: str) -> Path:
    """Resolve ``target.tokenizer`` to a tokenizer.json: a file, a folder holding one, or ORG/NAME in the
    Hugging Face cache (newest snapshot). Nothing is downloaded."""
    p = Path(spec).expanduser()
    if p.is_file():
        return p
    if p.is_dir():
        if (p / "tokenizer.json").is_file():
            return p / "tokenizer.json"
        raise ConfigError(f"target.tokenizer: folder '{p}' holds no tokenizer.json",
                          hint="give the path of the tokenizer.json file itself")
    looked = [str(p)]
    repo_dir = "models--" + spec.replace("/", "--")
    for cache in _hf_cache_dirs():
        snaps = cache / repo_dir / "snapshots"
        looked.append(str(snaps))
        found = (
            sorted(snaps.glob("*/tokenizer.json"), key=lambda f: f.stat().st_mtime) if snaps.is_dir() else []
        )
        if found:
            return found[-1]
    raise ConfigError(
        f"target.tokenizer: '{spec}' is neither a tokenizer.json path nor a model in the local Hugging Face "
        f"cache (looked in: {', '.join(looked)})",
        hint="give the path of the model's tokenizer.json (servelab never downloads tokenizers)",
    )


async def resolve_counter(count_fn: CountFn | None = None, tokenizer: str | None = None) -> TokenCounter:
    """The best available counter: the server's when it answers, else the named local tokenizer, else an
    estimate. A named tokenizer that cannot be loaded is an error, not a silent fallback."""
    if count_fn is not None:
        server = ServerCounter(count_fn)
        n = await server.count(_PROBE)
        if n is not None and n > 0:
            return server
    if tokenizer:
        return LocalTokenizerCounter.load(tokenizer)
    return EstimateCounter()
