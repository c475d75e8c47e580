"""The contract between the simulated engine and its fronts (in-process transport, HTTP server).

The engine (``servelab.sim.engine.Engine``) is driven by a clock (``servelab.clock``): on a
``VirtualClock`` it simulates in process, on a ``WallClock`` it serves over HTTP in real time.

A front builds a :class:`SimRequest`, calls ``engine.submit(req)``, and either awaits ``req.done``
(an ``asyncio.Future`` the engine resolves when the request finishes) or, for streaming, receives
``req.on_tokens(n_new, t_ns)`` callbacks as steps emit tokens. When the request finishes the engine
fills the outcome fields below, including one arrival time per output token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class SimRequest:
    rid: int
    prompt_ids: list[int]  # token ids from the engine's tokenizer (Engine.tokenize)
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    arrival_ns: int = 0
    on_tokens: Callable[[int, int], None] | None = None  # (new tokens, time ns), called per step
    done: asyncio.Future | None = None  # resolved with the request itself when it finishes
    # Outcome, filled by the engine.
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error"
    output_tokens: int = 0
    cached_tokens: int = 0
    first_token_ns: int | None = None
    finish_ns: int | None = None
    token_times_ns: list[int] = field(default_factory=list)
    error: str | None = None
    # Ground truth: where the time went, ns.
    queue_ns: int = 0
    prefill_ns: int = 0
    decode_ns: int = 0
    preempted_ns: int = 0
    comm_ns: int = 0
    preemptions: int = 0
