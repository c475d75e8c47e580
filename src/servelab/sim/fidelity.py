"""How far to trust a simulated run: its configuration's fidelity class and what the fidelity benchmark
measured for that class against published results the simulator was never fitted on.

``benchmarks/sim_fidelity.py`` prints the check set's median |error| per slice (backend x dense/MoE x GPU
family x engine); :data:`MEASURED` holds the last figures it printed (docs/simulator.md, "Fidelity"), so a
run's summary can say "12.6% median error on 12 published results" rather than only a class name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servelab.sim.deployment import Deployment

# (backend, GPU kind, moe, engine) -> (median |error| %, published rows, what the rows measured).
# Throughput slices unless the label says otherwise; benchmarks/sim_fidelity.py --no-grid, 2026-12-05.
MEASURED: dict[tuple[str, str, bool, str], tuple[float, int, str]] = {
    ("silicon", "hopper", False, "trtllm"): (3.3, 16, "TensorRT-LLM throughput"),
    ("silicon", "blackwell", False, "trtllm"): (6.8, 12, "TensorRT-LLM FP4 throughput"),
    ("silicon", "hopper", True, "trtllm"): (7.1, 25, "TensorRT-LLM throughput"),
    ("silicon", "blackwell", True, "trtllm"): (11.9, 48, "TensorRT-LLM throughput"),
    ("silicon", "hopper", True, "vllm"): (11.2, 12, "vLLM-at-defaults throughput"),
    ("roofline", "hopper", False, "trtllm"): (8.2, 16, "TensorRT-LLM throughput"),
    ("roofline", "blackwell", False, "trtllm"): (14.7, 12, "TensorRT-LLM FP4 throughput"),
    ("roofline", "hopper", True, "trtllm"): (11.1, 25, "TensorRT-LLM throughput"),
    ("roofline", "blackwell", True, "trtllm"): (11.4, 48, "TensorRT-LLM throughput"),
    ("roofline", "hopper", True, "sglang"): (7.8, 3, "SGLang multi-node prefill throughput"),
    ("roofline", "hopper", True, "vllm"): (15.6, 12, "vLLM-at-defaults throughput"),
    ("roofline", "amd", False, "vllm"): (17.0, 4, "vLLM batch latency, too fast"),
}


def gpu_kind(family: str) -> str:
    """hopper, blackwell, amd, tpu or the family's own name."""
    for kind in ("hopper", "blackwell", "amd", "tpu"):
        if kind in family:
            return kind
    return family


def measured(backend: str, family: str, moe: bool, engine: str) -> dict[str, Any] | None:
    """The check-set figure for this slice: the engine's own where measured, else the nearest engine's on the
    same backend, GPU kind and model kind (``same_engine`` False); None where no published row is close."""
    kind, eng = gpu_kind(family), engine.split(":")[0].lower()
    if kind == "amd" and family != "amd-cdna3":  # the AMD rows are MI300X (CDNA3) only
        return None
    hit = MEASURED.get((backend, kind, moe, eng))
    same = hit is not None
    if hit is None:
        near = [k for e in ("trtllm", "vllm", "sglang") if (k := (backend, kind, moe, e)) in MEASURED]
        if not near:
            return None
        hit = MEASURED[near[0]]
    pct, n, what = hit
    return {"median_abs_error_pct": pct, "published_rows": n, "slice": what, "same_engine": same}


def fidelity(dep: Deployment, backend: str) -> dict[str, Any]:
    """This run's fidelity class, a note on what it rests on, and the measured error of its slice."""
    fam, moe = dep.family.name, dep.model.is_moe
    kind = gpu_kind(fam)
    if kind == "tpu":
        cls, note = "unvalidated", "roofline priors; no published TPU result is in the fidelity set"
    elif fam == "amd-cdna3":
        cls, note = "prior", "roofline with MI300X efficiencies from public measurements (no AMD kernel data)"
    elif kind == "amd":
        cls, note = "unvalidated", "roofline priors; no published result for this AMD GPU is in the set"
    elif backend == "silicon":
        cls, note = "silicon", "step costs from AIConfigurator's measured kernels; scheduler and overheads " \
                               "are servelab's"
    elif not moe:
        cls, note = "calibrated", "roofline fitted on AIConfigurator kernel step times (dense)"
    else:
        cls, note = "approximate", "roofline; MoE constants fitted on AIConfigurator MoE step times, " \
                                   "routing skew and all-to-all from published DeepEP/SGLang figures"
    eng = dep.engine or ""
    return {"backend": backend, "class": cls, "note": note, "engine": dep.engine, "hardware_family": fam,
            "moe": moe, "check": measured(backend, fam, moe, eng)}

