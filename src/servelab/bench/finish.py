"""The end of a run, at the coordinator: merge every shard's journals into Parquet (streamed), summarise
from Parquet, add telemetry (scraped once, by shard 0), name lagging workers, write summary and manifest,
report."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from servelab.analysis.columns import TABLE_COLUMNS
from servelab.analysis.evidence import run_evidence
from servelab.analysis.summary import summarize_batches
from servelab.analysis.telemetry import summarize_telemetry, token_agreement
from servelab.bench import ending
from servelab.bench.shard import RunSpec, ShardOutcome, merge_outcomes
from servelab.bench.workloads import SUMMARIES
from servelab.config.models import RunConfig
from servelab.load.runner import RunOutcome
from servelab.records.hygiene import retire_journals
from servelab.records.journal import REQUESTS_JOURNAL, SESSIONS_JOURNAL, Journal, read_journal, shard_name
from servelab.records.manifest import redact, utc_now_iso
from servelab.records.merge import issued_indices, merge_journals
from servelab.records.rundir import SESSION_SCHEMA, read_parquet, write_json
from servelab.records.schema import lost_session
from servelab.records.stream import arrow_pool_restored, iter_tables, read_columns, use_system_arrow_pool
from servelab.records.telemetry import write_telemetry
from servelab.transport.base import lost_record

_EVIDENCE_COLUMNS = ("status", "warmup", "srv_queue_ns", "srv_preempted_ns")


@dataclass
class RunResult:
    run_dir: Path
    summary: dict[str, Any]
    outcome: RunOutcome
    config: RunConfig
    report_path: Path | None = None
    warnings: list[str] = field(default_factory=list)
    shards: list[ShardOutcome] = field(default_factory=list)


class RunTables:
    """The run's records as a workload's own summary reads them: the Parquet files, not a list in memory.
    ``iter_requests`` / ``iter_sessions`` stream the columns asked for a batch at a time (what the agent and
    replay summaries read); ``requests`` and ``sessions`` read a file whole, only when a summary asks for
    it (a ``--mix`` run's per-class figures)."""

    def __init__(self, requests_path: Path, sessions_path: Path | None) -> None:
        self.requests_path, self.sessions_path = requests_path, sessions_path
        self._requests: pa.Table | None = None
        self._sessions: pa.Table | None = None

    @property
    def requests(self) -> pa.Table:
        if self._requests is None:
            self._requests = read_parquet(self.requests_path)
        return self._requests

    @property
    def sessions(self) -> pa.Table | None:
        if self._sessions is None and self.sessions_path is not None:
            self._sessions = read_parquet(self.sessions_path)
        return self._sessions

    def iter_requests(self, columns: Sequence[str]) -> Iterator[pa.Table]:
        return iter_tables(self.requests_path, columns)

    def iter_sessions(self, columns: Sequence[str]) -> Iterator[pa.Table] | None:
        """None when the run wrote no ``sessions.parquet``."""
        if self.sessions_path is None:
            return None
        return iter_tables(self.sessions_path, columns, schema=SESSION_SCHEMA)


def _land_remote_journals(spec: RunSpec, shards: list[ShardOutcome]) -> None:
    for s in shards:
        for name, blob in (s.journals or {}).items():
            (spec.run_dir / shard_name(name, s.shard)).write_bytes(blob)
        s.journals = None


def _heard_from(spec: RunSpec, shard: int, name: str, key: str, times: tuple[str, ...]
                ) -> tuple[set[int], int | None]:
    """The ``key`` ids (request_id or session_id) shard ``shard`` journaled in ``name``, and the latest of
    their ``times``: when that shard was last heard from, on its own clock like its records."""
    ids: set[int] = set()
    last: int | None = None
    for r in read_journal(spec.run_dir / shard_name(name, shard)):
        if not isinstance(r, dict) or not isinstance(r.get(key), int):
            continue
        ids.add(r[key])
        seen = [t for t in (r.get(c) for c in times) if isinstance(t, int)]
        if seen:
            last = max(seen) if last is None else max(last, *seen)
    return ids, last


def _record_dead_shard(spec: RunSpec, s: ShardOutcome, started_ns: int | None = None) -> int:
    """A shard that died (killed, crashed) never recorded what it had in flight: record each job it had
    started but not finished as cancelled, so counts still add up. Their time is when the shard was last
    heard from (its latest journaled time; ``started_ns``, the live shards' start, when it journaled
    nothing): a time on the run's clock, never 0, which made the measured window the clock's whole age.
    Returns how many were recorded."""
    cfg = spec.config
    started = issued_indices(spec.run_dir, s.shard)
    if not started or cfg.workload.kind == "replay":  # type: ignore[union-attr]
        return 0
    why = f"worker {s.shard} ({s.host}) died with this in flight: {s.error or 'exit ' + str(s.exitcode)}"
    n = 0
    with Journal(spec.run_dir, s.shard) as j:
        if cfg.is_agent:
            done, last = _heard_from(spec, s.shard, SESSIONS_JOURNAL, "session_id", ("start_ns", "end_ns"))
            t = last if last is not None else started_ns or 0
            for i in started:
                if i not in done:
                    j.write_session(lost_session(i, s.shard, t, why))
                    n += 1
        else:
            done, last = _heard_from(spec, s.shard, REQUESTS_JOURNAL, "request_id",
                                     ("intended_ns", "sent_ns", "end_ns"))
            t = last if last is not None else started_ns or 0
            for i in started:
                if i not in done:
                    j.write_request(lost_record(i, s.shard, t, why))
                    n += 1
    return n


def _shifts(spec: RunSpec, shards: list[ShardOutcome], coord_mono_minus_wall: int) -> dict[int, int]:
    """ns to add to each remote shard's times to put them on the coordinator's monotonic clock."""
    out = {}
    for s in shards:
        if s.host != spec.coordinator_host:
            out[s.shard] = coord_mono_minus_wall - s.mono_minus_wall_ns - s.clock_offset_ns
    return out


def _worker_lag_reasons(table: pa.Table, shards: list[ShardOutcome], max_lag_ms: float, mode: str | None
                        ) -> tuple[list[str], list[dict[str, Any]]]:
    rows, reasons = [], []
    worker = table.column("worker").to_numpy(zero_copy_only=False) if table.num_rows else np.zeros(0)
    lag_ms = None
    if mode == "open" and table.num_rows:
        lag = pc.subtract(table.column("sent_ns"), table.column("intended_ns"))
        lag_ms = pc.fill_null(lag, 0).to_numpy(zero_copy_only=False) / 1e6
    for s in shards:
        o = s.outcome
        row: dict[str, Any] = {"worker": s.shard, "host": s.host, "error": s.error,
                               "clock_offset_ms": s.clock_offset_ns / 1e6,
                               "clock_rtt_ms": None if s.clock_rtt_ns is None else s.clock_rtt_ns / 1e6,
                               "issued": o.issued if o else None, "completed": o.completed if o else None,
                               "load_cpu_s": s.load_cpu_s,
                               "loop_lag_p99_ms": o.loop_lag_p99_ms if o else None, "lag_p99_ms": None}
        mine = worker == s.shard
        if lag_ms is not None and mine.any():
            row["lag_p99_ms"] = float(np.percentile(lag_ms[mine], 99))
        for what, v in (
            ("event-loop timer lag", row["loop_lag_p99_ms"]),
            ("schedule lag", row["lag_p99_ms"]),
        ):
            if v is not None and v > max_lag_ms:
                reasons.append(
                    f"worker {s.shard} ({s.host}) lagged: {what} p99 {v:.3g} ms exceeds {max_lag_ms:g} ms "
                    "(give that worker fewer users or a lower rate: add workers or hosts)"
                )
        if s.outcome is None:
            reasons.append(
                f"worker {s.shard} ({s.host}) failed: {s.error or 'exit ' + str(s.exitcode)}; what it "
                "had in flight is recorded as cancelled"
            )
        rows.append(row)
    return reasons, rows


def finish_run(spec: RunSpec, shards: list[ShardOutcome], manifest: dict[str, Any], *, report: bool = True,
               coord_mono_minus_wall: int = 0) -> RunResult:
    """Merge, summarise and write the run from its shards' outcomes (some may have failed)."""
    with arrow_pool_restored():
        return _finish_run(spec, shards, manifest, report=report, coord_mono_minus_wall=coord_mono_minus_wall)


def _finish_run(spec: RunSpec, shards: list[ShardOutcome], manifest: dict[str, Any], *, report: bool,
                coord_mono_minus_wall: int) -> RunResult:
    cfg, run_dir = spec.config, spec.run_dir
    _land_remote_journals(spec, shards)
    live_start = min((s.outcome.started_ns for s in shards if s.outcome is not None), default=None)
    dead = {s.shard: _record_dead_shard(spec, s, live_start) for s in shards if s.outcome is None}
    n_req, n_ses = merge_journals(run_dir, _shifts(spec, shards, coord_mono_minus_wall))
    use_system_arrow_pool()  # the summary, evidence and report on the C library's allocator
    outcome = merge_outcomes([s.outcome for s in shards if s.outcome is not None])
    outcome.cancelled_in_flight += sum(dead.values())
    rp, sp = run_dir / "requests.parquet", run_dir / "sessions.parquet"
    tables = RunTables(rp, sp if sp.exists() else None)
    extra: dict[str, Any] = {
        "stopped_by": outcome.stopped_by,
        "cancelled_in_flight": outcome.cancelled_in_flight,
        "loop_lag_p99_ms": outcome.loop_lag_p99_ms,
    }
    first = next((s for s in shards if s.outcome is not None), None)
    extra["requests_issued"] = ending.requests_issued(cfg.is_agent, first.facts if first else {},
                                                      outcome.issued + sum(dead.values()))
    work = first.work if first is not None else None
    open_schedule = (work.offsets_ns is not None) if work is not None else cfg.load.rate is not None
    mode = "open" if open_schedule else None
    summary = summarize_batches(iter_tables(rp, TABLE_COLUMNS), cfg, started_ns=outcome.started_ns,
                                ended_ns=outcome.ended_ns, extra=extra, mode=mode)
    if work is not None and work.summarize is not None and spec.workers == 1:
        summary.update(work.summarize(tables, outcome))
    elif first is not None:
        kind = getattr(cfg.workload, "kind", "requests")
        summary.update(SUMMARIES[kind](cfg, first.facts, tables, outcome))
    if spec.workers > 1:
        reasons, rows = _worker_lag_reasons(read_columns(rp, ("worker", "sent_ns", "intended_ns")), shards,
                                            cfg.limits.max_lag_p99_ms,
                                            "open" if open_schedule else "closed")
        summary["workers"] = rows
        if reasons:
            summary["invalid_reasons"] = list(summary.get("invalid_reasons") or []) + reasons
            summary["valid"] = False
    _telemetry(run_dir, shards, summary, manifest)
    if (manifest.get("target") or {}).get("simulator"):  # which step-cost backend priced it, how trustworthy
        summary["simulator"] = manifest["target"]["simulator"]
    summary["evidence"] = run_evidence(iter_tables(rp, _EVIDENCE_COLUMNS), summary, manifest)
    write_json(run_dir / "summary.json", summary)
    _finish_manifest(spec, shards, manifest, outcome)
    # the Parquet files hold everything: the crash journals go (a run that lost a shard keeps them)
    if not dead:
        retire_journals(run_dir, n_req, n_ses)
    result = RunResult(run_dir, summary, outcome, cfg, shards=shards)
    if report:
        result.report_path = _write_report(run_dir, result)
    return result


def _telemetry(
    run_dir: Path, shards: list[ShardOutcome], summary: dict[str, Any], manifest: dict[str, Any]
) -> None:
    tel = next((s.telemetry for s in shards if s.shard == 0 and s.telemetry is not None), None)
    if tel is None:
        return
    write_telemetry(run_dir, tel["columns"])
    server = summarize_telemetry(tel["columns"], tel["engine"])
    if server.get("available"):
        tokens = summary.get("tokens", {})
        server["token_agreement"] = token_agreement(
            server, tokens.get("output") or 0, tokens.get("input") or 0
        )
    server["scrape_errors"] = tel["errors"]
    summary["server"] = server
    if tel["engine"] and not manifest.get("target", {}).get("engine"):
        manifest.setdefault("target", {})["engine"] = tel["engine"]


def _finish_manifest(spec: RunSpec, shards: list[ShardOutcome], manifest: dict[str, Any], outcome: RunOutcome
                     ) -> None:
    facts = next((s.target_facts for s in shards if s.target_facts is not None), None)
    if facts is not None and not manifest.get("target"):
        manifest["target"] = redact(facts)
    manifest["ended_at"] = utc_now_iso()
    manifest.update(ending.run_status(outcome.stopped_by))
    manifest["clock"] = {"kind": "virtual" if spec.config.target.is_sim else "monotonic",
                         "started_ns": outcome.started_ns, "ended_ns": outcome.ended_ns}
    manifest["executor"] = {
        "kind": spec.executor,
        "workers": spec.workers,
        "coordinator_host": spec.coordinator_host,
        "shards": [
            {
                "worker": s.shard,
                "host": s.host,
                "clock_offset_ns": s.clock_offset_ns,
                "clock_rtt_ns": s.clock_rtt_ns,
                "error": s.error,
                "exitcode": s.exitcode,
            }
            for s in shards
        ],
    }
    write_json(spec.run_dir / "manifest.json", manifest)


def _write_report(run_dir: Path, result: RunResult) -> Path | None:
    from servelab.report.html import write_run_report

    try:
        return write_run_report(run_dir)
    except Exception as e:  # noqa: BLE001 - a report failure must not lose the measured run
        result.warnings.append(f"report not written: {type(e).__name__}: {e}")
        return None
