"""`servelab report RUN_OR_SWEEP`: write the self-contained HTML report (and PNG plots beside it)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console


def register(app: typer.Typer) -> None:
    app.command("report")(report)


def report(
    path: Annotated[str, typer.Argument(help="A run or sweep directory.")],
    out: Annotated[
        str | None, typer.Option(help="Where to write the HTML (default: inside the directory).")
    ] = None,
) -> None:
    """Write report.html for a run or a sweep."""
    from servelab.errors import ConfigError
    from servelab.records.rundir import is_run_dir
    from servelab.report.html import REPORT_NAME, write_report, write_run_report, write_sweep_report
    from servelab.sweep.state import is_sweep_dir

    p = Path(path)
    out_path = Path(out) if out else None
    if is_sweep_dir(p):
        written = write_sweep_report(p, out_path)
    elif is_run_dir(p) and (p / "summary.json").exists() and (p / "requests.parquet").exists():
        written = write_run_report(p, out_path)  # a finished run: only the columns the report reads, streamed
    elif is_run_dir(p):
        from dataclasses import replace

        from servelab.records.rundir import read_run

        run = read_run(p)
        if not run.summary:  # never finished: the figures `show` prints, recomputed from the records
            from servelab.bench.resummarize import summary_from_run

            run = replace(run, summary=summary_from_run(run))
        written = write_report(run, out_path or run.path / REPORT_NAME)
    else:
        raise ConfigError(f"{str(p)!r} is neither a run directory nor a sweep directory",
                          hint="pass a directory printed by `servelab run` or `servelab sweep`")
    Console(stderr=True, soft_wrap=True).print(f"report written to {written}", highlight=False)
