"""One run end to end: open the target, build the work, run it, journal, summarize, write, report."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.analysis.live import LiveStats
from servelab.analysis.summary import build_summary
from servelab.analysis.telemetry import summarize_telemetry, token_agreement
from servelab.bench.plan import plan_for
from servelab.bench.targets import make_clock, make_transport, validate_target
from servelab.bench.telemetry import RunTelemetry
from servelab.bench.workloads import prepare_work
from servelab.config.models import RunConfig
from servelab.errors import TargetError
from servelab.load.runner import Runner, RunOutcome
from servelab.records.journal import Journal
from servelab.records.manifest import build_manifest, redact, utc_now_iso
from servelab.records.rundir import create_run_dir, write_json, write_parquet_from_journal
from servelab.records.sink import RecordSink


@dataclass
class RunResult:
    run_dir: Path
    summary: dict[str, Any]
    outcome: RunOutcome
    config: RunConfig
    report_path: Path | None = None
    warnings: list[str] = field(default_factory=list)


def execute(
    cfg: RunConfig,
    *,
    argv: list[str] | None = None,
    progress: bool = False,
    report: bool = True,
    run_dir: Path | None = None,
    manifest_extra: dict[str, Any] | None = None,
) -> RunResult:
    """Run ``cfg`` and write its run directory; returns the summary. Raises ServelabError on bad input."""
    validate_target(cfg.target)
    run_dir = run_dir or create_run_dir(cfg.out, cfg.name)
    clock = make_clock(cfg.target)
    live = LiveStats(cfg.load.mode)
    journal = Journal(run_dir)
    sink = RecordSink(journal, on_request=live.update)
    started_at = utc_now_iso()
    config_dict = cfg.model_dump(mode="json")

    def manifest_for(target: dict[str, Any]) -> dict[str, Any]:
        return build_manifest(config=config_dict, argv=argv or [], target=target, seed=cfg.seed,
                              started_at=started_at, extra=manifest_extra)

    manifest = manifest_for({})
    write_json(run_dir / "manifest.json", manifest)
    state: dict[str, Any] = {}

    async def main() -> RunOutcome:
        transport = make_transport(cfg.target, clock, concurrency=_pool_size(cfg), seed=cfg.seed)
        try:
            facts = await transport.describe()
            manifest["target"] = redact(_target_facts(cfg, facts))
            write_json(run_dir / "manifest.json", manifest)
            work = await prepare_work(cfg, transport, clock, sink)
            state["work"] = work
            runner = Runner(clock, plan_for(cfg, work.count_hint, work.offsets_ns, work.extra_drain_s))
            telemetry = state["telemetry"] = RunTelemetry(cfg, transport, clock)
            loop = asyncio.get_running_loop()
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signal.SIGINT, runner.request_stop)
            await telemetry.start()
            # Everything set up so far lives for the whole run: keep the collector from re-walking it,
            # so full collections do not stall the measurement.
            gc.collect()
            gc.freeze()
            try:
                return await runner.run(work.job)
            finally:
                gc.unfreeze()  # a sweep runs many points in one process: let them be collected again
                await telemetry.stop()
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(signal.SIGINT)
        finally:
            await transport.aclose()

    with _progress_display(progress, live, clock):
        try:
            outcome = clock.run(main)
        finally:
            journal.close()
    return _finish(cfg, run_dir, sink, outcome, manifest, state, report, clock.virtual)


def _finish(cfg: RunConfig, run_dir: Path, sink: RecordSink, outcome: RunOutcome, manifest: dict[str, Any],
            state: dict[str, Any], report: bool, virtual: bool) -> RunResult:
    write_parquet_from_journal(run_dir)
    extra: dict[str, Any] = {
        "stopped_by": outcome.stopped_by,
        "cancelled_in_flight": outcome.cancelled_in_flight,
        "loop_lag_p99_ms": outcome.loop_lag_p99_ms,
        "requests_issued": None if cfg.is_agent else outcome.issued,
    }
    work = state.get("work")
    open_schedule = work is not None and work.offsets_ns is not None
    summary = build_summary(sink.requests, cfg, started_ns=outcome.started_ns, ended_ns=outcome.ended_ns,
                            extra=extra, mode="open" if open_schedule else None)
    if work is not None and work.summarize is not None:
        summary.update(work.summarize(sink, outcome))
    telemetry = state.get("telemetry")
    if telemetry is not None:
        telemetry.write(run_dir)
        server = summarize_telemetry(telemetry.rows.columns(), telemetry.engine)
        if server.get("available"):
            tokens = summary.get("tokens", {})
            server["token_agreement"] = token_agreement(server, tokens.get("output") or 0, tokens.get("input") or 0)
        server["scrape_errors"] = telemetry.rows.errors[:5]
        summary["server"] = server
        if telemetry.engine and not manifest.get("target", {}).get("engine"):
            manifest.setdefault("target", {})["engine"] = telemetry.engine
    write_json(run_dir / "summary.json", summary)
    manifest["ended_at"] = utc_now_iso()
    manifest["clock"] = {"kind": "virtual" if virtual else "monotonic",
                         "started_ns": outcome.started_ns, "ended_ns": outcome.ended_ns}
    write_json(run_dir / "manifest.json", manifest)
    result = RunResult(run_dir, summary, outcome, cfg)
    if report:
        result.report_path = _write_report(run_dir, result)
    return result


def _write_report(run_dir: Path, result: RunResult) -> Path | None:
    from servelab.report.html import write_run_report

    try:
        return write_run_report(run_dir)
    except Exception as e:  # noqa: BLE001 - a report failure must not lose the measured run
        result.warnings.append(f"report not written: {type(e).__name__}: {e}")
        return None


def _pool_size(cfg: RunConfig) -> int:
    if cfg.load.concurrency is not None:
        return cfg.load.concurrency
    return 256


def _target_facts(cfg: RunConfig, facts: dict[str, Any]) -> dict[str, Any]:
    if facts.get("error") and not cfg.target.is_sim and not facts.get("models"):
        raise TargetError(
            f"cannot reach the target {cfg.target.url}: {facts['error']}",
            hint="check that the server is running and the URL ends with /v1 (e.g. http://127.0.0.1:8000/v1)",
        )
    out = dict(facts)
    out.setdefault("url", cfg.target.url)
    out.setdefault("api", cfg.target.api)
    return out


@contextlib.contextmanager
def _progress_display(enabled: bool, live: LiveStats, clock: Any):
    if not enabled:
        yield
        return
    from rich.console import Console
    from rich.live import Live

    from servelab.report.terminal import progress_line

    console = Console(stderr=True)
    if not console.is_terminal:
        yield
        return
    with Live(get_renderable=lambda: progress_line(live), console=console, refresh_per_second=4, transient=True):
        yield
