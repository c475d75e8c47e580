"""The ``servelab`` command: thin typer commands that parse, build a config, call one function.

Errors from servelab (bad input) print their message and exit 2; a failed check exits 1; no traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import typer
from rich.console import Console
from rich.markup import escape

from servelab.errors import ServelabError

app = typer.Typer(
    name="servelab",
    help="Benchmark LLM serving deployments on real work (serving metrics, agents, sweeps, a simulator).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

err_console = Console(stderr=True)


# Command modules: each has ``register(app)`` (top-level commands) or ``app`` (a sub-command group).
_COMMANDS = ("run_cmd", "show_cmd", "profiles_cmd", "replay_cmd", "sweep_cmd", "compare_cmd", "report_cmd",
             "accuracy_cmd", "gateway_cmd")
_GROUPS = (("sim_cmd", "sim"), ("trace_cmd", "trace"))


def _register() -> None:
    for name in _COMMANDS:
        if importlib.util.find_spec(f"servelab.cli.{name}") is not None:
            importlib.import_module(f"servelab.cli.{name}").register(app)
    for name, group in _GROUPS:
        if importlib.util.find_spec(f"servelab.cli.{name}") is not None:
            app.add_typer(importlib.import_module(f"servelab.cli.{name}").app, name=group)


_register()


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    saved_argv = sys.argv
    sys.argv = ["servelab", *args]  # commands record sys.argv in the manifest: the one given here
    try:
        return _invoke(args)
    finally:
        sys.argv = saved_argv


def _invoke(args: list[str]) -> int:
    try:
        app(args=args, prog_name="servelab", standalone_mode=False)
    except ServelabError as e:
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    except Exception as e:
        # Usage errors from the command-line parser (typer ships its own copy of click, so match by shape).
        if type(e).__name__ == "Abort":
            return 130
        if hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int):
            e.show()
            return 2 if e.exit_code not in (0, 1) else e.exit_code
        raise
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
