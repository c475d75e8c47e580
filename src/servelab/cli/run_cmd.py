"""`servelab run`: one benchmark run against an endpoint or the simulator."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from servelab.cli.options import build_run_config


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def run(
    target: Annotated[Optional[str], typer.Option(help="OpenAI-compatible base URL (http://127.0.0.1:8000/v1) or "
                                                  "a simulator: sim, sim:MODEL@COUNTxHW[,k=v...], sim:FILE.yaml.")] = None,
    model: Annotated[Optional[str], typer.Option(help="Model name (default: the first the server lists).")] = None,
    api: Annotated[Optional[str], typer.Option(help="chat or completions.")] = None,
    concurrency: Annotated[Optional[int], typer.Option(help="Closed loop: concurrent users.")] = None,
    rate: Annotated[Optional[float], typer.Option(help="Open loop: requests per second.")] = None,
    arrival: Annotated[Optional[str], typer.Option(help="poisson, gamma or constant.")] = None,
    burstiness: Annotated[Optional[float], typer.Option(help="Gamma shape (1 = Poisson, <1 burstier).")] = None,
    requests: Annotated[Optional[int], typer.Option(help="Requests to send.")] = None,
    duration: Annotated[Optional[float], typer.Option(help="Seconds to send for.")] = None,
    warmup: Annotated[Optional[int], typer.Option(help="First N requests excluded from figures.")] = None,
    input_tokens: Annotated[Optional[int], typer.Option(help="Prompt tokens per request.")] = None,
    output_tokens: Annotated[Optional[int], typer.Option(help="Output tokens (max_tokens) per request.")] = None,
    ignore_eos: Annotated[Optional[bool], typer.Option("--ignore-eos", help="Force output lengths.")] = None,
    stream: Annotated[Optional[bool], typer.Option("--stream/--no-stream", help="Stream responses (SSE).")] = None,
    api_key_env: Annotated[Optional[str], typer.Option(help="Env var holding the API key (never stored).")] = None,
    header: Annotated[Optional[list[str]], typer.Option(help="Extra header 'Name: value' (repeatable).")] = None,
    tokenizer: Annotated[Optional[str], typer.Option(help="Local tokenizer.json for prompt lengths.")] = None,
    think_time: Annotated[Optional[float], typer.Option(help="Closed loop pause between requests, s.")] = None,
    slo_ttft_ms: Annotated[Optional[float], typer.Option(help="Goodput SLO on TTFT, ms.")] = None,
    slo_itl_ms: Annotated[Optional[float], typer.Option(help="Goodput SLO on mean ITL, ms.")] = None,
    slo_tpot_ms: Annotated[Optional[float], typer.Option(help="Goodput SLO on TPOT, ms.")] = None,
    slo_e2e_ms: Annotated[Optional[float], typer.Option(help="Goodput SLO on end-to-end latency, ms.")] = None,
    profile: Annotated[Optional[str], typer.Option(help="Agent/workload profile (see `servelab profiles`).")] = None,
    sessions: Annotated[Optional[int], typer.Option(help="Closed loop: concurrent sessions of the profile.")] = None,
    session_rate: Annotated[Optional[float], typer.Option(help="Open loop: new sessions per second.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed: same seed, same requests.")] = None,
    out: Annotated[Optional[str], typer.Option(help="Directory in which the run directory is created.")] = None,
    name: Annotated[Optional[str], typer.Option(help="Run name (part of the directory name).")] = None,
    config: Annotated[Optional[str], typer.Option("--config", help="YAML config file.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print summary.json instead of the table.")] = False,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Write report.html.")] = True,
) -> None:
    """Run one benchmark and print its summary."""
    from servelab.bench.run import execute
    from servelab.cli.present import finish_run

    flags = dict(locals())
    if profile is not None or sessions is not None or session_rate is not None:
        from servelab.cli.sessions import build_session_config

        cfg = build_session_config(config, flags)
    else:
        cfg = build_run_config(config, flags)
    result = execute(cfg, argv=["servelab", *sys.argv[1:]], progress=not json_out, report=report)
    finish_run(result, json_out=json_out)
