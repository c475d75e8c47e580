"""Agent sessions on virtual time: how many 10-turn sessions complete per wall second on one core.

Target: 1,000 concurrent sessions with tool waits, on the in-process simulator, complete at least 100
sessions per wall second. Reference measured in the same run: the same sessions against a null transport
(answers instantly), i.e. the executor's own cost without the simulated engine.

    PYTHONPATH=src python benchmarks/agent_sessions.py [--sessions 1000] [--turns 10]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from servelab.clock import VirtualClock
from servelab.config.agent import SessionConfig
from servelab.load.session import RequestIds, run_session
from servelab.records.schema import OK, RequestRecord
from servelab.transport.base import ModelRequest
from servelab.workload.agent import build_plan, synth_text_source
from servelab.workload.tokens import EstimateCounter

TARGET_PER_S = 100.0


def session_spec(turns: int) -> SessionConfig:
    return SessionConfig.model_validate(
        {
            "name": "bench",
            "system_tokens": 500,
            "user_tokens": 200,
            "steps": [
                {
                    "kind": "repeat",
                    "count": turns - 1,
                    "steps": [
                        {
                            "kind": "model",
                            "output_tokens": {"kind": "lognormal", "median": 64, "sigma": 0.3, "max": 256},
                        },
                        {
                            "kind": "tool",
                            "duration_s": {"kind": "lognormal", "median": 2.0, "sigma": 0.5, "max": 20},
                            "result_tokens": {"kind": "lognormal", "median": 100, "sigma": 0.5, "max": 1000},
                            "failure_prob": 0.02,
                        },
                    ],
                },
                {"kind": "model", "output_tokens": 64},
            ],
            "policy": {"retry": {"max_retries": 1, "backoff_s": 0.5}, "correction": {"enabled": True}},
        }
    )


class NullTransport:
    """Answers every request at once with the requested length (the executor's cost alone)."""

    def __init__(self, clock) -> None:
        self.clock = clock

    async def send(self, req: ModelRequest) -> RequestRecord:
        t = self.clock.now()
        return RequestRecord(
            request_id=req.request_id,
            session_id=req.session_id,
            turn=req.turn,
            attempt=req.attempt,
            status=OK,
            sent_ns=t,
            end_ns=t,
            usage_prompt_tokens=req.est_prompt_tokens,
            usage_completion_tokens=req.max_tokens,
        )

    async def count_tokens(self, text: str) -> None:
        return None

    async def describe(self) -> dict:
        return {}

    async def aclose(self) -> None:
        return None


def sim_transport(clock, seed: int):
    from servelab.sim.target import parse_sim_target
    from servelab.transport.sim import SimTransport

    return SimTransport(parse_sim_target("sim"), clock, seed)


def run(kind: str, n: int, turns: int) -> tuple[float, int, int, float]:
    """(wall seconds, completed ok sessions, requests, virtual seconds)."""
    clock = VirtualClock()
    spec = session_spec(turns)
    plans = [build_plan(spec, i, seed=1) for i in range(n)]
    records: list[RequestRecord] = []

    async def main():
        texts = await synth_text_source(EstimateCounter(), seed=1)
        tr = NullTransport(clock) if kind == "null" else sim_transport(clock, 1)
        ids = RequestIds()
        t0 = time.perf_counter()
        out = await asyncio.gather(*(run_session(p, tr, clock, ids, on_record=records.append, texts=texts)
                                     for p in plans))
        wall = time.perf_counter() - t0
        await tr.aclose()
        return wall, out

    wall, sessions = clock.run(main)
    ok = sum(1 for s in sessions if s.status == "ok")
    return wall, ok, len(records), clock.now() / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--only", choices=["null", "sim"], default=None)
    a = ap.parse_args()
    kinds = [a.only] if a.only else ["null", "sim"]
    print(f"{a.sessions} concurrent sessions x {a.turns} model turns, tool waits (lognormal median 2 s)")
    print(f"{'transport':10} {'wall s':>8} {'virtual s':>10} {'ok':>6} {'requests':>9} {'sessions/s':>11} "
          f"{'vs target':>10}")
    for kind in kinds:
        try:
            wall, ok, reqs, virt = run(kind, a.sessions, a.turns)
        except ImportError as e:
            print(f"{kind:10} unavailable: {e}")
            continue
        rate = a.sessions / wall
        print(
            f"{kind:10} {wall:8.2f} {virt:10.1f} {ok:6d} {reqs:9d} {rate:11.1f} {rate / TARGET_PER_S:9.2f}x"
        )
    print(f"target: {TARGET_PER_S:.0f} sessions/s on one core (sim row); the null row is the executor alone")


if __name__ == "__main__":
    main()
