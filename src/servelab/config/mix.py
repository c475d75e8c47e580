"""Mixed traffic on one endpoint: several workload classes at once (``mix:`` in YAML, ``--mix`` on the
command line), each with its own load and, optionally, its own tenant (API key variable, extra headers).

``--mix chat:16,batch-summarize:64`` is two classes: 16 closed-loop chat users and 64 bulk summarisers;
``NAME@RATE`` is an open-loop class (new sessions per second). A class's workload is a profile (a shipped
name, see ``servelab profiles``, or a profile YAML path).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from servelab.config import bounds as B
from servelab.config.base import Strict
from servelab.errors import ConfigError


class MixClassConfig(Strict):
    workload: str = Field(
        description="The class's workload: a profile name (`servelab profiles`) or a profile YAML path."
    )
    name: str | None = Field(
        default=None,
        description="The class's name in records and figures (default: the "
        "workload's name; two classes of one workload need names).",
    )
    concurrency: int | None = Field(default=None, ge=1, le=B.MAX_CONCURRENCY, description="Closed loop: "
                                    "concurrent users of this class, each running one session after another.")
    rate: float | None = Field(
        default=None,
        ge=B.MIN_RATE,
        le=B.MAX_RATE,
        description="Open loop: new sessions of this class per second (Poisson).",
    )
    sessions: int | None = Field(
        default=None,
        ge=1,
        le=B.MAX_COUNT,
        description="Sessions this class starts in "
        "all (default: the first class max(16, 2 x users); the others keep going "
        "until the first class is done).",
    )
    tenant: str | None = Field(default=None, description="Tenant name recorded with this class's requests "
                               "(default: none).")
    api_key_env: str | None = Field(default=None, description="Name of the environment variable holding this "
                                    "class's bearer key (never stored); default: the target's.")
    headers: dict[str, str] = Field(default_factory=dict, description="Extra HTTP headers on this class's "
                                    "requests (over the target's).")

    @model_validator(mode="after")
    def _one_mode(self) -> MixClassConfig:
        if self.concurrency is not None and self.rate is not None:
            raise ValueError("give a class either concurrency (closed loop) or rate (open loop), not both")
        if self.concurrency is None and self.rate is None:
            raise ValueError(f"class {self.label!r} needs concurrency (users) or rate (sessions/s)")
        return self

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            B.check_header(name, value)
        return v

    @field_validator("workload", "name", "tenant")
    @classmethod
    def _text(cls, v: str | None) -> str | None:
        if v is not None and not _NAME.fullmatch(v.strip() or "-"):
            raise ValueError(f"{v!r} must be a non-empty name without commas, colons or control characters")
        return v.strip() if v is not None else v

    @property
    def label(self) -> str:
        """The class's name: ``name``, else the workload's (a path's file stem)."""
        if self.name:
            return self.name
        return Path(self.workload).stem if self.workload.endswith((".yaml", ".yml")) else self.workload

    @property
    def mode(self) -> str:
        return "open" if self.rate is not None else "closed"


_NAME = re.compile(r"[^,:\x00-\x1f]{1,200}")
_ITEM = re.compile(r"^(?P<w>[^:@]+)(?::(?P<c>[^:@]+)|@(?P<r>[^:@]+))$")


def parse_mix(text: str) -> list[dict[str, Any]]:
    """``--mix`` as config data: ``NAME:USERS`` (closed loop) or ``NAME@RATE`` (open loop, sessions/s),
    comma-separated. Raises :class:`ConfigError` (exit 2) on anything else."""
    example = "e.g. --mix chat:16,batch-summarize:64 (users per class) or --mix chat:16,batch-summarize@2"
    items = [t.strip() for t in (text or "").split(",")]
    if not text or not text.strip() or any(not t for t in items):
        raise ConfigError(f"--mix {text!r} is empty or has an empty class", hint=example)
    out: list[dict[str, Any]] = []
    for t in items:
        m = _ITEM.match(t)
        if m is None:
            raise ConfigError(f"--mix class {t!r} is not NAME:USERS or NAME@RATE", hint=example)
        w = m.group("w").strip()
        if m.group("c") is not None:
            try:
                n = int(m.group("c").strip())
            except ValueError:
                raise ConfigError(f"--mix class {t!r}: users {m.group('c')!r} is not a whole number",
                                  hint=example) from None
            if n < 1:
                raise ConfigError(f"--mix class {t!r}: users must be at least 1", hint=example)
            out.append({"workload": w, "concurrency": n})
        else:
            try:
                r = float(m.group("r").strip())
            except ValueError:
                raise ConfigError(
                    f"--mix class {t!r}: rate {m.group('r')!r} is not a number", hint=example
                ) from None
            if not r > 0 or r == float("inf"):
                raise ConfigError(
                    f"--mix class {t!r}: rate must be a positive number of sessions/s", hint=example
                )
            out.append({"workload": w, "rate": r})
    return out


def check_mix(mix: list[MixClassConfig]) -> list[MixClassConfig]:
    """Class names are unique (they key the records and the figures)."""
    if not mix:
        raise ValueError("mix needs at least one class")
    seen: set[str] = set()
    for c in mix:
        if c.label in seen:
            raise ValueError(f"class {c.label!r} appears twice in mix; give each a distinct `name`")
        seen.add(c.label)
    return mix


def default_sessions(c: MixClassConfig) -> int:
    """Sessions the first (reference) class runs when neither it nor the run sets a limit."""
    return max(16, 2 * (c.concurrency or 8))
