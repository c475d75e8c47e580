"""A mixed run end to end, with its interference baseline.

With two or more classes and ``mix_baseline`` (the default), the first (interactive) class runs alone
first, same seed and same load, into ``RUN_DIR/baseline/`` (a run directory of its own); then the whole
mix runs into ``RUN_DIR``. ``summary.json`` then gets ``interference``: the first class's TTFT / end-to-end
/ ITL percentiles alone vs in the mix (:func:`servelab.analysis.mix.interference`). The baseline runs
first so that, against a real server with prefix caching, what it leaves cached can only flatter the mix
(interference is understated, never inflated).

A mix is driven by one process (its classes share one clock and one target): ``--workers`` is ignored
with a warning.
"""

from __future__ import annotations

import shutil
from typing import Any

from servelab.analysis.mix import interference
from servelab.bench import preflight
from servelab.bench.mix import class_specs, tenant_notes
from servelab.bench.run import Executor, RunResult, execute
from servelab.config.models import RunConfig
from servelab.records.rundir import create_run_dir, write_json

BASELINE_DIR = "baseline"


def baseline_config(cfg: RunConfig) -> RunConfig:
    """The first class alone: same target, seed, limits and class settings; no baseline of its own."""
    assert cfg.mix
    return cfg.model_copy(update={"mix": [cfg.mix[0]], "mix_baseline": False})


def wants_baseline(cfg: RunConfig) -> bool:
    return bool(cfg.mix) and len(cfg.mix or []) > 1 and cfg.mix_baseline


def execute_mix(cfg: RunConfig, *, argv: list[str] | None = None, progress: bool = False, report: bool = True,
                executor: Executor | None = None) -> RunResult:
    """Run the mix ``cfg`` (and, see :func:`wants_baseline`, its first class alone); returns the mixed run."""
    warnings: list[str] = []
    ex = executor or Executor()
    if ex.workers > 1 or ex.ray_address is not None:
        warnings.append("a mixed run is driven by one process (its classes share one clock and one target): "
                        f"--workers/--ray ignored ({ex.kind})")
    class_specs(cfg)  # an unknown profile fails here, before anything is written (exit 2)
    for c in cfg.mix or []:
        preflight.check_api_key(c.api_key_env)
    warnings += tenant_notes(cfg)
    if not wants_baseline(cfg):
        result = execute(cfg, argv=argv, progress=progress, report=report)
        result.warnings[:0] = warnings
        return result
    preflight.check_out_dir(cfg.out)
    run_dir = create_run_dir(cfg.out, cfg.name)
    base_dir = run_dir / BASELINE_DIR
    base_dir.mkdir()
    try:
        base = execute(baseline_config(cfg), argv=argv, progress=progress, report=False, run_dir=base_dir,
                       manifest_extra={"mix_baseline_of": run_dir.name})
    except BaseException:
        if preflight.discard_failed_start(base_dir) and not any(run_dir.iterdir()):
            shutil.rmtree(run_dir, ignore_errors=True)  # a start that failed leaves nothing behind
        raise
    if base.outcome.stopped_by == "interrupt":
        base.warnings[:0] = [*warnings, "interrupted while the first class ran alone (the interference "
                             "baseline): the mixed run did not start"]
        return base
    result = execute(cfg, argv=argv, progress=progress, report=report, run_dir=run_dir,
                     manifest_extra={"mix_baseline": BASELINE_DIR})
    result.warnings[:0] = warnings
    add_interference(result, base.summary, report=report)
    return result


def add_interference(result: RunResult, alone_summary: dict[str, Any], *, report: bool) -> None:
    """Put ``interference`` into the mixed run's summary (in memory and summary.json) and redraw its
    report."""
    cfg = result.config
    assert cfg.mix
    first = cfg.mix[0].label
    mixed = (result.summary.get("classes") or {}).get(first)
    alone = (alone_summary.get("classes") or {}).get(first)
    if mixed is None or alone is None:
        result.warnings.append(f"interference not computed: class {first!r} has no figures in both runs")
        return
    result.summary["interference"] = interference(mixed, alone, first, [c.label for c in cfg.mix[1:]],
                                                  alone_run=BASELINE_DIR)
    write_json(result.run_dir / "summary.json", result.summary)
    if report and result.report_path is not None:
        from servelab.report.html import write_run_report

        try:
            result.report_path = write_run_report(result.run_dir)
        except Exception as e:  # noqa: BLE001 - a report failure must not lose the measured run
            result.warnings.append(f"report not redrawn: {type(e).__name__}: {e}")

