"""Run a sweep: one run directory per grid point, resumable, within a time budget."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab.bench.run import execute
from servelab.config import RunConfig, apply_overrides, validate
from servelab.config.models import DEFAULT_TARGET
from servelab.errors import ConfigError, ServelabError
from servelab.records.manifest import redact, redact_argv, utc_now_iso
from servelab.records.rundir import create_run_dir
from servelab.sweep import state as st
from servelab.sweep.decision_of import decision_for
from servelab.sweep.grid import Point, expand
from servelab.sweep.knee_of import knees_for, split_for
from servelab.sweep.scaling_of import scaling_for
from servelab.sweep.server import ServerProcess, render_command


@dataclass
class ServerSpec:
    command: str  # template, e.g. "vllm serve {model} --max-num-seqs {max_num_seqs}"
    health_url: str
    startup_timeout_s: float = 600.0
    variables: dict[str, Any] = field(default_factory=dict)


@dataclass
class AccuracySpec:
    """Run the held-out answer set at every point whose serving setup (server command, target) is new."""

    n: int = 100
    seed: int = 0
    dataset: str | None = None
    max_tokens: int = 64
    max_drop: float = 0.0


@dataclass
class SweepSpec:
    base: dict[str, Any]  # config data without the swept values
    axes: dict[str, list[Any]]
    out: str = "runs"
    name: str | None = None
    server: ServerSpec | None = None
    budget_s: float | None = None
    resume_dir: Path | None = None
    force: bool = False  # resume even when target, workload or grid differ from the stored sweep
    argv: list[str] = field(default_factory=list)
    report: bool = True
    # Writes the sweep's report.html (cli passes report.html.write_sweep_report: sweep never imports report).
    report_writer: Callable[[Path], Any] | None = None
    accuracy: AccuracySpec | None = None
    parallel: int = 1  # points run at once, each in a worker process (or a Ray task with ray_address)
    ray_address: str | None = None  # "" = a local Ray cluster, else an existing one
    _accuracy_cache: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)


def point_config(base: dict[str, Any], params: dict[str, Any]) -> RunConfig:
    """The run config of one point: the base with the point's values applied."""
    data = apply_overrides(base, {})
    sim_keys: dict[str, Any] = {}
    for key, value in params.items():
        if key == "concurrency":
            data.setdefault("load", {}).pop("rate", None)
            data["load"]["concurrency"] = value
        elif key == "rate":
            data.setdefault("load", {}).pop("concurrency", None)
            data["load"]["rate"] = value
        elif key == "target":
            data.setdefault("target", {})["url"] = value
        elif "." in key:
            data = apply_overrides(data, {key: value})
        else:
            sim_keys[key] = value
    url = (data.get("target") or {}).get("url", DEFAULT_TARGET)
    if sim_keys and str(url).startswith("sim"):
        data.setdefault("target", {})["url"] = _with_sim_keys(str(url), sim_keys)
    return validate(RunConfig, data, source="sweep point")


# What the target ``sim`` means: servelab.sim.target.DEFAULT_SPEC, spelled here so that sweep does not
# import the simulator (tests/unit/sweep/test_sweep_units.py checks the two agree).
DEFAULT_SIM_SPEC = "sim:sim-tiny@1xh100"


def _with_sim_keys(url: str, keys: dict[str, Any]) -> str:
    """``sim:MODEL@NxHW,a=1`` with ``keys`` set (replacing the same keys); plain ``sim`` is its default
    spec."""
    spec = DEFAULT_SIM_SPEC if url == "sim" else url
    if spec.lower().endswith((".yaml", ".yml")):
        raise ConfigError(f"cannot sweep simulator keys {sorted(keys)} over a deployment file ({spec})",
                          hint="use a sim:MODEL@COUNTxHARDWARE target, or sweep target with several files")
    head, *pairs = spec.split(",")
    kept = [p for p in pairs if p.split("=", 1)[0].strip().lower() not in {k.lower() for k in keys}]
    return ",".join([head, *kept, *(f"{k}={_plain(v)}" for k, v in keys.items())])


def _plain(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def run_sweep(spec: SweepSpec, say: Callable[[str], None] = lambda s: None) -> tuple[Path, dict[str, Any]]:
    points = expand(spec.axes)
    # Validate every point before running any (or creating anything): a typo must not cost a sweep.
    from servelab.sweep.parallel import slot_base

    configs = {p.key: point_config(slot_base(spec.base, spec.server, 0), p.params) for p in points}
    if spec.resume_dir is not None:
        sweep_dir = Path(spec.resume_dir)
        state = st.load(sweep_dir)
        st.check_resume(state, redact(spec.axes), redact(spec.base), force=spec.force, sweep_dir=sweep_dir)
        done = {e["key"]: e for e in state["points"] if st.finished_point(sweep_dir, e)}
    else:
        sweep_dir = create_run_dir(spec.out, (spec.name or "") + "-sweep" if spec.name else "sweep")
        state = st.new_state(
            redact(spec.axes), redact(spec.base), redact_argv(spec.argv), utc_now_iso(), spec.budget_s
        )
        done = {}
    state["points"] = [done.get(p.key) or _entry(p, "pending") for p in points]
    st.save(sweep_dir, state)
    t0 = time.monotonic()
    walls: list[float] = [e.get("wall_s", 0.0) for e in done.values()]
    stopped = False  # Ctrl-C at a parallel sweep's coordinator (a serial one records it in the cut point)
    if spec.parallel > 1 or spec.ray_address is not None:
        stopped = _run_parallel(sweep_dir, spec, points, configs, done, state, t0, say)
    for i, p in enumerate(points):
        if spec.parallel > 1 or spec.ray_address is not None:
            break
        if p.key in done:
            say(f"[{i + 1}/{len(points)}] {p.key}: done earlier, skipped")
            continue
        if spec.budget_s is not None and time.monotonic() - t0 > spec.budget_s:
            state["points"][i] = _entry(p, "skipped", error="time budget exhausted")
            continue
        entry = _run_point(sweep_dir, p, configs[p.key], spec)
        state["points"][i] = entry
        walls.append(entry.get("wall_s", 0.0))
        remaining = sum(1 for e in state["points"] if e["status"] == "pending")
        eta = remaining * (sum(walls) / len(walls)) if walls else 0.0
        say(f"[{i + 1}/{len(points)}] {p.key}: {entry['status']} in {entry.get('wall_s', 0):.1f} s; "
            f"about {eta:.0f} s left")
        st.save(sweep_dir, state)
        if entry["status"] == "interrupted":  # Ctrl-C cut this point: stop here; --resume runs it again
            break
    state["knees"], state["knee"], state["knee_reason"] = knees_for(state["points"])
    state["scaling"] = scaling_for(sweep_dir, state["points"])
    state["decision"] = decision_for(sweep_dir, state)
    state["split"] = split_for(state["points"], (state.get("base_config") or {}).get("slo"))
    state["ended_at"] = utc_now_iso()
    state["complete"] = all(e["status"] in ("ok", "failed") for e in state["points"])
    state["interrupted"] = stopped or any(e["status"] == "interrupted" for e in state["points"])
    st.save(sweep_dir, state)
    if spec.report and spec.report_writer is not None:
        _report(sweep_dir, spec.report_writer, say)
    return sweep_dir, state


def _run_parallel(sweep_dir: Path, spec: SweepSpec, points: list[Point], configs: dict[str, RunConfig],
                  done: dict[str, Any], state: dict[str, Any], t0: float, say: Callable[[str], None]) -> bool:
    """Points as tasks (worker processes or Ray), ``spec.parallel`` at once; sweep.json written here only.
    True when Ctrl-C stopped it: the points it cut are marked interrupted, the rest stay pending."""
    from servelab.sweep.parallel import run_points

    work = [(i, p, configs[p.key]) for i, p in enumerate(points) if p.key not in done]
    for i, p in enumerate(points):
        if p.key in done:
            say(f"[{i + 1}/{len(points)}] {p.key}: done earlier, skipped")

    def out_of_budget() -> bool:
        return spec.budget_s is not None and time.monotonic() - t0 > spec.budget_s

    def on_done(i: int, entry: dict[str, Any]) -> None:
        state["points"][i] = entry
        say(f"[{i + 1}/{len(points)}] {points[i].key}: {entry['status']} in {entry.get('wall_s', 0):.1f} s")
        st.save(sweep_dir, state)

    stopped = run_points(
        work,
        run_point_task,
        (sweep_dir, spec),
        parallel=max(1, spec.parallel),
        ray_address=spec.ray_address,
        on_done=on_done,
        out_of_budget=out_of_budget,
    )
    for i, p in enumerate(points):
        if not stopped and state["points"][i]["status"] == "pending" and out_of_budget():
            state["points"][i] = _entry(p, "skipped", error="time budget exhausted")
    st.save(sweep_dir, state)
    return stopped


def run_point_task(sweep_dir: Path, spec: SweepSpec, p: Point, cfg: RunConfig, slot: int) -> dict[str, Any]:
    """A point as a task of its own (a worker process or a Ray task)."""
    return _run_point(sweep_dir, p, cfg, spec, slot)


def _entry(p: Point, status: str, **kw: Any) -> dict[str, Any]:
    return {"index": p.index, "key": p.key, "params": redact(p.params), "level": p.level, "status": status,
            "run_dir": None, "summary": None, "error": None, **kw}


def _run_point(
    sweep_dir: Path, p: Point, cfg: RunConfig, spec: SweepSpec, slot: int | None = None
) -> dict[str, Any]:
    """One point (in this process, a worker process or a Ray task; ``slot``: its parallel slot's
    port/GPUs)."""
    from servelab.sweep.parallel import for_slot

    cfg, server_spec = for_slot(cfg, spec.server, slot, base=spec.base, params=p.params)
    run_dir = sweep_dir / p.key
    if run_dir.exists():  # a point killed mid-run: start it again from nothing
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    t = time.monotonic()
    extra: dict[str, Any] = {"sweep": {"dir": str(sweep_dir), "point": p.key, "params": p.params}}
    server = None
    try:
        if server_spec is not None:
            argv = render_command(
                server_spec.command, {**server_spec.variables, **_template_values(cfg), **p.params}
            )
            extra["server"] = {"command_line": redact_argv(argv), "log": "server.log"}
            server = ServerProcess(
                argv, run_dir / "server.log", server_spec.health_url, server_spec.startup_timeout_s
            )
            t_srv = time.monotonic()
            server.start()
            extra["server"]["ready_s"] = time.monotonic() - t_srv  # start-up is part of a topology's cost
        result = execute(cfg, argv=spec.argv, run_dir=run_dir, report=False, manifest_extra=extra)
        status = "interrupted" if result.outcome.stopped_by == "interrupt" else "ok"
        entry = _entry(p, status, run_dir=p.key, summary=result.summary, wall_s=time.monotonic() - t)
        if server is not None:
            entry["server_ready_s"] = extra["server"]["ready_s"]
        if spec.accuracy is not None:  # while the point's server is still up
            entry["accuracy"] = _point_accuracy(spec, cfg, extra.get("server"), run_dir)
        return entry
    except ServelabError as e:
        return _entry(p, "failed", run_dir=p.key, error=str(e), wall_s=time.monotonic() - t)
    except Exception as e:  # noqa: BLE001 - one broken point must not end the sweep
        return _entry(
            p, "failed", run_dir=p.key, error=f"{type(e).__name__}: {e}", wall_s=time.monotonic() - t
        )
    finally:
        if server is not None:
            server.stop()


def _point_accuracy(
    spec: SweepSpec, cfg: RunConfig, server: dict[str, Any] | None, run_dir: Path
) -> dict[str, Any]:
    """Accuracy of this point's serving setup (computed once per setup), judged against the first setup."""
    from servelab.accuracy.compare import flag_quality_drop
    from servelab.accuracy.dataset import load_dataset
    from servelab.accuracy.runner import accuracy_for_target
    from servelab.records.rundir import write_json

    acc = spec.accuracy
    assert acc is not None
    key = repr(((server or {}).get("command_line"), cfg.target.url, cfg.target.model))
    cache = spec._accuracy_cache
    if key not in cache:
        items = load_dataset(acc.dataset, n=acc.n, seed=acc.seed)
        try:
            cache[key] = accuracy_for_target(cfg.target, items, max_tokens=acc.max_tokens, seed=acc.seed)
        except ServelabError as e:
            cache[key] = {"error": str(e)}
    result = cache[key]
    write_json(run_dir / "accuracy.json", result)
    out: dict[str, Any] = {"setup": key, "summary": result.get("summary"), "error": result.get("error")}
    baseline = next(iter(cache.values()))
    if result is not baseline and "summary" in result and "summary" in baseline:
        out["vs_first_setup"] = flag_quality_drop(baseline, result, max_drop=acc.max_drop)
    return out


def _template_values(cfg: RunConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"url": cfg.target.url}
    if cfg.target.model:
        out["model"] = cfg.target.model
    return out


def _report(sweep_dir: Path, write: Callable[[Path], Any], say: Callable[[str], None]) -> None:
    try:
        path = write(sweep_dir)
        say(f"report: {path}")
    except Exception as e:  # noqa: BLE001 - the measured sweep is already on disk
        say(f"warning: report not written: {type(e).__name__}: {e}")
