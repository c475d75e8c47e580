"""--workers / --ray: the executor a run's shards go to."""

from __future__ import annotations

from typing import Any

from servelab.errors import ConfigError


def executor_from_flags(workers: str | None, ray: str | None) -> Any:
    from servelab.bench.run import Executor
    from servelab.load.executors import resolve_workers

    try:
        n = resolve_workers(workers)
    except ValueError:
        raise ConfigError(f"--workers {workers!r} is not a number of workers",
                          hint="give a positive whole number, or auto (one per core)") from None
    if ray is not None:
        _check_ray()
    return Executor(workers=n, ray_address=None if ray is None else ("" if ray == "local" else ray))


def _check_ray() -> None:
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise ConfigError("--ray needs Ray, which is not installed",
                          hint="pip install 'servelab[ray]' (or pip install ray)")
