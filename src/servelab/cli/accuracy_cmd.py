"""`servelab accuracy`: a held-out answer set against one or more targets at temperature 0."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from servelab.cli import flags


def register(app: typer.Typer) -> None:
    app.command("accuracy")(accuracy)


def _targets(urls: list[str], models: list[str] | None, api: str | None, api_key_env: str | None,
             header: list[str] | None) -> list[Any]:
    from servelab.cli.options import parse_headers
    from servelab.config import TargetConfig, validate
    from servelab.errors import ConfigError

    models = models or []
    if len(models) not in (0, 1, len(urls)):
        raise ConfigError(f"got {len(models)} --model values for {len(urls)} --target values",
                          hint="give one --model for every target, or one for all")
    out = []
    for i, url in enumerate(urls):
        data: dict[str, Any] = {"url": url}
        model = models[i] if len(models) == len(urls) else (models[0] if models else None)
        for key, value in (("model", model), ("api", api), ("api_key_env", api_key_env),
                           ("headers", parse_headers(header))):
            if value is not None:
                data[key] = value
        out.append(validate(TargetConfig, data, source=f"--target #{i + 1}"))
    return out


def accuracy(
    target: Annotated[
        list[str],
        typer.Option(
            help="Target base URL or simulator spec (repeat to compare; the first is the baseline)."
        ),
    ],
    model: Annotated[
        list[str] | None,
        typer.Option(
            help="Model name: once for all targets or once per target (default: the first the server lists)."
        ),
    ] = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            help='JSONL answer set: {"prompt", "expected", "matcher"?, "id"?} per line (default: generated).'
        ),
    ] = None,
    matcher: Annotated[
        str | None, typer.Option(help="Override every item's matcher: exact, regex or number.")
    ] = None,
    n: Annotated[
        int | None,
        typer.Option("--n", help="Items: generated count (default 200) or the first N of --dataset."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the generated answer set.")] = 0,
    concurrency: Annotated[int, typer.Option(help="Requests in flight per target.")] = 8,
    max_tokens: Annotated[int, typer.Option(help="max_tokens per answer (leave room for reasoning).")] = 256,
    api: flags.Api = None,
    system_prompt: Annotated[str | None, typer.Option(help="System message before every question.")] = None,
    api_key_env: flags.ApiKeyEnv = None,
    header: flags.Header = None,
    max_drop: Annotated[
        float,
        typer.Option(
            help="Flag a candidate whose accuracy is lower than the baseline's "
            "by more than this fraction, beyond the interval."
        ),
    ] = 0.0,
    fail_on_drop: Annotated[
        bool, typer.Option("--fail-on-drop", help="Exit 1 when a drop is flagged.")
    ] = False,
    out: Annotated[str, typer.Option(help="Directory in which the run directory is created.")] = "runs",
    name: Annotated[str | None, typer.Option(help="Run name (part of the directory name).")] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print accuracy.json instead of the table.")
    ] = False,
) -> None:
    """Score targets on a held-out answer set (accuracy with a 95% interval, agreement, quality drop)."""
    from servelab.accuracy.dataset import load_dataset
    from servelab.accuracy.suite import evaluate, write_run
    from servelab.errors import CheckFailed, ConfigError
    from servelab.records.rundir import create_run_dir

    if concurrency < 1 or max_tokens < 1:
        raise ConfigError(
            f"--concurrency and --max-tokens must be at least 1, got {concurrency} and {max_tokens}"
        )
    if not 0 <= max_drop < 1:
        raise ConfigError(
            f"--max-drop must be a fraction in [0, 1), got {max_drop}", hint="e.g. --max-drop 0.02"
        )
    targets = _targets(target, model, api, api_key_env, header)
    items = load_dataset(dataset, n=n, seed=seed, matcher=matcher)
    source = {
        "source": dataset or "generated",
        "seed": None if dataset else seed,
        "matcher_override": matcher,
    }
    report = evaluate(
        targets,
        items,
        dataset=source,
        concurrency=concurrency,
        max_tokens=max_tokens,
        seed=seed,
        system_prompt=system_prompt,
        max_drop=max_drop,
    )
    run_dir = create_run_dir(out, name or "accuracy")
    public = write_run(run_dir, report, items)
    if json_out:
        import orjson

        sys.stdout.write(orjson.dumps(public, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print(public)
    typer.echo(f"accuracy run written to {run_dir}", err=True)
    flagged = [q for q in public["quality"] if q["flagged"]]
    if fail_on_drop and flagged:
        raise CheckFailed(f"{len(flagged)} target(s) lost accuracy against the baseline beyond the interval")


def _pct(p: dict[str, Any]) -> str:
    if p.get("value") is None:
        return "n/a"
    return f"{100 * p['value']:.1f}% [{100 * p['lo']:.1f}, {100 * p['hi']:.1f}]"


def _print(report: dict[str, Any]) -> None:
    from rich.table import Table

    from servelab.cli.present import wide_console

    console = wide_console()
    t = Table(title=f"accuracy on {report['dataset']['items']} items ({report['dataset']['source']}), "
              "temperature 0, 95% Wilson interval", title_justify="left")
    for col in ("#", "target", "model", "accuracy", "correct / answered", "failed"):
        t.add_column(col)
    for r in report["targets"]:
        t.add_row(str(r["index"]), r["url"], str(r["model"]),
                  _pct(r["accuracy"]) if r.get("measurable", True) else str(r.get("note")),
                  f"{r['correct']} / {r['answered']}", str(r["failed"]))
    console.print(t)
    for a in report["agreement"]:
        console.print(f"agreement #{a['a']} vs #{a['b']}: same answer {_pct(a['answer'])}, "
                      f"same verdict {_pct(a['verdict'])} over {a['paired']} items")
    for q in report["quality"]:
        if q["diff"] is None:
            console.print(f"#{q['candidate']} vs baseline #0: {q['verdict']}")
            continue
        style = "bold red" if q["flagged"] else "green"
        console.print(f"#{q['candidate']} vs baseline #0: accuracy {100 * q['diff']:+.1f} points "
                      f"[{100 * q['lo']:+.1f}, {100 * q['hi']:+.1f}] -> [{style}]{q['verdict']}[/]")
    for r in report["targets"]:
        if r["failed"]:
            console.print(
                f"[yellow]warning[/]: #{r['index']} failed {r['failed']} request(s); accuracy is over "
                "the answered items (see items.jsonl for the errors)"
            )
        if r["wrong_at_length_limit"] and r.get("measurable", True):  # filler text: no advice about it
            console.print(f"[yellow]note[/]: #{r['index']}: {r['wrong_at_length_limit']} wrong answer(s) hit "
                          "max_tokens; raise --max-tokens if the model reasons before answering")
