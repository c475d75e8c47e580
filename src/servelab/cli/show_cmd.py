"""`servelab show RUN_DIR`: print a stored run's summary again."""

from __future__ import annotations

from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("show")(show)


def show(
    run_dir: Annotated[
        str,
        typer.Argument(
            help="A run directory (`servelab run`, `replay`) or a sweep directory (`servelab sweep`)."
        ),
    ],
    json_out: Annotated[
        bool, typer.Option("--json", help="Print summary.json (a sweep: sweep.json).")
    ] = False,
) -> None:
    """Print a stored run's summary, or a sweep's table and knee."""
    from servelab.cli.present import print_summary
    from servelab.records.rundir import read_run
    from servelab.sweep.state import is_sweep_dir

    if is_sweep_dir(run_dir):
        _show_sweep(run_dir, json_out)
        return
    data = read_run(run_dir)
    summary = data.summary
    if not summary:
        from servelab.bench.resummarize import summary_from_run

        summary = summary_from_run(data)
    from servelab.report.words import run_title

    print_summary(summary, json_out=json_out, title=run_title(data.manifest.get("config"), data.path.name)
                  + ("" if data.complete else " (incomplete: read from its journal)"))


def _show_sweep(sweep_dir: str, json_out: bool) -> None:
    import json
    import sys
    from pathlib import Path

    from servelab.cli.present import wide_console
    from servelab.report.sweep_table import render_sweep
    from servelab.sweep.state import SWEEP_FILE

    text = (Path(sweep_dir) / SWEEP_FILE).read_text(encoding="utf-8")
    if json_out:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    render_sweep(json.loads(text), wide_console())
