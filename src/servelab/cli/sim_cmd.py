"""``servelab sim ...``: the simulated serving engine behind an OpenAI-compatible HTTP server."""

from __future__ import annotations

from pathlib import Path

import typer

from servelab.config.models import DEFAULT_TARGET
from servelab.errors import ConfigError

app = typer.Typer(help="The simulated serving engine.", no_args_is_help=True, add_completion=False)


@app.command("serve")
def serve_cmd(
    deployment: str = typer.Option(
        DEFAULT_TARGET,
        "--deployment",
        "-d",
        help="Simulated deployment: sim:MODEL@COUNTxHARDWARE[,k=v...], a YAML, or sim (a tiny synthetic "
        "model, for tests). The default is run's and sweep's default target.",
    ),
    host: str = typer.Option("127.0.0.1", help="Address to bind (loopback unless told otherwise)."),
    port: int = typer.Option(8000, help="TCP port (0: any free port)."),
    faults: Path | None = typer.Option(
        None, "--faults", help="YAML file of fault rates (flags override it)."
    ),
    error_rate: float | None = typer.Option(None, help="Fraction of requests answered with an HTTP error."),
    error_status: list[int] | None = typer.Option(
        None, help="HTTP status of injected errors (repeatable; 429, 500, 503...)."
    ),
    reset_rate: float | None = typer.Option(None, help="Fraction of requests whose connection is reset."),
    reset_after_chunks: int | None = typer.Option(
        None, help="Reset after N chunks (0: before the response)."
    ),
    stall_rate: float | None = typer.Option(None, help="Fraction of streams that pause mid-way."),
    stall_s: float | None = typer.Option(None, help="Length of a stall, seconds."),
    stall_after_chunks: int | None = typer.Option(
        None, help="Stall after N chunks (0: before the first token)."
    ),
    slow_first_byte_s: float | None = typer.Option(None, help="Hold the response headers back this long."),
    slow_first_byte_rate: float | None = typer.Option(
        None,
        help="Fraction of requests with a slow first byte (default 1 when --slow-first-byte-s is given).",
    ),
    malformed_rate: float | None = typer.Option(None, help="Fraction of responses with a garbage SSE chunk."),
    malformed_after_chunks: int | None = typer.Option(None, help="Garbage after N chunks."),
    truncate_rate: float | None = typer.Option(
        None, help="Fraction of streams ended without finish or [DONE]."
    ),
    truncate_after_chunks: int | None = typer.Option(None, help="Truncate after N chunks."),
    seed: int | None = typer.Option(None, help="Seed of the engine and of the fault decisions."),
) -> None:
    """Serve a simulated deployment at http://HOST:PORT/v1 until interrupted."""
    from servelab.clock import WallClock
    from servelab.sim.faults import load_faults
    from servelab.sim.server import serve

    if not 0 <= port <= 65535:
        raise ConfigError(f"--port: expected 0..65535, got {port}")
    cfg = load_faults(
        faults, seed=seed, error_rate=error_rate, error_status=tuple(error_status) if error_status else None,
        reset_rate=reset_rate, reset_after_chunks=reset_after_chunks, stall_rate=stall_rate, stall_s=stall_s,
        stall_after_chunks=stall_after_chunks, slow_first_byte_s=slow_first_byte_s,
        slow_first_byte_rate=slow_first_byte_rate, malformed_rate=malformed_rate,
        malformed_after_chunks=malformed_after_chunks, truncate_rate=truncate_rate,
        truncate_after_chunks=truncate_after_chunks,
    )
    WallClock().run(lambda: serve(deployment, host=host, port=port, faults=cfg, seed=seed or 0))
