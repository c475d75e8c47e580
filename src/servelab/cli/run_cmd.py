"""`servelab run`: one benchmark run against an endpoint or the simulator."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from servelab.cli.options import build_run_config


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def run(
    target: Annotated[str | None, typer.Option(help="OpenAI-compatible base URL (http://127.0.0.1:8000/v1) or "
                                                  "a simulator: sim, sim:MODEL@COUNTxHW[,k=v...], sim:FILE.yaml.")] = None,
    model: Annotated[str | None, typer.Option(help="Model name (default: the first the server lists).")] = None,
    api: Annotated[str | None, typer.Option(help="chat or completions.")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Closed loop: concurrent users.")] = None,
    rate: Annotated[float | None, typer.Option(help="Open loop: requests per second.")] = None,
    arrival: Annotated[str | None, typer.Option(help="poisson, gamma or constant.")] = None,
    burstiness: Annotated[float | None, typer.Option(help="Gamma shape (1 = Poisson, <1 burstier).")] = None,
    requests: Annotated[int | None, typer.Option(help="Requests to send.")] = None,
    duration: Annotated[float | None, typer.Option(help="Seconds to send for.")] = None,
    warmup: Annotated[int | None, typer.Option(help="First N requests excluded from figures.")] = None,
    input_tokens: Annotated[int | None, typer.Option(help="Prompt tokens per request.")] = None,
    output_tokens: Annotated[int | None, typer.Option(help="Output tokens (max_tokens) per request.")] = None,
    ignore_eos: Annotated[bool | None, typer.Option("--ignore-eos", help="Force output lengths.")] = None,
    stream: Annotated[bool | None, typer.Option("--stream/--no-stream", help="Stream responses (SSE).")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="Env var holding the API key (never stored).")] = None,
    header: Annotated[list[str] | None, typer.Option(help="Extra header 'Name: value' (repeatable).")] = None,
    tokenizer: Annotated[str | None, typer.Option(help="Local tokenizer.json for prompt lengths.")] = None,
    think_time: Annotated[float | None, typer.Option(help="Closed loop pause between requests, s.")] = None,
    slo_ttft_ms: Annotated[float | None, typer.Option(help="Goodput SLO on TTFT, ms.")] = None,
    slo_itl_ms: Annotated[float | None, typer.Option(help="Goodput SLO on mean ITL, ms.")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="Goodput SLO on TPOT, ms.")] = None,
    slo_e2e_ms: Annotated[float | None, typer.Option(help="Goodput SLO on end-to-end latency, ms.")] = None,
    profile: Annotated[str | None, typer.Option(help="Agent/workload profile (see `servelab profiles`).")] = None,
    sessions: Annotated[int | None, typer.Option(help="Closed loop: concurrent sessions of the profile.")] = None,
    session_rate: Annotated[float | None, typer.Option(help="Open loop: new sessions per second.")] = None,
    max_sessions: Annotated[int | None, typer.Option(help="Agent runs: sessions to start in all.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed: same seed, same requests.")] = None,
    out: Annotated[str | None, typer.Option(help="Directory in which the run directory is created.")] = None,
    name: Annotated[str | None, typer.Option(help="Run name (part of the directory name).")] = None,
    config: Annotated[str | None, typer.Option("--config", help="YAML config file.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print summary.json instead of the table.")] = False,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Write report.html.")] = True,
) -> None:
    """Run one benchmark and print its summary."""
    from servelab.bench.run import execute
    from servelab.cli.present import finish_run

    flags = dict(locals())
    cfg = build_run_config(config, flags)
    result = execute(cfg, argv=["servelab", *sys.argv[1:]], progress=not json_out, report=report)
    finish_run(result, json_out=json_out)
