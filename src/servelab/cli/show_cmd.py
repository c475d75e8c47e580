"""`servelab show RUN_DIR`: print a stored run's summary again."""

from __future__ import annotations

from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("show")(show)


def show(
    run_dir: Annotated[str, typer.Argument(help="A run directory written by `servelab run`.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print summary.json.")] = False,
) -> None:
    """Print a stored run's summary."""
    from servelab.cli.present import print_summary
    from servelab.records.rundir import read_run

    data = read_run(run_dir)
    summary = data.summary
    if not summary:
        from servelab.bench.resummarize import summary_from_run

        summary = summary_from_run(data)
    print_summary(summary, json_out=json_out, title=f"servelab run: {data.path.name}"
                  + ("" if data.complete else " (incomplete: read from its journal)"))
