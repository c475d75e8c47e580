"""`servelab run`: one benchmark run against an endpoint or the simulator."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from servelab.cli import flags
from servelab.cli.options import build_run_config


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def run(
    target: flags.Target = None,
    model: flags.Model = None,
    api: flags.Api = None,
    concurrency: flags.Concurrency = None,
    rate: flags.Rate = None,
    arrival: flags.Arrival = None,
    burstiness: flags.Burstiness = None,
    requests: flags.Requests = None,
    duration: flags.Duration = None,
    warmup: flags.Warmup = None,
    input_tokens: flags.InputTokens = None,
    output_tokens: flags.OutputTokens = None,
    ignore_eos: flags.IgnoreEos = None,
    stream: flags.Stream = None,
    api_key_env: flags.ApiKeyEnv = None,
    header: flags.Header = None,
    tokenizer: flags.Tokenizer = None,
    idle_timeout: flags.IdleTimeout = None,
    max_response_bytes: flags.MaxResponseBytes = None,
    allow_over_context: flags.AllowOverContext = None,
    think_time: Annotated[float | None, typer.Option(help="Closed loop pause between requests, s.")] = None,
    slo_ttft_ms: flags.SloTtft = None,
    slo_itl_ms: flags.SloItl = None,
    slo_tpot_ms: flags.SloTpot = None,
    slo_e2e_ms: flags.SloE2e = None,
    profile: flags.Profile = None,
    sessions: Annotated[
        int | None, typer.Option(help="Closed loop: concurrent sessions of the profile.")
    ] = None,
    session_rate: Annotated[float | None, typer.Option(help="Open loop: new sessions per second.")] = None,
    max_sessions: Annotated[int | None, typer.Option(help="Agent runs: sessions to start in all.")] = None,
    mix: Annotated[
        str | None,
        typer.Option(
            help="Mixed traffic on one endpoint: classes run at once, "
            "NAME:USERS or NAME@SESSIONS_PER_S, comma-separated (e.g. "
            "chat:16,batch-summarize:64); figures per class.",
            metavar="CLASSES",
        ),
    ] = None,
    mix_baseline: Annotated[
        bool | None,
        typer.Option(
            "--mix-baseline/--no-mix-baseline",
            help="With 2+ classes, also run the first class alone and report interference (default: on).",
        ),
    ] = None,
    gpu_hour_usd: flags.GpuHourUsd = None,
    gpus: Annotated[
        int | None, typer.Option(help="Cost: GPUs held (default: the simulator's count, else 1).")
    ] = None,
    seed: flags.Seed = None,
    out: flags.Out = None,
    name: flags.Name = None,
    config: flags.ConfigFile = None,
    json_out: flags.JsonOut = False,
    report: flags.Report = True,
    workers: flags.Workers = None,
    ray: flags.Ray = None,
) -> None:
    """Run one benchmark and print its summary."""
    from servelab.bench.run import execute
    from servelab.cli.context import print_context
    from servelab.cli.present import finish_run
    from servelab.cli.scale import executor_from_flags

    given = {k: v for k, v in locals().items() if k not in ("workers", "ray")}
    cfg = build_run_config(config, given)
    print_context(cfg)
    if cfg.mix:
        from servelab.bench.mix_run import execute_mix

        result = execute_mix(cfg, argv=["servelab", *sys.argv[1:]], progress=not json_out, report=report,
                             executor=executor_from_flags(workers, ray))
    else:
        result = execute(cfg, argv=["servelab", *sys.argv[1:]], progress=not json_out, report=report,
                         executor=executor_from_flags(workers, ray))
    finish_run(result, json_out=json_out)
