"""Workload profiles: the YAML files shipped in ``servelab/workload/profiles/`` and user-written ones.

A profile is a :class:`~servelab.config.agent.ProfileConfig`: a name, a one-line description, where its
numbers come from, and the session every user/task runs.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from servelab.config.agent import ProfileConfig
from servelab.config.loading import load_yaml, validate
from servelab.errors import ConfigError

_PACKAGE = "servelab.workload"
_DIR = "profiles"


def _shipped() -> dict[str, Path]:
    root = resources.files(_PACKAGE).joinpath(_DIR)
    return {Path(str(p)).stem: Path(str(p)) for p in root.iterdir() if str(p).endswith(".yaml")}


def profile_names() -> list[str]:
    """Names of the shipped profiles, sorted."""
    return sorted(_shipped())


def list_profiles() -> list[tuple[str, str]]:
    """(name, one-line description) of every shipped profile, sorted by name."""
    return [(name, load_profile(name).description) for name in profile_names()]


def load_profile(name_or_path: str | Path) -> ProfileConfig:
    """A shipped profile by name (``coding-agent``) or a profile YAML file by path."""
    shipped = _shipped()
    key = str(name_or_path)
    if key in shipped:
        path = shipped[key]
    else:
        path = Path(key)
        if not path.is_file():
            raise ConfigError(
                f"unknown profile {key!r}: neither a shipped profile nor an existing file",
                hint=f"use one of {', '.join(sorted(shipped))} (servelab profiles lists them), "
                "or the path of a profile YAML",
            )
    return validate(ProfileConfig, load_yaml(path), source=str(path))
