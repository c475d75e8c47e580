"""Sweep points in parallel: each point a task in a worker process (``--parallel N``) or on Ray (``--ray``).

The coordinator alone writes ``sweep.json`` (each finished point's entry comes back to it), so resume
works as before. Each of the N slots running at once has its own server: a ``--server-cmd`` template and
the target URL may use ``{port}`` (the base port plus the slot) and ``{gpus}`` (the slot's GPU ids, e.g.
``0,1`` then ``2,3`` with ``gpus_per_point=2``), so parallel points never share a server.

Ctrl-C ends a parallel sweep as it ends a serial one: no new point starts, each running point stops as a
point of a serial sweep does (its run kept and marked interrupted), and :func:`run_points` returns True so
that the coordinator writes sweep.json's final fields. A terminal's Ctrl-C reaches every worker (one
process group); an idle worker ignores it, and a SIGINT sent to the coordinator alone is passed on to the
workers when their points have not stopped within ``FORWARD_AFTER_S``.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from servelab.config import RunConfig
from servelab.load.executors import worker_context

DEFAULT_PORT = 8000

Done = Callable[[int, dict[str, Any]], None]  # (point position, its entry)
FORWARD_AFTER_S = 2.0  # after Ctrl-C: points still running then get the SIGINT from the coordinator


def slot_values(spec_vars: dict[str, Any], slot: int) -> dict[str, Any]:
    """``{port}`` and ``{gpus}`` of parallel slot ``slot``."""
    base = int(spec_vars.get("port", DEFAULT_PORT))
    per = int(spec_vars.get("gpus_per_point", 1))
    return {"port": base + slot, "gpus": ",".join(str(g) for g in range(slot * per, (slot + 1) * per)),
            "slot": slot}


def slot_base(base: dict[str, Any], server: Any, slot: int) -> dict[str, Any]:
    """The sweep's base config with ``{port}`` in the target URL filled for ``slot``."""
    url = (base.get("target") or {}).get("url")
    if not isinstance(url, str) or "{port}" not in url:
        return base
    port = slot_values(server.variables if server is not None else {}, slot)["port"]
    return {**base, "target": {**base["target"], "url": url.replace("{port}", str(port))}}


def for_slot(cfg: RunConfig, server: Any, slot: int | None, *, base: dict[str, Any] | None = None,
             params: dict[str, Any] | None = None) -> tuple[RunConfig, Any]:
    """The point's config and server spec with the slot's ``{port}``/``{gpus}`` filled in (a serial sweep
    is slot 0)."""
    slot = 0 if slot is None else slot
    if base is not None and slot_base(base, server, slot) is not base:
        from servelab.sweep.runner import point_config

        cfg = point_config(slot_base(base, server, slot), params or {})
    if server is not None:
        values = slot_values(server.variables, slot)
        server = replace(server, health_url=server.health_url.replace("{port}", str(values["port"])),
                         variables={**server.variables, **values})
    return cfg, server


def run_points(
    work: list[tuple[int, Any, RunConfig]],
    run_one: Callable[..., dict[str, Any]],
    args: tuple[Any, ...],
    *,
    parallel: int,
    ray_address: str | None,
    on_done: Done,
    out_of_budget: Callable[[], bool],
) -> bool:
    """Run ``run_one(*args, point, cfg, slot)`` for each (position, point, cfg), ``parallel`` at once.
    True when Ctrl-C ended it (every point that was running then has had its entry through ``on_done``)."""
    if ray_address is not None:
        return _run_ray(work, run_one, args, parallel=parallel, address=ray_address, on_done=on_done,
                        out_of_budget=out_of_budget)
    # Workers fork from one fork server that imported the point's code once (spawned, each worker paid an
    # interpreter start and ~0.5 s of imports itself); the pool keeps them for the next points.
    with cf.ProcessPoolExecutor(max_workers=parallel, mp_context=worker_context(run_one),
                                initializer=_ignore_sigint) as pool:
        free = list(range(parallel))
        running: dict[cf.Future[dict[str, Any]], tuple[int, int]] = {}
        queue = list(work)
        try:
            while queue or running:
                while queue and free and not out_of_budget():
                    i, p, cfg = queue.pop(0)
                    slot = free.pop(0)
                    running[pool.submit(_in_worker, run_one, *args, p, cfg, slot)] = (i, slot)
                if not running:
                    break
                done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                for f in done:
                    i, slot = running.pop(f)
                    free.append(slot)
                    on_done(i, _result(f, work, i))
        except KeyboardInterrupt:
            _drain(pool, running, work, on_done)
            return True
    return False


def _ignore_sigint() -> None:
    """A pool worker between points: Ctrl-C is the running points' business (and the coordinator's)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _in_worker(run_one: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """A point in a pool worker: Ctrl-C stops it as it stops a serial sweep's point; idle again after."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run_one(*args)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _drain(pool: cf.ProcessPoolExecutor, running: dict[cf.Future[dict[str, Any]], tuple[int, int]],
           work: list[tuple[int, Any, RunConfig]], on_done: Done) -> None:
    """After Ctrl-C: start nothing more; wait for the running points to stop and keep their entries.
    A second Ctrl-C passes SIGINT on at once; a third stops waiting (those points count as interrupted)."""
    pending = set(running)
    t0, hits, forwarded = time.monotonic(), 0, False
    try:
        while pending:
            try:
                done, pending = cf.wait(pending, timeout=0.2)
            except KeyboardInterrupt:
                hits += 1
                if hits >= 2:
                    break
                done = set()
            if not forwarded and pending and (hits or time.monotonic() - t0 > FORWARD_AFTER_S):
                forwarded = True
                for pid in list(getattr(pool, "_processes", None) or {}):
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGINT)
            for f in done:
                on_done(running[f][0], _result(f, work, running[f][0]))
    finally:
        for f in pending:
            on_done(running[f][0], _cut(work, running[f][0], "did not stop after Ctrl-C; worker ended"))
        if pending:
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)


def _point_entry(work: list[tuple[int, Any, RunConfig]], i: int, status: str, error: str) -> dict[str, Any]:
    p = next(p for j, p, _ in work if j == i)
    return {"index": p.index, "key": p.key, "params": p.params, "level": p.level, "status": status,
            "run_dir": None, "summary": None, "error": error}


def _cut(work: list[tuple[int, Any, RunConfig]], i: int, why: str) -> dict[str, Any]:
    """A point Ctrl-C cut before it could say so itself (--resume runs it again)."""
    return _point_entry(work, i, "interrupted", f"interrupted: {why}")


def _result(f: Any, work: list[tuple[int, Any, RunConfig]], i: int) -> dict[str, Any]:
    try:
        return f.result()
    except KeyboardInterrupt:  # Ctrl-C reached the point outside its run's loop (starting or ending)
        return _cut(work, i, "Ctrl-C outside the point's load loop")
    except Exception as e:  # noqa: BLE001 - a worker that died is that point's failure
        if type(e).__name__ == "TaskCancelledError":  # Ray: the task cancelled on Ctrl-C
            return _cut(work, i, "task cancelled")
        return _point_entry(work, i, "failed", f"worker failed: {type(e).__name__}: {e}")


def _run_ray(
    work: list[tuple[int, Any, RunConfig]],
    run_one: Callable[..., dict[str, Any]],
    args: tuple[Any, ...],
    *,
    parallel: int,
    address: str,
    on_done: Done,
    out_of_budget: Callable[[], bool],
) -> bool:
    import ray

    if not ray.is_initialized():
        ray.init(
            address=address or None, include_dashboard=False, log_to_driver=False, configure_logging=False
        )
    task = ray.remote(num_cpus=1, max_retries=0)(run_one)
    free = list(range(parallel))
    running: dict[Any, tuple[int, int]] = {}
    queue = list(work)
    try:
        while queue or running:
            while queue and free and not out_of_budget():
                i, p, cfg = queue.pop(0)
                slot = free.pop(0)
                running[task.remote(*args, p, cfg, slot)] = (i, slot)
            if not running:
                break
            ready, _ = ray.wait(list(running), num_returns=1)
            for ref in ready:
                i, slot = running.pop(ref)
                free.append(slot)
                on_done(i, _ray_result(ray, ref, work, i))
    except KeyboardInterrupt:
        for ref in running:
            ray.cancel(ref)
        for ref, (i, _slot) in running.items():  # a point that stopped itself in time keeps its entry
            try:
                ready, _ = ray.wait([ref], timeout=FORWARD_AFTER_S)
            except KeyboardInterrupt:
                ready = []
            on_done(i, _ray_result(ray, ref, work, i) if ready else _cut(work, i, "task cancelled"))
        return True
    return False


def _ray_result(ray: Any, ref: Any, work: list[tuple[int, Any, RunConfig]], i: int) -> dict[str, Any]:
    class _F:
        def result(self) -> dict[str, Any]:
            return ray.get(ref)

    return _result(_F(), work, i)
