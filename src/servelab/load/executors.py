"""Executors: where a run's shards run. Worker processes on this host (multiprocessing: forked from a fork
server that has imported the shard's code once, or spawned where there is none) and Ray
(tasks on actors, on a local or an existing cluster). Both follow one protocol with each shard:

1. start it; it sets itself up (target, work) and says it is ready;
2. when every live shard is ready, tell each the shared start as a wall time of its own host (the
   coordinator's start plus that host's measured clock offset);
3. relay live-statistics deltas while it runs; on Ctrl-C at the coordinator, tell every shard to stop;
4. collect its outcome, or, when it died, a failure naming the shard (what it had in flight is then
   recorded as cancelled by the coordinator).

``drive(spec, shard, control)`` is the shard's run (:func:`servelab.bench.drive.drive_shard`); ``failed(shard,
error, exitcode)`` builds the outcome of a shard that died. Nothing here knows what a run is.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import queue
import signal
import time
from collections.abc import Callable
from typing import Any

from servelab.load.control import ShardControl

Drive = Callable[[Any, int, ShardControl], Any]
Failed = Callable[[int, str, "int | None"], Any]
Report = Callable[[int, dict[str, Any]], None]
START_LEAD_S = 0.25  # from "all ready" to the shared start: time for the go message to reach every shard
STOP_GRACE_S = 30.0  # after Ctrl-C: how long shards get to cancel, journal and report before being killed


def resolve_workers(workers: int | str | None) -> int:
    """``--workers N`` or ``auto`` (this host's cores)."""
    if workers is None:
        return 1
    if isinstance(workers, str):
        if workers.strip().lower() == "auto":
            return max(1, os.cpu_count() or 1)
        workers = int(workers)
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    return workers


class _ProcessControl(ShardControl):
    remote = True
    handles_sigint = False

    def __init__(self, shard: int, q: Any, stop: Any, go: Any, start_at: Any) -> None:
        super().__init__()
        self.shard, self.q, self.stop, self.go, self.start_at = shard, q, stop, go, start_at

    def ready(self) -> None:
        self.q.put(("ready", self.shard, time.time_ns()))

    def wait_start(self) -> int | None:
        while not self.go.wait(0.1):
            if self.stop.is_set():
                return None
        return int(self.start_at.value) or None

    def should_stop(self) -> bool:
        return self.stop.is_set()

    def report(self, snapshot: dict[str, Any]) -> None:
        self.q.put(("live", self.shard, snapshot))


def _child(drive: Drive, spec: Any, shard: int, q: Any, stop: Any, go: Any, start_at: Any,
           env: dict[str, str]) -> None:
    # Ctrl-C in a terminal reaches the whole process group: the coordinator alone decides, and tells us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the coordinator's environment now (an API key set since the fork server started), not the server's
    os.environ.clear()
    os.environ.update(env)
    try:
        out = drive(spec, shard, _ProcessControl(shard, q, stop, go, start_at))
        q.put(("done", shard, out.portable()))
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the coordinator
        try:
            blob = pickle.dumps(e)
        except Exception:  # noqa: BLE001 - an exception that does not pickle is sent as text
            blob = None
        q.put(("error", shard, f"{type(e).__name__}: {e}", blob))


class _Coordinator:
    """The bookkeeping both executors share: ready set, results, failures, interrupt."""

    def __init__(self, workers: int, on_report: Report | None, failed: Failed) -> None:
        self.workers, self.on_report, self.failed = workers, on_report, failed
        self.ready: set[int] = set()
        self.results: dict[int, Any] = {}
        self.raised: BaseException | None = None
        self.interrupted_at: float | None = None

    def handle(self, msg: tuple[Any, ...]) -> None:
        kind, shard = msg[0], msg[1]
        if kind == "ready":
            self.ready.add(shard)
        elif kind == "live" and self.on_report is not None:
            self.on_report(shard, msg[2])
        elif kind == "done":
            self.results[shard] = msg[2]
            if msg[2].live and self.on_report is not None:
                self.on_report(shard, msg[2].live)
        elif kind == "error":
            exc = pickle.loads(msg[3]) if msg[3] is not None else None
            if exc is not None and getattr(exc, "exit_code", None) == 2 and self.raised is None:
                self.raised = exc  # bad input found by a shard: the run stops with that message
            self.results[shard] = self.failed(shard, msg[2], None)

    @property
    def pending(self) -> list[int]:
        return [w for w in range(self.workers) if w not in self.results]


@contextlib.contextmanager
def on_sigint(callback: Callable[[], None]) -> Any:
    """Ctrl-C (SIGINT) calls ``callback`` while the shards run, even where SIGINT was ignored at start (a
    background job); outside the main thread nothing is installed."""
    try:
        previous = signal.signal(signal.SIGINT, lambda _s, _f: callback())
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_processes(drive: Drive, spec: Any, workers: int, *, failed: Failed, on_report: Report | None = None,
                  on_interrupt: Callable[[], None] | None = None) -> list[Any]:
    """Run ``workers`` shards in worker processes on this host; returns their outcomes by shard."""
    ctx = worker_context(drive)
    q, stop, go, start_at = ctx.Queue(), ctx.Event(), ctx.Event(), ctx.Value("q", 0)
    env = dict(os.environ)
    procs = [
        ctx.Process(
            target=_child,
            args=(drive, spec, w, q, stop, go, start_at, env),
            name=f"servelab-shard-{w}",
            daemon=True,
        )
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    co = _Coordinator(workers, on_report, failed)
    dead_since: dict[int, float] = {}
    with on_sigint(lambda: _interrupt(co, stop, go, on_interrupt)):
        _coordinate(co, procs, q, stop, go, start_at, dead_since, on_interrupt)
    if co.raised is not None:
        raise co.raised
    return [co.results[w] for w in range(workers)]


def worker_context(drive: Callable[..., Any]) -> Any:
    """Fresh interpreters (no inherited event loop, threads or sockets). Where the platform has one, a fork
    server: started once per coordinator process, it imports the drive's module, then each worker is
    forked from it. A worker still runs ``__main__``'s top level, as a spawned one did (Python 3.11's fork
    server is never given the main path, so listing ``__main__`` does not preload it): for the
    ``servelab`` script, the CLI's imports, ~0.05 s of CPU. Spawned one by one, every worker
    paid an interpreter start and those imports itself, 0.3-0.5 s of CPU each. Elsewhere: spawn. A parallel
    sweep's point pool uses it too (:mod:`servelab.sweep.parallel`)."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["__main__", drive.__module__])  # read when the fork server starts
    return ctx


def _coordinate(co: _Coordinator, procs: list[Any], q: Any, stop: Any, go: Any, start_at: Any,
                dead_since: dict[int, float], on_interrupt: Callable[[], None] | None) -> None:
    workers = len(procs)
    try:
        while co.pending:
            try:
                co.handle(q.get(timeout=0.1))
            except queue.Empty:
                pass
            except KeyboardInterrupt:
                _interrupt(co, stop, go, on_interrupt)
                continue
            _check_dead(co, procs, dead_since)
            if co.raised is not None and not stop.is_set():
                stop.set()
                go.set()
            if not go.is_set() and all(w in co.ready or w in co.results for w in range(workers)):
                start_at.value = time.time_ns() + int(START_LEAD_S * 1e9)
                go.set()
            if co.interrupted_at is not None and time.monotonic() - co.interrupted_at > STOP_GRACE_S:
                for w in co.pending:
                    procs[w].kill()
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()


def _interrupt(co: _Coordinator, stop: Any, go: Any, on_interrupt: Callable[[], None] | None) -> None:
    if co.interrupted_at is None:
        co.interrupted_at = time.monotonic()
        stop.set()
        go.set()
        if on_interrupt is not None:
            on_interrupt()


def _check_dead(co: _Coordinator, procs: list[Any], dead_since: dict[int, float]) -> None:
    """A process that exited without sending its outcome died (killed, crashed, out of memory)."""
    now = time.monotonic()
    for w in co.pending:
        p = procs[w]
        if p.is_alive():
            continue
        first = dead_since.setdefault(w, now)
        # a clean exit flushes its last message first: give the queue a moment before calling it lost
        if p.exitcode != 0 or now - first > 2.0:
            co.results[w] = co.failed(w, f"worker process exited with code {p.exitcode}", p.exitcode)


def run_ray(drive: Drive, spec: Any, workers: int, *, failed: Failed, address: str | None = None,
            on_report: Report | None = None, on_interrupt: Callable[[], None] | None = None) -> list[Any]:
    """Run ``workers`` shards as Ray actors (one task each): on the cluster at ``address``, or a local one."""
    from servelab.load import ray_shards

    return ray_shards.run(drive, spec, workers, failed=failed, address=address, on_report=on_report,
                          on_interrupt=on_interrupt, coordinator=_Coordinator)

