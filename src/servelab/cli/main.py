"""The ``servelab`` command: thin typer commands that parse, build a config, call one function.

Exit codes (a contract, see docs/exit-codes.md): 0 ran and valid; 1 ran but a check failed (an SLO, a
regression, or the run is INVALID); 2 bad input or nothing trustworthy measured; 130 interrupted (what was
measured is kept and summarised). Errors print one message, never a traceback.
"""

from __future__ import annotations

import sys

try:  # Ctrl-C while the (slow) imports run: one line and exit 130, not a traceback
    import importlib
    import importlib.util

    import typer
    from rich.console import Console
    from rich.markup import escape

    from servelab.errors import Interrupted, ServelabError
except KeyboardInterrupt:  # pragma: no cover - timing dependent; see tests/e2e/test_exit_codes.py
    sys.stderr.write("interrupted\n")
    raise SystemExit(130) from None

EXIT_CODES_HELP = (
    "Exit codes: 0 ran and valid; 1 a check failed (SLO, regression) or the run is INVALID; "
    "2 bad input or nothing trustworthy measured; 130 interrupted (what was measured is kept)."
)

app = typer.Typer(
    name="servelab",
    help="Benchmark LLM serving deployments on real work (serving metrics, agents, sweeps, a simulator).\n\n"
    + EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

err_console = Console(stderr=True)


# Command modules: each has ``register(app)`` (top-level commands) or ``app`` (a sub-command group).
_COMMANDS = ("run_cmd", "show_cmd", "profiles_cmd", "replay_cmd", "sweep_cmd", "compare_cmd", "report_cmd",
             "accuracy_cmd", "gateway_cmd")
_GROUPS = (("sim_cmd", "sim"), ("trace_cmd", "trace"), ("config_cmd", "config"))


def _register() -> None:
    for name in _COMMANDS:
        if importlib.util.find_spec(f"servelab.cli.{name}") is not None:
            importlib.import_module(f"servelab.cli.{name}").register(app)
    for name, group in _GROUPS:
        if importlib.util.find_spec(f"servelab.cli.{name}") is not None:
            app.add_typer(importlib.import_module(f"servelab.cli.{name}").app, name=group)


try:
    _register()
    importlib.import_module("servelab.cli.help").polish(app)
except KeyboardInterrupt:  # pragma: no cover - timing dependent
    sys.stderr.write("interrupted\n")
    raise SystemExit(130) from None


def main(argv: list[str] | None = None) -> int:
    from servelab.cli.flags import fill_optional_values

    args = fill_optional_values(list(sys.argv[1:] if argv is None else argv))
    saved_argv = sys.argv
    sys.argv = ["servelab", *args]  # commands record sys.argv in the manifest: the one given here
    try:
        return _invoke(args)
    finally:
        sys.argv = saved_argv


def _invoke(args: list[str]) -> int:
    try:
        rv = app(args=args, prog_name="servelab", standalone_mode=False)
    except Interrupted as e:
        err_console.print(escape(_clean(str(e))), highlight=False, soft_wrap=True)
        return e.exit_code
    except ServelabError as e:
        err_console.print(f"[bold red]error:[/] {escape(_clean(str(e)))}", highlight=False, soft_wrap=True)
        return e.exit_code
    except typer.Exit as e:
        return _exit_code(e.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    except Exception as e:
        # Usage errors from the command-line parser (typer ships its own copy of click, so match by shape).
        if type(e).__name__ == "Abort":
            err_console.print("interrupted")
            return 130
        if hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int):
            e.show()
            return 2 if e.exit_code not in (0, 1) else e.exit_code
        raise
    # In non-standalone mode typer returns an Exit's code (and turns Ctrl-C into 130) instead of raising.
    return _exit_code(rv)


def _clean(message: str) -> str:
    """A message as printed: any URL's user:password hidden (secrets never reach the terminal)."""
    from servelab.records.manifest import redact_text

    return redact_text(message)


def _exit_code(rv: object) -> int:
    code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
    if code == 130:  # a bare Ctrl-C that no command handled (ours raise Interrupted, with a message)
        err_console.print("interrupted")
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
