"""Quality checks: run a held-out answer set against targets at temperature 0, score it with confidence
intervals, and compare targets (agreement, quality drop between a baseline and a candidate)."""

from servelab.accuracy.compare import agreement, flag_quality_drop
from servelab.accuracy.dataset import Item, generate_items, load_dataset, load_jsonl
from servelab.accuracy.matchers import MATCHERS, Match, match
from servelab.accuracy.runner import ItemResult, accuracy_for_target, run_items, score

__all__ = [
    "MATCHERS",
    "Item",
    "ItemResult",
    "Match",
    "accuracy_for_target",
    "agreement",
    "flag_quality_drop",
    "generate_items",
    "load_dataset",
    "load_jsonl",
    "match",
    "run_items",
    "score",
]
