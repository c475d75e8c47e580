"""`servelab replay`: send a recorded trace again, on its own schedule, and measure how the target did."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from servelab.cli import flags
from servelab.cli.trace_cmd import FORMAT_HELP, normalize_format, parse_options

# flags of `run` that mean the same here (the rest are replay's own: --rate is the trace's rate)
_SHARED = ("target", "model", "api", "stream", "api_key_env", "tokenizer", "header", "warmup", "seed", "out",
           "name", "slo_ttft_ms", "slo_itl_ms", "slo_tpot_ms", "slo_e2e_ms")


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)


def replay(
    trace: Annotated[
        str,
        typer.Argument(
            help="The trace file (claude-code: also a directory or glob; servelab: a run directory)."
        ),
    ],
    format: Annotated[str | None, typer.Option("--format", "-f", help=FORMAT_HELP)] = None,
    speed: Annotated[
        float | None, typer.Option(help="Play the trace this many times faster (default 1).")
    ] = None,
    rate: flags.Rate = None,
    start: Annotated[float | None, typer.Option(help="Window start, seconds into the trace.")] = None,
    duration: flags.Duration = None,
    sample: Annotated[
        float | None,
        typer.Option(help="Keep this random fraction in (0, 1] (whole sessions; arrival times kept)."),
    ] = None,
    max_requests: Annotated[
        int | None, typer.Option(help="Keep at most this many requests (whole sessions).")
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(help="Untimed traces (mt-bench) without --rate: sessions run by N concurrent users."),
    ] = None,
    option: Annotated[
        list[str] | None,
        typer.Option(help="Loader option key=value (repeatable), e.g. stagger_s=30 (claude-code)."),
    ] = None,
    no_ignore_eos: Annotated[
        bool,
        typer.Option(
            "--no-ignore-eos",
            help="Let the server end responses early instead of forcing the trace's output lengths.",
        ),
    ] = False,
    target: flags.Target = None,
    model: flags.Model = None,
    api: flags.Api = None,
    stream: flags.Stream = None,
    api_key_env: flags.ApiKeyEnv = None,
    header: flags.Header = None,
    tokenizer: flags.Tokenizer = None,
    warmup: Annotated[int | None, typer.Option(help="First N units (requests or sessions) excluded.")] = None,
    slo_ttft_ms: flags.SloTtft = None,
    slo_itl_ms: flags.SloItl = None,
    slo_tpot_ms: flags.SloTpot = None,
    slo_e2e_ms: flags.SloE2e = None,
    seed: Annotated[int | None, typer.Option(help="Seed of --sample and of the prompt text.")] = None,
    out: flags.Out = None,
    name: flags.Name = None,
    config: flags.ConfigFile = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print summary.json instead of the table.")
    ] = False,
    report: flags.Report = True,
) -> None:
    """Replay a trace against a target and print the summary, with the replay's fidelity to the trace."""
    from servelab.bench.run import execute
    from servelab.cli.present import finish_run

    given = dict(locals())
    workload = {
        "kind": "replay", "path": trace, "format": normalize_format(format), "speed": speed, "rate": rate,
        "start_s": start, "duration_s": duration, "sample": sample, "max_requests": max_requests,
        "options": parse_options(option),
    }
    if no_ignore_eos:
        workload["ignore_eos"] = False
    cfg = build_replay_config(config, given, workload, concurrency)
    from servelab.cli.context import print_context

    print_context(cfg)
    result = execute(cfg, argv=["servelab", *sys.argv[1:]], progress=not json_out, report=report)
    try:
        finish_run(result, json_out=json_out)
    finally:
        if not json_out:
            print_replay(result.summary.get("replay"))


def build_replay_config(config_file: str | None, flags: dict[str, Any], workload: dict[str, Any],
                        concurrency: int | None) -> Any:
    """The RunConfig: the file, then the shared flags, then the replay workload (flag > file > default)."""
    from servelab.cli.options import config_data
    from servelab.config import RunConfig, validate

    data = config_data(config_file, {k: flags.get(k) for k in _SHARED})
    file_w = data.get("workload") if isinstance(data.get("workload"), dict) else {}
    base = dict(file_w) if file_w.get("kind") == "replay" else {}
    # one excludes the other: a flag replaces the file's
    for flag, other in (("speed", "rate"), ("rate", "speed")):
        if workload[flag] is not None and workload[other] is None:
            base.pop(other, None)
    base.update({k: v for k, v in workload.items() if v is not None and v != {}})
    data["workload"] = base
    if concurrency is not None:
        load = data["load"] if isinstance(data.get("load"), dict) else {}
        load.pop("rate", None)
        load["concurrency"] = concurrency
        data["load"] = load
    return validate(RunConfig, data, source=config_file or "flags")


def print_replay(rep: dict[str, Any] | None) -> None:
    """The replay's fidelity: trace against achieved arrivals, and prefix-cache reuse."""
    if not rep:
        return
    from rich.console import Console
    from rich.table import Table

    from servelab.report.terminal import fmt

    t = Table(title=f"replay of {rep['format']} trace {rep['source']}"
              + (f" at {fmt(rep['speed'])}x" if rep.get("speed") else ""), title_justify="left")
    for col in ("", "trace", "achieved"):
        t.add_column(col, justify="left" if not col else "right")
    t.add_row("requests", fmt(rep["trace_requests"]), fmt(rep["requests"]))
    t.add_row("rate, req/s", fmt(rep["trace_rate"]), fmt(rep["achieved_rate"]))
    t.add_row("inter-arrival CV", fmt(rep["trace_cv"]), fmt(rep["achieved_cv"]))
    t.add_row("schedule lag p99, ms", "", fmt(rep["lag_ms_p99"]))
    ks = rep.get("ks")
    if ks:
        t.add_row("KS statistic of gaps (p-value)", "", f"{fmt(ks['statistic'])} ({fmt(ks['pvalue'])})")
    if rep.get("trace_prefix_reuse") is not None or rep.get("cached_fraction"):
        reuse, cached = rep.get("trace_prefix_reuse"), rep.get("cached_fraction")
        t.add_row("prefix reuse / cached", "-" if reuse is None else f"{reuse:.1%}",
                  "-" if cached is None else f"{cached:.1%}")
    Console().print(t)
