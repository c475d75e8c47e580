"""Counts add up under random server failures: sent = ok + failed + cancelled, one row per attempt.

Each example is a real run of the HTTP client against the simulator's HTTP server over loopback, with
seeded random faults (errors, resets, malformed chunks, truncation, stalls past a short drain timeout).
"""

import asyncio
import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.bench.run import execute
from servelab.config import RunConfig, validate
from servelab.records.rundir import read_run
from servelab.sim.faults import FaultConfig
from servelab.sim.server import make_engine, start_server


class _Server:
    def __init__(self, faults: FaultConfig) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def up():
            from servelab.clock import WallClock

            engine, deployment = make_engine("sim", WallClock(use_uvloop=False), seed=0)
            return await start_server(engine, deployment, host="127.0.0.1", port=0, faults=faults)

        self.srv = asyncio.run_coroutine_threadsafe(up(), self.loop).result(10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.srv.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


rates = st.floats(min_value=0.0, max_value=0.2)


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(error=rates, reset=rates, malformed=rates, truncate=rates, stall=rates,
       concurrency=st.integers(1, 6), seed=st.integers(0, 1000))
def test_counts_add_up_under_random_faults(tmp_path_factory, error, reset, malformed, truncate, stall,
                                           concurrency, seed):
    faults = FaultConfig(seed=seed, error_rate=error, error_status=(500, 503), reset_rate=reset,
                         reset_after_chunks=2, malformed_rate=malformed, malformed_after_chunks=1,
                         truncate_rate=truncate, truncate_after_chunks=2, stall_rate=stall, stall_s=5.0,
                         stall_after_chunks=1)
    server = _Server(faults)
    try:
        cfg = validate(RunConfig, {
            "target": {"url": server.srv.base_url, "timeouts": {"total_s": 3.0, "first_token_s": 2.0}},
            "workload": {"input_tokens": 16, "output_tokens": 8},
            "load": {"concurrency": concurrency},
            "limits": {"requests": 16, "drain_timeout_s": 0.3},
            "telemetry": {"enabled": False},
            "seed": seed, "out": str(tmp_path_factory.mktemp("runs")),
        })
        result = execute(cfg, report=False)
    finally:
        server.close()
    r = result.summary["requests"]
    failed = sum(r["failed"].values())
    assert r["sent"] == r["ok"] + failed + r["cancelled"]
    rows = read_run(result.run_dir).requests
    assert rows.num_rows == r["sent"] == result.outcome.issued
    assert set(rows.column("status").to_pylist()) <= {
        "ok",
        "http_error",
        "timeout",
        "disconnected",
        "malformed",
        "cancelled",
    }
