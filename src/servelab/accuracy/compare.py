"""Two targets on the same answer set: agreement item by item, and whether a candidate lost quality.

Both take the dicts :func:`servelab.accuracy.runner.accuracy_for_target` returns (or just their
``"results"`` lists). Items are paired by id; an item either target failed to answer is left out of the
paired figures (and counted in ``unpaired``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from servelab.accuracy.stats import DEFAULT_CONFIDENCE, difference_independent, difference_paired, proportion

NOT_MEASURABLE = "not measurable (simulated text)"


def _results(x: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    if isinstance(x, Mapping):
        return list(x.get("results") or [])
    return list(x)


def _pairs(a: Any, b: Any) -> tuple[list[tuple[Mapping[str, Any], Mapping[str, Any]]], int]:
    ra, rb = _results(a), {r["id"]: r for r in _results(b)}
    pairs, unpaired = [], 0
    for r in ra:
        other = rb.get(r["id"])
        if other is None or r["correct"] is None or other["correct"] is None:
            unpaired += 1
            continue
        pairs.append((r, other))
    return pairs, unpaired


def agreement(a: Any, b: Any, confidence: float = DEFAULT_CONFIDENCE) -> dict[str, Any]:
    """Share of items on which both targets gave the same answer (right or wrong), with a Wilson interval,
    and the share on which both were judged the same way (both right or both wrong)."""
    pairs, unpaired = _pairs(a, b)
    same_answer = sum(1 for x, y in pairs if x["answer"] == y["answer"])
    same_verdict = sum(1 for x, y in pairs if x["correct"] == y["correct"])
    return {"answer": proportion(same_answer, len(pairs), confidence),
            "verdict": proportion(same_verdict, len(pairs), confidence),
            "paired": len(pairs), "unpaired": unpaired,
            "differing_ids": [x["id"] for x, y in pairs if x["answer"] != y["answer"]][:50]}


def flag_quality_drop(baseline_acc: Any, candidate_acc: Any, *, max_drop: float = 0.0,
                      confidence: float = DEFAULT_CONFIDENCE) -> dict[str, Any]:
    """Is the candidate's accuracy lower than the baseline's beyond the interval?

    The difference (candidate - baseline) gets Newcombe's paired interval over the items both answered
    (unpaired when the two ran different items, or when only summaries with ``correct`` and ``answered``
    are given). ``flagged`` is True when the whole interval lies below
    ``-max_drop``: the candidate lost more than ``max_drop`` (a fraction, default 0) at this confidence.
    A sweep point that gains throughput with ``flagged`` bought the gain with quality.
    """
    if not 0 <= max_drop < 1:
        raise ValueError(f"max_drop must be a fraction in [0, 1), got {max_drop}")
    if not (measurable(baseline_acc) and measurable(candidate_acc)):
        return {"diff": None, "lo": None, "hi": None, "flagged": False, "max_drop": max_drop,
                "confidence": confidence, "unpaired": 0, "verdict": NOT_MEASURABLE}
    pairs, unpaired = _pairs(candidate_acc, baseline_acc)
    if pairs:
        d = difference_paired([c["correct"] for c, _ in pairs], [b["correct"] for _, b in pairs], confidence)
    else:
        # No common items: compare the two accuracies as independent samples.
        sc, sb = _summary(candidate_acc), _summary(baseline_acc)
        d = difference_independent(sc[0], sc[1], sb[0], sb[1], confidence)
    flagged = d["hi"] is not None and d["hi"] < -max_drop
    if d["diff"] is None:
        verdict = "no common answered items"
    elif flagged:
        verdict = "quality drop"
    elif d["lo"] > 0:
        verdict = "quality gain"
    else:
        verdict = "within noise"
    return {**d, "flagged": flagged, "max_drop": max_drop, "confidence": confidence, "unpaired": unpaired,
            "verdict": verdict}


def measurable(x: Any) -> bool:
    """False for an accuracy result against the simulator (its text is filler: quality is not measurable)."""
    s = x.get("summary") if isinstance(x, Mapping) and isinstance(x.get("summary"), Mapping) else x
    return not (isinstance(s, Mapping) and s.get("measurable") is False)


def _summary(x: Any) -> tuple[int, int]:
    """(correct, answered) from the per-item rows, else from a summary (``{"summary": {...}}`` or the
    per-target entry of accuracy.json, both holding ``correct`` and ``answered``)."""
    rows = [r for r in _results(x) if r["correct"] is not None]
    if not rows and isinstance(x, Mapping):
        s = x.get("summary") if isinstance(x.get("summary"), Mapping) else x
        if isinstance(s.get("correct"), int) and isinstance(s.get("answered"), int):
            return s["correct"], s["answered"]
    return sum(1 for r in rows if r["correct"]), len(rows)
