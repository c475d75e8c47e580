"""Simulator fidelity: each step-cost backend against published results and against each other.

Two tables, each split into a FITTING set and a CHECK set before anything was fitted:

1. Published results (/work/shared/facts/calibration.md, C-1..C-4). FITTING set: C-1 (dense, TensorRT-LLM)
   and C-2 (MoE, H800 EP128, which the silicon data does not cover); CHECK set: C-3 and C-4. The roofline's
   Hopper constants are fitted on the silicon fitting rows (table 2) and C-1, C-2 at once
   (benchmarks/sim_fit_hopper.py). The silicon backend fits nothing; it prices the figures it covers (C-3:
   DeepSeek-V3 on H100 with SGLang; C-4: Llama-3.1-8B on H100 with TensorRT-LLM).
2. Roofline step times against silicon step times (AIConfigurator's measured kernels) over a grid of
   models x GPUs x engines x step shapes. FITTING set: H100 and B200 rows; CHECK set: H200 and GB200 rows
   (same families, other chips). ``--fit`` grid-searches the roofline constants of each family on the
   fitting rows (least squared log error) and prints them for ``sim/catalog/hardware.yaml``.

Error is (predicted - reference) / reference; slices print median and max |error| and the sign of the median.
Table 1 also runs the 122 check rows of benchmarks/fidelity_cases.yaml (TensorRT-LLM perf overviews, vLLM at
its defaults, TTFT/TPOT at concurrency 4, AMD MI300X batch latencies; sources and conditions per row),
sliced by model kind x hardware family x engine x metric (throughput, TTFT, TPOT, latency).

    PYTHONPATH=src python benchmarks/sim_fidelity.py [--fit] [--no-published]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from servelab.sim import silicon  # noqa: E402
from servelab.sim.catalog import Family  # noqa: E402
from servelab.sim.costmodel import RooflineCost  # noqa: E402
from servelab.sim.deployment import Deployment  # noqa: E402
from servelab.sim.target import parse_sim_target  # noqa: E402

CACHE = Path(__file__).parent / "data" / "sim_silicon_grid.json"

# (slice model kind, spec): engines in each spec; every spec is run on each of the four GPUs where it fits.
GRID_SPECS = [
    ("dense", "llama-3.1-8b@1x{hw},dtype=fp8,engine=trtllm"),
    ("dense", "llama-3.1-8b@1x{hw},engine=vllm"),
    ("dense", "llama-3.1-70b@4x{hw},dtype=fp8,engine=trtllm"),
    ("dense", "llama-3.1-70b@8x{hw},engine=sglang"),
    ("moe", "gpt-oss-120b@1x{hw},engine=vllm"),
    ("moe", "gpt-oss-20b@1x{hw},engine=trtllm"),
    ("moe", "deepseek-v3@8x{hw},dtype=fp8,ep=8,dp_attention=true,engine=sglang"),
    ("moe", "qwen3-30b-a3b@2x{hw},dtype=fp8,ep=2,engine=vllm"),
]
HARDWARE = {"h100": "fit", "b200": "fit", "h200": "check", "gb200": "check"}
# (phase, decode sequences, context per sequence, prefill tokens)
SHAPES = [("decode", n, 2048, 0) for n in (1, 8, 32, 128, 512)] + [
    ("prefill", 0, 0, p) for p in (512, 2048, 8192)
]


def _shape_args(n: int, ctx: int, p: int) -> tuple[int, int, int, int, int]:
    return n, n * ctx, p, p * (p + 1) // 2, p


def silicon_grid() -> list[dict]:
    """Silicon step times for every grid row (cached: building the models takes minutes)."""
    if CACHE.is_file():
        return json.loads(CACHE.read_text())
    from servelab.sim.stepcost import make_step_cost

    rows = []
    for (kind, spec), hw in itertools.product(GRID_SPECS, HARDWARE):
        try:
            dep = parse_sim_target("sim:" + spec.format(hw=hw) + ",backend=silicon,expert_skew=0")
            cost = make_step_cost(dep)
        except Exception as exc:  # does not fit this GPU, or no measured data for it
            print(f"  skip {spec.format(hw=hw)}: {str(exc).splitlines()[0][:120]}", file=sys.stderr)
            continue
        for phase, n, ctx, p in SHAPES:
            t = cost.step(*_shape_args(n, ctx, p)).time_s
            rows.append(
                {
                    "kind": kind,
                    "spec": spec.format(hw=hw),
                    "hw": hw,
                    "engine": dep.engine,
                    "family": dep.family.name,
                    "phase": phase,
                    "n": n,
                    "ctx": ctx,
                    "p": p,
                    "silicon_s": t,
                }
            )
        print(f"  priced {spec.format(hw=hw)}", file=sys.stderr)
    CACHE.parent.mkdir(exist_ok=True)
    CACHE.write_text(json.dumps(rows, indent=0))
    return rows


_deps: dict[str, Deployment] = {}
_costs: dict[tuple, RooflineCost] = {}


def roofline_s(row: dict, fam: Family | None = None) -> float:
    dep = _deps.get(row["spec"])
    if dep is None:
        dep = _deps[row["spec"]] = parse_sim_target("sim:" + row["spec"] + ",backend=roofline,expert_skew=0")
    if fam is not None and fam.name == dep.family.name:
        dep = replace(dep, family=fam)
    key = (row["spec"], dep.family)
    cost = _costs.get(key)
    if cost is None:
        if len(_costs) > 5000:
            _costs.clear()
        cost = _costs[key] = RooflineCost(dep)
    return cost.step(*_shape_args(row["n"], row["ctx"], row["p"])).time_s


def fit_family(rows: list[dict], base: Family) -> Family:
    grid = {
        "compute_eff": (0.5, 0.6, 0.7),
        "decode_compute_eff": (0.35, 0.45, 0.55),
        "mem_eff": (0.6, 0.7, 0.8),
        "layer_overhead_us": (20, 35, 50, 70),
        "moe_compute_eff": (0.2, 0.3, 0.5),
        "lowp_compute_eff": (0.5, 0.7, 1.0),
    }
    mine = [r for r in rows if r["family"] == base.name and HARDWARE[r["hw"]] == "fit"]
    best, best_loss = base, math.inf
    for vals in itertools.product(*grid.values()):
        kw = dict(zip(grid, vals, strict=True))
        if kw["decode_compute_eff"] > kw["compute_eff"]:
            continue
        fam = replace(base, **kw)
        loss = sum(math.log(roofline_s(r, fam) / r["silicon_s"]) ** 2 for r in mine)
        if loss < best_loss:
            best, best_loss = fam, loss
    print(
        f"{base.name}: compute_eff={best.compute_eff} decode_compute_eff={best.decode_compute_eff} "
        f"mem_eff={best.mem_eff} layer_overhead_us={best.layer_overhead_us} "
        f"moe_compute_eff={best.moe_compute_eff} "
        f"lowp_compute_eff={best.lowp_compute_eff} "
        f"(rms log error {math.sqrt(best_loss / max(len(mine), 1)):.3f} over {len(mine)} fitting rows)"
    )
    return best


def slice_table(title: str, items: list[tuple[str, str, float]]) -> None:
    """items: (slice, set, error)."""
    print(f"\n{title}")
    print(f"{'slice':<48} {'set':<6} {'n':>3} {'median |err|':>13} {'max |err|':>10} {'sign':>5}")
    keys = sorted({(s, k) for s, k, _ in items})
    for s, k in keys:
        errs = [e for s2, k2, e in items if (s2, k2) == (s, k)]
        med = statistics.median(abs(e) for e in errs)
        sign = "+" if statistics.median(errs) > 0 else "-"
        worst = 100 * max(abs(e) for e in errs)
        print(f"{s:<48} {k:<6} {len(errs):>3} {100 * med:>12.1f}% {worst:>9.1f}% {sign:>5}")


def grid_report(rows: list[dict], fams: dict[str, Family]) -> None:
    items = []
    for r in rows:
        fam = fams.get(r["family"])
        err = roofline_s(r, fam) / r["silicon_s"] - 1
        phase = r["phase"] if r["phase"] == "prefill" else ("decode<=8" if r["n"] <= 8 else "decode>8")
        items.append((f"{r['kind']} {r['family'][7:]} {r['engine']} {phase}", HARDWARE[r["hw"]], err))
    slice_table("roofline step time vs silicon step time (reference = silicon)", items)
    check = [abs(e) for _, k, e in items if k == "check"]
    print(
        f"check set overall: median |err| {100 * statistics.median(check):.1f}%, max {100 * max(check):.1f}% "
        f"over {len(check)} rows"
    )


def _metric_class(metric: str) -> str:
    return {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "batch_latency_s": "latency"}.get(metric, "throughput")


def published(backends: list[str], only: set[str] | None = None) -> None:
    import fidelity_cases as fc  # the check rows beyond calibration.md (benchmarks/fidelity_cases.yaml)
    import sim_calibration as cal  # the case set-ups, from the published configurations
    from servelab.errors import DeploymentError
    from servelab.sim.stepcost import make_step_cost

    items = []
    print(
        "\npublished results (facts/calibration.md C-1..C-4; benchmarks/fidelity_cases.yaml, all check rows)"
    )
    print(f"{'id':<5} {'set':<6} {'backend':<9} {'figure':<72} {'published':>10} {'sim':>10} {'error':>8}")

    def row(cid: str, st: str, backend: str, what: str, pub: float, pred: float | None) -> float | None:
        if pred is None:
            print(f"{cid:<5} {st:<6} {backend:<9} {what[:72]:<72} {pub:>10,.2f} {'-':>10}   (not covered)")
            return None
        err = pred / pub - 1
        print(
            f"{cid:<5} {st:<6} {backend:<9} {what[:72]:<72} {pub:>10,.2f} {pred:>10,.2f} {100 * err:>+7.1f}%"
        )
        return err

    _, cases = fc.load()
    for backend in backends:
        for cid, kind, hwfam, eng, what, pub, pred in cal.cases_for_backend(backend):
            if only and cid not in only:
                continue
            st = "fit" if cid in ("C-1", "C-2") else "check"
            err = row(cid, st, backend, what, pub, pred)
            if err is not None:
                items.append((f"{backend} {kind} {hwfam} {eng} throughput", st, err))
        for c in cases:
            if only and c.id not in only:
                continue
            dep = fc.deployment(c, backend)
            try:
                make_step_cost(dep)  # backend=silicon raises where the measured data does not cover dep
            except DeploymentError:
                row(c.id, c.set, backend, c.what, c.published, None)
                continue
            err = row(c.id, c.set, backend, c.what, c.published, fc.simulate(c, dep))
            eng = dep.profile.name if dep.profile else "none"
            slice_name = f"{backend} {fc.kind_of(dep)} {fc.family_of(dep)} {eng} {_metric_class(c.metric)}"
            items.append((slice_name, c.set, err))
    slice_table("published results by slice", items)
    for backend in backends:
        check = [abs(e) for s, k, e in items if k == "check" and s.startswith(backend)]
        if check:
            print(f"{backend} check set overall: median |err| {100 * statistics.median(check):.1f}%, "
                  f"max {100 * max(check):.1f}% over {len(check)} rows")
    if only is None:  # a subset of rows (--only) measures no slice whole
        stale_fidelity_figures(items)


def stale_fidelity_figures(items: list[tuple[str, str, float]]) -> list[str]:
    """Print (and return) the throughput/latency slices whose check-set median differs from what runs report
    (servelab.sim.fidelity.MEASURED) by 0.1 point or more, or which a run does not report at all: update
    MEASURED (and docs/simulator.md) from this run when they do."""
    from servelab.sim.fidelity import MEASURED

    have = {f"{b} {'moe' if moe else 'dense'} {kind} {eng}": v[:2]
            for (b, kind, moe, eng), v in MEASURED.items()}
    out = []
    kinds = ("throughput", "latency")
    for s in sorted({s for s, k, _ in items if k == "check" and s.rsplit(" ", 1)[-1] in kinds}):
        errs = [abs(e) for s2, k, e in items if (s2, k) == (s, "check")]
        med, key = round(100 * statistics.median(errs), 1), s.rsplit(" ", 1)[0]
        if key not in have:
            out.append(f"{s}: {med}% (n={len(errs)}) is not in servelab.sim.fidelity.MEASURED")
        elif abs(have[key][0] - med) >= 0.1 or have[key][1] != len(errs):
            out.append(f"{s}: {med}% (n={len(errs)}), runs report {have[key][0]}% (n={have[key][1]})")
    print("\nfigures runs report (servelab.sim.fidelity.MEASURED): " + ("up to date" if not out else
          "STALE, update them:\n  " + "\n  ".join(out)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--fit", action="store_true", help="refit the roofline constants of each family on the fitting rows"
    )
    ap.add_argument("--no-published", action="store_true")
    ap.add_argument("--no-grid", action="store_true", help="skip the roofline-vs-silicon step-time grid")
    ap.add_argument("--only", default="", help="published row ids, comma-separated (e.g. N-1,V-5)")
    ap.add_argument("--backend", choices=["roofline", "silicon"], help="one backend only (default: both)")
    args = ap.parse_args()
    backends = ["roofline"] + (["silicon"] if silicon.installed() else [])
    if args.backend:
        if args.backend not in backends:
            sys.exit(f"backend {args.backend!r} is not available here (install servelab[silicon])")
        backends = [args.backend]
    only = {x.strip() for x in args.only.split(",") if x.strip()} or None
    if args.no_grid:
        pass
    elif silicon.installed() or CACHE.is_file():
        rows = silicon_grid()
        fams: dict[str, Family] = {}
        if args.fit:
            for name in sorted({r["family"] for r in rows}):
                base = parse_sim_target(
                    "sim:llama-3.1-8b@1x" + ("h100" if "hopper" in name else "b200")
                ).family
                fams[name] = fit_family(rows, base)
        grid_report(rows, fams)
    else:
        print("silicon data not installed and no cached grid: skipping the roofline-vs-silicon table")
    if not args.no_published:
        published(backends, only)


if __name__ == "__main__":
    main()
