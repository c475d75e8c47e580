"""`servelab compare A B [C ...]` (fair, side by side) and `servelab check BASELINE CANDIDATE` (a gate)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from servelab.cli.present import wide_console
from servelab.errors import CheckFailed, ComparisonError, ConfigError


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
        from servelab.analysis.compare import run_level

        run = read_run(p)
        level = run_level(run.manifest)
        return {"name": p.name, "manifest": run.manifest, "levels": {level: (run.summary, run.requests)}}
    raise ConfigError(f"{str(p)!r} is neither a run directory nor a sweep directory",
                      hint="pass directories printed by `servelab run` or `servelab sweep`")


def _mode(summary: Any) -> Any:
    """The load mode a run's latency figures were computed in (open: from the intended send)."""
    mode = ((summary or {}).get("run") or {}).get("mode")
    return mode if mode in ("open", "closed") else "closed"


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
    noise_floor: Annotated[str, typer.Option(help="Practical-significance floor: relative differences at or "
                                                  "under it are 'within noise', e.g. 2%.")] = "2%",
    force: Annotated[bool, typer.Option("--force", help="Compare even when the runs differ in more than one "
                                                        "dimension (warn instead of exit 2).")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
    report: Annotated[str | None, typer.Option(help="Also write an HTML report of A with the comparison "
                                               "table to this file.")] = None,
) -> None:
    """Compare runs fairly: refuse when more than one dimension differs; figures with intervals and verdicts."""  # noqa: E501
    from servelab.analysis.compare import check_fair, compare_figures, manifest_diff

    if len(runs) < 2:
        raise ConfigError("compare needs at least two run or sweep directories")
    floor = _fraction(noise_floor, "--noise-floor")
    loaded = [_load(r) for r in runs]
    manifests = [x["manifest"] for x in loaded]
    try:
        diff = check_fair(manifests, allow_diff or ())
        unfair = None
    except ComparisonError as e:
        if not force:
            raise
        diff, unfair = manifest_diff(manifests), e.message
        Console(stderr=True, soft_wrap=True).print(f"[yellow]warning (--force):[/] {escape(e.message)}",
                                                   highlight=False)
    base = loaded[0]
    result: dict[str, Any] = {"names": [x["name"] for x in loaded], "diff": diff, "figures": [],
                              "noise_floor": floor, "unfair": unfair}
    for other in loaded[1:]:
        for level in sorted(set(base["levels"]) & set(other["levels"]), key=lambda v: (v is None, v)):
            mode = _mode(base["levels"][level][0])
            rows = compare_figures(base["levels"][level][1], other["levels"][level][1], mode=mode,
                                   noise_floor=floor)
            result["figures"].append({"a": base["name"], "b": other["name"], "level": level, "rows": rows})
    if report:
        _write_report(runs, result, report)
    if json_out:
        sys.stdout.write(
            orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n"
        )
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
        con.print(figures_table(block))


def _figure_name(figure: str) -> str:
    """'ttft_ms p95' -> 'time to first token p95'; figures already in words are kept."""
    from servelab.report.words import NAMES

    metric, _, pct = figure.rpartition(" ")
    return f"{NAMES[metric]} {pct}" if metric in NAMES else figure


def figures_table(block: dict[str, Any]) -> Table:
    """One comparison block: each figure in words, with its unit, three significant figures."""
    from servelab.report.words import sig

    level = "" if block.get("level") is None else f" at level {block['level']}"
    ft = Table(title=f"{block['b']} (B) vs {block['a']} (A){level}", title_justify="left")
    for c in ("figure", "unit", "A", "B", "B - A", "95% CI of B - A", "verdict"):
        ft.add_column(c, justify="right" if c in ("A", "B", "B - A") else "left")
    for r in block["rows"]:
        unit, k = ("%", 100.0) if r.get("unit") == "fraction" else (r.get("unit") or "", 1.0)

        def shown(key: str, r: dict[str, Any] = r, k: float = k) -> str:
            return sig(None if r.get(key) is None else k * float(r[key]))

        ci = "-" if r.get("lo") is None else f"{shown('lo')} to {shown('hi')}"
        ft.add_row(_figure_name(r["figure"]), unit, shown("a"), shown("b"), shown("diff"), ci, r["verdict"])
    return ft


def _write_report(dirs: list[str], result: dict[str, Any], out: str) -> None:
    from servelab.records.rundir import is_run_dir, read_run
    from servelab.report.html import write_run_report

    first = dirs[0]
    if not is_run_dir(first):
        raise ConfigError("--report writes the comparison into run A's report: A must be a run directory",
                          hint="for sweeps, compare with --json and use `servelab report SWEEP_DIR`")
    block = result["figures"][0] if result["figures"] else None
    comparison = {
        "names": [block["a"], block["b"]] if block else result["names"][:2],
        "diff": result["diff"],
        "figures": block["rows"] if block else [],
        "runs": [(n, read_run(d)) for n, d in zip(result["names"], dirs, strict=True) if is_run_dir(d)],
    }
    path = write_run_report(Path(first), Path(out), comparison=comparison)
    pngs = sorted(path.parent.glob(f"{path.stem}-*.png"))
    Console(stderr=True, soft_wrap=True).print(
        f"report written to {path} (one self-contained file: charts inline; PNG copies of them beside it: "
        f"{', '.join(p.name for p in pngs) or 'none'})", highlight=False)


def _fraction(text: str, flag: str = "--max-regression") -> float:
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ConfigError(f"{flag} {text!r} is not a number or a percentage",
                          hint=f"e.g. {flag} 10% or 0.1") from None
    if not 0 <= v < 100:
        raise ConfigError(f"{flag} must be a fraction >= 0 (or a percentage), got {text!r}")
    return v


NoiseFloor = Annotated[
    str,
    typer.Option(
        help="Practical-significance floor: relative differences at or under it are noise, e.g. 2%."
    ),
]
Force = Annotated[
    bool, typer.Option("--force", help="Go on when the runs are not comparable (warn instead of exit 2).")
]


def _noise_rows(b: dict[str, Any], c: dict[str, Any], levels: set[Any],
                floor: float) -> dict[Any, dict[str, dict[str, Any]]]:
    """compare's bootstrap rows ({level: {figure: row}}) at the levels where both sides have records."""
    from servelab.analysis.compare import compare_figures

    out: dict[Any, dict[str, dict[str, Any]]] = {}
    for level in levels:
        if level not in b["levels"] or level not in c["levels"]:
            continue
        (bs, bt), (_, ct) = b["levels"][level], c["levels"][level]
        if bt is None or ct is None:
            continue
        rows = compare_figures(bt, ct, mode=_mode(bs), noise_floor=floor)
        out[level] = {r["figure"]: r for r in rows}
    return out


def check(
    baseline: Annotated[str, typer.Argument(help="Baseline run or sweep directory.")],
    candidate: Annotated[str, typer.Argument(help="Candidate run or sweep directory.")],
    max_regression: Annotated[str, typer.Option(help="Largest allowed regression, e.g. 10%.")] = "10%",
    noise_floor: NoiseFloor = "2%",
    allow_diff: Annotated[
        list[str] | None, typer.Option(help="A dimension allowed to differ (repeatable).")
    ] = None,
    force: Force = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the failures as JSON.")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Also fail on a change beyond the limit that the "
                                         "raw samples cannot tell from noise (inconclusive).")] = False,
) -> None:
    """Exit 1 when the candidate regresses on latency (TTFT, TPOT, ITL, e2e at p50/p95/p99), throughput,
    goodput or, for agent runs, task time p95, success rate or cost per task, at any baseline level.
    A change beyond the limit whose 95% bootstrap interval (from both runs' request records) holds 0 is
    inconclusive: printed, not a failure unless --strict.
    Exit 2 (nothing gated) when either run is INVALID or the pair is not comparable, unless --force."""
    from servelab.analysis.gate import check_regression, refusals, split_by_noise

    limit = _fraction(max_regression)
    floor = _fraction(noise_floor, "--noise-floor")
    if floor >= 1:
        raise ConfigError(f"--noise-floor must be under 100%, got {noise_floor!r}")
    b, c = _load(baseline), _load(candidate)
    sides = [
        {"name": x["name"], "manifest": x["manifest"], "levels": {k: v[0] for k, v in x["levels"].items()}}
        for x in (b, c)
    ]
    refused = refusals(sides[0], sides[1], allow_diff=allow_diff or ())
    err = Console(stderr=True, soft_wrap=True)
    if refused and not force:
        if json_out:
            sys.stdout.write(orjson.dumps({"refused": refused, "failures": []}).decode() + "\n")
        raise ComparisonError(f"cannot gate {c['name']} against {b['name']}:\n  - " + "\n  - ".join(refused),
                              hint="rerun what is INVALID and gate like against like; --force gates anyway")
    for r in refused:
        err.print(f"[yellow]warning (--force):[/] {escape(r)}", highlight=False)
    fails = check_regression(sides[0]["levels"], sides[1]["levels"], limit, noise_floor=floor)
    fails, unsure = split_by_noise(fails, _noise_rows(b, c, {f.get("level") for f in fails}, floor))
    if strict:
        fails = fails + unsure
    if json_out:
        sys.stdout.write(orjson.dumps({"failures": fails, "inconclusive": unsure, "max_regression": limit,
                                       "noise_floor": floor, "strict": strict,
                                       "forced": refused}).decode() + "\n")
    else:
        con = Console(soft_wrap=True)
        for f in fails:
            con.print(f"[red]regression[/] {escape(f['message'])}", highlight=False)
        for f in [] if strict else unsure:
            con.print(f"[yellow]inconclusive[/] {escape(f['message'])}", highlight=False)
        if not fails:
            also = f"; {len(unsure)} inconclusive (--strict fails on them)" if unsure else ""
            con.print(
                f"no regression beyond {limit:.0%} (noise floor {floor:.0%}) at {len(b['levels'])} level(s)"
                + also,
                highlight=False,
            )
    if fails:
        raise CheckFailed(f"{len(fails)} regression(s) beyond {limit:.0%} in {c['name']} against {b['name']}")
