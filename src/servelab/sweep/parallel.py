"""Sweep points in parallel: each point a task in a worker process (``--parallel N``) or on Ray (``--ray``).

The coordinator alone writes ``sweep.json`` (each finished point's entry comes back to it), so resume
works as before. Each of the N slots running at once has its own server: a ``--server-cmd`` template and
the target URL may use ``{port}`` (the base port plus the slot) and ``{gpus}`` (the slot's GPU ids, e.g.
``0,1`` then ``2,3`` with ``gpus_per_point=2``), so parallel points never share a server.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from servelab.config import RunConfig
from servelab.load.executors import worker_context

DEFAULT_PORT = 8000

Done = Callable[[int, dict[str, Any]], None]  # (point position, its entry)


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
) -> None:
    """Run ``run_one(*args, point, cfg, slot)`` for each (position, point, cfg), ``parallel`` at once."""
    if ray_address is not None:
        _run_ray(work, run_one, args, parallel=parallel, address=ray_address, on_done=on_done,
                 out_of_budget=out_of_budget)
        return
    # Workers fork from one fork server that imported the point's code once (spawned, each worker paid an
    # interpreter start and ~0.5 s of imports itself); the pool keeps them for the next points.
    with cf.ProcessPoolExecutor(max_workers=parallel, mp_context=worker_context(run_one)) as pool:
        free = list(range(parallel))
        running: dict[cf.Future[dict[str, Any]], tuple[int, int]] = {}
        queue = list(work)
        try:
            while queue or running:
                while queue and free and not out_of_budget():
                    i, p, cfg = queue.pop(0)
                    slot = free.pop(0)
                    running[pool.submit(run_one, *args, p, cfg, slot)] = (i, slot)
                if not running:
                    break
                done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                for f in done:
                    i, slot = running.pop(f)
                    free.append(slot)
                    on_done(i, _result(f, work, i))
        except KeyboardInterrupt:
            for f in running:
                f.cancel()
            pool.shutdown(wait=True, cancel_futures=True)  # running points end as interrupted, and are kept
            for f, (i, _slot) in running.items():
                if f.done() and not f.cancelled():
                    on_done(i, _result(f, work, i))
            raise


def _result(f: Any, work: list[tuple[int, Any, RunConfig]], i: int) -> dict[str, Any]:
    try:
        return f.result()
    except Exception as e:  # noqa: BLE001 - a worker that died is that point's failure
        p = next(p for j, p, _ in work if j == i)
        return {"index": p.index, "key": p.key, "params": p.params, "level": p.level, "status": "failed",
                "run_dir": None, "summary": None, "error": f"worker failed: {type(e).__name__}: {e}"}


def _run_ray(
    work: list[tuple[int, Any, RunConfig]],
    run_one: Callable[..., dict[str, Any]],
    args: tuple[Any, ...],
    *,
    parallel: int,
    address: str,
    on_done: Done,
    out_of_budget: Callable[[], bool],
) -> None:
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
        raise


def _ray_result(ray: Any, ref: Any, work: list[tuple[int, Any, RunConfig]], i: int) -> dict[str, Any]:
    class _F:
        def result(self) -> dict[str, Any]:
            return ray.get(ref)

    return _result(_F(), work, i)
