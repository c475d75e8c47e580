"""`servelab gateway-overhead` end to end: the simulator's HTTP server on 127.0.0.1 and, in front of it, a
tiny aiohttp reverse proxy that holds every request for a fixed delay before forwarding it. The measured
TTFT overhead must come out near that delay; ITL (the proxy streams chunks through untouched) near zero.

Both servers run on an event loop in a background thread; the CLI runs in the test's thread, as a user
would run it, with its own event loop.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from servelab.cli.main import main
from servelab.clock import WallClock
from servelab.sim.server import make_engine, start_server

DELAY_S = 0.020


class Background:
    """An event loop in a daemon thread, for servers the CLI (on its own loop) talks to."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro, timeout: float = 15.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


async def _start_proxy(upstream: str, delay_s: float) -> tuple[web.AppRunner, int, dict]:
    """A reverse proxy to ``upstream`` (``http://host:port``) that waits ``delay_s`` before forwarding."""
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
    seen: dict[str, int] = {}

    async def forward(request: web.Request) -> web.StreamResponse:
        seen[request.path] = seen.get(request.path, 0) + 1
        body = await request.read()
        await asyncio.sleep(delay_s)
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept")}
        async with session.request(request.method, upstream + request.rel_url.path_qs, data=body,
                                   headers=headers) as up:
            resp = web.StreamResponse(status=up.status,
                                      headers={"Content-Type": up.headers.get("Content-Type", "application/json")})
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)

    async def _close(_app: web.Application) -> None:
        await session.close()

    app.on_cleanup.append(_close)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, port, seen


@pytest.fixture
def servers():
    bg = Background()

    async def up():
        engine, deployment = make_engine("sim", WallClock(), seed=0)
        sim = await start_server(engine, deployment, host="127.0.0.1", port=0)
        proxy, port, seen = await _start_proxy(f"http://127.0.0.1:{sim.port}", DELAY_S)
        return sim, proxy, port, seen

    sim, proxy, port, seen = bg.call(up())
    yield sim.base_url, f"http://127.0.0.1:{port}/v1", seen
    bg.call(proxy.cleanup())
    bg.call(sim.close())
    bg.close()


def test_ttft_overhead_matches_the_proxy_delay(servers, tmp_path: Path, capsys):
    direct, via, seen = servers
    rc = main(["gateway-overhead", "--direct", direct, "--via", via, "--requests", "60", "--warmup", "4",
               "--concurrency", "4", "--input-tokens", "64", "--output-tokens", "16", "--seed", "3",
               "--out", str(tmp_path), "--json"])
    assert rc == 0
    result = json.loads(capsys.readouterr().out)
    rows = {r["figure"]: r for r in result["rows"]}
    ttft = rows["ttft p50"]
    delay_ms = DELAY_S * 1000
    # The proxy holds each request DELAY_S, plus its own forwarding cost (a millisecond or two).
    assert delay_ms * 0.8 <= ttft["overhead"] <= delay_ms * 1.6, ttft
    assert ttft["overhead_lo"] <= ttft["overhead"] <= ttft["overhead_hi"]
    assert ttft["overhead_lo"] > 0 and ttft["verdict"] == "overhead"
    assert ttft["overhead_pct"] > 0 and ttft["pct_lo"] > 0
    assert abs(rows["e2e p50"]["overhead"] - ttft["overhead"]) < delay_ms * 0.5
    # Chunks pass straight through: the gap between tokens does not carry the delay.
    assert abs(rows["itl p50"]["overhead"]) < delay_ms * 0.25, rows["itl p50"]
    # A closed loop of 4 users each waiting 20 ms more per request loses throughput.
    assert rows["requests/s"]["overhead_pct"] > 0
    assert result["failures"]["direct"]["failed"] == 0 and result["failures"]["via"]["failed"] == 0
    assert result["primed"] is True
    # Only the via run went through the proxy (the prime and direct runs did not).
    assert seen["/v1/chat/completions"] == 60
    out_dir = Path(result["runs"]["direct"]).parent
    assert {p.name for p in out_dir.iterdir()} >= {"prime", "direct", "via", "gateway.json"}
    for role in ("direct", "via"):
        manifest = json.loads((out_dir / role / "manifest.json").read_text())
        assert manifest["gateway"]["role"] == role
        assert manifest["config"]["seed"] == 3


def test_same_url_and_sim_targets_are_bad_input(tmp_path: Path, capsys):
    url = "http://127.0.0.1:9/v1"
    assert main(["gateway-overhead", "--direct", url, "--via", url, "--out", str(tmp_path)]) == 2
    assert "same URL" in capsys.readouterr().err
    assert main(["gateway-overhead", "--direct", "sim", "--via", url, "--out", str(tmp_path)]) == 2
    assert "must be an http(s) URL" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
