"""Flags shared by `run`, `replay` and `sweep`, and how they become a RunConfig (flag > file > default)."""

from __future__ import annotations

from typing import Any

from servelab.config import RunConfig, apply_overrides, load_yaml, validate
from servelab.errors import ConfigError

# flag name (as typer passes it) -> dotted config path
FLAG_PATHS: dict[str, str] = {
    "target": "target.url",
    "model": "target.model",
    "api": "target.api",
    "stream": "target.stream",
    "api_key_env": "target.api_key_env",
    "tokenizer": "target.tokenizer",
    "idle_timeout": "target.timeouts.idle_s",
    "max_response_bytes": "target.max_response_bytes",
    "allow_over_context": "target.allow_over_context",
    "concurrency": "load.concurrency",
    "rate": "load.rate",
    "arrival": "load.arrival",
    "burstiness": "load.burstiness",
    "think_time": "load.think_time_s",
    "requests": "limits.requests",
    "duration": "limits.duration_s",
    "warmup": "limits.warmup_requests",
    "warmup_s": "limits.warmup_s",
    "drain_timeout": "limits.drain_timeout_s",
    "input_tokens": "workload.input_tokens",
    "output_tokens": "workload.output_tokens",
    "ignore_eos": "workload.ignore_eos",
    "slo_ttft_ms": "slo.ttft_ms",
    "slo_itl_ms": "slo.itl_ms",
    "slo_tpot_ms": "slo.tpot_ms",
    "slo_e2e_ms": "slo.e2e_ms",
    "sessions": "load.concurrency",
    "session_rate": "load.rate",
    "max_sessions": "limits.sessions",
    "mix_baseline": "mix_baseline",
    "seed": "seed",
    "out": "out",
    "name": "name",
}


def parse_headers(headers: list[str] | None) -> dict[str, str] | None:
    if not headers:
        return None
    out: dict[str, str] = {}
    for h in headers:
        if ":" not in h:
            raise ConfigError(f"--header {h!r} is not 'Name: value'", hint="e.g. --header 'X-Team: perf'")
        k, v = h.split(":", 1)
        out[k.strip()] = v.strip()
    return out


def config_data(config_file: str | None, flags: dict[str, Any]) -> dict[str, Any]:
    """The config as a plain dict: the file, then each flag that was given on top."""
    data = load_yaml(config_file) if config_file else {}
    load = data.get("load") if isinstance(data.get("load"), dict) else None
    if load is not None:
        # Open and closed loop exclude each other: a flag for one replaces the file's other.
        if flags.get("rate") is not None or flags.get("session_rate") is not None:
            load.pop("concurrency", None)
        if flags.get("concurrency") is not None or flags.get("sessions") is not None:
            load.pop("rate", None)
    if flags.get("mix") is not None:  # mixed traffic: the flag's classes replace the file's mix
        from servelab.config.mix import parse_mix

        if flags.get("profile") is not None:
            raise ConfigError(
                "--mix and --profile both name the workload",
                hint="give the classes in --mix only, e.g. --mix chat:16,batch-summarize:64",
            )
        data["mix"] = parse_mix(flags["mix"])
    if flags.get("profile") is not None:
        data["workload"] = {"kind": "agent", "profile": flags["profile"]}
    elif flags.get("sessions") is not None or flags.get("session_rate") is not None:
        workload = data.get("workload")
        if not (isinstance(workload, dict) and workload.get("kind") == "agent"):
            raise ConfigError("--sessions/--session-rate need an agent workload",
                              hint="add --profile NAME (see `servelab profiles`) or a workload of kind agent")
    # Several flags share a path (--concurrency and --sessions): only the ones given may set it.
    overrides = {path: flags[name] for name, path in FLAG_PATHS.items() if flags.get(name) is not None}
    if flags.get("gpu_hour_usd") is not None:
        gpus = flags.get("gpus") or _sim_gpus(
            str((data.get("target") or {}).get("url") or flags.get("target") or "")
        )
        data["cost"] = {**(data.get("cost") or {}),
                        "model": {"kind": "gpu_hour", "gpu_hour_usd": flags["gpu_hour_usd"], "gpus": gpus}}
    headers = parse_headers(flags.get("header"))
    if headers:
        overrides["target.headers"] = headers
    return apply_overrides(data, overrides)


def _sim_gpus(url: str) -> int:
    """GPUs of a ``sim:MODEL@[NODESx]COUNTxHW`` spec (1 for anything else)."""
    import re

    m = re.match(r"^sim:[^@]+@(?:(\d+)x)?(\d+)x", url)
    return int(m.group(1) or 1) * int(m.group(2)) if m else 1


def build_run_config(config_file: str | None, flags: dict[str, Any]) -> RunConfig:
    return validate(RunConfig, config_data(config_file, flags), source=config_file or "flags")
