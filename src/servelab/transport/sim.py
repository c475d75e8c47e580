"""The in-process transport: model requests go straight to the simulated engine, no sockets.

Works on a ``VirtualClock`` (an hour of traffic in seconds, deterministic from the seed) and on a
``WallClock`` (real time). The engine starts lazily on the running loop at the first send.
"""

from __future__ import annotations

import itertools
from typing import Any

import servelab
from servelab.clock import Clock
from servelab.records.schema import OK, RequestRecord
from servelab.sim.api import SimRequest
from servelab.sim.deployment import Deployment
from servelab.sim.engine import Engine
from servelab.sim.prom import RequestMetrics, render_metrics
from servelab.sim.tokenizer import count_tokens
from servelab.transport.base import ModelRequest


class SimTransport:
    """``Transport`` over an in-process :class:`servelab.sim.engine.Engine`."""

    def __init__(self, deployment: Deployment, clock: Clock, seed: int = 0) -> None:
        self.deployment = deployment
        self.clock = clock
        self.engine = Engine(deployment, clock, seed=seed)
        self._rids = itertools.count(1)
        self._started = False
        self.metrics = RequestMetrics()

    async def send(self, req: ModelRequest) -> RequestRecord:
        if not self._started:
            self.engine.start()
            self._started = True
        clock = self.clock
        sent = clock.now()
        prompt_ids = self.engine.tokenize(req.text())
        sreq = SimRequest(rid=next(self._rids), prompt_ids=prompt_ids, max_tokens=req.max_tokens,
                          min_tokens=req.min_tokens or 0, ignore_eos=req.ignore_eos, arrival_ns=sent)
        self.engine.submit(sreq)
        await sreq.done  # type: ignore[misc]
        self.metrics.observe(sreq)
        rec = RequestRecord(
            request_id=req.request_id, session_id=req.session_id, turn=req.turn, attempt=req.attempt,
            warmup=req.warmup, intended_ns=req.intended_ns or sent, sent_ns=sent,
            est_prompt_tokens=req.est_prompt_tokens, requested_output_tokens=req.max_tokens,
            finish_reason=sreq.finish_reason, usage_prompt_tokens=len(prompt_ids),
        )
        if sreq.finish_reason == "error":
            rec.status, rec.http_status, rec.error = "http_error", 400, sreq.error
            rec.end_ns = rec.first_byte_ns = sreq.finish_ns
            return rec
        times = sreq.token_times_ns
        rec.status = OK
        rec.http_status = 200
        rec.token_times_ns = times
        rec.first_byte_ns = rec.first_token_ns = rec.first_content_ns = sreq.first_token_ns
        rec.last_token_ns = times[-1] if times else None
        rec.end_ns = sreq.finish_ns
        rec.usage_completion_tokens = sreq.output_tokens
        rec.usage_cached_tokens = sreq.cached_tokens
        rec.est_completion_tokens = len(times) if req.stream else int(sreq.output_tokens > 0)
        rec.srv_queue_ns, rec.srv_prefill_ns, rec.srv_decode_ns = sreq.queue_ns, sreq.prefill_ns, sreq.decode_ns
        rec.srv_preempted_ns, rec.srv_comm_ns = sreq.preempted_ns, sreq.comm_ns
        rec.output_text = self.engine.output_text(sreq)
        if rec.finish_reason == "abort":
            rec.status = "disconnected"
        return rec

    def metrics_text(self) -> str:
        """The engine's Prometheus page (vLLM's names), as ``servelab sim serve`` would answer /metrics."""
        return render_metrics(self.engine.stats(), self.metrics, self.deployment.model.name)

    async def count_tokens(self, text: str) -> int | None:
        return count_tokens(text)

    async def describe(self) -> dict[str, Any]:
        d = self.deployment
        return {"engine": "servelab-sim", "version": servelab.__version__, "models": [d.model.name],
                "deployment": d.describe(), "hardware": d.hardware.facts(), "model": d.model.facts()}

    async def aclose(self) -> None:
        if self._started:
            await self.engine.stop()
            self._started = False
