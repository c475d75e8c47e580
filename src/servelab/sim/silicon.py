"""The ``silicon`` step-cost backend: NVIDIA AIConfigurator's measured kernel database.

Optional (``pip install 'servelab[silicon]'`` = ``aiconfigurator-core==0.12.0``, Apache-2.0, works offline:
the database ships inside the wheel). Each step becomes one forward-pass metrics record per attention-DP
rank (scheduled prefill requests and tokens, decode requests and the sum of their KV lengths) and
``RustForwardPassPerfModel.estimate_forward_pass_time_ms`` prices it from GEMM, attention, MLA, MoE and
NCCL/DeepEP latencies measured on the GPU for that engine. Results are cached by the quantized step shape.

AIConfigurator gives the total only; the compute/memory/communication split, the expert imbalance and the
all-to-all bytes reported beside it are the roofline's for the same step, scaled to the silicon total.
Coverage: H100, H200, B200, GB200 with vLLM, SGLang and TensorRT-LLM; the models below. Anything else (AMD,
TPU, H800, Llama-2, sim-tiny) is priced by the roofline.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
from typing import TYPE_CHECKING

from servelab.sim.stepcost import StepTime

if TYPE_CHECKING:
    from servelab.sim.costmodel import RooflineCost
    from servelab.sim.deployment import Deployment

MODEL_PATHS = {
    "DeepSeek-V3": "deepseek-ai/DeepSeek-V3",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
    "Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "Llama-3.1-405B": "meta-llama/Meta-Llama-3.1-405B",
    "Qwen3-235B-A22B": "Qwen/Qwen3-235B-A22B",
    "Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B",
}
SYSTEMS = {"H100": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm", "GB200": "gb200"}
ENGINES = ("vllm", "sglang", "trtllm")


def installed() -> bool:
    """The extra is importable (``SERVELAB_NO_SILICON=1`` hides it, as on a machine without it)."""
    if os.environ.get("SERVELAB_NO_SILICON", "") not in ("", "0"):
        return False
    return importlib.util.find_spec("aiconfigurator_core") is not None


def coverage(dep: Deployment) -> str | None:
    """None when the silicon backend can price ``dep``; else why not."""
    if not installed():
        return "the silicon extra is not installed (pip install 'servelab[silicon]')"
    if dep.model.name not in MODEL_PATHS:
        return f"no measured data for model {dep.model.name}"
    if dep.hardware.name not in SYSTEMS:
        return f"no measured data for hardware {dep.hardware.name} (covered: {', '.join(SYSTEMS)})"
    eng = dep.profile.name if dep.profile else dep.engine.split(":")[0]
    if eng not in ENGINES:
        return f"no measured data for engine {eng}"
    if dep.group_nodes() > 1:
        # Measured: AIConfigurator 0.12 prices DeepSeek-V3 EP16 decode over 2 x 8 H200 at about a third of one
        # node's per-node throughput at every batch (SGLang, 512-8192 sequences), against LMSYS's published
        # large-EP results; its cross-node all-to-all is not trusted here.
        return "one model group spans nodes: cross-node expert/tensor parallelism is priced by the roofline"
    return None


def _dtype(dep: Deployment, which: str) -> str:
    d = getattr(dep, which)
    if d in ("bf16", "fp16"):
        return "bfloat16" if d == "bf16" else "float16"
    if d == "fp8":
        return "fp8_block" if dep.model.attention["kind"] == "mla" else "fp8"
    return "nvfp4" if dep.hardware.fp4_tflops else "fp8"


def _moe_dtype(dep: Deployment) -> str:
    e = dep.expert_dtype
    if e != "fp4":
        return _dtype(dep, "expert_dtype")
    if dep.model.ffn.get("expert_dtype") == "fp4":  # MXFP4 checkpoint (gpt-oss)
        eng = dep.profile.name if dep.profile else dep.engine.split(":")[0]
        if dep.hardware.fp4_tflops and eng in ("trtllm", "sglang"):
            # Blackwell: TensorRT-LLM (CUTLASS / TRTLLM MoE backends) and SGLang (flashinfer mxfp4 MoE,
            # default precision) quantize the activations to MXFP8: AIConfigurator's w4a8_mxfp4_mxfp8 rows
            # (TRT-LLM moe_torch_flow, SGLang flashinfer_trtllm_moe). Not "w4a8_mxfp4_mxfp8_trtllm": that
            # name is DeepSeek-V4's SGLang kernel, and the native config drops it for gpt-oss, falling back
            # to the checkpoint's W4A16 without a word (a B200 decode step 2.4x too slow). vLLM's B200 data
            # has only W4A16 (flashinfer mxfp4 x bf16); Hopper has no FP8-activation MXFP4 path.
            return "w4a8_mxfp4_mxfp8"
        return "w4a16_mxfp4"
    return "nvfp4" if dep.hardware.fp4_tflops else "w4afp8"


def uses_marlin(dep: Deployment) -> bool:
    """MXFP4 experts on Hopper that the engine version runs with Marlin (vLLM before 0.12: engines.yaml)."""
    return dep.mxfp4_marlin


def _loglog(pts: list[tuple[float, float]], x: float) -> float:
    """Log-log interpolation in ``pts`` (ascending x, all > 0), held flat beyond either end."""
    if x <= pts[0][0]:
        return pts[0][1]
    if x >= pts[-1][0]:
        return pts[-1][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x <= x1:
            if x1 == x0:
                return y1
            f = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return math.exp(math.log(y0) + f * (math.log(y1) - math.log(y0)))
    return pts[-1][1]


def envelope(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Running maximum of y over ascending x (a kernel's dips at its tile edges belong to its own shape)."""
    out, best = [], 0.0
    for x, y in sorted(pts):
        best = max(best, y)
        out.append((x, best))
    return out


Curve = list[tuple[float, float]]


def marlin_factor(tpe: float, triton_tf: Curve, marlin_tf: Curve) -> float:
    """How much longer Marlin takes than Triton for MXFP4 experts at ``tpe`` tokens per expert: the ratio of
    their achieved TFLOP/s there (``(tokens per expert, TFLOP/s)`` points; Marlin's as its envelope), never
    below 1 (below ~1 token per expert the two tables' shapes, not the kernels, set the ratio)."""
    if tpe <= 0:
        return 1.0
    return max(1.0, _loglog(triton_tf, tpe) / _loglog(envelope(marlin_tf), tpe))


class MarlinMoE:
    """AIConfigurator's vLLM Hopper MoE rows for MXFP4 are OpenAI's Triton kernel (``matmul_ogs``, vLLM
    0.24.0), which the forward-pass model prices; older vLLM ran these experts with Marlin W4A16. Each step
    gets ``layers x t_triton(tokens) x (marlin_factor - 1)`` added: t_triton from the same table's Triton
    rows for this model, expert TP/EP and power-law routing (alpha 1.2, the rows the forward pass reads);
    the factor from the Triton rows (balanced, no TP/EP) against the table's Marlin MXFP4 W4A16 rows (another
    model's shape, balanced, no TP/EP), compared at equal tokens per expert."""

    def __init__(self, dep: Deployment) -> None:
        import glob

        import aiconfigurator_core
        import pandas as pd

        from servelab.sim.engines import version_key

        m = dep.model
        self.layers, self.topk, self.experts = m.n_moe_layers, m.top_k, m.n_experts
        hidden, inter = m.hidden, int(m.ffn["expert_intermediate"])
        root = os.path.dirname(aiconfigurator_core.__file__)
        system = SYSTEMS[dep.hardware.name]
        files = sorted(glob.glob(os.path.join(root, "systems", "data", system, "moe", "vllm", "*",
                                              "moe_perf.parquet")),
                       key=lambda f: version_key(os.path.basename(os.path.dirname(f))))
        t = None
        for f in files:
            d = pd.read_parquet(f)
            if d.kernel_source.str.contains("gptossmxfp4moe_triton").any():
                t = d
        if t is None:
            raise RuntimeError(f"no vLLM MXFP4 Triton MoE rows for {dep.hardware.name}")
        tri = t[t.kernel_source.str.contains("gptossmxfp4moe_triton") & (t.hidden_size == hidden)
                & (t.inter_size == inter) & (t.topk == self.topk) & (t.num_experts == self.experts)]
        mar = t[t.kernel_source.str.contains("marlin") & (t.moe_dtype == "w4a16_mxfp4")]

        def tflops(rows: pd.DataFrame) -> list[tuple[float, float]]:
            rows = rows[(rows.moe_tp_size == 1) & (rows.moe_ep_size == 1) & (rows.distribution == "balanced")]
            return sorted((r.num_tokens * r.topk / r.num_experts,
                           2 * r.num_tokens * r.topk * 3 * r.hidden_size * r.inter_size / r.latency / 1e9)
                          for r in rows.itertuples())

        lat = tri[(tri.moe_tp_size == dep.moe_tp) & (tri.moe_ep_size == dep.ep)
                  & (tri.distribution == "power_law_1.2")]
        self.triton_ms = sorted((float(r.num_tokens), float(r.latency)) for r in lat.itertuples())
        self.triton_tf, self.marlin_tf = tflops(tri), tflops(mar)
        if not (self.triton_ms and self.triton_tf and self.marlin_tf):
            raise RuntimeError(f"no Triton/Marlin MXFP4 MoE rows for {m.name} on {dep.hardware.name}")

    def extra_s(self, tokens: float) -> float:
        """Seconds Marlin adds over Triton to a step of ``tokens`` tokens per rank."""
        if tokens <= 0:
            return 0.0
        f = marlin_factor(tokens * self.topk / self.experts, self.triton_tf, self.marlin_tf)
        return self.layers * _loglog(self.triton_ms, tokens) * (f - 1.0) * 1e-3


def engine_config(dep: Deployment) -> dict:
    """AIConfigurator's engine config for one replica of ``dep``."""
    eng = dep.profile.name if dep.profile else dep.engine.split(":")[0]
    attn_dp = dep.attn_dp
    cfg = {
        "schema_version": 1,
        "model_name": MODEL_PATHS[dep.model.name],
        "system_name": SYSTEMS[dep.hardware.name],
        "backend": eng,
        "backend_version": None,
        "tp_size": dep.attn_tp,
        "pp_size": dep.pp,
        "attention_dp_size": attn_dp,
        "weight_dtype": _dtype(dep, "dtype"),
        "kv_cache_dtype": "fp8" if dep.kv_dtype == "fp8" else "bfloat16",
        # attention (FMHA) precision. MLA's context kernels were measured in BF16 only (beside a BF16 or FP8
        # latent cache; TRT-LLM and SGLang tables on H100-GB200): FP8 finds no data and fails the build.
        "activation_dtype": (
            "fp8" if dep.kv_dtype == "fp8" and dep.model.attention["kind"] != "mla" else "bfloat16"
        ),
    }
    if dep.model.is_moe:
        cfg.update(moe_tp_size=dep.moe_tp, moe_ep_size=dep.ep, moe_dtype=_moe_dtype(dep))
    if dep.spec_tokens:
        cfg["nextn"] = dep.spec_tokens
    return cfg


def _q(x: float) -> int:
    from servelab.sim.costmodel import _q as q
    return q(x)


def _dq(k: int) -> float:
    from servelab.sim.costmodel import _dq as dq
    return dq(k)


class SiliconCost:
    """Step times from AIConfigurator's per-step API, memoized by quantized step shape."""

    name = "silicon"
    marlin: MarlinMoE | None = None  # Marlin MXFP4 experts (vLLM before 0.12 on Hopper): see MarlinMoE

    def __init__(self, dep: Deployment, roofline: RooflineCost) -> None:
        logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
        from dataclasses import replace

        from aiconfigurator_core.sdk.rust_engine_step import RustForwardPassPerfModel

        from servelab.sim.costmodel import RooflineCost

        self.dep, self.roof = dep, roofline
        # The step of a skewed deployment is stretched by the roofline's ratio of skewed to balanced time (the
        # slowest EP rank sets it). Caveat, measured: AIConfigurator's forward-pass model reads its MoE rows
        # measured under power-law routing on the busiest EP rank (alpha 1.2; 1.01 for DeepSeek), not balanced
        # ones (a gpt-oss-20b B200 decode step moves by exactly 24 layers x the power_law_1.2 rows' difference
        # between two MoE dtypes), so default routing counts skew twice (x1.04-1.16 on EP 2-8 decode steps).
        self.balanced = (
            RooflineCost(replace(dep, expert_skew=0.0)) if dep.model.is_moe and dep.ep > 1 else None
        )
        self.config = engine_config(dep)
        self.model = RustForwardPassPerfModel.from_native(self.config)
        self.ranks = dep.attn_dp
        self.misses = 0  # steps the database could not price (the roofline priced them)
        self.marlin = MarlinMoE(dep) if uses_marlin(dep) else None
        self._memo: dict[tuple[int, ...], StepTime] = {}
        # Probe once so an uncovered kernel shape fails here (and auto falls back), not mid-run.
        if self._ms(1, 64, 0, 0) is None or self._ms(0, 0, 8, 8 * 1024) is None:
            raise RuntimeError("AIConfigurator returned no estimate for a probe step")

    def _ms(self, n_pre: int, p_tok: float, n_dec: float, kv: float) -> float | None:
        r = self.ranks
        fpm = {"version": 1, "worker_id": "servelab", "dp_rank": 0, "counter_id": 0, "wall_time": 0.0,
               "scheduled_requests": {
                   "num_prefill_requests": int(-(-n_pre // r)), "sum_prefill_tokens": int(round(p_tok / r)),
                   "var_prefill_length": 0.0, "num_decode_requests": int(-(-n_dec // r)),
                   "sum_decode_kv_tokens": int(round(kv / r)), "var_decode_kv_tokens": 0.0},
               "queued_requests": {}}
        try:
            # The ranks carry equal shares, and an iteration is priced on its busiest rank's load: one record
            # stands for all of them (the same figure, several times faster than a list of identical ones).
            return self.model.estimate_forward_pass_time_ms(fpm)
        except ValueError:  # PerfDataNotAvailableError: no measured kernel for this shape
            self.misses += 1
            return None

    def step(self, n_dec: int, ctx_dec: int, p_tok: int = 0, p_pairs: int = 0, p_ctx: int = 0) -> StepTime:
        key = (_q(n_dec), _q(ctx_dec), _q(p_tok), _q(p_pairs), _q(p_ctx))
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        if len(self._memo) > 200_000:
            self._memo.clear()
        nd, cd, pt, pp_, pc = (_dq(k) for k in key)
        rf = self.roof.step(n_dec, ctx_dec, p_tok, p_pairs, p_ctx)
        # Prefill requests in the step: chunks average p_ctx / p_tok context each; at least one.
        n_pre = 0 if not pt else max(1, round(pt * pt / max(2 * pp_ - pt, pt)))
        ms = self._ms(n_pre, pt, nd, cd + nd) if (nd or pt) else 0.0
        if ms is None:
            out = rf
        else:
            t = ms * 1e-3
            if self.marlin is not None:
                t += self.marlin.extra_s((pt + nd) / self.ranks)
            if pt and pc > pt:
                # The forward-pass record has no field for the context a prefill chunk continues (a long
                # prompt's 2nd, 3rd ... chunk): AIConfigurator prices n_pre fresh chunks of pt / n_pre
                # tokens. Add the roofline's price of the attention pairs and context reads beyond those.
                fresh = pt * (pt / n_pre + 1) / 2
                if p_pairs > fresh:
                    alone = self.roof.step(n_dec, ctx_dec, p_tok, int(fresh), p_tok).time_s
                    t += max(0.0, rf.time_s - alone)
            if self.balanced is not None:
                t *= rf.time_s / max(self.balanced.step(n_dec, ctx_dec, p_tok, p_pairs, p_ctx).time_s, 1e-12)
            k = t / rf.time_s if rf.time_s > 0 else 0.0
            out = StepTime(t, rf.compute_s * k, rf.memory_s * k, rf.comm_s * k, rf.imbalance, rf.a2a_bytes)
        self._memo[key] = out
        return out
