"""``servelab trace ...``: inspect a recorded trace (what ``servelab replay`` would send)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import orjson
import typer

from servelab.config.trace_formats import FORMATS, formats_text
from servelab.errors import ConfigError

app = typer.Typer(
    help=f"Inspect recorded traces ({', '.join(FORMATS)}).",
    no_args_is_help=True,
    add_completion=False,
)

FORMAT_HELP = f"Trace format: {formats_text()}."


def normalize_format(fmt: str | None) -> str:
    """The canonical format name, or a ConfigError naming the known ones."""
    if fmt is None:
        raise ConfigError(
            "--format is required", hint=f"name the trace's format: one of {', '.join(FORMATS)}"
        )
    name = fmt.strip().lower().replace("_", "-")
    if name not in FORMATS:
        raise ConfigError(f"--format: unknown trace format {fmt!r}; expected one of {', '.join(FORMATS)}",
                          hint="see docs/traces.md for what each format reads")
    return name


def _value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "on", "yes"):
        return True
    if low in ("false", "off", "no"):
        return False
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def parse_options(pairs: list[str] | None) -> dict[str, Any]:
    """``--option key=value`` pairs (numbers and booleans converted) for the format's loader."""
    out: dict[str, Any] = {}
    for p in pairs or []:
        if "=" not in p:
            raise ConfigError(f"--option {p!r} is not key=value", hint="e.g. --option stagger_s=30")
        k, v = p.split("=", 1)
        out[k.strip()] = _value(v)
    return out


@app.command("stats")
def stats(
    trace: Annotated[str, typer.Argument(help="The trace file (claude-code: also a directory or glob; "
                                         "servelab: a run directory).")],
    format: Annotated[str | None, typer.Option("--format", "-f", help=FORMAT_HELP)] = None,
    start: Annotated[float | None, typer.Option(help="Window start, seconds into the trace.")] = None,
    duration: Annotated[float | None, typer.Option(help="Window length, seconds.")] = None,
    sample: Annotated[float | None, typer.Option(help="Keep this random fraction (whole sessions).")] = None,
    max_requests: Annotated[int | None, typer.Option(help="Keep at most this many requests.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of --sample.")] = 0,
    option: Annotated[list[str] | None, typer.Option(help="Loader option key=value (repeatable), e.g. "
                                                     "stagger_s=30 (claude-code), output_tokens=512 "
                                                     "(mt-bench), block_tokens=512 (mooncake).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    """Rate, burstiness, token lengths, sessions and prefix reuse of a trace."""
    from servelab.workload.traces import load_trace, select, stats_rows, trace_stats

    tr = load_trace(trace, normalize_format(format), **parse_options(option))
    if any(v is not None for v in (start, duration, sample, max_requests)):
        tr = select(tr, start, duration, sample, seed, max_requests=max_requests)
    figures = trace_stats(tr)
    if json_out:
        sys.stdout.write(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    from rich.table import Table

    table = Table(title=f"trace {tr.source}", title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for label, value in stats_rows(figures):
        table.add_row(label, value)
    from servelab.cli.present import wide_console

    wide_console().print(table)
