"""`servelab gateway-overhead`: the same workload straight to a server and through a gateway in front of it.

Both sides use one config (same seed, so the same requests in the same order) but for the target URL; the
server's metrics are scraped from the direct URL in both, so the scrape itself does not differ. Output
lengths are forced identical (``ignore_eos``, the same seeded ``max_tokens``) and checked afterwards: e2e
and ITL move with the length, so different lengths would compare different work. A priming run goes first
(``--no-prime`` skips it) so that the measured runs meet the same warm server. The measured runs are
interleaved A B B A (``--repeats`` pairs: direct, via, via, direct, direct, via...), so a drift of the
server over time falls on both sides alike; each side's repetitions are pooled.

Writes ``OUT/<stamp>-gateway/{prime,direct-1,via-1,via-2,direct-2...}/`` (ordinary run directories) and
``gateway.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from servelab.cli import flags


def register(app: typer.Typer) -> None:
    app.command("gateway-overhead")(gateway_overhead)


def build_pair(config: str | None, flags: dict[str, Any], direct: str, via: str) -> tuple[Any, Any]:
    """The two run configs: identical but for ``target.url`` (both scrape the direct server's metrics),
    with ``ignore_eos`` forced so both sides generate the same output lengths."""
    from servelab.cli.options import build_run_config
    from servelab.errors import ConfigError
    from servelab.telemetry.sources import metrics_url_for

    cfgs = [build_run_config(config, {**flags, "target": url}) for url in (direct, via)]
    for cfg, which in zip(cfgs, ("--direct", "--via"), strict=True):
        if cfg.target.is_sim:
            raise ConfigError(
                f"{which} must be an http(s) URL, got the simulator target {cfg.target.url!r}",
                hint="serve the simulator with `servelab sim serve` and put the gateway in front",
            )
    if cfgs[0].target.url == cfgs[1].target.url:
        raise ConfigError(f"--direct and --via are the same URL ({cfgs[0].target.url})",
                          hint="--via is the gateway's URL, --direct the server behind it")
    if not hasattr(cfgs[0].workload, "ignore_eos"):
        raise ConfigError(
            f"gateway-overhead needs a workload with fixed output lengths (requests or replay), "
            f"got kind {cfgs[0].workload.kind!r}",
            hint="use --input-tokens/--output-tokens or a trace replay",
        )
    metrics = cfgs[0].telemetry.metrics_url or metrics_url_for(cfgs[0].target.url)
    return tuple(c.model_copy(update={"telemetry": c.telemetry.model_copy(update={"metrics_url": metrics}),
                                      "workload": c.workload.model_copy(update={"ignore_eos": True})})
                 for c in cfgs)  # type: ignore[return-value]


def abba(pairs: int) -> list[str]:
    """The measured runs' order: pairs of (direct, via) alternating in direction, A B B A A B..."""
    order: list[str] = []
    for i in range(pairs):
        order += ["direct", "via"] if i % 2 == 0 else ["via", "direct"]
    return order


def measure(cfg_direct: Any, cfg_via: Any, *, prime: bool, out_dir: Path, argv: list[str],
            repeats: int = 2) -> dict[str, Any]:
    """Run (prime,) then the ABBA sequence; returns the overhead analysis with the run directories."""
    from servelab.analysis.gateway import gateway_overhead, output_lengths
    from servelab.bench.run import execute
    from servelab.records.rundir import read_run

    cfgs = {"direct": cfg_direct, "via": cfg_via}
    runs: dict[str, Any] = {}
    tables: dict[str, list[Any]] = {"direct": [], "via": []}
    plan = ([("prime", "direct")] if prime else [])
    seen = {"direct": 0, "via": 0}
    for role in abba(repeats):
        seen[role] += 1
        plan.append((f"{role}-{seen[role]}", role))
    for name, role in plan:
        run_dir = out_dir / name
        run_dir.mkdir()
        runs[name] = execute(cfgs[role], argv=argv, report=False, run_dir=run_dir,
                             manifest_extra={"gateway": {"role": role, "run": name, "pair": out_dir.name,
                                                         "order": [n for n, _ in plan]}})
        if name != "prime":
            tables[role].append(read_run(runs[name].run_dir).requests)
    result = gateway_overhead(
        tables["direct"], tables["via"], mode=cfg_direct.load.mode, seed=cfg_direct.seed
    )
    result["output_lengths"] = output_lengths(tables["direct"], tables["via"])
    result["order"] = [n for n, _ in plan]
    result["runs"] = {name: str(r.run_dir) for name, r in runs.items()}
    result["targets"] = {"direct": cfg_direct.target.url, "via": cfg_via.target.url}
    result["primed"] = prime
    result["stopped_by"] = {name: r.outcome.stopped_by for name, r in runs.items()}
    return result


def gateway_overhead(
    direct: Annotated[str, typer.Option(help="The server's own base URL (http://127.0.0.1:8000/v1).")],
    via: Annotated[str, typer.Option(help="The gateway's base URL in front of the same server.")],
    model: flags.Model = None,
    api: flags.Api = None,
    concurrency: flags.Concurrency = None,
    rate: flags.Rate = None,
    arrival: flags.Arrival = None,
    requests: Annotated[int | None, typer.Option(help="Requests per run.")] = None,
    duration: Annotated[float | None, typer.Option(help="Seconds to send for, per run.")] = None,
    warmup: Annotated[int | None, typer.Option(help="First N requests of each run excluded.")] = None,
    input_tokens: flags.InputTokens = None,
    output_tokens: flags.OutputTokens = None,
    ignore_eos: flags.IgnoreEos = None,
    stream: flags.Stream = None,
    api_key_env: flags.ApiKeyEnv = None,
    header: flags.Header = None,
    seed: Annotated[int | None, typer.Option(help="Seed: both runs send the same requests.")] = None,
    out: Annotated[
        str | None, typer.Option(help="Directory in which the pair's directory is created.")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Name (part of the directory name).")] = None,
    config: Annotated[
        str | None,
        typer.Option("--config", help="YAML config file (its target.url is replaced by --direct / --via)."),
    ] = None,
    prime: Annotated[
        bool, typer.Option("--prime/--no-prime", help="Warm the server with one unmeasured run first.")
    ] = True,
    repeats: Annotated[
        int,
        typer.Option(
            min=1,
            max=50,
            help="Measured (direct, via) pairs, interleaved A B B A (2 pairs: direct, via, via, direct).",
        ),
    ] = 2,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print gateway.json instead of the table.")
    ] = False,
) -> None:
    """Measure what a gateway adds: TTFT, ITL, e2e and throughput overhead with bootstrap intervals."""
    from servelab.records.rundir import create_run_dir, write_json

    given = {k: v for k, v in locals().items()
             if k not in ("direct", "via", "prime", "json_out", "config", "repeats")}
    cfg_direct, cfg_via = build_pair(config, given, direct, via)
    out_dir = create_run_dir(cfg_direct.out, cfg_direct.name or "gateway")
    result = measure(cfg_direct, cfg_via, prime=prime, out_dir=out_dir, argv=["servelab", *sys.argv[1:]],
                     repeats=repeats)
    write_json(out_dir / "gateway.json", result)
    if json_out:
        import orjson

        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print(result)
    typer.echo(f"gateway comparison written to {out_dir}", err=True)


def _fmt(v: float | None) -> str:
    from servelab.report.words import sig

    return "n/a" if v is None else sig(v)


_WORDS = {"ttft": "time to first token", "itl": "inter-token latency", "e2e": "end-to-end latency"}


def _figure(figure: str) -> str:
    """'ttft p50' -> 'time to first token p50'."""
    key, _, rest = figure.partition(" ")
    return f"{_WORDS[key]} {rest}".strip() if key in _WORDS else figure


def _print(result: dict[str, Any]) -> None:
    from rich.table import Table

    t = Table(title=f"gateway overhead: {result['targets']['via']} in front of {result['targets']['direct']} "
                    f"({100 * result['confidence']:g}% bootstrap intervals)", title_justify="left")
    for col in ("figure", "direct", "via", "overhead", "interval", "overhead %", "interval %", "verdict"):
        t.add_column(col, justify="left" if col in ("figure", "verdict") else "right")
    for r in result["rows"]:
        unit = r["unit"]
        t.add_row(f"{_figure(r['figure'])} ({unit})", _fmt(r["direct"]), _fmt(r["via"]), _fmt(r["overhead"]),
                  f"[{_fmt(r['overhead_lo'])}, {_fmt(r['overhead_hi'])}]", _fmt(r["overhead_pct"]),
                  f"[{_fmt(r['pct_lo'])}, {_fmt(r['pct_hi'])}]", r["verdict"])
    from servelab.cli.present import wide_console

    console = wide_console()
    console.print(t)
    f = result["failures"]
    console.print(f"failed requests: direct {f['direct']['failed']}/{f['direct']['requests']}, "
                  f"via {f['via']['failed']}/{f['via']['requests']}. Throughput overhead is the share lost. "
                  f"Order: {', '.join(result['order'])}.", highlight=False)
    lengths = result["output_lengths"]
    if not lengths["identical"]:
        console.print(
            f"[yellow]warning:[/] output lengths differ (direct {lengths['direct_tokens']:,} tokens, via "
            f"{lengths['via_tokens']:,}): the server did not honour ignore_eos/max_tokens or requests "
            "failed, so e2e and ITL compare different work",
            highlight=False,
        )
    for r in result["rows"]:
        if r.get("note") and "drift" in r["note"]:
            console.print(f"note: {_figure(r['figure'])}: {r['note']}", highlight=False)
