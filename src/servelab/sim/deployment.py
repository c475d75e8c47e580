"""A simulated deployment: a model on some accelerators with serving-engine settings.

Parallelism (SGLang-like):

* ``nodes x gpus_per_node`` GPUs = ``tp * pp * dp``. ``dp`` replicas are independent engines; ``pp`` stages
  split the layers; within a stage ``tp`` GPUs form one model group.
* Attention is sharded ``tp`` ways by heads, or, with ``dp_attention``, data-parallel over the ``tp`` GPUs
  (each holds full attention weights and the KV cache of its own sequences; MLA caches cannot be sharded by
  heads, so without it every GPU of the group holds the whole latent cache).
* MoE experts are split over ``ep`` GPUs (``ep`` divides ``tp``) and sliced ``tp / ep`` ways within.

Memory per GPU = weights + activation reserve + KV cache, within ``hbm * gpu_memory_utilization``.
``pd="P:D"`` disaggregates: P nodes prefill, D nodes decode, each pool laid out with the same settings.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from servelab.errors import DeploymentError
from servelab.sim.catalog import DTYPE_BYTES, Catalog, Family, Hardware, ModelSpec, default_catalog
from servelab.sim.engines import EngineProfile, engine_profile

GB = 1e9
GIB = float(1 << 30)  # HBM capacities are sold in binary units: an "80 GB" H100 has 81,559 MiB (nvidia-smi)
DEFAULT_ENGINE = "vllm"
SLIDING_RESERVE_SEQS = 128
# Zipf exponent of expert popularity when the target does not say: routing measured on real traffic is skewed
# (SGLang reports 1.49x prefill / 2.54x decode speed-ups from its expert load balancer over unbalanced
# routing, facts/hardware.md); 0.6 over 256 experts puts the hottest of 32 ranks ~1.4x over the mean
# before sampling noise. eplb=true removes the static part; expert_skew=0 is perfectly balanced routing.
DEFAULT_EXPERT_SKEW = 0.6
RUNTIME_RESERVE_BYTES = 1.0 * GB  # CUDA context, graphs, allocator slack (assumption, vLLM-like)


@dataclass(frozen=True, slots=True)
class Memory:
    """Per-GPU memory plan of one stage of one replica (bytes), and the engine's KV capacity."""

    weights: float
    activations: float
    sliding_reserve: float
    usable: float
    kv_bytes_per_token: float  # per GPU, one stage, full-attention layers
    kv_tokens: int  # per replica (all attention ranks)
    kv_blocks: int
    weights_total: float  # whole model, one replica


@dataclass(frozen=True, slots=True)
class Deployment:
    model: ModelSpec
    hardware: Hardware
    family: Family
    gpus_per_node: int = 1
    nodes: int = 1
    tp: int = 0  # 0 = derived
    pp: int = 1
    dp: int = 0
    ep: int = 1
    dp_attention: bool = False
    dtype: str = "bf16"
    kv_dtype: str = ""  # "" = same as dtype (fp4 weights keep an fp8 cache)
    gpu_memory_utilization: float = 0.0  # 0 = the engine's default
    max_num_seqs: int = 0  # 0 = the engine's default; per attention rank under dp_attention
    max_num_batched_tokens: int = 0  # 0 = the engine's default; per attention rank under dp_attention
    max_model_len: int = 0  # 0 = the model's maximum
    block_size: int = 16
    prefix_caching: bool = True
    chunked_prefill: bool = True
    overlap: bool = False  # two micro-batches overlapping compute with communication
    eplb: bool = False
    expert_skew: float = -1.0  # Zipf exponent of expert popularity; 0 = balanced; < 0 = DEFAULT_EXPERT_SKEW
    spec_tokens: int = 0  # speculative (MTP) draft tokens per decode step
    spec_acceptance: float = 0.7
    pd: str = ""  # "P:D" nodes for disaggregated prefill/decode; "" = co-located
    natural_median: int = 256  # median natural output length (lognormal), tokens
    natural_sigma: float = 0.8
    slowdown: float = 1.0  # what-if: every step takes this many times longer (a slower or throttled device)
    engine: str = DEFAULT_ENGINE  # serving-engine profile: vllm | sglang | trtllm [:VERSION]
    cost_backend: str = "auto"  # step-cost backend: auto | silicon | roofline
    jitter: float = 0.02  # seeded spread of step times (sigma of a lognormal factor); 0 = none
    async_scheduling: bool | None = None  # None = the engine's default
    # The engine's host (CPU) time per step, per attention rank: step_cpu_us + step_cpu_per_seq_us x the
    # rank's running sequences (scheduling, input preparation, sampling and response bookkeeping). -1 = the
    # engine profile's figure; a what-if for a measured build or a faster or slower host CPU.
    step_cpu_us: float = -1.0
    step_cpu_per_seq_us: float = -1.0
    # CUDA-graph batch sizes (per attention rank) a decode-only step is padded up to, as TensorRT-LLM does
    # with cuda_graph_config enable_padding; () = no padding. Sizes above max_num_seqs are not captured.
    cuda_graph_batch_sizes: tuple[int, ...] = ()
    memory: Memory | None = field(default=None, compare=False)
    profile: EngineProfile | None = field(default=None, compare=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(cls, model: str, hardware: str, count: int, *, catalog: Catalog | None = None,
              gpus_per_node: int | None = None, **settings: Any) -> Deployment:
        """Resolve names in ``catalog`` and validate; ``count`` GPUs split into nodes of the hardware's
        size."""
        cat = catalog or default_catalog()
        m, hw = cat.get_model(model), cat.get_hardware(hardware)
        if count < 1:
            raise DeploymentError(f"GPU count must be at least 1, got {count}")
        gpn = gpus_per_node or min(count, hw.node_gpus)
        if count % gpn:
            raise DeploymentError(f"{count} GPUs do not split into nodes of {gpn}",
                                  hint=f"use a multiple of {gpn}, or NODESx{gpn}x{hw.name}")
        return cls(model=m, hardware=hw, family=cat.family(hw), gpus_per_node=gpn, nodes=count // gpn,
                   **settings).validated()

    def validated(self) -> Deployment:
        d = self
        if d.pd:
            p, dn = _parse_pd(d.pd, d.nodes)
            pre = replace(d, pd="", nodes=p).validated()
            replace(d, pd="", nodes=dn).validated()
            return replace(
                d,
                max_model_len=pre.max_model_len,
                kv_dtype=pre.kv_dtype,
                max_num_seqs=pre.max_num_seqs,
                max_num_batched_tokens=pre.max_num_batched_tokens,
                profile=pre.profile,
                gpu_memory_utilization=pre.gpu_memory_utilization,
            )
        world = d.gpus_per_node * d.nodes
        _check_dtype("dtype", d.dtype)
        prof = engine_profile(d.engine)
        d = _engine_defaults(d, prof)
        kv_dtype = d.kv_dtype or (d.dtype if d.dtype in ("bf16", "fp16") else prof.kv_dtype)
        _check_dtype("kv_dtype", kv_dtype)
        pp = d.pp
        if pp < 1 or world % pp:
            raise DeploymentError(
                f"pp={pp} does not divide {world} GPUs", hint="choose pp dividing the GPU count"
            )
        tp = d.tp or (world // pp // (d.dp or 1))
        dp = d.dp or max(1, world // (tp * pp))
        if tp < 1 or tp * pp * dp != world:
            raise DeploymentError(
                f"tp*pp*dp = {tp}*{pp}*{dp} = {tp * pp * dp}, but the deployment has {world} GPUs "
                f"({d.nodes} node(s) x {d.gpus_per_node})",
                hint="make tp*pp*dp equal the GPU count (dp replicas are independent engines)")
        m = d.model
        if d.ep < 1 or tp % d.ep:
            raise DeploymentError(
                f"ep={d.ep} must divide tp={tp}", hint="experts are split within a tp group"
            )
        if d.ep > 1 and (not m.is_moe or m.n_experts % d.ep):
            raise DeploymentError(f"ep={d.ep} needs a MoE model whose expert count divides by it; "
                                  f"{m.name} has {m.n_experts} experts")
        attn_tp = 1 if d.dp_attention else tp
        if m.heads % attn_tp:
            raise DeploymentError(f"{m.name} has {m.heads} attention heads, not divisible by tp={attn_tp}",
                                  hint="use a tp that divides the head count, or dp_attention=true")
        if m.layers < pp:
            raise DeploymentError(f"pp={pp} exceeds the {m.layers} layers of {m.name}")
        mml = d.max_model_len or m.max_position
        if mml > m.max_position:
            raise DeploymentError(
                f"max_model_len={mml} exceeds {m.name}'s maximum of {m.max_position} tokens"
            )
        if not 0.05 <= d.gpu_memory_utilization <= 1.0:
            raise DeploymentError(
                f"gpu_memory_utilization must be in [0.05, 1], got {d.gpu_memory_utilization}"
            )
        if d.block_size < 1 or d.max_num_seqs < 1:
            raise DeploymentError("block_size and max_num_seqs must be positive")
        if d.max_num_batched_tokens < d.max_num_seqs * (1 + d.spec_tokens):
            raise DeploymentError(
                f"max_num_batched_tokens={d.max_num_batched_tokens} is below max_num_seqs*(1+spec_tokens)="
                f"{d.max_num_seqs * (1 + d.spec_tokens)}",
                hint="raise max_num_batched_tokens or lower max_num_seqs",
            )
        if not d.chunked_prefill and d.max_num_batched_tokens < mml and not prof.unchunked_checks_prompt:
            raise DeploymentError(
                f"without chunked prefill max_num_batched_tokens ({d.max_num_batched_tokens}) must be at "
                "least "
                f"max_model_len ({mml})",
                hint="enable_chunked_prefill=true, or lower max_model_len",
            )
        if not (d.slowdown > 0 and math.isfinite(d.slowdown)):
            raise DeploymentError(
                f"slowdown={d.slowdown} must be a positive number (a factor on every step's time)",
                hint="use e.g. slowdown=2 for a device twice as slow; 1 = as calibrated",
            )
        if not 0.0 <= d.spec_acceptance <= 1.0 or d.spec_tokens < 0:
            raise DeploymentError("spec_acceptance must be in [0, 1] and spec_tokens >= 0")
        if any(b < 1 for b in d.cuda_graph_batch_sizes):
            raise DeploymentError(f"cuda_graph_batch_sizes={d.cuda_graph_batch_sizes}: sizes must be >= 1",
                                  hint="e.g. cuda_graph_batch_sizes=1/2/4/8/16/32/64/128/256/512")
        if not (0.0 <= d.jitter < 1.0):
            raise DeploymentError(f"jitter={d.jitter} must be in [0, 1) (sigma of the step-time spread)",
                                  hint="use e.g. jitter=0.02; jitter=0 for exactly repeatable step times")
        for key in ("step_cpu_us", "step_cpu_per_seq_us"):
            v = getattr(d, key)
            if not (math.isfinite(v) and (v == -1.0 or 0.0 <= v <= 1e6)):
                raise DeploymentError(f"{key}={v} must be a time in microseconds between 0 and 1e6",
                                      hint=f"e.g. {key}=20; leave it out for the engine profile's figure")
        if d.cost_backend not in ("auto", "silicon", "roofline"):
            raise DeploymentError(
                f"backend={d.cost_backend!r} is not a step-cost backend",
                hint="use backend=auto (silicon where covered, else roofline), silicon or roofline",
            )
        out = replace(d, tp=tp, dp=dp, kv_dtype=kv_dtype, max_model_len=mml, profile=prof)
        return replace(out, memory=_plan_memory(out))

    # ------------------------------------------------------------------ derived sizes
    @property
    def world(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def attn_tp(self) -> int:
        return 1 if self.dp_attention else self.tp

    @property
    def attn_dp(self) -> int:
        return self.tp if self.dp_attention else 1

    @property
    def moe_tp(self) -> int:
        return self.tp // self.ep

    @property
    def kv_values_per_rank(self) -> int:
        """KV values cached per token per layer on one GPU (one attention rank): MLA's latent whole (every
        rank keeps it), other attention its share of the KV heads over the attention TP group (at least one
        head: a group wider than the KV heads replicates them)."""
        m = self.model
        if m.attention["kind"] == "mla":
            return m.kv_values_per_token_layer
        kvh = m.attention.get("kv_heads", m.heads)
        return 2 * max(1, kvh // self.attn_tp) * m.attention["head_dim"]

    @property
    def sched_max_seqs(self) -> int:
        """Running-sequence limit of one replica's scheduler (the per-rank limit times the attention
        ranks)."""
        return self.max_num_seqs * self.attn_dp

    @property
    def sched_max_tokens(self) -> int:
        return self.max_num_batched_tokens * self.attn_dp

    @property
    def async_sched(self) -> bool:
        if self.async_scheduling is not None:
            return self.async_scheduling
        return bool(self.profile and self.profile.async_scheduling)

    @property
    def host_step_us(self) -> tuple[float, float]:
        """(fixed, per running sequence) host time of one step of one attention rank, microseconds: the
        target's ``step_cpu_us`` / ``step_cpu_per_seq_us``, else the engine profile's (125 / 0 without
        one)."""
        prof = self.profile
        fixed = self.step_cpu_us if self.step_cpu_us >= 0 else (prof.step_cpu_us if prof else 125.0)
        per = self.step_cpu_per_seq_us if self.step_cpu_per_seq_us >= 0 else (
            prof.step_cpu_per_seq_us if prof else 0.0)
        return fixed, per

    @property
    def skew(self) -> float:
        """Zipf exponent of expert popularity in effect."""
        return DEFAULT_EXPERT_SKEW if self.expert_skew < 0 else self.expert_skew

    @property
    def expert_compute_dtype(self) -> str:
        """Precision the expert GEMMs run at: FP4 weights on a GPU without an FP4 path run at the engine's
        kernel precision there (vLLM/SGLang W4A16: BF16 math; TensorRT-LLM W4A8: FP8)."""
        e = self.expert_dtype
        if e == "fp4" and not self.hardware.fp4_tflops:
            want = self.profile.fp4_compute_hopper if self.profile else "fp8"
            return want if (want != "fp8" or self.hardware.fp8_tflops) else "bf16"
        return e

    @property
    def mxfp4_marlin(self) -> bool:
        """MXFP4 experts on Hopper that the engine version runs with Marlin W4A16 (vLLM before 0.12:
        engines.yaml ``mxfp4_moe_hopper_below``)."""
        return bool(self.model.is_moe and self.model.ffn.get("expert_dtype") == "fp4"
                    and self.expert_dtype == "fp4" and self.hardware.name in ("H100", "H200")
                    and self.profile is not None and self.profile.name == "vllm"
                    and self.profile.mxfp4_moe_hopper == "marlin")

    @property
    def expert_dtype(self) -> str:
        native = self.model.ffn.get("expert_dtype")
        if native and DTYPE_BYTES[native] < DTYPE_BYTES[self.dtype]:
            return native
        return self.dtype

    def group_nodes(self) -> int:
        """Nodes spanned by one tp group (1 when it fits inside a node)."""
        return max(1, math.ceil(self.tp / self.gpus_per_node))

    def split(self) -> tuple[Deployment, Deployment] | None:
        """(prefill pool, decode pool) for a disaggregated deployment, else None."""
        if not self.pd:
            return None
        p, dn = _parse_pd(self.pd, self.nodes)
        return replace(self, pd="", nodes=p).validated(), replace(self, pd="", nodes=dn).validated()

    def describe(self) -> dict[str, Any]:
        mem = self.memory
        d = {k: v for k, v in asdict(self).items() if k not in ("model", "hardware", "family", "memory")}
        d.pop("profile", None)
        fixed, per = self.host_step_us
        d.update(model=self.model.name, hardware=self.hardware.name, gpus=self.world, expert_skew=self.skew,
                 async_scheduling=self.async_sched, step_cpu_us=fixed, step_cpu_per_seq_us=per)
        if mem is not None:
            d.update(weights_gb_per_gpu=round(mem.weights / GB, 2), kv_tokens=mem.kv_tokens,
                     kv_blocks=mem.kv_blocks, kv_bytes_per_token_per_gpu=round(mem.kv_bytes_per_token, 1))
        return d


def _engine_defaults(d: Deployment, prof: EngineProfile) -> Deployment:
    """Fill the settings the user left unset (0) from the engine profile (GPU-memory dependent)."""
    seqs, toks = prof.batch_defaults(d.hardware.hbm_gb)
    changes: dict[str, Any] = {}
    if not d.max_num_seqs:
        changes["max_num_seqs"] = seqs
    if not d.max_num_batched_tokens:
        changes["max_num_batched_tokens"] = max(toks, (changes.get("max_num_seqs") or d.max_num_seqs)
                                                * (1 + d.spec_tokens))
    if not d.gpu_memory_utilization:
        changes["gpu_memory_utilization"] = prof.gpu_memory_utilization
    return replace(d, **changes) if changes else d


def _check_dtype(name: str, v: str) -> None:
    if v not in DTYPE_BYTES:
        raise DeploymentError(
            f"{name}={v!r} is not a known precision", hint=f"use one of: {', '.join(DTYPE_BYTES)}"
        )


def _parse_pd(pd: str, nodes: int) -> tuple[int, int]:
    try:
        p, dn = (int(x) for x in pd.split(":"))
    except ValueError:
        raise DeploymentError(f"pd={pd!r} is not P:D (node counts, e.g. 1:1)") from None
    if p < 1 or dn < 1 or p + dn != nodes:
        raise DeploymentError(f"pd={pd} must split the {nodes} node(s) into two positive parts",
                              hint=f"use P:D with P + D = {nodes}, e.g. NODESxGPUSxHW with more nodes")
    return p, dn


def weight_bytes(d: Deployment) -> tuple[float, float]:
    """(bytes per GPU of the heaviest stage, bytes of the whole model) for deployment ``d``."""
    m = d.model
    wb, eb = DTYPE_BYTES[d.dtype], DTYPE_BYTES[d.expert_dtype]
    emb = m.embed_params * 2.0  # embeddings and LM head stay in BF16
    per_layer_attn = m.attn_params * wb
    dense = m.dense_ffn_params * wb
    moe_experts = m.n_experts * m.expert_params * eb
    moe_other = (m.shared_params + m.router_params) * wb
    mtp = (per_layer_attn + (moe_experts + moe_other if m.is_moe else dense)) * (
        1 if d.spec_tokens and m.mtp_layers else 0
    )
    total = (m.layers * per_layer_attn + m.n_dense_layers * dense + m.n_moe_layers * (moe_experts + moe_other)
             + emb + mtp)
    pp = d.pp
    stage_layers = math.ceil(m.layers / pp)
    frac_dense = m.n_dense_layers / m.layers
    per_gpu = stage_layers * (per_layer_attn / d.attn_tp
                              + frac_dense * dense / d.attn_tp
                              + (1 - frac_dense) * (moe_experts / d.tp + moe_other / d.attn_tp))
    per_gpu += emb / d.attn_tp / min(pp, 2) + mtp / d.tp
    return per_gpu, total


def _plan_memory(d: Deployment) -> Memory:
    m, hw = d.model, d.hardware
    per_gpu, total = weight_bytes(d)
    usable = hw.hbm_gb * GIB * d.gpu_memory_utilization
    acts = RUNTIME_RESERVE_BYTES + d.max_num_batched_tokens * m.hidden * 2 * 12 / d.tp \
        + d.max_num_seqs * m.vocab * 4 / d.attn_tp
    kvb = DTYPE_BYTES[d.kv_dtype]
    stage_layers = m.layers / d.pp
    values = d.kv_values_per_rank
    # An engine without window-sized pages (TensorRT-LLM unless the KV config sets max_attention_window)
    # caches sliding-window layers for the whole sequence, like full ones.
    pools = d.profile.window_kv_pools if d.profile else True
    sliding_layers = m.n_sliding_layers / d.pp if pools else 0.0
    per_token = (stage_layers - sliding_layers) * values * kvb
    # Sliding-window layers keep at most one window per running sequence. Engines allocate those pages from
    # the same pool on demand (vLLM's hybrid KV manager), not for max_num_seqs up front: we set windows aside
    # for up to SLIDING_RESERVE_SEQS sequences per rank and let the per-token pool absorb the rest.
    seqs_per_rank = min(d.max_num_seqs, SLIDING_RESERVE_SEQS)
    sliding = sliding_layers * values * kvb * m.sliding_window * seqs_per_rank
    free = usable - per_gpu - acts - sliding
    if d.profile is not None and d.profile.kv_fraction_of_free:
        # TensorRT-LLM: the fraction applies to the memory the weights and activations leave (engines.yaml)
        free = (hw.hbm_gb * GIB - per_gpu - acts) * d.gpu_memory_utilization - sliding
    if free <= 0:
        raise _no_fit(d, per_gpu, total, usable, acts + sliding)
    tokens = int(free / per_token) * d.attn_dp
    blocks = tokens // d.block_size
    if blocks * d.block_size < d.max_model_len:
        raise DeploymentError(
            f"{m.name} on {d.world} x {hw.name}: the KV cache holds {blocks * d.block_size:,} tokens, "
            "fewer than "
            f"one sequence of max_model_len={d.max_model_len:,}",
            hint=f"set max_model_len <= {blocks * d.block_size}, use kv_dtype=fp8, more GPUs, or "
            "dp_attention=true",
        )
    return Memory(weights=per_gpu, activations=acts, sliding_reserve=sliding, usable=usable,
                  kv_bytes_per_token=per_token, kv_tokens=tokens, kv_blocks=blocks, weights_total=total)


def _no_fit(d: Deployment, per_gpu: float, total: float, usable: float, reserve: float) -> DeploymentError:
    m, hw = d.model, d.hardware
    have = d.world * hw.hbm_gb * GB  # as sold ("80 GB"); usable memory counts them as GiB
    msg = (
        f"{m.name} in {d.dtype.upper()} needs {_fmt(total)} of weights ({_fmt(per_gpu)} on the fullest GPU, "
        f"plus {_fmt(reserve)} of activations); {d.world} x {hw.name} hold {_fmt(have)} "
        f"({_fmt(usable)} usable per GPU at gpu_memory_utilization={d.gpu_memory_utilization})"
    )
    tips = []
    for dt in ("fp8", "fp4"):
        if DTYPE_BYTES[dt] >= DTYPE_BYTES[d.dtype]:
            continue
        scaled = total * DTYPE_BYTES[dt] / DTYPE_BYTES[d.dtype]
        tips.append(_gpus_tip(scaled, hw, d, f"dtype={dt}"))
    tips.append(_gpus_tip(total, hw, d, f"dtype={d.dtype}"))
    if d.dp_attention and m.attention["kind"] != "mla":
        tips.append("dp_attention=false (attention weights are replicated on every GPU with it)")
    return DeploymentError(msg, hint="; or ".join(tips))


def _gpus_tip(total: float, hw: Hardware, d: Deployment, what: str) -> str:
    per_gpu_room = hw.hbm_gb * GIB * d.gpu_memory_utilization * 0.75  # leave a quarter for the KV cache
    need = max(1, math.ceil(total / per_gpu_room))
    gpn = d.gpus_per_node
    nodes = math.ceil(need / gpn)
    return f"{what} ({_fmt(total)}) on {nodes} node(s) of {gpn} x {hw.name}"


def _fmt(b: float) -> str:
    return f"{b / 1e12:.2f} TB" if b >= 1e12 else f"{b / 1e9:.0f} GB"
