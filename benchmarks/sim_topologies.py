"""The multi-node agent question: would 2 or 4 nodes of H200 help DeepSeek-V3 coding agents?

DeepSeek-V3 (FP8, data-parallel attention, experts over every GPU of the group) on 1, 2 and 4 nodes of
8 x H200, driven by closed-loop agent-like sessions on virtual time: light (4 sessions, 8K-token turns,
short answers) and sustained (256 sessions, 24K-token prompts, 1K-token answers). Prints the ordering of
the topologies by median request latency (light) and by output throughput (sustained), for the roofline
backend and, where installed, the default backend (silicon on one node; multi-node groups are priced by the
roofline, see docs/simulator.md).

    PYTHONPATH=src python benchmarks/sim_topologies.py [--backend roofline|auto] [--sessions 256]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from servelab.clock import VirtualClock
from servelab.sim.api import SimRequest
from servelab.sim.engine import Engine
from servelab.sim.target import parse_sim_target
from servelab.sim.tokenizer import filler_ids

TOPOLOGIES = {
    "1 node (EP8)": "sim:deepseek-v3@8xh200,dtype=fp8,ep=8,dp_attention=true",
    "2 nodes (EP16)": "sim:deepseek-v3@2x8xh200,dtype=fp8,ep=16,dp_attention=true",
    "4 nodes (EP32)": "sim:deepseek-v3@4x8xh200,dtype=fp8,ep=32,dp_attention=true",
}


def sessions(spec: str, n: int, turns: int, in_len: int, grow: int, out_len: int) -> dict:
    """``n`` sessions of ``turns`` turns; each turn re-sends the conversation (+``grow`` new tokens)."""
    clock = VirtualClock()
    dep = parse_sim_target(spec)
    lat: list[float] = []

    async def main() -> dict:
        eng = Engine(dep, clock, seed=1)
        eng.start()
        toks = 0

        async def user(u: int) -> None:
            nonlocal toks
            ids = filler_ids(in_len, u).tolist()
            for k in range(turns):
                req = SimRequest(
                    rid=u * 1000 + k + 1, prompt_ids=list(ids), max_tokens=out_len, ignore_eos=True
                )
                eng.submit(req)
                await req.done
                toks += req.output_tokens
                lat.append((req.finish_ns - req.arrival_ns) / 1e9)
                ids += filler_ids(out_len + grow, u * 1000 + k).tolist()

        await asyncio.gather(*(user(u) for u in range(n)))
        out = {"tput": toks / (clock.now() / 1e9), "p50": statistics.median(lat), "backend": eng.backend}
        await eng.stop()
        return out

    return clock.run(main)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="roofline", choices=("roofline", "auto"))
    ap.add_argument("--sessions", type=int, default=256)
    args = ap.parse_args()
    rows = []
    t0 = time.perf_counter()
    for name, spec in TOPOLOGIES.items():
        spec += f",backend={args.backend}"
        light = sessions(spec, 4, 3, 8192, 200, 128)
        heavy = sessions(spec, args.sessions, 2, 24_576, 500, 1024)
        rows.append((name, light["p50"], heavy["tput"], light["backend"]))
    print(f"DeepSeek-V3 FP8 on H200, backend={args.backend}")
    print(f"{'topology':<16} {'priced by':<10} {'light: p50 latency s':>22} {'sustained: out tok/s':>22} "
          f"{'tok/s per node':>15}")
    for i, (name, p50, tput, be) in enumerate(rows):
        print(f"{name:<16} {be:<10} {p50:>22.2f} {tput:>22,.0f} {tput / 2 ** i:>15,.0f}")
    by_lat = " < ".join(r[0] for r in sorted(rows, key=lambda r: r[1]))
    by_tput = " > ".join(r[0] for r in sorted(rows, key=lambda r: -r[2]))
    print(f"light latency (lower first): {by_lat}")
    print(f"sustained throughput (higher first): {by_tput}")
    print(f"wall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
