"""Helpers for the real-engine tests: one benchmark run into a temp dir, and the run directory read back."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from servelab.bench.run import RunResult, execute
from servelab.config import RunConfig, validate


def run_config(url: str, model: str, out: Path, **sections: Any) -> RunConfig:
    """A run config against ``url``: short timeouts, fast telemetry; ``sections`` replace/extend the
    defaults."""
    data: dict[str, Any] = {
        "target": {
            "url": url,
            "model": model,
            "timeouts": {"connect_s": 5, "first_token_s": 60, "total_s": 120},
        },
        "telemetry": {"interval_s": 0.2, "nvml": False},
        "out": str(out),
        "seed": 1,
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return validate(RunConfig, data, source="test")


def run(url: str, model: str, out: Path, **sections: Any) -> RunResult:
    return execute(run_config(url, model, out, **sections), argv=["pytest"], report=False)


def fresh_seed() -> int:
    """A seed no earlier run used: the server keeps its prefix cache between test runs, so a workload that
    must find nothing cached needs prompts it has never seen."""
    return time.time_ns() % (2**31 - 1)


def manifest(run_dir: Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "manifest.json").read_text())


def raw_counter_delta(run_dir: Path, raw_name: str) -> float:
    """Last minus first scraped value of an engine's own counter (summed over label sets)."""
    t = pq.read_table(Path(run_dir) / "telemetry.parquet").to_pydict()
    series: dict[str, list[tuple[int, float]]] = {}
    for ts, name, labels, value in zip(t["t_ns"], t["raw_name"], t["labels"], t["value"], strict=True):
        if name == raw_name:
            series.setdefault(labels, []).append((ts, value))
    if not series:
        raise AssertionError(f"{raw_name} was never scraped; names seen: {sorted(set(t['raw_name']))[:40]}")
    return sum(max(pts)[1] - min(pts)[1] for pts in series.values())


def agreement(summary: dict[str, Any], key: str) -> dict[str, Any]:
    server = summary.get("server") or {}
    assert server.get("available"), f"no server telemetry in summary: {server}"
    found = (server.get("token_agreement") or {}).get(key)
    assert found is not None, f"no token agreement for {key}: {server.get('token_agreement')}"
    return found
