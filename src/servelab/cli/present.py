"""Printing a finished run: the summary table (or summary.json with --json), where it was written."""

from __future__ import annotations

import sys
from typing import Any

import orjson
import typer
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
    """Print the run, say where it was written, and exit 1 when a configured check failed."""
    print_summary(result.summary, json_out=json_out, title=f"servelab run: {result.run_dir.name}")
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    if result.outcome.stopped_by == "interrupt":
        err.print(f"interrupted: {result.outcome.cancelled_in_flight} request(s) in flight were cancelled and "
                  "recorded as such; everything finished before is kept")
    for w in result.warnings:
        err.print(f"warning: {w}")
    err.print(f"run written to {result.run_dir}")
    if result.report_path is not None:
        err.print(f"report: {result.report_path}")
    slo = result.config.slo
    good = (result.summary.get("goodput") or {}).get("fraction")
    if slo.min_goodput_fraction is not None and good is not None and good < slo.min_goodput_fraction:
        err.print(f"[red]SLO check failed[/]: goodput fraction {good:.3f} < {slo.min_goodput_fraction}")
        raise typer.Exit(1)
