"""Printing a finished run: the summary table (or summary.json with --json), where it was written."""

from __future__ import annotations

import sys
from typing import Any

import orjson
from rich.console import Console


def print_summary(summary: dict[str, Any], *, json_out: bool, title: str = "servelab run") -> None:
    if json_out:
        sys.stdout.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    from servelab.report.terminal import render_summary

    render_summary(summary, wide_console(), title=title)


def wide_console() -> Console:
    """A console for tables: the terminal's width, or 140 columns when writing to a file or pipe."""
    probe = Console()
    return probe if probe.is_terminal else Console(width=140)


def finish_run(result: Any, *, json_out: bool) -> None:
    """Print the run, say where it was written, and exit with its verdict (servelab.cli.verdict)."""
    from servelab.cli.verdict import run_verdict
    from servelab.report.words import run_title

    title = run_title({"workload": {"kind": result.config.workload.kind}}, result.run_dir.name)
    print_summary(result.summary, json_out=json_out, title=title)
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    for w in result.warnings:
        err.print(f"warning: {w}")
    err.print(f"run written to {result.run_dir}")
    if result.report_path is not None:
        err.print(f"report: {result.report_path}")
    run_verdict(result.summary, interrupted=result.outcome.stopped_by == "interrupt",
                cancelled_in_flight=result.outcome.cancelled_in_flight, where=str(result.run_dir),
                min_goodput_fraction=result.config.slo.min_goodput_fraction, err=err)
