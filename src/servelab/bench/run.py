"""One run end to end, as a shardable unit: :func:`plan_run` (validate, run dir, manifest, target facts, the
shard count) -> :func:`~servelab.bench.drive.drive_shard` x W (this process, worker processes, or Ray)
-> :func:`~servelab.bench.finish.finish_run` (merge journals into Parquet, summarise from Parquet, report).
:func:`execute` is the one-call wrapper; with one worker it is the plain in-process run.
"""

from __future__ import annotations

import contextlib
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servelab.analysis.live import LiveStats
from servelab.bench import ending, preflight
from servelab.bench.drive import drive_shard, target_facts
from servelab.bench.finish import RunResult, finish_run
from servelab.bench.shard import RunSpec, ShardOutcome
from servelab.bench.targets import make_probe, validate_target
from servelab.clock import WallClock
from servelab.config.models import RunConfig
from servelab.load.control import ShardControl
from servelab.records.manifest import build_manifest, redact, utc_now_iso
from servelab.records.rundir import create_run_dir, write_json

__all__ = ["Executor", "RunResult", "RunSpec", "execute", "plan_run"]


@dataclass(frozen=True)
class Executor:
    """Where the shards run: ``workers`` processes on this host, or Ray (``ray_address`` "" = a local
    cluster, else an existing one, e.g. "auto" or "ray://head:10001")."""

    workers: int = 1
    ray_address: str | None = None

    @property
    def kind(self) -> str:
        if self.ray_address is not None:
            return "ray"
        return "processes" if self.workers > 1 else "local"


def _workers_for(cfg: RunConfig, ex: Executor) -> tuple[int, str | None]:
    """(shards, why fewer than asked). The simulator runs on virtual time: one deterministic process."""
    w = ex.workers
    if cfg.target.is_sim and (w > 1 or ex.ray_address is not None):
        return 1, (
            "the in-process simulator runs on virtual time, one deterministic event loop, so it is not "
            "sharded (to load it from several workers, serve it: servelab sim serve)"
        )
    c, n = cfg.load.concurrency, (cfg.limits.sessions if cfg.is_agent else cfg.limits.requests)
    if cfg.load.rate is None and c is not None and c < w:
        return c, f"{w} workers asked but only {c} concurrent users: {c} workers"
    if n is not None and n < w:
        return max(1, n), f"{w} workers asked but only {n} jobs: {max(1, n)} workers"
    return w, None


def plan_run(cfg: RunConfig, *, argv: list[str] | None = None, run_dir: Path | None = None,
             manifest_extra: dict[str, Any] | None = None, executor: Executor | None = None
             ) -> tuple[RunSpec, dict[str, Any], list[str]]:
    """Validate, create the run directory and manifest, describe the target (W > 1) and cut the shards.
    Returns (spec, manifest, warnings). Raises ServelabError on bad input."""
    ex = executor or Executor()
    validate_target(cfg.target)
    preflight.before_start(cfg, new_run_dir=run_dir is None)
    workers, why = _workers_for(cfg, ex)
    facts = _describe(cfg) if workers > 1 or ex.ray_address is not None else None
    run_dir = run_dir or create_run_dir(cfg.out, cfg.name)
    started_at = utc_now_iso()
    manifest = build_manifest(config=cfg.model_dump(mode="json"), argv=argv or [], target={}, seed=cfg.seed,
                              started_at=started_at, extra=manifest_extra)
    if facts is not None:
        manifest["target"] = redact(facts)
    write_json(run_dir / "manifest.json", manifest)
    kind = "local" if workers == 1 and ex.ray_address is None else ex.kind
    spec = RunSpec(config=cfg, run_dir=run_dir, workers=workers, executor=kind,
                   coordinator_host=socket.gethostname(), target_facts=facts, started_at=started_at,
                   argv=tuple(argv or ()))
    return spec, manifest, [why] if why else []


def _describe(cfg: RunConfig) -> dict[str, Any]:
    """The coordinator describes the target once (a short-lived client), so shards need not."""
    clock = WallClock()

    async def main() -> dict[str, Any]:
        probe = make_probe(cfg.target, clock)
        try:
            facts = await probe.describe()
        finally:
            await probe.aclose()
        preflight.preflight(cfg, facts)
        return target_facts(cfg, facts)

    return clock.run(main)


class _LocalControl(ShardControl):
    """One shard in this process: the manifest learns the target as soon as the shard has described it."""

    def __init__(self, live: LiveStats, spec: RunSpec, manifest: dict[str, Any]) -> None:
        super().__init__(live)
        self.spec, self.manifest = spec, manifest

    def described(self, target_facts: dict[str, Any]) -> None:
        self.manifest["target"] = redact(target_facts)
        write_json(self.spec.run_dir / "manifest.json", self.manifest)


def _failed(shard: int, error: str, exitcode: int | None) -> ShardOutcome:
    return ShardOutcome(shard=shard, host="?", error=error, exitcode=exitcode)


def _drive_all(spec: RunSpec, ex: Executor, live: LiveStats, manifest: dict[str, Any]) -> list[ShardOutcome]:
    if spec.executor == "local":
        return [drive_shard(spec, 0, _LocalControl(live, spec, manifest))]

    def on_report(_shard: int, snap: dict[str, Any]) -> None:
        live.merge(LiveStats.from_snapshot(snap))

    from servelab.load import executors

    if spec.executor == "ray":
        outs = executors.run_ray(
            drive_shard,
            spec,
            spec.workers,
            failed=_failed,
            address=ex.ray_address or None,
            on_report=on_report,
        )
    else:
        outs = executors.run_processes(drive_shard, spec, spec.workers, failed=_failed, on_report=on_report)
    for o in outs:
        if o.host == "?":
            o.host = spec.coordinator_host if spec.executor == "processes" else "unknown"
    return outs


def execute(
    cfg: RunConfig,
    *,
    argv: list[str] | None = None,
    progress: bool = False,
    report: bool = True,
    run_dir: Path | None = None,
    manifest_extra: dict[str, Any] | None = None,
    executor: Executor | None = None,
) -> RunResult:
    """Run ``cfg`` and write its run directory; returns the summary. Raises ServelabError on bad input."""
    ex = executor or Executor()
    created = run_dir is None
    spec, manifest, warnings = plan_run(
        cfg, argv=argv, run_dir=run_dir, manifest_extra=manifest_extra, executor=ex
    )
    live = LiveStats(cfg.load.mode)
    try:
        # the progress bar may read the workload (a replay's trace): bad input there is a failed start too
        with _progress_display(progress, live, cfg):
            shards = _drive_all(spec, ex, live, manifest)
    except BaseException:
        # a start that failed (bad input found late, Ctrl-C before any request) leaves nothing
        if created:
            preflight.discard_failed_start(spec.run_dir)
        raise
    with ending.finishing() as ctrl_c:  # a Ctrl-C now must not lose what was measured
        result = finish_run(spec, shards, manifest, report=report,
                            coord_mono_minus_wall=time.monotonic_ns() - time.time_ns())
    if ctrl_c:
        result.outcome.stopped_by = "interrupt"
    result.warnings[:0] = warnings
    return result


@contextlib.contextmanager
def _progress_display(enabled: bool, live: LiveStats, cfg: RunConfig):
    if not enabled:
        yield
        return
    from servelab.report.progress import progress_display

    requests, sessions, duration_s, label = progress_extent(cfg)
    with progress_display(live, requests=requests, sessions=sessions, duration_s=duration_s, label=label):
        yield


def progress_extent(cfg: RunConfig) -> tuple[int | None, int | None, float | None, str]:
    """(requests, sessions, duration in seconds, label) that end the run, for the progress bar's percent
    and time left: the limits (an agent run's in sessions), and for a replay the requests of the trace (a
    replay ends when its trace does). A mix ends with its first class's sessions: no count to show."""
    lim = cfg.limits
    if cfg.workload.kind == "replay":
        from servelab.bench.replay import replay_request_count

        n = replay_request_count(cfg)
        return (n if lim.requests is None else min(n, lim.requests)), None, lim.duration_s, "replay"
    if cfg.is_agent:
        return None, (None if cfg.mix else lim.sessions), lim.duration_s, "agent run"
    return lim.requests, None, lim.duration_s, "run"
