"""Refit the roofline's MoE constants on AIConfigurator's silicon step times of MoE models.

The grid: MoE deployments from the catalog (gpt-oss-120b/20b, Qwen3-235B, Qwen3-30B, DeepSeek-V3/R1; TP,
EP and attention-DP layouts; vLLM, SGLang, TensorRT-LLM) on H100, H200 and B200, each priced by the silicon
backend (AIConfigurator 0.12's measured kernels, balanced routing) at decode batches 1-2048 (2K and 8K of
context per sequence) and prefill chunks of 512-8192 tokens. FITTING set: H100 and B200 rows; CHECK set:
H200 rows (and GB200 where it fits). None of these are the end-to-end rows of benchmarks/fidelity_cases.yaml
(those are published throughputs; this fits step times only). Mixtral is not in AIConfigurator's data.

Per family (Hopper, Blackwell) and per serving engine with fitting rows in that family (the engines' MoE
kernels differ more than one curve per family can follow), the fit grid-searches, least squared log error of
roofline / silicon step time (an engine without fitting rows, e.g. SGLang on Hopper, keeps the family's
constants; ``--family`` refits those too, over all engines' rows):
  moe_compute_eff        grouped expert GEMMs relative to dense ones at saturation
  moe_rows_half          tokens per expert at which the grouped GEMM reaches half of moe_compute_eff
  moe_tp_slice_rows      TP slicing: an expert sliced moe_tp ways loses efficiency as if its rows were
                         divided by (1 + (moe_tp - 1) * this); 0 = slicing costs nothing
  moe_layer_overhead_us  fixed time per MoE layer per step (router, permute, grouped-GEMM launches)
  moe_roof_k             soft roofline of the routed experts, (compute^k + weight reads^k)^(1/k); 0 = max
  moe_prefill_eff        prefill tokens' expert GEMM efficiency relative to decode tokens' (per engine only)
Prints the fit table (best constants, rms log error, the hardware.yaml lines) and the residuals per slice
(family, engine, phase), before and after.

    /tmp/silvenv/bin/python benchmarks/sim_fit_moe.py     # builds benchmarks/data/sim_moe_grid.json once
    PYTHONPATH=src python benchmarks/sim_fit_moe.py       # from the cached grid
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "src"))

from servelab.sim.catalog import Family  # noqa: E402
from servelab.sim.costmodel import RooflineCost  # noqa: E402
from servelab.sim.target import parse_sim_target  # noqa: E402

CACHE = Path(__file__).parent / "data" / "sim_moe_grid.json"

SPECS = [
    "gpt-oss-120b@1x{hw},engine=vllm",
    "gpt-oss-120b@1x{hw},engine=trtllm",
    "gpt-oss-120b@2x{hw},tp=2,engine=vllm",
    "gpt-oss-120b@4x{hw},ep=4,dp_attention=true,engine=trtllm",
    "gpt-oss-20b@1x{hw},engine=trtllm",
    "gpt-oss-20b@1x{hw},engine=vllm",
    "qwen3-30b-a3b@2x{hw},dtype=fp8,ep=2,engine=vllm",
    "qwen3-30b-a3b@1x{hw},dtype=fp8,engine=trtllm",
    "qwen3-235b-a22b@8x{hw},tp=8,engine=vllm",
    "qwen3-235b-a22b@8x{hw},dtype=fp8,ep=8,dp_attention=true,engine=trtllm",
    "qwen3-235b-a22b@4x{hw},dtype=fp8,tp=4,engine=trtllm",
    "deepseek-v3@8x{hw},dtype=fp8,tp=8,engine=vllm",
    "deepseek-v3@8x{hw},dtype=fp8,ep=8,dp_attention=true,engine=sglang",
    "deepseek-v3@8x{hw},dtype=fp8,ep=8,dp_attention=true,engine=trtllm",
]
BLACKWELL_EXTRA = [
    "qwen3-235b-a22b@4x{hw},dtype=fp4,ep=4,dp_attention=true,engine=trtllm",
    "deepseek-v3@4x{hw},dtype=fp4,ep=4,dp_attention=true,engine=trtllm",
    "qwen3-30b-a3b@1x{hw},dtype=fp4,engine=trtllm",
]
HARDWARE = {"h100": "fit", "b200": "fit", "h200": "check"}
SHAPES = [("decode", n, c, 0) for c in (2048, 8192) for n in (1, 8, 32, 128, 256, 512, 1024, 2048)] + [
    ("prefill", 0, 0, p) for p in (512, 2048, 8192)
]
GRID = {
    "moe_compute_eff": (0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0),
    "moe_rows_half": (0, 4, 8, 16, 32, 64, 128, 256),
    "moe_tp_slice_rows": (0.0, 0.5, 1.0),
    "moe_layer_overhead_us": (0, 5, 10, 15, 30, 50, 80),
    "moe_roof_k": (0, 1.5, 2, 4),
    "moe_size_half": (0, 1, 2, 4, 8),
}
# ``--only FAMILY/ENGINE`` (e.g. nvidia-blackwell/trtllm) refits that engine alone; every other engine keeps
# the catalog's constants. The wider grid (moe_compute_eff above 1, moe_rows_half above 64, MoE layer
# overheads under 15 us, moe_size_half)
# came with the per-expert size term (the Blackwell TRT-LLM fit sat at the old grid's edge).
PREFILL_EFF = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5)  # moe_prefill_eff, per engine
# An engine keeps the family's constants unless its own lower the rms log error on its fitting rows by this
# much (relative): a flat loss picks constants the data do not support, and they move untested rows.
MIN_GAIN = 0.05


def args_of(r: dict) -> tuple[int, int, int, int, int]:
    n, c, p = r["n"], r["ctx"], r["p"]
    return n, n * c, p, p * (p + 1) // 2, p


def build() -> list[dict]:
    if CACHE.is_file():
        return json.loads(CACHE.read_text())
    from servelab.sim.stepcost import make_step_cost

    rows = []
    for hw in HARDWARE:
        for spec in SPECS + (BLACKWELL_EXTRA if hw == "b200" else []):
            s = spec.format(hw=hw)
            try:
                dep = parse_sim_target("sim:" + s + ",backend=silicon,expert_skew=0")
                cost = make_step_cost(dep)
            except Exception as exc:  # does not fit, or no measured kernel for it
                print(f"  skip {s}: {str(exc).splitlines()[0][:110]}", file=sys.stderr)
                continue
            for phase, n, c, p in SHAPES:
                r = {"spec": s, "hw": hw, "family": dep.family.name, "engine": dep.engine.split(":")[0],
                     "phase": phase, "n": n, "ctx": c, "p": p}
                if dep.max_num_seqs and n > dep.max_num_seqs * max(dep.attn_dp, 1):
                    continue
                r["silicon_s"] = cost.step(*args_of(r)).time_s
                rows.append(r)
            print(f"  priced {s}", file=sys.stderr, flush=True)
    CACHE.parent.mkdir(exist_ok=True)
    CACHE.write_text(json.dumps(rows, indent=0))
    return rows


_deps: dict = {}
_costs: dict = {}


def roof_s(r: dict, fam: Family | None = None) -> float:
    dep = _deps.get(r["spec"])
    if dep is None:
        dep = _deps[r["spec"]] = parse_sim_target("sim:" + r["spec"] + ",backend=roofline,expert_skew=0")
    if fam is not None:
        dep = replace(dep, family=fam)
    key = (r["spec"], dep.family)
    cost = _costs.get(key)
    if cost is None:
        if len(_costs) > 4000:
            _costs.clear()
        cost = _costs[key] = RooflineCost(dep)
    return cost.step(*args_of(r)).time_s


def slice_of(r: dict) -> str:
    phase = r["phase"] if r["phase"] == "prefill" else ("decode<=32" if r["n"] <= 32 else "decode>32")
    return f"{r['family'][7:]:<10} {r['engine']:<7} {phase}"


def fam_of(r: dict, fams: dict[str, Family]) -> Family | None:
    """The fitted constants of a row: its (family, engine)'s, else its family's, else None (the catalog's)."""
    return fams.get(f"{r['family']}/{r['engine']}") or fams.get(r["family"])


def report(rows: list[dict], fams: dict[str, Family], title: str) -> float:
    print(f"\n{title}")
    print(f"{'slice':<32} {'set':<6} {'n':>3} {'median |err|':>13} {'max |err|':>10} {'median err':>11}")
    items = [(slice_of(r), r["set"], roof_s(r, fam_of(r, fams)) / r["silicon_s"] - 1) for r in rows]
    for s, k in sorted({(s, k) for s, k, _ in items}):
        e = [x for s2, k2, x in items if (s2, k2) == (s, k)]
        print(f"{s:<32} {k:<6} {len(e):>3} {100 * statistics.median(abs(x) for x in e):>12.1f}% "
              f"{100 * max(abs(x) for x in e):>9.1f}% {100 * statistics.median(e):>+10.1f}%")
    for k in ("fit", "check"):
        e = [abs(x) for _, k2, x in items if k2 == k]
        print(f"{k} set: median |err| {100 * statistics.median(e):.1f}%, max {100 * max(e):.1f}%, n={len(e)}")
    return statistics.median(abs(x) for _, k2, x in items if k2 == "check")


def loss_of(mine: list[dict], fam: Family) -> float:
    return sum(math.log(roof_s(r, fam) / r["silicon_s"]) ** 2 for r in mine)


def _grid(key: str) -> dict:
    """The fit grid for ``key`` (family/engine): 'moe_size_half' only searched where asked with --only."""
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    return GRID if only == key else {**GRID, "moe_size_half": (0,)}


def fit_engine(rows: list[dict], base: Family, engine: str, family: Family) -> Family | None:
    """Grid-search the MoE constants and moe_prefill_eff on one engine's fitting rows of ``base``'s family.
    ``base``: the family as the catalog gives it to that engine; ``family``: without engine constants. None
    when the engine has no fitting rows or its own constants do not beat the family's by MIN_GAIN."""
    mine = [r for r in rows if r["family"] == base.name and r["engine"] == engine and r["set"] == "fit"]
    if not mine:
        return None
    dec = [r for r in mine if r["phase"] != "prefill"]
    pre = [r for r in mine if r["phase"] == "prefill"]
    best, best_loss = base, math.inf
    grid = _grid(f"{base.name}/{engine}")
    for vals in itertools.product(*grid.values()):
        fam = replace(base, **dict(zip(grid, vals, strict=True)))
        d_loss = loss_of(dec, fam)  # decode rows do not depend on moe_prefill_eff
        if d_loss >= best_loss:
            continue
        for pf in PREFILL_EFF:
            fam_pf = replace(fam, moe_prefill_eff=pf)
            loss = d_loss + loss_of(pre, fam_pf)
            if loss < best_loss:
                best, best_loss = fam_pf, loss
    kv = " ".join(f"{k}={getattr(best, k)}" for k in (*GRID, "moe_prefill_eff"))
    rms, rms_family = math.sqrt(best_loss / len(mine)), math.sqrt(loss_of(mine, family) / len(mine))
    keep = rms <= rms_family * (1 - MIN_GAIN)
    print(f"{base.name} {engine}: {kv}  rms log error {rms:.3f} (family's constants {rms_family:.3f}, "
          f"catalog {math.sqrt(loss_of(mine, base) / len(mine)):.3f}) over {len(mine)} fitting rows"
          + ("" if keep else f": gain under {MIN_GAIN:.0%}, the family's constants stay"))
    return best if keep else None


def fit(rows: list[dict], base: Family) -> Family:
    mine = [r for r in rows if r["family"] == base.name and r["set"] == "fit"]
    best, best_loss = base, math.inf
    for vals in itertools.product(*GRID.values()):
        fam = replace(base, **dict(zip(GRID, vals, strict=True)))
        loss = sum(math.log(roof_s(r, fam) / r["silicon_s"]) ** 2 for r in mine)
        if loss < best_loss:
            best, best_loss = fam, loss
    base_loss = sum(math.log(roof_s(r, base) / r["silicon_s"]) ** 2 for r in mine)
    kv = " ".join(f"{k}={getattr(best, k)}" for k in GRID)
    print(f"{base.name}: {kv}  rms log error {math.sqrt(best_loss / len(mine)):.3f} "
          f"(catalog {math.sqrt(base_loss / len(mine)):.3f}) over {len(mine)} fitting rows")
    return best


def main() -> None:
    rows = build()
    for r in rows:
        r["set"] = HARDWARE[r["hw"]]
    report(rows, {}, "roofline (catalog constants) vs silicon MoE step times")
    if "--no-fit" in sys.argv:
        return
    print("\nfit (least squared log error on the fitting rows):")
    fams: dict[str, Family] = {}
    adopted: set[str] = set()
    for name in sorted({r["family"] for r in rows}):
        family = parse_sim_target("sim:gpt-oss-20b@1x" + ("h100" if "hopper" in name else "b200")).family
        if "--family" in sys.argv:
            family = fams[name] = fit(rows, replace(family, engines=()))
        for engine in sorted({r["engine"] for r in rows if r["family"] == name}):
            if "--only" in sys.argv and sys.argv[sys.argv.index("--only") + 1] != f"{name}/{engine}":
                fams[f"{name}/{engine}"] = family.for_engine(engine)  # the catalog's, unchanged
                continue
            got = fit_engine(rows, family.for_engine(engine), engine, family.for_engine(None))
            if got is not None:
                adopted.add(f"{name}/{engine}")
            fams[f"{name}/{engine}"] = got or family.for_engine(None)
    print("\nhardware.yaml, per family:  engines: {ENGINE: {...}}")
    for key, fam in sorted(fams.items()):
        if key in adopted:
            print(f"  {key}: {{" + ", ".join(f"{k}: {getattr(fam, k):g}" for k in (*GRID, "moe_prefill_eff"))
                  + "}")
    report(rows, fams, "roofline (fitted constants) vs silicon MoE step times")


if __name__ == "__main__":
    main()
