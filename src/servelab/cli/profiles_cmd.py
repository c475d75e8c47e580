"""`servelab profiles`: the shipped workload profiles, one line each."""

from __future__ import annotations

import sys
from typing import Annotated

import orjson
import typer


def register(app: typer.Typer) -> None:
    app.command("profiles")(profiles)


def profiles(
    json_out: Annotated[bool, typer.Option("--json", help="Print name and description as JSON.")] = False,
) -> None:
    """List the built-in workload profiles (use one with `servelab run --profile NAME`)."""
    from servelab.workload.profiles import list_profiles

    rows = list_profiles()
    if json_out:
        data = [{"name": n, "description": d} for n, d in rows]
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    width = max((len(n) for n, _ in rows), default=0)
    for name, description in rows:
        typer.echo(f"{name:<{width}}  {description}")
