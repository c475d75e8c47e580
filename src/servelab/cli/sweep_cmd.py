"""`servelab sweep`: the run flags plus list values; one run directory per point, sweep.json, the knee."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Console

from servelab.cli import flags


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)


def sweep(
    # The run flags, from cli/flags.py (one declaration, run's help); each applies to every point.
    target: flags.TargetList = None,
    model: flags.Model = None,
    api: flags.Api = None,
    concurrency: flags.ConcurrencyLevels = None,
    rate: flags.RateLevels = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="KEY=V1,V2,... for any config key (dotted) or simulator/server key (repeatable)."
        ),
    ] = None,
    profile: flags.Profile = None,
    gpu_hour_usd: flags.GpuHourUsd = None,
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
    slo_ttft_ms: flags.SloTtft = None,
    slo_itl_ms: flags.SloItl = None,
    slo_e2e_ms: flags.SloE2e = None,
    # The sweep's own flags.
    server_cmd: Annotated[
        str | None,
        typer.Option(
            help="Server command template started per point, e.g. "
            "'vllm serve {model} --max-num-seqs {max_num_seqs}'."
        ),
    ] = None,
    health_url: Annotated[
        str | None, typer.Option(help="URL that answers 200 when the server is ready.")
    ] = None,
    startup_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for the server to be healthy.")
    ] = 600.0,
    accuracy: Annotated[
        int | None,
        typer.Option(
            help="Run N held-out answer items at every new serving setup "
            "(dtype/precision, engine, server command) and flag quality drops."
        ),
    ] = None,
    budget: Annotated[float | None, typer.Option(help="Time budget for the whole sweep, seconds.")] = None,
    resume: Annotated[str | None, typer.Option(help="Resume the sweep in this directory.")] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="With --resume: resume even when the target, workload or grid differ from the stored sweep.",
        ),
    ] = False,
    seed: flags.Seed = None,
    out: flags.Out = None,
    name: flags.Name = None,
    config: flags.ConfigFile = None,
    json_out: flags.JsonOut = False,
    report: flags.Report = True,
    parallel: flags.Parallel = None,
    ray: flags.Ray = None,
) -> None:
    """Run the benchmark over a grid of load levels and settings; find the knee.

    Each point is one run: the run flags (--requests, --duration, --warmup, ...) apply to every point.
    """
    from servelab.cli.options import config_data
    from servelab.errors import ConfigError
    from servelab.sweep.grid import DEFAULT_CONCURRENCY, parse_list, parse_set
    from servelab.sweep.runner import AccuracySpec, ServerSpec, SweepSpec, run_sweep

    given = dict(locals())
    given.update(target=None, concurrency=None, rate=None)
    base = config_data(config, given)
    axes: dict[str, list] = {}
    if target and len(target) > 1:
        axes["target"] = list(target)
    elif target:
        base.setdefault("target", {})["url"] = target[0]
    axes.update(parse_set(set_ or []))
    if concurrency and rate:
        raise ConfigError("give --concurrency or --rate levels, not both")
    if rate:
        axes["rate"] = parse_list(rate, "--rate")
    elif concurrency:
        axes["concurrency"] = parse_list(concurrency, "--concurrency")
    elif "load.rate" not in axes and "load.concurrency" not in axes:
        axes["concurrency"] = list(DEFAULT_CONCURRENCY)
    server = None
    if server_cmd:
        if not health_url:
            raise ConfigError("--server-cmd needs --health-url", hint="e.g. --health-url http://127.0.0.1:8000/health")
        server = ServerSpec(server_cmd, health_url, startup_timeout)
    spec = SweepSpec(
        base=base,
        axes=axes,
        out=out or base.get("out", "runs"),
        name=name,
        server=server,
        budget_s=budget,
        resume_dir=Path(resume) if resume else None,
        force=force,
        argv=["servelab", *sys.argv[1:]],
        report=report,
        report_writer=_sweep_report_writer(),
        accuracy=AccuracySpec(n=accuracy, seed=seed or 0) if accuracy else None,
        parallel=_parallel(parallel),
        ray_address=None if ray is None else ("" if ray == "local" else ray),
    )
    err = Console(stderr=True, soft_wrap=True, highlight=False)
    sweep_dir, state = run_sweep(spec, say=lambda s: err.print(s, highlight=False, markup=False))
    if state.get("decision"):  # the decision table beside sweep.json
        from servelab.report.sweep_table import decision_csv

        (sweep_dir / "decision.csv").write_text(decision_csv(state["decision"]))
    if json_out:
        sys.stdout.write(orjson.dumps(state, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        from servelab.cli.present import wide_console
        from servelab.report.sweep_table import render_sweep

        render_sweep(state, wide_console())
    err.print(f"sweep written to {sweep_dir}")
    from servelab.cli.verdict import sweep_verdict

    sweep_verdict(state, str(sweep_dir))


def _parallel(n: int | None) -> int:
    from servelab.errors import ConfigError

    if n is not None and n < 1:
        raise ConfigError(f"--parallel {n}: needs at least 1 point at a time", hint="e.g. --parallel 2")
    return n or 1


def _sweep_report_writer():
    """report.html's writer for the sweep (cli wires it: sweep does not import report)."""
    from servelab.report.html import write_sweep_report

    return write_sweep_report
