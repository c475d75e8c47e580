"""A sweep grid: the cartesian product of list-valued parameters, each point a set of overrides."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

from servelab.errors import ConfigError
from servelab.records.manifest import is_secret_name, redact_text

DEFAULT_CONCURRENCY = (1, 4, 16, 64, 256)

# Axes that are load levels, in the order the knee prefers them.
LEVEL_AXES = ("concurrency", "rate", "sessions", "session_rate")


@dataclass(frozen=True)
class Point:
    index: int
    params: dict[str, Any]

    @property
    def key(self) -> str:
        """A stable, filesystem-safe name for the point's run directory."""
        parts = [f"{_short(k)}={'redacted' if is_secret_name(k) else _fmt(redact_text(str(v)))}"
                 for k, v in self.params.items()]
        name = "_".join(parts) if parts else "point"
        return f"p{self.index:03d}-" + re.sub(r"[^A-Za-z0-9._=-]+", "-", name)[:100]

    @property
    def level(self) -> float | None:
        for axis in LEVEL_AXES:
            if axis in self.params:
                return float(self.params[axis])
        return None


def _short(k: str) -> str:
    return k.rsplit(".", 1)[-1]


def _fmt(v: Any) -> str:
    return str(v).replace("/", "-")


def parse_scalar(text: str) -> Any:
    t = text.strip()
    low = t.lower()
    if low in ("true", "on", "yes"):
        return True
    if low in ("false", "off", "no"):
        return False
    for cast in (int, float):
        try:
            return cast(t)
        except ValueError:
            pass
    return t


def parse_list(text: str, what: str) -> list[Any]:
    """'1,4,16' -> [1, 4, 16]; '1..256' (powers of two) -> [1, 2, 4, ..., 256]."""
    t = text.strip()
    m = re.fullmatch(r"(\d+)\.\.(\d+)", t)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo < 1 or hi < lo:
            raise ConfigError(f"{what}: range {t!r} must be LOW..HIGH with 1 <= LOW <= HIGH")
        out, v = [], lo
        while v <= hi:
            out.append(v)
            v *= 2
        return out
    values = [parse_scalar(x) for x in t.split(",") if x.strip()]
    if not values:
        raise ConfigError(f"{what}: empty list {text!r}", hint="give comma-separated values, e.g. 1,4,16")
    return values


def parse_set(items: list[str]) -> dict[str, list[Any]]:
    """``--set KEY=V1,V2`` items -> {KEY: [V1, V2]}."""
    axes: dict[str, list[Any]] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set {item!r} is not KEY=V1,V2,...",
                              hint="e.g. --set max_num_seqs=16,64 or --set workload.input_tokens=1024,2048")
        k, v = item.split("=", 1)
        k = k.strip()
        if not k:
            raise ConfigError(f"--set {item!r} has an empty key")
        axes[k] = parse_list(v, f"--set {k}")
    return axes


def expand(axes: dict[str, list[Any]]) -> list[Point]:
    """Points in a stable order: the first axis varies slowest, load levels fastest."""
    names = sorted(axes, key=lambda k: (k in LEVEL_AXES, list(axes).index(k)))
    combos = itertools.product(*(axes[n] for n in names)) if names else [()]
    return [Point(i, dict(zip(names, combo, strict=True))) for i, combo in enumerate(combos)]
