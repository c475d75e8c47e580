"""Did-you-mean for unknown config keys, and the list of every key a config model accepts.

``concurrency`` at the top level suggests ``load.concurrency`` (the key exists elsewhere), ``load.concurency``
suggests ``load.concurrency`` (a close spelling among its siblings), a flag's name such as ``duration``
suggests ``limits.duration_s``.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    """The pydantic models an annotation may hold (through Optional, unions, Annotated, lists, dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from _models_in(typing.get_args(annotation)[0])
        return
    if origin in (typing.Union, types.UnionType):
        for a in typing.get_args(annotation):
            yield from _models_in(a)


def field_paths(model: type[BaseModel], prefix: str = "", _seen: frozenset[type] = frozenset()) -> list[
        tuple[str, Any]]:
    """Every dotted key of ``model`` with its FieldInfo, nested models walked (each variant of a union)."""
    out: list[tuple[str, Any]] = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        out.append((path, info))
        for sub in _models_in(info.annotation):
            if sub not in _seen:
                out += field_paths(sub, f"{path}.", _seen | {model})
    first: dict[str, tuple[str, Any]] = {}  # each key once, where it first appears
    for p, i in out:
        first.setdefault(p, (p, i))
    return list(first.values())


def suggest(model: type[BaseModel], where: str, key: str) -> str | None:
    """A replacement for the unknown ``key`` found under ``where`` (dotted, '' for the top), or None."""
    paths = [p for p, _ in field_paths(model)]
    parent = f"{where}." if where else ""
    siblings = [p[len(parent):] for p in paths if p.startswith(parent) and "." not in p[len(parent):]]
    close = difflib.get_close_matches(key, siblings, n=1, cutoff=0.75)
    if close:
        return f"{parent}{close[0]}"
    k = key.replace("-", "_").lower()
    leaves = {p: p.rsplit(".", 1)[-1] for p in paths}
    exact = [p for p, leaf in leaves.items() if leaf in (k, f"{k}_s", f"{k}_requests", f"{k}_ms")]
    if exact:
        return min(exact, key=len)
    near = difflib.get_close_matches(k, sorted(set(leaves.values())), n=1, cutoff=0.8)
    if near:
        return min((p for p, leaf in leaves.items() if leaf == near[0]), key=len)
    return None
