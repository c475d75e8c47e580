"""`servelab compare A B [C ...]` (fair, side by side) and `servelab check BASELINE CANDIDATE` (a gate)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.table import Table

from servelab.cli.present import wide_console
from servelab.errors import CheckFailed, ConfigError


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
    app.command("check")(check)


def _load(path: str) -> dict[str, Any]:
    """A run or sweep as {"manifest", "levels": {level: (summary, requests table)}}."""
    from servelab.records.rundir import is_run_dir, read_run
    from servelab.sweep.state import is_sweep_dir

    p = Path(path)
    if is_sweep_dir(p):
        from servelab.report.html import load_sweep

        sw = load_sweep(p)
        levels: dict[Any, Any] = {}
        manifest: dict[str, Any] = {}
        for e in sw.state.get("points", []):
            run = sw.runs.get(e.get("key"))
            if run is None:
                continue
            manifest = manifest or run.manifest
            levels[e.get("level")] = (run.summary, run.requests)
        if not levels:
            raise ConfigError(f"sweep {p} has no finished points to compare")
        return {"name": p.name, "manifest": manifest, "levels": levels, "sweep": sw.state}
    if is_run_dir(p):
        run = read_run(p)
        load = (run.manifest.get("config") or {}).get("load") or {}
        level = load.get("concurrency") or load.get("rate")
        return {"name": p.name, "manifest": run.manifest, "levels": {level: (run.summary, run.requests)}}
    raise ConfigError(f"{str(p)!r} is neither a run directory nor a sweep directory",
                      hint="pass directories printed by `servelab run` or `servelab sweep`")


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.4g}"
    return str(v)


def compare(
    runs: Annotated[list[str], typer.Argument(help="Two or more run or sweep directories (the first is A).")],
    allow_diff: Annotated[list[str] | None, typer.Option(help="A dimension allowed to differ besides the one "
                                                         "varied (repeatable).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
    report: Annotated[str | None, typer.Option(help="Also write an HTML report of A with the comparison "
                                               "table to this file.")] = None,
) -> None:
    """Compare runs fairly: refuse when more than one dimension differs; figures with intervals and verdicts."""
    from servelab.analysis.compare import check_fair, compare_figures

    if len(runs) < 2:
        raise ConfigError("compare needs at least two run or sweep directories")
    loaded = [_load(r) for r in runs]
    diff = check_fair([x["manifest"] for x in loaded], allow_diff or ())
    base = loaded[0]
    result: dict[str, Any] = {"names": [x["name"] for x in loaded], "diff": diff, "figures": []}
    for other in loaded[1:]:
        for level in sorted(set(base["levels"]) & set(other["levels"]), key=lambda v: (v is None, v)):
            rows = compare_figures(base["levels"][level][1], other["levels"][level][1])
            result["figures"].append({"a": base["name"], "b": other["name"], "level": level, "rows": rows})
    if report:
        _write_report(runs[0], result, report)
    if json_out:
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
        return
    con = wide_console()
    t = Table(title="what differs", title_justify="left")
    t.add_column("dimension")
    for n in result["names"]:
        t.add_column(n)
    t.add_column("status")
    for r in diff:
        if r["status"] != "same":
            t.add_row(r["label"], *[_fmt(v) for v in r["values"]], r["status"])
    con.print(t)
    for block in result["figures"]:
        ft = Table(title=f"{block['b']} vs {block['a']} at level {block['level']}", title_justify="left")
        for c in ("figure", "A", "B", "diff", "95% CI", "verdict"):
            ft.add_column(c)
        for r in block["rows"]:
            ci = f"[{_fmt(r.get('lo'))}, {_fmt(r.get('hi'))}]"
            ft.add_row(r["figure"], _fmt(r.get("a")), _fmt(r.get("b")), _fmt(r.get("diff")), ci, r["verdict"])
        con.print(ft)


def _write_report(first: str, result: dict[str, Any], out: str) -> None:
    from servelab.records.rundir import is_run_dir
    from servelab.report.html import write_run_report

    if not is_run_dir(first):
        raise ConfigError("--report writes the comparison into run A's report: A must be a run directory",
                          hint="for sweeps, compare with --json and use `servelab report SWEEP_DIR`")
    block = result["figures"][0] if result["figures"] else None
    comparison = {"names": [block["a"], block["b"]] if block else result["names"][:2], "diff": result["diff"],
                  "figures": block["rows"] if block else []}
    path = write_run_report(Path(first), Path(out), comparison=comparison)
    Console(stderr=True, soft_wrap=True).print(f"report written to {path}", highlight=False)


def _fraction(text: str) -> float:
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ConfigError(f"--max-regression {text!r} is not a number or a percentage",
                          hint="e.g. --max-regression 10% or 0.1") from None
    if v < 0:
        raise ConfigError(f"--max-regression must be >= 0, got {text!r}")
    return v


def check(
    baseline: Annotated[str, typer.Argument(help="Baseline run or sweep directory.")],
    candidate: Annotated[str, typer.Argument(help="Candidate run or sweep directory.")],
    max_regression: Annotated[str, typer.Option(help="Largest allowed regression, e.g. 10%.")] = "10%",
    json_out: Annotated[bool, typer.Option("--json", help="Print the failures as JSON.")] = False,
) -> None:
    """Exit 1 when the candidate regresses on p50/p95/p99 latency or goodput at any baseline level."""
    from servelab.analysis.compare import check_regression

    limit = _fraction(max_regression)
    b, c = _load(baseline), _load(candidate)
    fails = check_regression({k: v[0] for k, v in b["levels"].items()},
                             {k: v[0] for k, v in c["levels"].items()}, limit)
    if json_out:
        sys.stdout.write(orjson.dumps({"failures": fails, "max_regression": limit}).decode() + "\n")
    else:
        con = Console()
        for f in fails:
            con.print(f"[red]regression[/] {f}", highlight=False)
        if not fails:
            con.print(f"no regression beyond {limit:.0%} at {len(b['levels'])} level(s)")
    if fails:
        raise CheckFailed(f"{len(fails)} regression(s) beyond {limit:.0%} in {c['name']} against {b['name']}")
