"""Where vLLM's request-rate-inf rows spend their time: the published TTFT spread against the simulated one.

GPUStack's baseline runs (vllm bench serve, every request sent at once) publish the TTFT mean, median and
p99 beside the duration. When the first tokens of nearly every request come out in the last few seconds
of the run, the run was bound by the serialised per-request work in front of the GPU (the API server's
one core: HTTP, chat template, tokenization, hand-off), not by the GPU: prefills of the first requests
finish within seconds, but their first tokens are streamed only once the ingest backlog is through. The
implied ingest per request is then about ``median TTFT / requests``. This prints, for each row, the
published and the simulated figures side by side, so a gap in duration can be told apart: ingest (TTFT
median far from the simulated one, spread alike) or GPU (spread unlike).

Published figures: the GPUStack performance-lab pages named in fidelity_cases.yaml (sources
gpustack-gptoss120b-h100, gpustack-dsr1-h200, gpustack-qwen3-235b-h100), "Baseline benchmark results".

    python3 benchmarks/sim_ingest.py [--backend roofline|silicon] [--only V-1,V-5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys

import fidelity_cases as fc
from servelab.clock import VirtualClock
from servelab.sim.api import SimRequest
from servelab.sim.engine import Engine

# row -> (duration s, TTFT mean ms, TTFT median ms, TTFT p99 ms, ITL median ms), as published
PUBLISHED = {
    "V-1": (7.72, 4850.46, 4987.41, 7372.98, 352.58),
    "V-2": (72.87, 36234.76, 35662.58, 70634.63, 14.92),
    "V-5": (22.07, 19392.11, 18992.42, 21440.63, 368.43),
    "V-6": (59.26, 28911.90, 27559.21, 53497.07, 357.74),
    "V-9": (8.83, 7042.17, 6882.45, 8721.24, 235.21),
}


def run(case: fc.Case, backend: str) -> tuple[float, list[float], float]:
    """(duration s, sorted TTFTs ms, the engine's mean step ms) of the row simulated on ``backend``."""
    dep = fc.deployment(case, backend)
    clock = VirtualClock()

    async def main() -> tuple[float, list[float], float]:
        eng = Engine(dep, clock, seed=0)
        eng.start()
        reqs = [SimRequest(rid=i + 1, max_tokens=case.osl, ignore_eos=True,
                           prompt_ids=[(i * 131 + j) % 30011 + 1 for j in range(case.prompt_len)])
                for i in range(case.requests)]
        for r in reqs:
            eng.submit(r)
        await asyncio.gather(*(r.done for r in reqs))
        await eng.stop()
        end = max(r.token_times_ns[-1] for r in reqs) / 1e9
        ttft = sorted(r.first_token_ns / 1e6 for r in reqs)  # every request sent at 0
        steps = sum(x.steps for x in eng.replicas)
        busy = sum(x.busy_s for x in eng.replicas)
        return end, ttft, 1e3 * busy / max(steps, 1)

    return clock.run(main)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["roofline", "silicon"], default="roofline")
    ap.add_argument("--only", default="", help="row ids, comma-separated (default: all with published TTFTs)")
    args = ap.parse_args()
    only = {x.strip() for x in args.only.split(",") if x.strip()} or set(PUBLISHED)
    unknown = only - set(PUBLISHED)
    if unknown:
        print(f"no published TTFT spread for {', '.join(sorted(unknown))}; "
              f"rows: {', '.join(PUBLISHED)}", file=sys.stderr)
        sys.exit(2)
    _, cases = fc.load()
    print(f"{'id':<5} {'':<4} {'dur s':>7} {'TTFT mean':>10} {'median':>8} {'p99':>8} {'med/dur':>8} "
          f"{'ingest ms/req':>14} {'ITL|step ms':>12}")
    for c in cases:
        if c.id not in only:
            continue
        dur, mean, med, p99, itl = PUBLISHED[c.id]
        print(f"{c.id:<5} {'pub':<4} {dur:>7.2f} {mean / 1e3:>10.2f} {med / 1e3:>8.2f} {p99 / 1e3:>8.2f} "
              f"{med / 1e3 / dur:>8.2f} {med / c.requests:>14.2f} {itl:>12.1f}")
        sdur, tt, step = run(c, args.backend)
        smed = tt[len(tt) // 2]
        sp99 = tt[min(len(tt) - 1, int(0.99 * len(tt)))]
        print(f"{'':<5} {'sim':<4} {sdur:>7.2f} {statistics.fmean(tt) / 1e3:>10.2f} {smed / 1e3:>8.2f} "
              f"{sp99 / 1e3:>8.2f} {smed / 1e3 / sdur:>8.2f} {smed / c.requests:>14.2f} {step:>12.1f}")
    print("ingest ms/req = median TTFT / requests (meaningful where med/dur is near 1: an ingest-bound run);"
          " ITL|step: published median ITL, simulated mean step time")


if __name__ == "__main__":
    main()
