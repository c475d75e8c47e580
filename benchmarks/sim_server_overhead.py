"""What does the simulator's HTTP front cost, per streamed token, next to the engine it serves?

Two setups run the same closed-loop workload (C concurrent streams, N requests, fixed output length with
ignore_eos) on the wall clock, each in a fresh process, on the same deployment:

  (a) reference - the engine alone: requests submitted in process, awaited on ``req.done``
  (b) http      - ``servelab sim serve`` (engine + aiohttp front) in one process, the benchmark's
                  HttpTransport in another; the server process's CPU time is measured across the load

Printed per concurrency: tokens/s delivered, server CPU microseconds per token, and the ratios http/ref
(CPU per token: the front's overhead factor; tokens/s: how much of the engine's pace reaches clients).

    PYTHONPATH=src python benchmarks/sim_server_overhead.py [--spec sim] [--requests 64] [--tokens 128]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import time

PROMPT = "benchmark the simulated server " * 16


def _engine_alone(spec: str, conc: int, n: int, tokens: int, out: mp.Queue) -> None:
    from servelab.clock import WallClock
    from servelab.sim.api import SimRequest
    from servelab.sim.server import make_engine

    async def main() -> None:
        clock = WallClock()
        engine, _ = make_engine(spec, clock)
        engine.start()
        ids = engine.tokenize(PROMPT)
        next_id = iter(range(n))
        done_tokens = 0

        async def user() -> None:
            nonlocal done_tokens
            for rid in next_id:
                req = SimRequest(rid=rid, prompt_ids=list(ids), max_tokens=tokens, ignore_eos=True)
                req.on_tokens = lambda k, t: None
                engine.submit(req)
                await req.done
                done_tokens += req.output_tokens

        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(user() for _ in range(conc)))
        out.put((done_tokens, time.perf_counter() - t0, time.process_time() - cpu0))
        await engine.stop()

    WallClock().run(main)


def _server(spec: str, port_q: mp.Queue, ctl: mp.Queue, out: mp.Queue) -> None:
    from servelab.clock import WallClock
    from servelab.sim.server import make_engine, start_server

    async def main() -> None:
        engine, dep = make_engine(spec, WallClock())
        srv = await start_server(engine, dep, port=0)
        port_q.put(srv.port)
        loop = asyncio.get_running_loop()
        for _ in range(2):  # "start" then "stop": CPU time between them
            await loop.run_in_executor(None, ctl.get)
            out.put(time.process_time())
        await srv.close()

    WallClock().run(main)


def _client(port: int, conc: int, n: int, tokens: int, out: mp.Queue) -> None:
    from servelab.clock import WallClock
    from servelab.config.models import TargetConfig
    from servelab.transport.base import ModelRequest
    from servelab.transport.http import HttpTransport

    async def main() -> None:
        t = HttpTransport(TargetConfig(url=f"http://127.0.0.1:{port}/v1"), WallClock(), concurrency=conc)
        await t.resolve_model()
        next_id = iter(range(n))
        got = 0
        bad = 0

        async def user() -> None:
            nonlocal got, bad
            for rid in next_id:
                rec = await t.send(ModelRequest(request_id=rid, prompt=PROMPT, api="completions",
                                                max_tokens=tokens, ignore_eos=True))
                got += rec.usage_completion_tokens or 0
                bad += rec.status != "ok"

        t0 = time.perf_counter()
        await asyncio.gather(*(user() for _ in range(conc)))
        out.put((got, time.perf_counter() - t0, bad))
        await t.aclose()

    WallClock().run(main)


def run(spec: str, conc: int, n: int, tokens: int) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_engine_alone, args=(spec, conc, n, tokens, q))
    p.start()
    ref_tokens, ref_wall, ref_cpu = q.get(timeout=300)
    p.join()

    port_q, ctl, cpu_q, res = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Queue()
    sp = ctx.Process(target=_server, args=(spec, port_q, ctl, cpu_q))
    sp.start()
    port = port_q.get(timeout=60)
    ctl.put("start")
    cpu0 = cpu_q.get(timeout=60)
    cp = ctx.Process(target=_client, args=(port, conc, n, tokens, res))
    cp.start()
    got, wall, bad = res.get(timeout=300)
    ctl.put("stop")
    cpu1 = cpu_q.get(timeout=60)
    cp.join()
    sp.join(timeout=30)
    return {"ref_tps": ref_tokens / ref_wall, "ref_us": 1e6 * ref_cpu / ref_tokens,
            "http_tps": got / wall, "http_us": 1e6 * (cpu1 - cpu0) / max(got, 1), "failed": bad,
            "tokens": got}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default="sim")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    a = ap.parse_args()
    print(f"deployment {a.spec}; {a.requests} requests x {a.tokens} tokens, ignore_eos, streamed")
    print(f"{'conc':>5} {'ref tok/s':>10} {'http tok/s':>11} {'tok/s ratio':>11} "
          f"{'ref us/tok':>11} {'http us/tok':>12} {'cpu ratio':>10} {'failed':>7}")
    for c in a.concurrency:
        r = run(a.spec, c, a.requests, a.tokens)
        print(
            f"{c:>5} {r['ref_tps']:>10.0f} {r['http_tps']:>11.0f} {r['http_tps'] / r['ref_tps']:>11.2f} "
            f"{r['ref_us']:>11.1f} {r['http_us']:>12.1f} {r['http_us'] / r['ref_us']:>10.2f} {r['failed']:>7}"
        )


if __name__ == "__main__":
    main()
