"""Fit the roofline's MLA constants for vLLM on Hopper on AIConfigurator's step times of DeepSeek-V3 FP8, TP8.

The reference: AIConfigurator 0.12's vLLM 0.27.0 op-level model of DeepSeek-V3 (FP8 block-scaled GEMMs and
experts, BF16 KV cache, TP8 = MoE TP8) on 8 x H100 and 8 x H200: prefill steps of 512-8192 fresh tokens and
decode steps of 1-256 sequences at 2K context, each with its per-op breakdown (the silicon backend prices the
same steps within 3%). FITTING set: H100 rows (8 x H100 cannot hold the FP8 weights; the deployment is the
H200 one with H100s put in, unvalidated); CHECK set: H200 rows. None of the published rows of
benchmarks/fidelity_cases.yaml take part.

Fixed from the kernels' structure, not fitted:
  mla_act_passes  32  elementwise passes over the BF16 hidden state a token and layer: two residual add +
                      RMSNorm (2 reads + 2 writes each: 8), FP8 activation quantization before the GEMMs (~4),
                      the fused MoE's top-8 per-expert BF16 output rows written and read back by its sum (16)
                      and its gathered FP8 inputs (4)
  mla_moe_comm     2  AIConfigurator prices vLLM's TP MoE pre- and post-dispatch as one TP collective each,
                      the size of the hidden-state all-reduce
Grid-searched (least squared log error of roofline / reference step time on the fitting rows):
  mla_attn_eff, mla_layer_floor_us, mla_prefill_overhead_us

    /tmp/silvenv/bin/python benchmarks/sim_fit_mla.py     # builds benchmarks/data/sim_mla_grid.json once
    PYTHONPATH=src python benchmarks/sim_fit_mla.py       # from the cached grid
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "src"))

from servelab.sim.catalog import default_catalog  # noqa: E402
from servelab.sim.costmodel import RooflineCost  # noqa: E402
from servelab.sim.target import parse_sim_target  # noqa: E402

CACHE = Path(__file__).parent / "data" / "sim_mla_grid.json"
SPEC = "sim:deepseek-v3@8xh200,tp=8,dtype=fp8,engine=vllm,backend=roofline,expert_skew=0"
SYSTEMS = {"h100": "h100_sxm", "h200": "h200_sxm"}
HARDWARE = {"h100": "fit", "h200": "check"}
PREFILL = (512, 1024, 2048, 4096, 8192)
DECODE = (1, 4, 8, 16, 32, 64, 128, 256)
FIXED = {"mla_act_passes": 32.0, "mla_moe_comm": 2.0}
GRID = {
    "mla_attn_eff": (0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7, 0.85, 1.0),
    "mla_layer_floor_us": (0, 200, 220, 240, 250, 260, 280),
    "mla_prefill_overhead_us": (0, 100, 150, 200, 250, 300, 400),
}
NEUTRAL = {"mla_attn_eff": 1.0, "mla_act_passes": 0.0, "mla_moe_comm": 0.0, "mla_layer_floor_us": 0.0,
           "mla_prefill_overhead_us": 0.0}


def build() -> list[dict]:
    """AIConfigurator's step time and per-op breakdown (ms) for every row (cached)."""
    if CACHE.is_file():
        return json.loads(CACHE.read_text())
    import logging

    from aiconfigurator_core.sdk import common, config
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.perf_database import get_database
    from aiconfigurator_core.sdk.step_estimate import MixedStepInput

    logging.disable(logging.WARNING)
    rows = []
    for hw, system in SYSTEMS.items():
        db = get_database(system, "vllm", "0.27.0")
        mc = config.ModelConfig(tp_size=8, gemm_quant_mode=common.GEMMQuantMode.fp8_block,
                                moe_quant_mode=common.MoEQuantMode.fp8_block,
                                kvcache_quant_mode=common.KVCacheQuantMode.bfloat16,
                                fmha_quant_mode=common.FMHAQuantMode.bfloat16, moe_tp_size=8, moe_ep_size=1)
        model, be = get_model("deepseek-ai/DeepSeek-V3", mc, "vllm"), get_backend("vllm")
        for p in PREFILL:
            est = be.run_mixed(model, db, config.RuntimeConfig(isl=p, osl=2, batch_size=1),
                               MixedStepInput(context_tokens=p, num_decode_requests=0))
            ops = {k.removeprefix("context_"): v for k, v in est.per_op_latency_ms.items() if v}
            rows.append({"hw": hw, "phase": "prefill", "n": p, "ms": est.latency_ms, "ops": ops})
        for n in DECODE:
            rc = config.RuntimeConfig(isl=2048, osl=2, batch_size=n)
            ms, _, ops, _, _ = be._get_genonly_step_latency(model, db, rc, n, 2048, 2)
            rows.append({"hw": hw, "phase": "decode", "n": n, "ms": ms,
                         "ops": {k.removeprefix("generation_"): v for k, v in ops.items() if v}})
        print(f"  priced {hw}", file=sys.stderr, flush=True)
    CACHE.parent.mkdir(exist_ok=True)
    CACHE.write_text(json.dumps(rows, indent=0))
    return rows


def deployments() -> dict:
    base = parse_sim_target(SPEC)
    cat = default_catalog()
    h100 = cat.get_hardware("H100")
    return {"h200": base, "h100": replace(base, hardware=h100, family=cat.family(h100))}


def cost(dep, consts: dict) -> RooflineCost:
    fam = replace(dep.family.for_engine("vllm"), engines=(), **{**NEUTRAL, **consts})
    return RooflineCost(replace(dep, family=fam))


def args_of(r: dict) -> tuple[int, ...]:
    n = r["n"]
    return (0, 0, n, n * (n + 1) // 2, n) if r["phase"] == "prefill" else (n, n * 2048)


def errors(rows: list[dict], deps: dict, consts: dict, hw: str) -> list[tuple[dict, float]]:
    c = cost(deps[hw], consts)
    return [(r, math.log(c.step(*args_of(r)).time_s * 1e3 / r["ms"])) for r in rows if r["hw"] == hw]


def rms(errs: list[tuple[dict, float]]) -> float:
    return math.sqrt(sum(e * e for _, e in errs) / len(errs))


def show(label: str, errs: list[tuple[dict, float]]) -> None:
    cells = " ".join(f"{r['phase'][0]}{r['n']}:{100 * math.expm1(e):+.0f}%" for r, e in errs)
    print(f"{label:<22} rms log {rms(errs):.3f}  {cells}")


def main() -> None:
    rows, deps = build(), deployments()
    print("AIConfigurator per-op ms (vLLM 0.27.0, DeepSeek-V3 FP8 TP8)")
    keys = sorted({k for r in rows for k in r["ops"]}, key=lambda k: -max(r["ops"].get(k, 0) for r in rows))
    keys = [k for k in keys if max(r["ops"].get(k, 0) for r in rows) >= 0.5]
    print(f"{'step':<18}" + "".join(f"{k[:12]:>13}" for k in keys) + f"{'total':>9}")
    for r in rows:
        print(f"{r['hw'] + ' ' + r['phase'] + ' ' + str(r['n']):<18}"
              + "".join(f"{r['ops'].get(k, 0):13.2f}" for k in keys) + f"{r['ms']:9.2f}")
    cat = {k: getattr(deps["h200"].family.for_engine("vllm"), k) for k in NEUTRAL}
    for hw, role in HARDWARE.items():
        show(f"neutral {hw} ({role})", errors(rows, deps, {}, hw))
    best = min((rms(errors(rows, deps, {**FIXED, **dict(zip(GRID, v, strict=True))}, "h100")),
                dict(zip(GRID, v, strict=True))) for v in itertools.product(*GRID.values()))
    print(f"best on the fitting rows: {best[1]} (with {FIXED}), rms log {best[0]:.4f}")
    for hw, role in HARDWARE.items():
        show(f"best {hw} ({role})", errors(rows, deps, {**FIXED, **best[1]}, hw))
    print(f"catalog (hardware.yaml nvidia-hopper engines.vllm): {cat}")
    for hw, role in HARDWARE.items():
        show(f"catalog {hw} ({role})", errors(rows, deps, cat, hw))


if __name__ == "__main__":
    main()
