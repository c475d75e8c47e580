"""Single-turn requests as runner jobs."""

from __future__ import annotations

import asyncio

from servelab.config.models import RunConfig
from servelab.load.runner import Job
from servelab.records.schema import CANCELLED
from servelab.records.sink import RecordSink
from servelab.transport.base import ModelRequest, Transport, ended_record


def single_turn_job(cfg: RunConfig, plans: object, transport: Transport, sink: RecordSink) -> Job:
    """A job that sends plan ``index`` once and records the attempt (cancelled ones too)."""
    target = cfg.target

    async def job(index: int, intended_ns: int, warmup: bool) -> None:
        p = plans.plan(index)  # type: ignore[attr-defined]
        req = ModelRequest(
            request_id=index,
            api=target.api,
            messages=p.messages,
            prompt=p.prompt,
            max_tokens=p.max_tokens,
            min_tokens=p.min_tokens,
            ignore_eos=p.ignore_eos,
            temperature=p.temperature,
            stream=target.stream,
            est_prompt_tokens=p.est_prompt_tokens,
            warmup=warmup,
            intended_ns=intended_ns,
        )
        try:
            rec = await transport.send(req)
        except asyncio.CancelledError:
            sink.request(ended_record(req, CANCELLED))
            raise
        rec.output_text = ""  # single-turn runs never read the text again: do not hold it for the run
        sink.request(rec)

    return job
