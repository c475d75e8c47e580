"""The flags commands share, declared once (same names, types and help everywhere; sweep's list-valued
forms of --target, --concurrency and --rate are declared here too, see SWEEP_LISTS)."""

from __future__ import annotations

from typing import Annotated

import typer

_TARGET_HELP = (
    "OpenAI-compatible base URL (http://127.0.0.1:8000/v1) or a simulator: sim:MODEL@COUNTxHW[,k=v...], "
    "sim:FILE.yaml (plain sim: a tiny test model)."
)
_CONCURRENCY_HELP = "Closed loop: concurrent users."
_RATE_HELP = "Open loop: requests per second."
_DEFAULT_TARGET = "sim:llama-3.1-8b@1xh100"

Target = Annotated[
    str | None,
    typer.Option(help=_TARGET_HELP, show_default=_DEFAULT_TARGET, metavar="URL|SIM"),
]
Model = Annotated[str | None, typer.Option(help="Model name (default: the first the server lists).")]
Api = Annotated[str | None, typer.Option(help="chat or completions.", show_default="chat", metavar="API")]
Concurrency = Annotated[int | None, typer.Option(help=_CONCURRENCY_HELP, show_default="16 when no --rate",
                                                  metavar="N")]
Rate = Annotated[float | None, typer.Option(help=_RATE_HELP, metavar="REQ/S")]
Arrival = Annotated[str | None, typer.Option(help="Open-loop arrivals: poisson, gamma or constant.",
                                              show_default="poisson", metavar="KIND")]
Burstiness = Annotated[
    float | None,
    typer.Option(help="Gamma shape (1 = Poisson, <1 burstier).", show_default="1", metavar="SHAPE"),
]
Requests = Annotated[int | None, typer.Option(help="Requests to send.",
                                               show_default="max(200, 4 x users) unless --duration",
                                               metavar="N")]
Duration = Annotated[float | None, typer.Option(help="Seconds to send for.", metavar="S")]
Warmup = Annotated[int | None, typer.Option(help="First N requests excluded from figures.", show_default="0",
                                             metavar="N")]
InputTokens = Annotated[int | None, typer.Option(help="Prompt tokens per request.", show_default="1024",
                                                  metavar="TOKENS")]
OutputTokens = Annotated[int | None, typer.Option(help="Output tokens (max_tokens) per request.",
                                                   show_default="256", metavar="TOKENS")]
IgnoreEos = Annotated[bool | None, typer.Option("--ignore-eos", help="Force output lengths.")]
Stream = Annotated[bool | None, typer.Option("--stream/--no-stream", help="Stream responses (SSE).",
                                            show_default="stream")]
ApiKeyEnv = Annotated[str | None, typer.Option(help="Env var holding the API key (never stored).")]
Header = Annotated[list[str] | None, typer.Option(help="Extra header 'Name: value' (repeatable).")]
AllowOverContext = Annotated[
    bool | None,
    typer.Option(
        "--allow-over-context",
        help="Send prompts + outputs longer than the served max_model_len anyway (default: refuse, exit 2).",
    ),
]
Tokenizer = Annotated[str | None, typer.Option(help="Local tokenizer.json for prompt lengths.")]
IdleTimeout = Annotated[
    float | None,
    typer.Option(
        help="Inter-token idle timeout, s: a stream quiet this long "
        "after a token ends as `timeout` (default 60)."
    ),
]
MaxResponseBytes = Annotated[
    int | None,
    typer.Option(
        help="Per-response byte cap: a bigger response is cut and recorded `malformed` (default 64 MiB)."
    ),
]
SloTtft = Annotated[float | None, typer.Option(help="Goodput SLO on TTFT, ms.")]
SloItl = Annotated[float | None, typer.Option(help="Goodput SLO on mean ITL, ms.")]
SloTpot = Annotated[float | None, typer.Option(help="Goodput SLO on TPOT, ms.")]
SloE2e = Annotated[float | None, typer.Option(help="Goodput SLO on end-to-end latency, ms.")]
Seed = Annotated[
    int | None, typer.Option(help="Seed: same seed, same requests.", show_default="0", metavar="N")
]
Out = Annotated[str | None, typer.Option(help="Directory in which the run (or sweep) directory is created.",
                                          show_default="runs", metavar="DIR")]
Name = Annotated[str | None, typer.Option(help="Run (or sweep) name (part of the directory name).")]
ConfigFile = Annotated[str | None, typer.Option("--config", help="YAML config file (keys: docs/config.md; "
                                                 "`servelab config init` writes one).", metavar="FILE")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print the JSON result instead of the table.")]
Report = Annotated[bool, typer.Option("--report/--no-report", help="Write report.html.")]
Profile = Annotated[str | None, typer.Option(help="Agent/workload profile (see `servelab profiles`).")]
GpuHourUsd = Annotated[
    float | None,
    typer.Option(help="Cost: price of one GPU-hour, USD (cost per successful task, priced at the GPUs each "
                 "target holds)."),
]
Workers = Annotated[
    str | None,
    typer.Option(
        help="Worker processes that drive the load together: N, or auto "
        "(one per core). Default 1 (this process). With --ray: Ray shards."
    ),
]
Ray = Annotated[str | None, typer.Option("--ray", help="Run on Ray: --ray starts a local Ray cluster, --ray "
                                         "ADDRESS joins one (auto, or ray://HEAD:10001).")]
Parallel = Annotated[
    int | None,
    typer.Option(
        help="Sweep points run at once, each in its own worker process "
        "(default 1). Real servers: use {port}/{gpus} in --server-cmd."
    ),
]

# `sweep`'s list-valued forms of three run flags: same name and meaning, but a sweep takes several values
# (one point each), so the type differs (a repeatable option, or a LEVELS string parsed by sweep.grid) and
# the help is run's help plus how to give the list. tests/unit/cli/test_flag_registry.py holds every other
# flag that run and sweep share to one declaration.
TargetList = Annotated[
    list[str] | None,
    typer.Option("--target", help=_TARGET_HELP + " Repeat to sweep targets.", show_default=_DEFAULT_TARGET,
                 metavar="URL|SIM"),
]
ConcurrencyLevels = Annotated[
    str | None,
    typer.Option(
        "--concurrency",
        help=_CONCURRENCY_HELP + " Levels: a list (1,4,16,64,256) or LOW..HIGH, every power of two from LOW "
        "to HIGH (1..256 = 1,2,4,...,256); with --profile, concurrent sessions.",
        show_default="1,4,16,64,256",
        metavar="LEVELS",
    ),
]
RateLevels = Annotated[
    str | None,
    typer.Option("--rate", help=_RATE_HELP + " Levels: a list (1,2,4,8) or LOW..HIGH as for --concurrency; "
                 "with --profile, new sessions per second.", metavar="LEVELS"),
]
SWEEP_LISTS = {"--target": TargetList, "--concurrency": ConcurrencyLevels, "--rate": RateLevels}

# Options whose value may be left out: a bare flag means this value (click cannot say so through typer).
OPTIONAL_VALUES = {"--ray": "local"}


def fill_optional_values(args: list[str]) -> list[str]:
    """``--ray`` given bare (last, or before another option) becomes ``--ray local``."""
    out: list[str] = []
    for i, a in enumerate(args):
        out.append(a)
        if a in OPTIONAL_VALUES and (i + 1 == len(args) or args[i + 1].startswith("-")):
            out.append(OPTIONAL_VALUES[a])
    return out

