"""Fault injection for the simulator's HTTP front.

A :class:`FaultConfig` says how often each fault happens; :meth:`FaultConfig.plan` turns it into one
:class:`FaultPlan` per request, decided from ``(seed, request index)`` alone, so the same seed and the same
arrival order give the same faults whatever the timing.

Faults (at most one "kind" per request, chosen by a single uniform draw over the cumulative rates, plus an
independent slow first byte):

* ``error``     - an HTTP error response (429/500/503, ...) with an OpenAI error body, nothing generated.
* ``reset``     - the TCP connection is reset (RST) before the response (``reset_after_chunks=0``) or after
  N content chunks mid-stream.
* ``stall``     - the stream pauses ``stall_s`` seconds after N content chunks (0: before the first token).
* ``malformed`` - after N content chunks a garbage (non-JSON) SSE event is written; the stream goes on.
* ``truncate``  - after N content chunks the response ends cleanly at the HTTP level but without the finish
  chunk, the usage chunk or ``data: [DONE]``.
* slow first byte - the response headers are held back ``slow_first_byte_s`` seconds.

Configs load from a YAML mapping (same keys as the fields) and/or flag overrides; bad values raise
:class:`servelab.errors.ConfigError` naming the key, the expected and the given value.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from servelab.errors import ConfigError

ERROR = "error"
RESET = "reset"
STALL = "stall"
MALFORMED = "malformed"
TRUNCATE = "truncate"
KINDS = (ERROR, RESET, STALL, MALFORMED, TRUNCATE)

_ALLOWED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """What the server does to one request. ``kind`` None: nothing (besides a possible slow first byte)."""

    kind: str | None = None
    status: int = 0  # for kind == "error"
    after_chunks: int = 0  # reset / stall / malformed / truncate: content chunks written first
    stall_s: float = 0.0
    first_byte_delay_s: float = 0.0

    @property
    def clean(self) -> bool:
        return self.kind is None and self.first_byte_delay_s == 0.0


NO_FAULT = FaultPlan()


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """Rates (probability per request, 0..1) and shapes of injected faults. All rates default to 0."""

    seed: int = 0
    error_rate: float = 0.0
    error_status: tuple[int, ...] = (503,)  # chosen uniformly per faulted request
    reset_rate: float = 0.0
    reset_after_chunks: int = 0  # 0: reset before any response byte
    stall_rate: float = 0.0
    stall_s: float = 5.0
    stall_after_chunks: int = 1
    malformed_rate: float = 0.0
    malformed_after_chunks: int = 1
    truncate_rate: float = 0.0
    truncate_after_chunks: int = 1
    slow_first_byte_rate: float = 0.0
    slow_first_byte_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("error_rate", "reset_rate", "stall_rate", "malformed_rate", "truncate_rate",
                     "slow_first_byte_rate"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ConfigError(f"faults.{name}: expected a probability in [0, 1], got {v}")
        total = self.error_rate + self.reset_rate + self.stall_rate + self.malformed_rate + self.truncate_rate
        if total > 1.0 + 1e-9:
            raise ConfigError(
                f"faults: error_rate + reset_rate + stall_rate + malformed_rate + truncate_rate = {total:g}, "
                "expected at most 1 (each request gets at most one of these faults)",
                hint="lower the rates so that they add up to 1 or less",
            )
        for name in ("reset_after_chunks", "stall_after_chunks", "malformed_after_chunks",
                     "truncate_after_chunks"):
            v = getattr(self, name)
            if v < 0:
                raise ConfigError(f"faults.{name}: expected a chunk count >= 0, got {v}")
        for name in ("stall_s", "slow_first_byte_s"):
            v = getattr(self, name)
            if v < 0:
                raise ConfigError(f"faults.{name}: expected seconds >= 0, got {v}")
        if not self.error_status:
            raise ConfigError("faults.error_status: expected at least one HTTP status, got none")
        for s in self.error_status:
            if s not in _ALLOWED_STATUSES:
                raise ConfigError(
                    f"faults.error_status: {s} is not an injectable error status; expected one of "
                    f"{sorted(_ALLOWED_STATUSES)}"
                )
        if self.slow_first_byte_s > 0 and self.slow_first_byte_rate == 0.0:
            # A delay without a rate means "every request" - the common command-line use.
            object.__setattr__(self, "slow_first_byte_rate", 1.0)

    @property
    def enabled(self) -> bool:
        return (self.error_rate + self.reset_rate + self.stall_rate + self.malformed_rate + self.truncate_rate
                + self.slow_first_byte_rate) > 0.0

    def plan(self, index: int) -> FaultPlan:
        """The faults of the ``index``-th request (0-based arrival order), deterministic in (seed, index)."""
        if not self.enabled:
            return NO_FAULT
        rng = random.Random(f"servelab-faults:{self.seed}:{index}")
        u = rng.random()
        delay = self.slow_first_byte_s if rng.random() < self.slow_first_byte_rate else 0.0
        edge = self.error_rate
        if u < edge:
            return FaultPlan(ERROR, status=rng.choice(self.error_status), first_byte_delay_s=delay)
        edge += self.reset_rate
        if u < edge:
            return FaultPlan(RESET, after_chunks=self.reset_after_chunks, first_byte_delay_s=delay)
        edge += self.stall_rate
        if u < edge:
            return FaultPlan(STALL, after_chunks=self.stall_after_chunks, stall_s=self.stall_s,
                             first_byte_delay_s=delay)
        edge += self.malformed_rate
        if u < edge:
            return FaultPlan(MALFORMED, after_chunks=self.malformed_after_chunks, first_byte_delay_s=delay)
        edge += self.truncate_rate
        if u < edge:
            return FaultPlan(TRUNCATE, after_chunks=self.truncate_after_chunks, first_byte_delay_s=delay)
        return FaultPlan(first_byte_delay_s=delay) if delay else NO_FAULT

    def with_overrides(self, **overrides: Any) -> FaultConfig:
        """A copy with the given non-None fields replaced (flags over file values)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        return from_mapping({**_as_mapping(self), **given}, where="flags")


_FIELDS = {f.name: f for f in fields(FaultConfig)}
_INT_FIELDS = {"seed", "reset_after_chunks", "stall_after_chunks", "malformed_after_chunks",
               "truncate_after_chunks"}


def _as_mapping(cfg: FaultConfig) -> dict[str, Any]:
    return {name: getattr(cfg, name) for name in _FIELDS}


def _coerce(name: str, value: Any, where: str) -> Any:
    if name == "error_status":
        items = value if isinstance(value, list | tuple) else [value]
        out = []
        for s in items:
            if isinstance(s, bool) or not isinstance(s, int):
                raise ConfigError(
                    f"{where}: error_status: expected an HTTP status or a list of them, got {s!r}"
                )
            out.append(s)
        return tuple(out)
    if isinstance(value, bool):
        raise ConfigError(f"{where}: {name}: expected a number, got {value!r}")
    if name in _INT_FIELDS:
        if not isinstance(value, int):
            raise ConfigError(f"{where}: {name}: expected an integer, got {value!r}")
        return value
    if not isinstance(value, int | float):
        raise ConfigError(f"{where}: {name}: expected a number, got {value!r}")
    return float(value)


def from_mapping(data: dict[str, Any], where: str = "faults") -> FaultConfig:
    """Build a config from a plain mapping; unknown keys and wrong types raise ConfigError."""
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise ConfigError(
            f"{where}: unknown fault key(s) {unknown}; expected some of {sorted(_FIELDS)}",
            hint="check the spelling (keys use underscores, e.g. error_rate)",
        )
    values = {k: _coerce(k, v, where) for k, v in data.items()}
    return replace(FaultConfig(), **values) if values else FaultConfig()


def load_faults(path: str | Path | None = None, **overrides: Any) -> FaultConfig:
    """Read a YAML fault file (optional), then apply non-None flag overrides."""
    import yaml  # only when a file or flags are used

    base: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as e:
            raise ConfigError(f"faults file {p}: cannot be read ({e.strerror or e})") from e
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"faults file {p}: not valid YAML ({e})") from e
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(
                f"faults file {p}: expected a mapping of fault keys, got {type(loaded).__name__}"
            )
        if set(loaded) == {"faults"} and isinstance(loaded["faults"], dict):
            loaded = loaded["faults"]
        base = dict(loaded)
        where = str(p)
    else:
        where = "faults"
    cfg = from_mapping(base, where=where)
    return cfg.with_overrides(**overrides) if any(v is not None for v in overrides.values()) else cfg
