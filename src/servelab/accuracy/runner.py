"""Run an answer set against one target through the :class:`~servelab.transport.base.Transport` interface.

Each item is one chat (or completions) request at temperature 0, not streamed, at most ``concurrency`` in
flight. A request that fails (HTTP error, timeout, reset) is counted as *failed*, not as wrong: accuracy is
over the answered items, so an overloaded server does not read as a worse model; the failed count is
reported beside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from servelab.accuracy.compare import NOT_MEASURABLE
from servelab.accuracy.dataset import Item
from servelab.accuracy.matchers import match
from servelab.accuracy.stats import DEFAULT_CONFIDENCE, proportion
from servelab.bench.targets import make_clock, make_probe, make_transport, validate_target
from servelab.clock import Clock
from servelab.config.models import TargetConfig
from servelab.errors import ConfigError
from servelab.records.schema import OK
from servelab.transport.base import ModelRequest, Transport

DEFAULT_MAX_TOKENS = 256
DEFAULT_CONCURRENCY = 8


@dataclass(slots=True)
class ItemResult:
    """One item's outcome on one target."""

    id: str
    status: str
    correct: bool | None  # None when the request failed
    answer: str | None  # canonical answer (see matchers); None when the request failed
    expected: str
    matcher: str
    response: str
    error: str | None
    latency_ms: float | None
    finish_reason: str | None
    completion_tokens: int | None


def _request(i: int, item: Item, api: str, max_tokens: int, system_prompt: str | None) -> ModelRequest:
    if api == "completions":
        return ModelRequest(request_id=i, api="completions", prompt=item.prompt, max_tokens=max_tokens,
                            temperature=0.0, stream=False)
    messages: list[dict[str, Any]] = [{"role": "user", "content": item.prompt}]
    if system_prompt:
        messages.insert(0, {"role": "system", "content": system_prompt})
    return ModelRequest(request_id=i, api="chat", messages=messages, max_tokens=max_tokens, temperature=0.0,
                        stream=False)


async def run_items(transport: Transport, items: Sequence[Item], *, clock: Clock, api: str = "chat",
                    concurrency: int = DEFAULT_CONCURRENCY, max_tokens: int = DEFAULT_MAX_TOKENS,
                    system_prompt: str | None = None) -> list[ItemResult]:
    """Send every item (at most ``concurrency`` at once) and judge each response; results in item order."""
    if concurrency < 1:
        raise ConfigError(f"concurrency must be at least 1, got {concurrency}")
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, item: Item) -> ItemResult:
        async with gate:
            req = _request(i, item, api, max_tokens, system_prompt)
            req.intended_ns = clock.now()
            rec = await transport.send(req)
        latency = None
        if rec.end_ns is not None and rec.sent_ns is not None:
            latency = (rec.end_ns - rec.sent_ns) / 1e6
        if rec.status != OK:
            return ItemResult(item.id, rec.status, None, None, item.expected, item.matcher, rec.output_text,
                              rec.error, latency, rec.finish_reason, rec.usage_completion_tokens)
        m = match(item.matcher, rec.output_text, item.expected)
        return ItemResult(
            item.id,
            rec.status,
            m.correct,
            m.answer,
            item.expected,
            item.matcher,
            rec.output_text,
            None,
            latency,
            rec.finish_reason,
            rec.usage_completion_tokens,
        )

    return list(await asyncio.gather(*(one(i, it) for i, it in enumerate(items))))


def score(
    results: Sequence[ItemResult | dict[str, Any]], confidence: float = DEFAULT_CONFIDENCE
) -> dict[str, Any]:
    """Accuracy over the answered items with its Wilson interval, plus counts (and per-kind accuracy)."""
    rows = [r if isinstance(r, dict) else asdict(r) for r in results]
    answered = [r for r in rows if r["correct"] is not None]
    k = sum(1 for r in answered if r["correct"])
    truncated = sum(1 for r in answered if not r["correct"] and r.get("finish_reason") == "length")
    return {
        "items": len(rows),
        "answered": len(answered),
        "failed": len(rows) - len(answered),
        "correct": k,
        "accuracy": proportion(k, len(answered), confidence),
        "wrong_at_length_limit": truncated,
    }


def accuracy_for_target(
    target: TargetConfig,
    items: Sequence[Item],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    seed: int = 0,
    system_prompt: str | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> dict[str, Any]:
    """Run ``items`` against ``target`` at temperature 0 and score them (blocking; opens its own clock).

    Returns ``{"target": facts, "summary": score(...), "results": [per-item dicts]}``; feed two of these to
    :func:`servelab.accuracy.compare.flag_quality_drop` or :func:`~servelab.accuracy.compare.agreement`.
    Raises :class:`~servelab.errors.TargetError` when the target cannot be reached or described.
    """
    if not items:
        raise ConfigError("the answer set is empty", hint="pass --n 1 or more, or a non-empty --dataset")
    validate_target(target)
    clock = make_clock(target)

    async def main() -> tuple[dict[str, Any], list[ItemResult]]:
        transport = make_transport(target, clock, concurrency=concurrency, seed=seed)
        probe = make_probe(target, clock, transport)
        try:
            facts = await probe.describe()
            results = await run_items(transport, items, clock=clock, api=target.api, concurrency=concurrency,
                                      max_tokens=max_tokens, system_prompt=system_prompt)
            return facts, results
        finally:
            await probe.aclose()
            await transport.aclose()

    facts, results = clock.run(main)
    model = target.model or next(iter(facts.get("models") or []), None)
    info = {"url": target.url, "model": model, "engine": facts.get("engine"), "version": facts.get("version")}
    rows = [asdict(r) for r in results]
    summary = score(rows, confidence)
    if facts.get("engine") == "servelab-sim":  # filler text: no answer can be right, so no verdict either
        summary.update(measurable=False, note=NOT_MEASURABLE)
    return {"target": info, "summary": summary, "results": rows}
