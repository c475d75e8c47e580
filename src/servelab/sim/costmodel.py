"""Step-time cost model: how long one engine step takes on a deployment.

Per layer and per GPU, each part is a roofline ``max(FLOPs / (peak * eff), bytes / (bw * mem_eff))``:
attention projections and core (MLA / GQA / MHA; decode reads the KV cache, prefill is causal over its
context), dense FFN or MoE (only the experts touched are read: the expected number of distinct experts hit by
``tokens * top_k`` draws under a Zipf popularity ``expert_skew``). Communication adds tensor-parallel
all-reduces and expert-parallel all-to-all (dispatch FP8, combine BF16; across nodes a token is sent once per
remote node) as latency + bytes / link bandwidth; ``overlap`` (two micro-batches) hides communication behind
compute at the price of reading the weights twice. Expert imbalance (max over GPUs / mean) scales the MoE
compute unless ``eplb``. Pipeline stages keep ``min(pp, seqs)`` micro-batches in flight across steps, so a
step costs ``pp`` stage times of one micro-batch (no per-step bubble once every stage has work). Fixed
per-step and per-layer overheads and the efficiency constants come from the hardware family; its MoE constants
from the family's entry for the deployment's serving engine where it has one (``Family.for_engine``). For MLA
models that entry may add (``mla_*``, fitted on AIConfigurator's step times of that engine) a factor on the
attention projections' efficiency, per-token elementwise passes over the hidden state at HBM speed, extra
all-reduces of a tensor-parallel MoE layer, a fixed time a layer in steps with prefill, and a least time a
layer.
"""

from __future__ import annotations

import math

import numpy as np

from servelab.sim.catalog import DTYPE_BYTES
from servelab.sim.deployment import Deployment
from servelab.sim.stepcost import StepTime

ACT_BYTES = 2.0  # activations travel in BF16
DISPATCH_BYTES = 1.0  # DeepEP-style FP8 dispatch
COMBINE_BYTES = 2.0  # BF16 combine
LL_TOKENS = 256  # up to this many tokens per GPU, all-to-all uses low-latency kernels (no per-node dedup)
# Normal-mode (throughput) all-to-all kernels run on SMs: DeepEP's take 24 of an H800's 132 in DeepSeek's and
# SGLang's prefill. While they overlap the other micro-batch's compute, that compute gets the rest. The
# low-latency kernels move data without occupying SMs, so decode overlap keeps every SM.
A2A_SM_SHARE = 24 / 132


# DeepEP low-latency kernels, H800 + 400 Gb/s NICs, hidden 7168, top-8, 128 tokens per GPU
# (facts/hardware.md): dispatch + combine microseconds by EP size. About a third is fixed (launch,
# synchronisation), the rest scales with the tokens sent and with the bottleneck link's speed relative to the
# H800's.
LL_A2A_US = {8: 77 + 114, 16: 118 + 195, 32: 155 + 273, 64: 173 + 314, 128: 192 + 369, 256: 194 + 360}
LL_FIXED_SHARE = 0.35
H800_NVLINK_GBPS, H800_NIC_GBPS = 160.0, 50.0  # achieved all-to-all bandwidth in those measurements
# Normal-mode (throughput) kernels: DeepEP reports ~190 us-class latency per dispatch + combine before
# bandwidth dominates; the bytes then move at the measured 153-158 GB/s (NVLink) / 43-58 GB/s (RDMA).
NORMAL_A2A_FIXED_US = 190.0
MOE_LAYER_OVERHEAD_US = 15.0  # default Family.moe_layer_overhead_us (router, permute, grouped-GEMM launches)


class RooflineCost:
    """The built-in step-cost backend: a roofline per layer part, memoized on quantized batch shapes."""

    name = "roofline"

    def __init__(self, dep: Deployment) -> None:
        self.dep = d = dep
        # The family's constants as this deployment's engine runs them (its own MoE constants where the
        # catalog has them; the family's for AMD, TPU and a deployment without an engine profile).
        m, hw, fam = d.model, d.hardware, d.family.for_engine(d.profile.name if d.profile else None)
        self.fam = fam
        self.m = m
        self.peak_w = hw.tflops(d.dtype) * 1e12
        # MXFP4 checkpoints (gpt-oss) on an FP4 GPU: TensorRT-LLM's and SGLang's MoE kernels quantize the
        # activations to MXFP8 (W4A8): the expert GEMMs run at FP8 math rate, not FP4's (NVFP4 runs FP4).
        e_math = d.expert_compute_dtype
        eng = d.profile.name if d.profile else None
        if e_math == "fp4" and m.ffn.get("expert_dtype") == "fp4" and eng in ("trtllm", "sglang"):
            e_math = "fp8" if hw.fp8_tflops else "bf16"
        self.peak_e = hw.tflops(e_math) * 1e12
        self.peak_a = hw.bf16_tflops * 1e12
        self.bw = hw.hbm_tbps * 1e12 * fam.mem_eff
        self.ce, self.dce = fam.compute_eff, fam.decode_compute_eff
        self.moe_ce = fam.moe_compute_eff
        # FP8/FP4 GEMMs reach a smaller fraction of their (2x/4x) peak than BF16 ones (scaling, conversion).
        self.lp_w = fam.lowp_compute_eff if hw.tflops(d.dtype) > hw.bf16_tflops else 1.0
        self.lp_e = fam.lowp_compute_eff if hw.tflops(e_math) > hw.bf16_tflops else 1.0
        self.wb, self.eb, self.kvb = (
            DTYPE_BYTES[d.dtype],
            DTYPE_BYTES[d.expert_dtype],
            DTYPE_BYTES[d.kv_dtype],
        )
        self.step_oh = 0.0  # CPU-side per-step time is the engine profile's (sim/stepcost.EngineStep)
        self.layer_oh = fam.layer_overhead_us * 1e-6
        self.moe_oh = fam.moe_layer_overhead_us * 1e-6
        self.moe_half, self.moe_slice = fam.moe_rows_half, fam.moe_tp_slice_rows
        self.moe_k = fam.moe_roof_k
        self.moe_pf = fam.moe_prefill_eff
        # Per-expert GEMM size: a small expert (hidden x intermediate / moe_tp weights) leaves each routed
        # row's fixed work (quantize, permute, scales, epilogue) less math to hide behind; the size at half
        # efficiency is moe_size_half (millions) at FP8 rate, proportionally larger at a faster rate.
        self.size_sat = 1.0
        if fam.moe_size_half > 0 and m.is_moe:
            size = m.expert_params / 3 / max(d.moe_tp, 1) / 1e6
            half = fam.moe_size_half * self.peak_e / ((hw.fp8_tflops or hw.bf16_tflops) * 1e12)
            self.size_sat = size / (size + half)
        # Links: scale-up (inside the domain) and scale-out, per direction, derated by comm_eff.
        self.up_bw = hw.scaleup_gbps / 2 * 1e9 * fam.comm_eff
        if hw.scaleup_topology.startswith("torus"):
            dims = 2 if hw.scaleup_topology == "torus2d" else 3
            self.up_bw /= max(1.0, (max(d.tp, 2) ** (1 / dims)) / 4)  # average hops of uniform traffic
        self.out_bw = (hw.scaleout_gbps or 3.125) * 1e9 * fam.comm_eff
        self.up_lat, self.out_lat = hw.scaleup_latency_us * 1e-6, hw.scaleout_latency_us * 1e-6
        self.switched = hw.scaleup_topology == "switched"
        domain_gpus = min(hw.domain_size, d.world) if hw.domain_size >= d.gpus_per_node else d.gpus_per_node
        self.domain = max(d.gpus_per_node, domain_gpus)
        self.tp_cross = d.tp > self.domain  # the tp group leaves the scale-up domain
        self.kv_vals = d.kv_values_per_rank  # KV values per token per layer as read by one GPU
        # MLA's down-projections (q_a: hidden -> q_lora_rank, kv_a: hidden -> kv_lora_rank + rope) are
        # replicated on every attention-TP rank (vLLM, SGLang and TensorRT-LLM shard only the per-head q_b,
        # kv_b and o projections): each rank reads them whole and runs them over all of its tokens.
        self.attn_rep = 0
        # MLA models as the engine runs them (Family.mla_*, all neutral unless the engine's entry sets them):
        # the projections' efficiency factor, elementwise passes over the hidden state a token and layer,
        # extra hidden-sized all-reduces of a tensor-parallel MoE layer, a layer's least time, a prefill
        # step's extra time a layer.
        self.attn_eff, self.act_passes, self.moe_comm = 1.0, 0.0, 0.0
        self.mla_floor = self.mla_pf_oh = 0.0
        if m.attention["kind"] == "mla":
            self.attn_eff, self.act_passes = fam.mla_attn_eff, fam.mla_act_passes
            self.moe_comm = fam.mla_moe_comm
            self.mla_floor, self.mla_pf_oh = fam.mla_layer_floor_us * 1e-6, fam.mla_prefill_overhead_us * 1e-6
            a = m.attention
            self.prefill_core = a["qk_nope_head_dim"] + a["qk_rope_head_dim"] + a["v_head_dim"]
            self.attn_rep = m.hidden * (a["q_lora_rank"] + a["kv_lora_rank"] + a["qk_rope_head_dim"])
        else:
            self.prefill_core = m.attn_core_dim
        self.stage_layers = m.layers / d.pp
        self.frac_sliding = m.n_sliding_layers / m.layers
        self.frac_moe = m.n_moe_layers / m.layers
        if m.is_moe:
            e = np.arange(1, m.n_experts + 1, dtype=np.float64) ** -d.skew
            self.pop = e / e.sum()
            # Popular experts land on ranks in no particular order: a fixed seeded placement, not sorted.
            placed = np.random.default_rng(0).permutation(self.pop)
            shares = placed.reshape(d.ep, -1).sum(axis=1) if d.ep > 1 else np.ones(1)
            self.static_imb = 1.0 if (d.eplb or d.skew == 0) else float(shares.max() * d.ep)
        # Marlin MXFP4 experts (vLLM before 0.12 on Hopper): the kernel's measured TFLOP/s by tokens per
        # expert bounds the routed experts' time from below (log-log interpolation; a rate never rises
        # faster than the tokens, so more tokens never take less time).
        # Skewed routing: the rate divided by the measured skewed/balanced time ratio at each tokens per
        # expert (marlin_skew_ratio; never below 1, held flat beyond its table), on both tables' points.
        self.marlin: tuple[np.ndarray, np.ndarray] | None = None
        if d.mxfp4_marlin and fam.marlin_moe_tflops:
            rate = fam.marlin_moe_tflops
            ratio = fam.marlin_skew_ratio if d.skew > 0 else ()
            x = np.log(sorted({p[0] for p in rate} | {p[0] for p in ratio}))
            y = np.interp(x, np.log([p[0] for p in rate]), np.log([p[1] * 1e12 for p in rate]))
            if ratio:
                lr = np.interp(x, np.log([p[0] for p in ratio]), np.log([p[1] for p in ratio]))
                y -= np.maximum(0.0, lr)
            for i in range(1, y.size):
                y[i] = min(y[i], y[i - 1] + x[i] - x[i - 1])
            self.marlin = (x, y)
        self.ll_fixed, self.ll_var = self._ll_table()
        self._memo: dict[tuple[int, ...], StepTime] = {}

    # ------------------------------------------------------------------ helpers
    def _eff(self, rows: float) -> float:
        """GEMM efficiency for ``rows`` tokens per weight matrix: decode-like below 64, prefill-like at
        2048+."""
        if rows <= 64:
            return self.dce
        return self.dce + (self.ce - self.dce) * min(1.0, math.log2(rows / 64) / 5)

    def _moe_eff(self, rows_e: float) -> float:
        """Grouped expert GEMM efficiency at ``rows_e`` tokens per touched expert: the dense curve times
        ``moe_compute_eff``, times ``r / (r + moe_rows_half)`` (few tokens per expert leave the grouped
        kernel's tiles mostly empty), where an expert TP-sliced ``moe_tp`` ways counts its rows as divided
        by ``1 + (moe_tp - 1) * moe_tp_slice_rows`` (thin slices of each weight matrix run less
        efficiently), times the per-expert size term ``size / (size + half)`` (``size_sat``)."""
        r = rows_e / (1.0 + (self.dep.moe_tp - 1) * self.moe_slice)
        sat = r / (r + self.moe_half) if self.moe_half > 0 else 1.0
        return self._eff(r) * self.moe_ce * sat * self.size_sat

    def _roof(self, flops: float, peak: float, eff: float, nbytes: float, k: float = 0.0
              ) -> tuple[float, float]:
        """(compute_s, memory_s) of one kernel: the larger of the two, all counted on its side; with ``k`` > 0
        the soft roofline ``(c^k + m^k)^(1/k)`` (compute and weight reads overlap imperfectly)."""
        tc, tm = flops / (peak * eff), nbytes / self.bw
        t = max(tc, tm) if k <= 0 else (tc**k + tm**k) ** (1.0 / k)
        return (t, 0.0) if tc >= tm else (0.0, t)

    def _marlin_s(self, flops: float, rows_e: float) -> float:
        """Seconds Marlin's MXFP4 experts need for ``flops`` at ``rows_e`` tokens per expert (0 without
        Marlin): the measured rate there, log-log interpolated, held flat beyond the table."""
        if self.marlin is None or rows_e <= 0:
            return 0.0
        return flops / math.exp(float(np.interp(math.log(rows_e), *self.marlin)))

    def _touched(self, n: float) -> float:
        """Expected distinct experts hit by ``n`` routed token-expert assignments."""
        return float(np.sum(1.0 - np.power(1.0 - self.pop, n)))

    def _allreduce(self, nbytes: float, n: int) -> float:
        if n <= 1:
            return 0.0
        if self.tp_cross:
            # NCCL runs one ring (channel) per NIC: every GPU of a node sends over its own NIC, so the ring's
            # bus bandwidth is the node's NICs together (nccl-tests busbw ~ NICs x link speed), not one NIC's.
            nics = min(n, self.dep.gpus_per_node)
            return self.out_lat + 2 * (n - 1) / n * nbytes / (self.out_bw * nics)
        # NVSwitch reduces in the switch (NVLS/SHARP): each GPU sends and receives the buffer once.
        factor = 1.0 if self.switched else 2 * (n - 1) / n
        # one-shot all-reduce: ~1/3 of an all-to-all phase
        return self.up_lat / 3 + factor * nbytes / self.up_bw

    # ------------------------------------------------------------------ one layer, one micro-batch
    def _layer(self, tok: float, ctx_dec: float, n_dec: float, p_tok: float, p_pairs: float, p_ctx: float,
               moe: bool, sliding: bool) -> tuple[float, float, float, float, float]:
        """(compute_s, memory_s, comm_s, imbalance, a2a_bytes) of one layer for ``tok`` tokens (whole
        group)."""
        d, m = self.dep, self.m
        tp, attn_tp, attn_dp = d.tp, d.attn_tp, d.attn_dp
        rows = tok / attn_dp
        c = mem = 0.0
        # Attention: projections (the sharded ones split attn_tp ways, MLA's replicated down-projections not).
        sharded, rep = m.attn_params - self.attn_rep, self.attn_rep
        tc, tm = self._roof(2 * (sharded + rep * attn_tp) * tok / tp, self.peak_w,
                            self._eff(rows) * self.lp_w * self.attn_eff,
                            (sharded / attn_tp + rep) * self.wb)
        c += tc
        mem += tm
        # Elementwise work a token (residual adds, RMSNorms, activation quantization, the MoE's per-expert
        # output rows and their sum): act_passes reads or writes of the BF16 hidden state at HBM speed, on
        # every attention-TP rank (each holds its tokens' whole residual stream).
        mem += self.act_passes * rows * m.hidden * ACT_BYTES / self.bw
        # Attention core: decode over the cache, prefill causal over its context.
        win = m.sliding_window if sliding else 0
        if win and n_dec:
            ctx_dec = min(ctx_dec, n_dec * win)
        if win and p_tok:
            p_pairs, p_ctx = min(p_pairs, p_tok * win), min(p_ctx, p_tok + win)
        q = d.spec_tokens + 1
        # Decode attention (small-GEMM efficiency) and prefill attention (big-GEMM efficiency) are separate
        # kernels: pricing them apart keeps the step monotone when a prefill token joins a decode batch.
        tc, tm = self._roof(2 * m.heads * m.attn_core_dim * ctx_dec * q / tp, self.peak_a, self.dce,
                            ctx_dec * self.kv_vals * self.kvb / attn_dp)
        c += tc
        mem += tm
        if p_tok:
            tc, tm = self._roof(2 * m.heads * self.prefill_core * p_pairs / tp, self.peak_a, self.ce,
                                p_ctx * self.kv_vals * self.kvb / attn_dp)
            c += tc
            mem += tm
        comm = self._allreduce(tok * m.hidden * ACT_BYTES, attn_tp)
        imb, a2a = 1.0, 0.0
        if not moe:
            # Dense FFN: tp-sharded, or with data-parallel attention data-parallel too (each GPU holds the
            # whole FFN and runs its own tokens, as SGLang and DeepSeek do for DeepSeek's first dense layers):
            # no all-reduce then, instead of one over the whole (possibly multi-node) group.
            ffn_tp = attn_tp
            tc, tm = self._roof(
                2 * m.dense_ffn_params * tok / tp,
                self.peak_w,
                self._eff(tok / tp * attn_tp) * self.lp_w,
                m.dense_ffn_params * self.wb / ffn_tp,
            )
            c += tc
            mem += tm
            if ffn_tp > 1:
                comm += self._allreduce(tok * m.hidden * ACT_BYTES, ffn_tp)
            return c, mem, comm, imb, a2a
        # MoE: shared experts and router like the projections; routed experts by touched count and load.
        other = m.shared_params + m.router_params
        tc, tm = self._roof(
            2 * other * tok / tp, self.peak_w, self._eff(rows) * self.lp_w, other * self.wb / attn_tp
        )
        c += tc
        mem += tm
        n = tok * m.top_k
        touched = self._touched(n)
        ep = d.ep
        if ep > 1:
            imb = self.imbalance(n)
        per_gpu_experts = min(m.n_experts / ep, touched / ep * self.static_imb)
        rows_e = n / max(touched, 1.0)
        # Prefill tokens' expert GEMMs run at moe_prefill_eff of the decode tokens' efficiency: counted as
        # 1 / moe_prefill_eff tokens of work each (a prefill token never costs less than nothing: monotone).
        n_work = (tok - p_tok + p_tok / self.moe_pf) * m.top_k
        # The slowest EP rank sets the layer: its routed-expert work is ``imb`` times the mean.
        tc, tm = self._roof(
            2 * m.expert_params * n_work / tp * imb,
            self.peak_e,
            self._moe_eff(rows_e) * self.lp_e,
            per_gpu_experts * m.expert_params * self.eb / d.moe_tp,
            self.moe_k,
        )
        if self.marlin is not None and rows_e > 0:
            floor = self._marlin_s(2 * m.expert_params * n_work / tp * imb, rows_e)
            if floor > tc + tm:
                tc, tm = floor, 0.0
        c += tc
        mem += tm
        if d.moe_tp > 1 or (attn_tp == 1 and ep == 1 and tp > 1):
            # A tensor-parallel MoE layer moves moe_comm more (AIConfigurator's vLLM pre/post dispatch).
            ar = self._allreduce(tok * m.hidden * ACT_BYTES, d.moe_tp if attn_tp > 1 else tp)
            comm += ar * (1.0 + (self.moe_comm if d.moe_tp > 1 else 0.0))
        if ep > 1:
            # The engine picks the cheaper all-to-all kernel family for the batch (low-latency for small
            # decode batches, normal for large ones); taking the cheaper keeps the step monotone in work.
            t_ll, b_ll = self._all_to_all(tok, imb, low_latency=True)
            t_nm, b_nm = self._all_to_all(tok, imb, low_latency=False)
            # normal kernels take SMs from overlapped work
            c_nm = c / (1.0 - A2A_SM_SHARE) if d.overlap else c
            if c + t_ll <= c_nm + t_nm or tok / d.tp <= LL_TOKENS // 4:
                return c, mem, comm + t_ll, imb, b_ll
            return c_nm, mem, comm + t_nm, imb, b_nm
        return c, mem, comm, imb, a2a

    def imbalance(self, n: float) -> float:
        """Tokens on the busiest EP rank over the mean, for ``n`` routed token-expert assignments: the static
        popularity skew (none with EPLB) times the sampling spread ``1 + sqrt(2 ln ep / (n / ep))``; never
        above ``ep`` (everything on one rank)."""
        ep = self.dep.ep
        if ep <= 1 or self.dep.skew == 0:  # expert_skew=0: perfectly balanced routing (an idealisation)
            return 1.0
        noise = 1 + math.sqrt(2 * math.log(ep) / (max(n, 1.0) / ep))
        return min(float(ep), self.static_imb * noise)

    def _ll_table(self) -> tuple[float, float]:
        """(fixed s, variable s at 128 tokens) of one low-latency dispatch + combine at this EP size, the
        measured H800 figures scaled to this hardware's bottleneck link."""
        d, hw = self.dep, self.dep.hardware
        if d.ep <= 1:
            return 0.0, 0.0
        keys = sorted(LL_A2A_US)
        ep = min(max(d.ep, keys[0]), keys[-1])
        lo = max(k for k in keys if k <= ep)
        hi = min(k for k in keys if k >= ep)
        us = (
            LL_A2A_US[lo]
            if lo == hi
            else LL_A2A_US[lo] + (LL_A2A_US[hi] - LL_A2A_US[lo]) * math.log(ep / lo) / math.log(hi / lo)
        )
        if d.ep <= self.domain:
            ratio = H800_NVLINK_GBPS / (hw.scaleup_gbps / 2 * self.dep.family.comm_eff / 0.9)
        else:
            ratio = H800_NIC_GBPS / max(hw.scaleout_gbps or 3.125, 1e-9)
        scale = self.m.hidden / 7168 * max(self.m.top_k, 1) / 8
        return us * LL_FIXED_SHARE * 1e-6, us * (1 - LL_FIXED_SHARE) * 1e-6 * ratio * scale

    def _all_to_all(self, tok: float, imb: float, low_latency: bool) -> tuple[float, float]:
        """(seconds, total bytes) of one MoE layer's dispatch + combine across ``ep`` GPUs. The busiest rank
        receives ``imb`` times the mean, and every rank waits for it."""
        d, m = self.dep, self.m
        ep, k = d.ep, m.top_k
        per_gpu_tok = tok / d.tp
        unit = m.hidden * (DISPATCH_BYTES + COMBINE_BYTES)
        local = min(ep, self.domain)
        intra = per_gpu_tok * k * unit * (local - 1) / ep
        groups = ep / local
        if low_latency:  # straight to each expert's GPU, no per-node deduplication
            inter = per_gpu_tok * k * unit * (ep - local) / ep if groups > 1 else 0.0
            t = self.ll_fixed + self.ll_var * per_gpu_tok / 128 * imb
            return t, (intra + inter) * d.tp
        inter = 0.0
        if groups > 1:  # normal mode: once per distinct remote domain, then fan out over NVLink
            distinct = groups * (1 - (1 - 1 / groups) ** k)
            inter = per_gpu_tok * unit * distinct * (groups - 1) / groups
        t = NORMAL_A2A_FIXED_US * 1e-6 + intra * imb / self.up_bw
        if inter:
            t = max(t, NORMAL_A2A_FIXED_US * 1e-6 + inter * imb / self.out_bw)
        return t, (intra + inter) * d.tp

    # ------------------------------------------------------------------ one step
    def step(self, n_dec: int, ctx_dec: int, p_tok: int = 0, p_pairs: int = 0, p_ctx: int = 0) -> StepTime:
        """Cost of a step with ``n_dec`` decoding sequences (sum of contexts ``ctx_dec``) and prefill chunks
        totalling ``p_tok`` tokens, ``p_pairs`` causal attention pairs and ``p_ctx`` context tokens read."""
        key = (n_dec, _q(ctx_dec), _q(p_tok), _q(p_pairs), _q(p_ctx))
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        if len(self._memo) > 200_000:
            self._memo.clear()
        cost = self._compute(n_dec, _dq(key[1]), _dq(key[2]), _dq(key[3]), _dq(key[4]))
        self._memo[key] = cost
        return cost

    def _compute(self, n_dec: int, ctx_dec: float, p_tok: float, p_pairs: float, p_ctx: float) -> StepTime:
        d, m = self.dep, self.m
        q = d.spec_tokens + 1
        tok = n_dec * q + p_tok
        if tok <= 0:
            return StepTime(self.step_oh, 0.0, 0.0, 0.0, 1.0, 0.0)
        seqs = n_dec + (1 if p_tok else 0)
        mb = max(1, min(d.pp, seqs))  # pipeline micro-batches
        f = 1.0 / mb

        def scaled(s: float) -> tuple[float, float, float, float, float, float]:
            return (tok * s, ctx_dec * s, n_dec * s, p_tok * s, p_pairs * s, p_ctx * s)

        args = scaled(f)
        kinds = [(False, False, 1 - self.frac_moe)]
        if self.frac_moe:
            kinds = [(False, False, 1 - self.frac_moe), (True, False, self.frac_moe)]
        if self.frac_sliding:
            kinds = [(mo, s, w * (self.frac_sliding if s else 1 - self.frac_sliding))
                     for mo, _, w in kinds for s in (False, True)]
        c = mem = comm = a2a = 0.0
        imb = 1.0
        layer_time = 0.0
        for moe, sliding, w in kinds:
            if w <= 0:
                continue
            n_layers = self.stage_layers * w
            if d.overlap and tok >= 2:
                hc, hm, hcomm, limb, la2a = self._layer(*scaled(f / 2), moe=moe, sliding=sliding)
                work, comm_t = 2 * (hc + hm), 2 * hcomm
                # Two micro-batches pipelined: the first one's compute and the last one's communication
                # cannot overlap anything: max(work, comm) + min(work, comm) / 2.
                t = max(work, comm_t) + min(work, comm_t) / 2
                lc, lm, lcomm = 2 * hc, 2 * hm, t - work
                la2a *= 2
            else:
                lc, lm, lcomm, limb, la2a = self._layer(*args, moe=moe, sliding=sliding)
                t = lc + lm + lcomm
            # A step with prefill tokens pays mla_prefill_overhead_us more a layer; no layer's kernels take
            # less than mla_layer_floor_us (both 0 but for MLA models under an engine that sets them). The
            # floor is the compute kernels' latency: the communication not hidden behind them (lcomm) comes
            # on top, so a slower link (another node) still costs a small step more.
            oh = self.layer_oh + (self.moe_oh if moe else 0.0) + (self.mla_pf_oh if p_tok else 0.0)
            layer_time += n_layers * (max(self.mla_floor, t - lcomm + oh) + lcomm)
            c += n_layers * lc
            mem += n_layers * lm
            comm += n_layers * lcomm
            a2a += n_layers * la2a * d.pp * mb
            imb = max(imb, limb)
        # LM head for the sampled positions (decode tokens and the last token of each prefill chunk).
        # With pipeline stages it runs on the last stage, once per micro-batch (reading its weights each
        # time).
        logits = (n_dec * q + (1 if p_tok else 0)) * f
        tc, tm = self._roof(2 * m.hidden * m.vocab * logits / d.tp, self.peak_a, self._eff(logits),
                            m.hidden * m.vocab * 2 / d.attn_tp)
        layer_time += tc + tm
        c, mem = c + tc, mem + tm
        if d.spec_tokens and n_dec:  # draft passes: one extra (MTP) layer per draft token
            draft = d.spec_tokens * layer_time / max(self.stage_layers * d.pp, 1) * n_dec * q / tok
            layer_time += draft
            c += draft
        # Pipeline stages: the engine keeps ``mb`` micro-batches in flight across steps (vLLM's virtual
        # engines, TensorRT-LLM's in-flight batching), so in steady state every stage is busy and each
        # micro-batch advances one token per trip through all ``pp`` stages: a step of the whole batch takes
        # ``pp`` stage times of one micro-batch. With fewer sequences than stages (mb < pp) stages idle: still
        # ``pp``.
        scale = d.pp
        p2p = 0.0
        if d.pp > 1:
            bw, lat = (self.out_bw, self.out_lat) if d.tp >= d.gpus_per_node else (self.up_bw, self.up_lat)
            p2p = (d.pp - 1) * (lat + tok * f * m.hidden * ACT_BYTES / d.tp / bw)
        total = self.step_oh + scale * layer_time + p2p
        # (the ``slowdown`` what-if applies to the engine's whole step: sim/stepcost.EngineStep)
        return StepTime(total, c * scale, mem * scale, comm * scale + p2p, imb, a2a)


CostModel = RooflineCost  # the name earlier revisions used


def _q(x: float) -> int:
    """Quantize to ~1.5% log buckets (exact below 64)."""
    if x < 64:
        return int(x)
    e = int(math.log2(x))
    return (e << 6) | int((x / (1 << e) - 1) * 64) | (1 << 30)


def _dq(k: int) -> float:
    if k < (1 << 30):
        return float(k)
    k ^= 1 << 30
    e, frac = k >> 6, k & 63
    return (1 << e) * (1 + (frac + 0.5) / 64)
