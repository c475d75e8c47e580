"""Help that helps: ``-h`` beside ``--help``, ``--version``, one example per command, no type column for
on/off flags (typer prints ``<bool>`` there), and a copy-paste-able example line under every command.

:func:`polish` is called once on the root app after every command is registered.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

HELP_OPTIONS = ["-h", "--help"]

# One example per command (and sub-command); each works as written on a fresh machine, except those that
# need a real endpoint at 127.0.0.1:8000 (run, sweep and gateway-overhead show the simulator form first).
EXAMPLES: dict[str, str] = {
    "run": "servelab run --target sim:llama-3.1-8b@1xh100 --concurrency 32 --input-tokens 2048 "
    "--output-tokens 512",
    "show": "servelab show runs/<run-or-sweep>",
    "profiles": "servelab profiles",
    "replay": "servelab replay trace.jsonl --format mooncake --speed 10",
    "sweep": "servelab sweep --concurrency 1..256 --target sim:llama-3.1-8b@1xh100   (1..256 = powers of "
    "two)",
    "compare": "servelab compare runs/<a> runs/<b> --report comparison.html",
    "check": "servelab check runs/<baseline> runs/<candidate> --max-regression 10%",
    "report": "servelab report runs/<run-or-sweep> --out report.html",
    "accuracy": "servelab accuracy --target http://127.0.0.1:8000/v1",
    "gateway-overhead": "servelab gateway-overhead --direct http://127.0.0.1:8000/v1 --via "
    "http://127.0.0.1:9000/v1 --concurrency 16",
    "serve": "servelab sim serve --deployment sim:llama-3.1-8b@1xh100 --port 8000",
    "stats": "servelab trace stats trace.csv --format azure",
    "init": "servelab config init run.yaml",
    "doc": "servelab config doc > docs/config.md",
}


def _version(value: bool) -> None:
    if value:
        from servelab import __version__

        typer.echo(f"servelab {__version__}")
        raise typer.Exit(0)


def _root(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", help="Print the version and exit.", is_eager=True, callback=_version),
    ] = False,
) -> None:
    """Benchmark LLM serving deployments on real work (serving metrics, agents, sweeps, a simulator)."""


def _no_bool_metavar() -> None:
    """Flags (``--json``, ``--ignore-eos``, ``--stream/--no-stream``) take no value: show no type for them."""
    from typer.core import TyperOption

    if getattr(TyperOption, "_servelab_polished", False):
        return
    original = TyperOption.display_type_rich

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        if getattr(self, "is_flag", False) or getattr(self, "is_bool_flag", False):
            return None
        return original(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]
    TyperOption._servelab_polished = True  # type: ignore[attr-defined]


def _epilog(name: str | None) -> str | None:
    ex = EXAMPLES.get(name or "")
    return f"Example:  {ex}" if ex else None


def polish(app: typer.Typer) -> None:
    """-h, --version, examples and flag metavars on ``app`` and its sub-command groups."""
    settings = dict(app.info.context_settings or {})
    settings["help_option_names"] = HELP_OPTIONS
    app.info.context_settings = settings
    if app.registered_callback is None:
        app.callback()(_root)
    _no_bool_metavar()
    for cmd in app.registered_commands:
        cmd.epilog = cmd.epilog or _epilog(cmd.name)
    for group in app.registered_groups:
        sub = group.typer_instance
        if sub is None:
            continue
        sub.info.context_settings = {**(sub.info.context_settings or {}), "help_option_names": HELP_OPTIONS}
        for cmd in sub.registered_commands:
            cmd.epilog = cmd.epilog or _epilog(cmd.name)
