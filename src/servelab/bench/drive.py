"""One shard's run loop: open the target, build the work, wait for the shared start, run, journal.

The same function runs in the coordinator's process (one shard, or the local executor), in a worker
process, or in a Ray task; :class:`~servelab.load.control.ShardControl` is the only difference.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from servelab.analysis.live import LiveStats
from servelab.bench import preflight
from servelab.bench.job_errors import record_job_errors
from servelab.bench.plan import plan_for
from servelab.bench.shard import RunSpec, ShardOutcome, global_job, shard_plan
from servelab.bench.targets import make_clock, make_probe, make_transport
from servelab.bench.telemetry import RunTelemetry
from servelab.bench.workloads import prepare_work
from servelab.clock import NS_PER_S, Clock
from servelab.config.models import RunConfig
from servelab.errors import TargetError
from servelab.load.control import ShardControl
from servelab.load.runner import Runner, RunOutcome
from servelab.records.journal import Journal
from servelab.records.sink import RecordSink


def pool_size(cfg: RunConfig, workers: int = 1) -> int:
    """Connections one shard keeps: its share of the users (closed loop), else 256 / W (at least 16)."""
    if cfg.load.concurrency is not None:
        return max(1, -(-cfg.load.concurrency // workers))
    return max(16, 256 // workers)


def target_facts(cfg: RunConfig, facts: dict[str, Any]) -> dict[str, Any]:
    if facts.get("error") and not cfg.target.is_sim and not facts.get("models"):
        raise TargetError(
            f"cannot reach the target {cfg.target.url}: {facts['error']}",
            hint="check that the server is running and the URL ends with /v1 (e.g. http://127.0.0.1:8000/v1)",
        )
    out = dict(facts)
    out.setdefault("url", cfg.target.url)
    out.setdefault("api", cfg.target.api)
    return out


def _journal_dir(spec: RunSpec) -> Path:
    """The run directory, when this host sees it; else a local directory whose journals are shipped back."""
    if spec.run_dir.is_dir():
        return spec.run_dir
    return Path(tempfile.mkdtemp(prefix=f"servelab-shard-{spec.run_dir.name}-"))


def drive_shard(spec: RunSpec, shard: int, control: ShardControl | None = None) -> ShardOutcome:
    """Run shard ``shard`` of ``spec`` to its end (limit, duration, schedule, stop or Ctrl-C)."""
    control = control or ShardControl()
    cfg, workers = spec.config, spec.workers
    clock = make_clock(cfg.target)
    live = control.live if control.live is not None else LiveStats(cfg.load.mode)
    jdir = _journal_dir(spec)
    journal = Journal(jdir, shard)
    sink = RecordSink(journal, on_request=live.update, on_session=live.session_done, worker=shard,
                      workers=workers)
    res = ShardOutcome(shard=shard, host=socket.gethostname(),
                       journal_dir=None if jdir == spec.run_dir else str(jdir))

    async def main() -> RunOutcome:
        transport = make_transport(cfg.target, clock, concurrency=pool_size(cfg, workers), seed=cfg.seed)
        probe = make_probe(cfg.target, clock, transport)
        work = None
        try:
            if spec.target_facts is None and shard == 0:
                facts = await probe.describe()
                preflight.preflight(cfg, facts)
                res.target_facts = target_facts(cfg, facts)
                control.described(res.target_facts)
            work = await prepare_work(cfg, transport, clock, sink, probe)
            res.work, res.facts = work, dict(work.facts)
            await _pin_model(transport, probe)
            plan = shard_plan(
                work.plan or plan_for(cfg, work.count_hint, work.offsets_ns, work.extra_drain_s),
                shard,
                workers,
            )
            runner = Runner(clock, plan, on_job_error=record_job_errors(clock, sink.request))
            telemetry = RunTelemetry(cfg, transport, clock) if shard == 0 else None
            job = global_job(work.job, shard, workers, journal if workers > 1 else None)
            control.ready()
            await _barrier(control, clock)
            return await _run(runner, job, telemetry, control, live, res)
        finally:
            if work is not None and work.aclose is not None:
                await work.aclose()
            await probe.aclose()
            await transport.aclose()

    try:
        res.outcome = clock.run(main)
    finally:
        journal.close()
        res.mono_minus_wall_ns = time.monotonic_ns() - time.time_ns()
    res.live = live.take() if control.remote else None
    return res


async def _pin_model(transport: Any, probe: Any) -> None:
    """Tell an HTTP transport its model before the run: left to the first send, the lookup (a GET /models
    on a new connection, ~5 ms on loopback) was that request's schedule lag, inside the measured run."""
    use = getattr(transport, "use_model", None)
    if use is not None:
        use(await probe.resolve_model())


async def _barrier(control: ShardControl, clock: Clock) -> None:
    """Wait for the coordinator's go, then until the shared start (a wall time on this host)."""
    start_wall = await asyncio.to_thread(control.wait_start) if control.remote else control.wait_start()
    if start_wall is None:
        return
    delay = (start_wall - time.time_ns()) / NS_PER_S  # the one wall-clock read: to meet the other shards
    if delay > 0:
        await clock.sleep(delay)


async def _run(
    runner: Runner,
    job: Any,
    telemetry: RunTelemetry | None,
    control: ShardControl,
    live: LiveStats,
    res: ShardOutcome,
) -> RunOutcome:
    loop = asyncio.get_running_loop()
    if control.handles_sigint:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, runner.request_stop)
    watcher = asyncio.ensure_future(_watch(runner, control, live)) if control.remote else None
    if telemetry is not None:
        await telemetry.start()
    # Everything set up so far lives for the whole run: keep the collector from re-walking it,
    # so full collections do not stall the measurement.
    gc.collect()
    gc.freeze()
    cpu0 = time.process_time()
    try:
        return await runner.run(job)
    finally:
        res.load_cpu_s = time.process_time() - cpu0
        gc.unfreeze()  # a sweep runs many points in one process: let them be collected again
        if watcher is not None:
            watcher.cancel()
        if telemetry is not None:
            await telemetry.stop()
            res.telemetry = {"columns": telemetry.rows.columns(), "engine": telemetry.engine,
                             "errors": telemetry.rows.errors[:5]}
        if control.handles_sigint:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal.SIGINT)


async def _watch(runner: Runner, control: ShardControl, live: LiveStats) -> None:
    """Remote shards: stop when the coordinator says so; report live statistics as deltas."""
    while True:
        await asyncio.sleep(control.report_interval_s)
        if control.should_stop():
            runner.request_stop()
        control.report(live.take())
