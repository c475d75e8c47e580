"""One answer set against several targets: per-target accuracy, pairwise agreement, quality drop against the
first target (the baseline), and the files of an accuracy run directory.

Run directory: ``accuracy.json`` (everything but the per-item rows) and ``items.jsonl`` (one row per
target and item: the prompt, the response, the canonical answer, the verdict, status and latency).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

import servelab
from servelab.accuracy.compare import agreement, flag_quality_drop
from servelab.accuracy.dataset import Item
from servelab.accuracy.runner import DEFAULT_CONCURRENCY, DEFAULT_MAX_TOKENS, accuracy_for_target
from servelab.accuracy.stats import DEFAULT_CONFIDENCE
from servelab.config.models import TargetConfig
from servelab.records.manifest import redact_argv
from servelab.records.rundir import write_json

ITEMS_FILE = "items.jsonl"
RESULT_FILE = "accuracy.json"


def evaluate(targets: Sequence[TargetConfig], items: Sequence[Item], *, dataset: dict[str, Any],
             concurrency: int = DEFAULT_CONCURRENCY, max_tokens: int = DEFAULT_MAX_TOKENS, seed: int = 0,
             system_prompt: str | None = None, max_drop: float = 0.0,
             confidence: float = DEFAULT_CONFIDENCE) -> dict[str, Any]:
    """Run ``items`` on every target in turn; compare every pair, and every target with the first."""
    runs = [accuracy_for_target(t, items, concurrency=concurrency, max_tokens=max_tokens, seed=seed,
                                system_prompt=system_prompt, confidence=confidence) for t in targets]
    pairs = []
    for i in range(len(runs)):
        for j in range(i + 1, len(runs)):
            pairs.append({"a": i, "b": j, **agreement(runs[i], runs[j], confidence)})
    quality = [{"baseline": 0, "candidate": j, **flag_quality_drop(runs[0], runs[j], max_drop=max_drop,
                                                                  confidence=confidence)}
               for j in range(1, len(runs))]
    return {
        "servelab_version": servelab.__version__,
        "argv": redact_argv(["servelab", *sys.argv[1:]]),
        "dataset": {**dataset, "items": len(items), "kinds": dict(Counter(it.kind for it in items)),
                    "matchers": dict(Counter(it.matcher for it in items))},
        "settings": {"temperature": 0.0, "max_tokens": max_tokens, "concurrency": concurrency,
                     "system_prompt": system_prompt, "confidence": confidence, "max_drop": max_drop},
        "targets": [{"index": i, **r["target"], **r["summary"]} for i, r in enumerate(runs)],
        "agreement": pairs,
        "quality": quality,
        "_results": [r["results"] for r in runs],
    }


def write_run(run_dir: Path, report: dict[str, Any], items: Sequence[Item]) -> dict[str, Any]:
    """Write ``items.jsonl`` and ``accuracy.json`` into ``run_dir``; returns the report without the rows."""
    prompts = {it.id: it.prompt for it in items}
    public = {k: v for k, v in report.items() if k != "_results"}
    with (run_dir / ITEMS_FILE).open("wb") as f:
        for t, rows in enumerate(report["_results"]):
            url = public["targets"][t]["url"]
            for r in rows:
                f.write(orjson.dumps({"target": t, "url": url, "prompt": prompts.get(r["id"]), **r}) + b"\n")
    public["files"] = {"items": ITEMS_FILE}
    write_json(run_dir / RESULT_FILE, public)
    return public
