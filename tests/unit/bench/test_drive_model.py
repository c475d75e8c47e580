"""A run against an HTTP target knows its model before the run: the first request does not look it up."""

from __future__ import annotations

import asyncio
import threading

from servelab.bench.drive import drive_shard
from servelab.bench.shard import RunSpec
from servelab.clock import WallClock
from servelab.config.models import RunConfig
from servelab.transport.http import HttpTransport


def test_the_model_is_resolved_before_the_run_not_by_the_first_send(tmp_path, monkeypatch):
    """Left to the first send, the GET /models (a new connection and a round trip) happened after the
    request was due: 4.4 ms of the first turn's 7 ms schedule lag in a Claude Code replay over HTTP."""
    from servelab.sim.server import make_engine, start_server

    loop = asyncio.new_event_loop()
    up = threading.Event()
    box: dict = {}

    async def serve() -> None:
        engine, dep = make_engine("sim", WallClock(use_uvloop=False))
        box["server"] = await start_server(engine, dep)
        box["stop"] = asyncio.Event()
        up.set()
        await box["stop"].wait()
        await box["server"].close()

    th = threading.Thread(target=lambda: loop.run_until_complete(serve()), daemon=True)
    th.start()
    assert up.wait(10)
    seen: list[str | None] = []
    real_send = HttpTransport.send

    async def send(self, req):
        seen.append(self._model)  # the model this transport knew when the request was handed to it
        return await real_send(self, req)

    monkeypatch.setattr(HttpTransport, "send", send)
    try:
        cfg = RunConfig.model_validate({"target": {"url": box["server"].base_url},
                                        "load": {"concurrency": 1}, "limits": {"requests": 2},
                                        "telemetry": {"enabled": False}})
        res = drive_shard(RunSpec(config=cfg, run_dir=tmp_path), 0)
    finally:
        loop.call_soon_threadsafe(box["stop"].set)
        th.join(10)
        loop.close()
    assert res.error is None and res.outcome is not None and res.outcome.completed == 2
    assert seen == ["sim-tiny", "sim-tiny"]  # before: [None, 'sim'], the first send resolved it on the clock
