"""Load YAML, merge flag overrides (flag beats file beats default), and explain validation errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from servelab.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def load_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(
            f"config file {str(p)!r} does not exist", hint="pass an existing YAML file to --config"
        )
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})",
                          hint="save the config file as UTF-8") from None
    except OSError as e:
        raise ConfigError(f"cannot read config file {str(p)!r}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{p}: not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``data`` with each dotted key of ``overrides`` set (None values are skipped)."""
    out = _deep_copy(data)
    for dotted, value in overrides.items():
        if value is None:
            continue
        node = out
        parts = dotted.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[parts[-1]] = value
    return out


def _deep_copy(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deep_copy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deep_copy(v) for v in d]
    return d


def format_validation_error(err: ValidationError, source: str = "config",
                            model: type[BaseModel] | None = None) -> str:
    lines = [f"invalid {source}: {err.error_count()} problem(s)"]
    for e in err.errors(include_url=False):
        loc = _path(e["loc"])
        given = e.get("input")
        kind = e["type"]
        if kind == "extra_forbidden":
            msg = "unknown key" + _did_you_mean(model, loc) + " (every key: docs/config.md)"
        else:
            msg = e["msg"]
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, ") :]
        given_s = "" if isinstance(given, dict) else f" (given: {given!r})"
        lines.append(f"  {loc or '<top>'}: {msg}{given_s}")
    return "\n".join(lines)


# Pydantic puts the chosen variant's tag into an error's location (workload.agent.profile); users wrote
# no such key, so tags are dropped when they follow a field that holds a union (or a list item).
_TAGS = {
    "fixed",
    "uniform",
    "normal",
    "lognormal",
    "exponential",
    "empirical",
    "requests",
    "agent",
    "replay",
    "model",
    "tool",
    "retrieval",
    "code",
    "think",
    "repeat",
    "gpu_hour",
    "tokens",
}
_UNION_FIELDS = {"workload", "input_tokens", "output_tokens", "user_tokens", "duration_s", "result_tokens",
                 "count", "error_tokens", "model"}


def _path(loc: tuple[object, ...]) -> str:
    parts: list[str] = []
    prev: object = None
    for x in loc:
        if isinstance(x, str) and x in _TAGS and (isinstance(prev, int) or prev in _UNION_FIELDS):
            prev = None
            continue
        parts.append(str(x))
        prev = x
    return ".".join(parts)


def _did_you_mean(model: type[BaseModel] | None, loc: str) -> str:
    if model is None or not loc:
        return ""
    from servelab.config.suggest import suggest

    where, _, key = loc.rpartition(".")
    hit = suggest(model, where, key)
    return f": did you mean {hit}?" if hit else ""


def validate(model: type[M], data: dict[str, Any], source: str = "config") -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source, model)) from None


def load_config(model: type[M], path: str | Path | None, overrides: dict[str, Any] | None = None) -> M:
    data = load_yaml(path) if path else {}
    data = apply_overrides(data, overrides or {})
    return validate(model, data, source=str(path) if path else "flags")
