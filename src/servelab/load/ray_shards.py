"""Run shards on Ray: one actor per shard, its run one task on it (optional extra ``servelab[ray]``).

The actor is threaded (the run occupies one thread; ``go``, ``stop``, ``take`` and ``wall_ns`` answer on
others). Each host's clock offset to the coordinator is measured before the start, NTP-style: the
coordinator reads its wall clock before and after asking the actor for its own, and the offset is the
actor's reading minus the midpoint, taken from the ping with the shortest round trip. A shard on another
host journals to a local directory and ships its journals back with its outcome.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

from servelab.load.control import ShardControl

PINGS = 5
START_LEAD_S = 1.0  # Ray messages take longer than a local queue
STOP_GRACE_S = 30.0


class _ActorControl(ShardControl):
    remote = True
    handles_sigint = False

    def __init__(self, actor: Shard) -> None:
        super().__init__()
        self.actor = actor

    def ready(self) -> None:
        self.actor.is_ready.set()

    def wait_start(self) -> int | None:
        while not self.actor.go_event.wait(0.1):
            if self.actor.stop_event.is_set():
                return None
        return self.actor.start_wall_ns

    def should_stop(self) -> bool:
        return self.actor.stop_event.is_set()

    def report(self, snapshot: dict[str, Any]) -> None:
        with self.actor.lock:
            self.actor.reports.append(snapshot)


class Shard:
    """The actor: holds one shard's run and its control state."""

    def __init__(self) -> None:
        self.is_ready, self.go_event, self.stop_event = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
        )
        self.start_wall_ns: int | None = None
        self.lock = threading.Lock()
        self.reports: list[dict[str, Any]] = []

    def wall_ns(self) -> int:
        return time.time_ns()

    def host(self) -> str:
        return socket.gethostname()

    def wait_ready(self, timeout_s: float) -> bool:
        return self.is_ready.wait(timeout_s)

    def go(self, start_wall_ns: int | None) -> None:
        self.start_wall_ns = start_wall_ns
        self.go_event.set()

    def stop(self) -> None:
        self.stop_event.set()
        self.go_event.set()

    def take(self) -> list[dict[str, Any]]:
        with self.lock:
            out, self.reports = self.reports, []
        return out

    def run(self, drive: Any, spec: Any, shard: int) -> Any:
        out = drive(spec, shard, _ActorControl(self))
        if out.journal_dir is not None:  # another host: ship the journals back
            out.journals = {_base_name(p.name, shard): p.read_bytes() for p in Path(out.journal_dir).iterdir()
                            if p.is_file()}
        return out.portable()


def _base_name(name: str, shard: int) -> str:
    return name.replace(f".w{shard}.", ".") if shard else name


def _offset(actor: Any, ray: Any) -> tuple[int, int]:
    """(actor wall - coordinator wall, round trip) from the fastest of a few pings."""
    best: tuple[int, int] | None = None
    for _ in range(PINGS):
        t0 = time.time_ns()
        tw = ray.get(actor.wall_ns.remote())
        t1 = time.time_ns()
        sample = (tw - (t0 + t1) // 2, t1 - t0)
        if best is None or sample[1] < best[1]:
            best = sample
    assert best is not None
    return best


def run(drive: Any, spec: Any, workers: int, *, failed: Any, address: str | None, on_report: Any,
        on_interrupt: Any, coordinator: Any) -> list[Any]:
    import ray

    if not ray.is_initialized():
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    actor_cls = ray.remote(num_cpus=1, max_concurrency=6)(Shard)
    actors = [actor_cls.remote() for _ in range(workers)]
    co = coordinator(workers, on_report, failed)
    offsets = {w: _offset(a, ray) for w, a in enumerate(actors)}
    runs = {ray_ref: w for w, a in enumerate(actors) for ray_ref in [a.run.remote(drive, spec, w)]}
    try:
        _await_ready(actors, co, runs, ray)
        start = time.time_ns() + int(START_LEAD_S * 1e9)
        for w, a in enumerate(actors):
            a.go.remote(start + offsets[w][0])
        from servelab.load.executors import on_sigint

        def interrupt() -> None:
            raise KeyboardInterrupt  # handled in _collect: every shard is told to stop

        with on_sigint(interrupt):
            _collect(actors, co, runs, ray, on_interrupt)
    finally:
        for a in actors:
            ray.kill(a, no_restart=True)
    out = []
    for w in range(workers):
        r = co.results[w]
        if getattr(r, "outcome", None) is not None or getattr(r, "error", None) is None:
            r.clock_offset_ns, r.clock_rtt_ns = offsets[w]
        out.append(r)
    if co.raised is not None:
        raise co.raised
    return out


def _done(ref: Any, w: int, co: Any, ray: Any) -> None:
    try:
        co.handle(("done", w, ray.get(ref)))
    except Exception as e:  # noqa: BLE001 - a failed task or a dead actor is this shard's failure
        cause = getattr(e, "cause", None) or e
        if getattr(cause, "exit_code", None) == 2 and co.raised is None:
            co.raised = cause
        co.results[w] = co.failed(w, f"{type(cause).__name__}: {cause}"[:500], None)


def _await_ready(actors: list[Any], co: Any, runs: dict[Any, int], ray: Any) -> None:
    pending = {w for w in range(len(actors))}
    while pending:
        ready_refs, _ = ray.wait(list(runs), timeout=0)
        for ref in ready_refs:  # finished (failed) before the start
            _done(ref, runs.pop(ref), co, ray)
        for w in list(pending):
            if w in co.results or ray.get(actors[w].wait_ready.remote(0.1)):
                pending.discard(w)


def _collect(actors: list[Any], co: Any, runs: dict[Any, int], ray: Any, on_interrupt: Any) -> None:
    stopped_at: float | None = None
    while runs:
        try:
            ready_refs, _ = ray.wait(list(runs), timeout=0.25)
            for ref in ready_refs:
                _done(ref, runs.pop(ref), co, ray)
            for w in [w for w in runs.values()]:
                for snap in ray.get(actors[w].take.remote()):
                    if co.on_report is not None:
                        co.on_report(w, snap)
            if co.raised is not None and stopped_at is None:
                stopped_at = time.monotonic()
                for a in actors:
                    a.stop.remote()
        except KeyboardInterrupt:
            if stopped_at is None:
                stopped_at = time.monotonic()
                for a in actors:
                    a.stop.remote()
                if on_interrupt is not None:
                    on_interrupt()
        if stopped_at is not None and time.monotonic() - stopped_at > STOP_GRACE_S:
            for ref, w in list(runs.items()):
                ray.kill(actors[w], no_restart=True)
                _done(ref, runs.pop(ref), co, ray)
