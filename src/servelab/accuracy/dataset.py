"""Answer sets: the built-in generated set (arithmetic and in-context lookup, exact answers) and users' JSONL.

The built-in set is generated from a seed in code, so it is held out by construction (no model has seen
these exact items) and costs nothing to ship. Every item has one exact answer:

* ``add`` / ``sub`` / ``mul``: integer arithmetic, checked with the ``number`` matcher;
* ``lookup``: a small table of made-up keys and values in the prompt, asked for one key's value (``number``);
* ``reverse``: the same kind of table, asked which key holds a value (``regex``: the name as a whole word).

A user's JSONL file holds one object per line: ``{"prompt": str, "expected": str | number, "matcher"?:
"exact" | "regex" | "number", "id"?: str}``. Blank lines are skipped; anything else wrong is a
:class:`~servelab.errors.ConfigError` naming the file and line.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

import orjson

from servelab.accuracy.matchers import MATCHERS, parse_number
from servelab.errors import ConfigError

DEFAULT_N = 200
KINDS = ("add", "sub", "mul", "lookup", "reverse")
_SYLLABLES = ("ka", "lo", "mi", "ru", "te", "vo", "zi", "pa", "ne", "xu", "bo", "da", "fi", "gu", "ho", "je")
_TABLE_ROWS = 6


@dataclass(frozen=True, slots=True)
class Item:
    """One question with its exact answer and how a response is judged."""

    id: str
    prompt: str
    expected: str
    matcher: str = "exact"
    kind: str = "user"


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(3))


def _arith(kind: str, i: int, rng: random.Random) -> Item:
    if kind == "mul":
        a, b = rng.randint(12, 99), rng.randint(12, 99)
        q, ans = f"{a} * {b}", a * b
    elif kind == "sub":
        a, b = rng.randint(100, 9999), rng.randint(100, 9999)
        q, ans = f"{a} - {b}", a - b
    else:
        a, b = rng.randint(100, 9999), rng.randint(100, 9999)
        q, ans = f"{a} + {b}", a + b
    prompt = f"Compute {q}. Reply with the number only."
    return Item(f"{kind}-{i}", prompt, str(ans), "number", kind)


def _table(rng: random.Random) -> list[tuple[str, int]]:
    keys: list[str] = []
    while len(keys) < _TABLE_ROWS:
        w = _word(rng)
        if w not in keys:
            keys.append(w)
    values = rng.sample(range(100, 1000), _TABLE_ROWS)
    return list(zip(keys, values, strict=True))


def _lookup(kind: str, i: int, rng: random.Random) -> Item:
    rows = _table(rng)
    key, value = rows[rng.randrange(len(rows))]
    table = "\n".join(f"{k}: {v}" for k, v in rows)
    if kind == "lookup":
        prompt = f"Here is a table of codes.\n{table}\nWhat is the code of {key}? Reply with the code only."
        return Item(f"{kind}-{i}", prompt, str(value), "number", kind)
    prompt = f"Here is a table of codes.\n{table}\nWhich name has the code {value}? Reply with the name only."
    # The name as a whole word, any case: "The name is Hozimi." is right, "hozimix" is not.
    return Item(f"{kind}-{i}", prompt, rf"(?i)\b({key})\b", "regex", kind)


def generate_items(n: int = DEFAULT_N, seed: int = 0) -> list[Item]:
    """``n`` items cycling through :data:`KINDS`; the same ``(n, seed)`` gives the same items, and a larger
    ``n`` extends a smaller one (item ``i`` depends only on ``seed`` and ``i``)."""
    if n < 1:
        raise ConfigError(f"the answer set needs at least 1 item, got n={n}", hint="pass --n 1 or more")
    items = []
    for i in range(n):
        rng = random.Random(f"servelab-accuracy/{seed}/{i}")
        kind = KINDS[i % len(KINDS)]
        items.append(_arith(kind, i, rng) if kind in ("add", "sub", "mul") else _lookup(kind, i, rng))
    return items


def _bad(path: Path, line: int, what: str, hint: str | None = None) -> ConfigError:
    return ConfigError(f"{path}:{line}: {what}", hint=hint or 'each line must be {"prompt": "...", '
                       '"expected": "...", "matcher": "exact|regex|number"} (matcher and id optional)')


def _item_from(obj: object, path: Path, line: int, default_matcher: str) -> Item:
    if not isinstance(obj, dict):
        raise _bad(path, line, f"expected a JSON object, got {type(obj).__name__}")
    unknown = set(obj) - {"prompt", "expected", "matcher", "id"}
    if unknown:
        raise _bad(path, line, f"unknown field(s) {sorted(unknown)}")
    prompt, expected = obj.get("prompt"), obj.get("expected")
    if not isinstance(prompt, str) or not prompt.strip():
        raise _bad(path, line, f"'prompt' must be a non-empty string, got {prompt!r}")
    if isinstance(expected, bool) or not isinstance(expected, str | int | float):
        raise _bad(path, line, f"'expected' must be a string or a number, got {expected!r}")
    matcher = obj.get("matcher", default_matcher)
    if matcher not in MATCHERS:
        raise _bad(path, line, f"'matcher' must be one of {', '.join(MATCHERS)}, got {matcher!r}")
    expected = str(expected)
    _check_expected(expected, matcher, f"{path}:{line}")
    item_id = obj.get("id", f"line-{line}")
    if not isinstance(item_id, str | int) or isinstance(item_id, bool):
        raise _bad(path, line, f"'id' must be a string or an integer, got {item_id!r}")
    return Item(str(item_id), prompt, expected, matcher)


def _check_expected(expected: str, matcher: str, where: str) -> None:
    if matcher == "number" and parse_number(expected) is None:
        raise ConfigError(
            f"{where}: expected answer {expected!r} is not a number but the matcher is 'number'",
            hint="use matcher 'exact' or 'regex' for non-numeric answers",
        )
    if matcher == "regex":
        try:
            re.compile(expected)
        except re.error as e:
            raise ConfigError(f"{where}: expected answer {expected!r} is not a valid regular expression: {e}",
                              hint="escape special characters, or use matcher 'exact'") from None


def load_jsonl(path: str | Path, default_matcher: str = "exact") -> list[Item]:
    """Items of a user's JSONL answer set (see the module docstring for the format)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(
            f"answer set {str(p)!r} does not exist", hint="pass an existing JSONL file to --dataset"
        )
    items: list[Item] = []
    seen: dict[str, int] = {}
    with p.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                raise _bad(p, line_no, f"not valid JSON ({e})") from None
            item = _item_from(obj, p, line_no, default_matcher)
            if item.id in seen:
                raise _bad(p, line_no, f"duplicate id {item.id!r} (first on line {seen[item.id]})",
                           hint="give every item a unique id, or leave ids out")
            seen[item.id] = line_no
            items.append(item)
    if not items:
        raise ConfigError(f"answer set {p} holds no items", hint="write one JSON object per line")
    return items


def load_dataset(path: str | Path | None = None, *, n: int | None = None, seed: int = 0,
                 matcher: str | None = None) -> list[Item]:
    """The items to run: the first ``n`` of a user's file, or ``n`` generated ones (default
    :data:`DEFAULT_N`). ``matcher`` overrides every item's matcher (its expected answers are checked)."""
    if n is not None and n < 1:
        raise ConfigError(f"--n must be at least 1, got {n}")
    if matcher is not None and matcher not in MATCHERS:
        raise ConfigError(f"unknown matcher {matcher!r}", hint=f"use one of: {', '.join(MATCHERS)}")
    if path is None:
        items = generate_items(n or DEFAULT_N, seed)
    else:
        items = load_jsonl(path)
        if n is not None:
            items = items[:n]
    if matcher is not None:
        for it in items:
            _check_expected(it.expected, matcher, f"item {it.id!r}")
        items = [Item(it.id, it.prompt, it.expected, matcher, it.kind) for it in items]
    return items
