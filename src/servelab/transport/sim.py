"""The in-process transport: model requests go straight to the simulated engine, no sockets.

Works on a ``VirtualClock`` (an hour of traffic in seconds, deterministic from the seed) and on a
``WallClock`` (real time). The engine starts lazily on the running loop at the first send.
"""

from __future__ import annotations

import itertools

import orjson

from servelab.clock import Clock
from servelab.records.schema import OK, RequestRecord
from servelab.sim.api import SimRequest
from servelab.sim.deployment import Deployment
from servelab.sim.engine import Engine
from servelab.sim.oai import BadRequest, ChunkWriter, error_body, parse_completion
from servelab.sim.prom import RequestMetrics, render_metrics
from servelab.sim.tokenizer import filler_text
from servelab.transport._wire import build_body
from servelab.transport.base import ModelRequest, new_record
from servelab.transport.mock import Reply, play


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
        rec = new_record(req)
        rec.sent_ns = sent
        rec.intended_ns = req.intended_ns or sent
        prompt_ids = self.engine.tokenize(req.text())
        try:
            # The body the HTTP transport would send, validated as the HTTP front does it (same messages).
            p = parse_completion(orjson.loads(build_body(req, None, req.stream, {})), req.api,
                                 lambda _text: prompt_ids + [0] * _template_tokens(req),
                                 self.deployment.max_model_len, self.deployment.model.name)
        except BadRequest as e:
            reply = Reply(status=e.status, content_type="application/json",
                          parts=((0.0, error_body(e.message, e.kind, e.status, e.param)),))
            return play(rec, reply, (sent, sent), stream=req.stream)
        sreq = SimRequest(rid=next(self._rids), prompt_ids=prompt_ids, max_tokens=p.max_tokens,
                          min_tokens=p.min_tokens, ignore_eos=p.ignore_eos, arrival_ns=sent)
        self.engine.submit(sreq)
        await sreq.done  # type: ignore[misc]
        self.metrics.observe(sreq)
        if sreq.finish_reason == "error":
            return self._failed(rec, req, sreq)
        times = sreq.token_times_ns
        rec.finish_reason = sreq.finish_reason
        rec.usage_prompt_tokens = len(prompt_ids)
        rec.status = OK
        rec.http_status = 200
        rec.token_times_ns = times
        rec.first_byte_ns = rec.first_token_ns = rec.first_content_ns = sreq.first_token_ns
        rec.last_token_ns = times[-1] if times else None
        rec.end_ns = sreq.finish_ns
        rec.usage_completion_tokens = sreq.output_tokens
        rec.usage_cached_tokens = sreq.cached_tokens
        rec.est_completion_tokens = len(times) if req.stream else int(sreq.output_tokens > 0)
        rec.srv_queue_ns, rec.srv_prefill_ns, rec.srv_decode_ns = (
            sreq.queue_ns,
            sreq.prefill_ns,
            sreq.decode_ns,
        )
        rec.srv_preempted_ns, rec.srv_comm_ns = sreq.preempted_ns, sreq.comm_ns
        rec.output_text = self.engine.output_text(sreq)
        if rec.finish_reason == "abort":
            rec.status = "disconnected"
        return rec

    def _failed(self, rec: RequestRecord, req: ModelRequest, sreq: SimRequest) -> RequestRecord:
        """The record of an engine failure: the bytes ``servelab sim serve`` answers, through the HTTP path's
        exchange (streamed: the tokens so far, then an error event; whole: HTTP 500)."""
        message = sreq.error or "the simulated engine failed the request"
        end = sreq.finish_ns if sreq.finish_ns is not None else self.clock.now()
        if not req.stream:
            body = error_body(message, "InternalServerError", 500)
            reply = Reply(status=500, content_type="application/json", parts=((0.0, body),))
            return play(rec, reply, (end, end), stream=False)
        cw = ChunkWriter(req.api, f"{'chatcmpl' if req.api == 'chat' else 'cmpl'}-{sreq.rid}", 0,
                         self.deployment.model.name, True)
        words = filler_text(len(sreq.token_times_ns), self.engine.output_seed(sreq)).split()
        parts: list[tuple[float, bytes]] = []
        at = [rec.sent_ns or end]
        times = sreq.token_times_ns
        i = 0
        while i < len(times):  # one chunk per engine step, as the front writes them
            j = i
            while j < len(times) and times[j] == times[i]:
                j += 1
            piece = " ".join(words[i:j])
            parts.append((0.0, (cw.role() if i == 0 else b"") + cw.token(" " + piece if i else piece)))
            at.append(times[i])
            i = j
        parts.append((0.0, cw.error(message) + cw.done()))
        at.append(end)
        return play(rec, Reply(parts=tuple(parts)), at, stream=True)

    def metrics_text(self) -> str:
        """The engine's Prometheus page (vLLM's names), as ``servelab sim serve`` would answer /metrics."""
        return render_metrics(self.engine.stats(), self.metrics, self.deployment.model.name)

    async def aclose(self) -> None:
        if self._started:
            await self.engine.stop()
            self._started = False


def _template_tokens(req: ModelRequest) -> int:
    """Tokens the simulator's chat template adds around the messages (a role tag each, then the assistant
    tag; see ``sim.oai.render_chat``). The HTTP front counts them in the prompt; the in-process transport
    gives the engine the bare text, as it always has, but validates lengths as the front does, so a
    request the front refuses is refused here with the same message (tests/e2e/test_sim_parity.py)."""
    if req.api != "chat":
        return 0
    return len(req.messages) + 1 if req.messages is not None else 2
