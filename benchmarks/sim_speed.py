"""Simulator speed: simulated output tokens per wall second on one core.

The issue's case: 256 concurrent sessions of 2K input / 1K output on DeepSeek-V3 @ 8xH200 (FP8), on a
VirtualClock. Printed beside two references measured in the same run: the issue's target (500,000 tok/s) and
a bare asyncio loop doing the same number of virtual-clock sleeps as the engine took steps (the floor any
step loop pays), as ratios.

    PYTHONPATH=src python benchmarks/sim_speed.py [--sessions 256] [--requests 2] [--spec SPEC]
    PYTHONPATH=src python benchmarks/sim_speed.py --hour     # one simulated hour, 256 sessions, whole CLI
"""

from __future__ import annotations

import argparse
import asyncio
import time

from servelab.clock import VirtualClock
from servelab.sim.api import SimRequest
from servelab.sim.engine import Engine
from servelab.sim.target import parse_sim_target
from servelab.sim.tokenizer import filler_ids

TARGET = 500_000


def simulate(
    spec: str, sessions: int, per_session: int, in_len: int, out_len: int
) -> tuple[int, float, int, float]:
    """(output tokens, wall seconds, engine steps, virtual seconds)."""
    clock = VirtualClock()
    dep = parse_sim_target(spec)
    prompts = {u: filler_ids(in_len, u).tolist() for u in range(sessions)}  # built before timing

    async def main() -> tuple[int, float, int]:
        eng = Engine(dep, clock, seed=0)
        eng.start()
        toks = 0

        async def user(u: int) -> None:
            nonlocal toks
            for k in range(per_session):
                req = SimRequest(
                    rid=u * 1000 + k + 1,
                    prompt_ids=prompts[u] if k == 0 else prompts[u][:-1] + [k],
                    max_tokens=out_len,
                    ignore_eos=True,
                )
                eng.submit(req)
                await req.done  # type: ignore[misc]
                toks += req.output_tokens

        t0 = time.perf_counter()
        await asyncio.gather(*(user(u) for u in range(sessions)))
        wall = time.perf_counter() - t0
        steps = eng.stats()["steps_total"]
        await eng.stop()
        return toks, wall, steps

    toks, wall, steps = clock.run(main)
    return toks, wall, steps, clock.now() / 1e9


def bare_sleeps(n: int, dt: float) -> float:
    """Wall seconds for ``n`` sequential virtual-clock sleeps of ``dt`` (the step loop's floor)."""
    clock = VirtualClock()

    async def main() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            await clock.sleep(dt)
        return time.perf_counter() - t0

    return clock.run(main)


HOUR_TARGET_S = 60.0
HOUR_SPEC = "sim:deepseek-v3@8xh200,dtype=fp8,ep=8,dp_attention=true"
HOUR_CASES = {
    "single-turn 2K/1K": [
        "--concurrency",
        "256",
        "--input-tokens",
        "2048",
        "--output-tokens",
        "1024",
        "--ignore-eos",
    ],
    "coding-agent": ["--profile", "coding-agent", "--sessions", "256"],
}


def hour_case(args: list[str], spec: str, out: str) -> dict:
    """One simulated hour through the whole CLI (workload, run loop, transport, engine, records, summary)."""
    import json
    import resource
    import subprocess

    cmd = [
        "servelab",
        "run",
        "--target",
        spec,
        "--duration",
        "3600",
        "--no-report",
        "--json",
        "--out",
        out,
        *args,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    except ValueError:
        summary = {}
    req = summary.get("requests", {})
    return {"rc": proc.returncode, "wall": wall, "cpu": cpu, "sent": req.get("sent"), "ok": req.get("ok"),
            "sim_s": summary.get("throughput", {}).get("duration_s"), "err": proc.stderr[-400:]}


def hour(spec: str) -> None:
    import tempfile

    print(f"one simulated hour of 256 sessions on {spec} (target < {HOUR_TARGET_S:.0f} s of wall time each)")
    print(
        f"{'case':<20} {'requests ok':>12} {'simulated s':>12} {'wall s':>8} {'CPU s':>8} "
        f"{'wall / target':>14}"
    )
    with tempfile.TemporaryDirectory() as out:
        for name, args in HOUR_CASES.items():
            r = hour_case(args, spec, out)
            if r["rc"] not in (0, 1):
                print(f"{name:<20} failed (exit {r['rc']}): {r['err']}")
                continue
            print(
                f"{name:<20} {r['ok'] or 0:>12,} {r['sim_s'] or 0:>12,.0f} {r['wall']:>8.1f} "
                f"{r['cpu']:>8.1f} "
                f"{r['wall'] / HOUR_TARGET_S:>13.2f}x"
            )
    print("CPU s: user + system time of the run's process (the shared machine's load inflates wall time)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hour", action="store_true", help="one simulated hour of 256 sessions through the CLI "
                    "(single-turn and coding-agent), against the 60 s target")
    ap.add_argument("--spec", default="sim:deepseek-v3@8xh200,dtype=fp8")
    ap.add_argument("--sessions", type=int, default=256)
    ap.add_argument("--requests", type=int, default=2, help="requests per session, back to back")
    ap.add_argument("--input", type=int, default=2048)
    ap.add_argument("--output", type=int, default=1024)
    args = ap.parse_args()
    if args.hour:
        hour(HOUR_SPEC)
        return
    toks, wall, steps, virt = simulate(args.spec, args.sessions, args.requests, args.input, args.output)
    rate = toks / wall
    floor = bare_sleeps(steps, virt / max(steps, 1))
    print(
        f"case: {args.spec}, {args.sessions} sessions x {args.requests} requests, {args.input} in / "
        f"{args.output} out"
    )
    print(f"{'measure':<44} {'value':>14}")
    print(f"{'simulated output tokens':<44} {toks:>14,}")
    print(f"{'simulated time (s)':<44} {virt:>14,.1f}")
    print(f"{'engine steps':<44} {steps:>14,}")
    print(f"{'wall time (s)':<44} {wall:>14.3f}")
    print(f"{'simulated output tok per wall s':<44} {rate:>14,.0f}")
    print(f"{'ratio to target 500,000 tok/s':<44} {rate / TARGET:>14.2f}x")
    print(f"{'bare loop: same number of sleeps, wall (s)':<44} {floor:>14.3f}")
    print(f"{'engine wall / bare-sleep wall':<44} {wall / floor:>14.2f}x")


if __name__ == "__main__":
    main()
