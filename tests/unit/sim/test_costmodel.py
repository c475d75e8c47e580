"""Cost-model structure: slowdown what-if, data-parallel dense FFN under dp_attention, pipeline stages."""

import pytest

from servelab.errors import DeploymentError, TargetError
from servelab.sim.costmodel import CostModel
from servelab.sim.stepcost import EngineStep
from servelab.sim.target import known_keys, parse_sim_target


def test_slowdown_multiplies_every_step_and_is_a_known_key():
    # The what-if stretches the engine's whole step (GPU and CPU time), so it is applied by EngineStep.
    base = EngineStep(parse_sim_target("sim:llama-3.1-8b@1xh100,jitter=0,backend=roofline"))
    slow = EngineStep(parse_sim_target("sim:llama-3.1-8b@1xh100,jitter=0,backend=roofline,slowdown=2.5"))
    for shape in ((1, 100), (64, 64 * 1000), (0, 0, 2048, 2048 * 1024, 2048), (0, 0)):
        a, b = base.step(*shape), slow.step(*shape)
        assert b.time_s == pytest.approx(2.5 * a.time_s)
        assert b.compute_s + b.memory_s == pytest.approx(2.5 * (a.compute_s + a.memory_s))
    assert "slowdown" in known_keys()
    assert parse_sim_target("sim:llama-3.1-8b@1xh100,slowdown=0.5").describe()["slowdown"] == 0.5


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_slowdown_must_be_positive(value):
    with pytest.raises(DeploymentError, match="slowdown"):
        parse_sim_target(f"sim:llama-3.1-8b@1xh100,slowdown={value}")


def test_slowdown_not_a_number_names_the_key():
    with pytest.raises(TargetError, match="slowdown"):
        parse_sim_target("sim:llama-3.1-8b@1xh100,slowdown=fast")


def test_dp_attention_runs_dense_ffn_without_a_cross_node_all_reduce():
    # DeepSeek-V3's first three layers are dense. Data-parallel over 128 GPUs they need no all-reduce; sharded
    # over the 16-node group each would all-reduce the whole batch over the NICs.
    spec = (
        "sim:deepseek-v3@16x8xh800,dtype=fp8,ep=128,overlap=true,max_num_seqs=16384,"
        "max_num_batched_tokens=16384"
    )
    dp = CostModel(parse_sim_target(spec + ",dp_attention=true,max_model_len=8192"))
    c, m, comm, _, _ = dp._layer(8192.0, 8192 * 4096.0, 8192.0, 0.0, 0.0, 0.0, moe=False, sliding=False)
    assert comm == 0.0 and c + m > 0
    dep = parse_sim_target(spec + ",dp_attention=true,max_model_len=8192")
    assert dep.memory is not None
    # Each GPU holds the dense FFN whole: weights per GPU grow by ~ (1 - 1/128) x the three dense FFNs in FP8.
    m_ = dep.model
    dense_fp8 = m_.n_dense_layers * m_.dense_ffn_params * 1.0
    assert dep.memory.weights > dense_fp8


def test_pipeline_stages_do_not_idle_in_steady_state():
    # pp=2 with a full batch: two micro-batches in flight keep both GPUs busy, so the step of the whole batch
    # takes about half the one-GPU time (GPipe's per-step bubble, (mb + pp - 1) / mb, would make it ~0.75).
    pp2 = CostModel(parse_sim_target("sim:llama-3.1-8b@2xh100,tp=1,pp=2"))
    pp1 = CostModel(parse_sim_target("sim:llama-3.1-8b@1xh100"))
    big = (512, 512 * 600)
    ratio = pp2.step(*big).time_s / pp1.step(*big).time_s
    assert 0.45 < ratio < 0.6, ratio
    # One sequence cannot fill two stages: it walks through both, as on one GPU.
    one = pp2.step(1, 600).time_s / pp1.step(1, 600).time_s
    assert 0.9 < one < 1.2, one


def test_cross_node_all_reduce_uses_every_nic_of_the_node():
    # TP16 over 2 nodes of 8 x H200 (one 50 GB/s NIC per GPU, comm_eff 0.70, 35 us scale-out latency).
    # A ring all-reduce of S bytes over n=16 GPUs moves 2(n-1)/n S per ring; NCCL runs one ring per NIC,
    # so the 8 NICs of a node carry it together: 35e-6 + 1.875 * S / (8 * 35e9). For S = 8192 tokens x
    # 7168 x 2 bytes = 117,440,512 B that is 35 us + 786.4 us = 821.4 us (one NIC: 6.327 ms).
    cm = CostModel(parse_sim_target("sim:deepseek-v3@2x8xh200,dtype=fp8,ep=16,backend=roofline"))
    assert cm.tp_cross
    t = cm._allreduce(117_440_512.0, 16)
    assert t == pytest.approx(35e-6 + 1.875 * 117_440_512 / (8 * 35e9), rel=1e-9)
    assert t == pytest.approx(821.4e-6, abs=0.1e-6)


def test_amd_decode_step_pays_a_measured_class_per_layer_overhead():
    # No AMD kernel data: the per-layer fixed time is Hopper's kernel-fitted 50 us, not a 15 us prior.
    # Llama-3.1-70B FP8 on 8 x MI300X TP8, one sequence at 128 tokens: weights ~70.6e9 B / 8 = 8.8 GB per
    # GPU at 5.3 TB/s x 0.65 (fd86763; 0.75 before) = 2.6 ms, plus 80 layers x 50 us = 4.0 ms: at least 6.2 ms
    # (was ~4.3 ms with a 15 us prior).
    spec = "sim:llama-3.1-70b@8xmi300x,tp=8,dtype=fp8,kv_dtype=fp8,backend=roofline"
    cost = CostModel(parse_sim_target(spec))
    assert cost.layer_oh == pytest.approx(50e-6)
    assert cost.step(1, 128).time_s >= 6.2e-3


# MoE constants refit on AIConfigurator 0.12 silicon step times (benchmarks/sim_fit_moe.py). Hand-picked check
# steps (H200 rows: the fit used H100 and B200 only), silicon figures from benchmarks/data/sim_moe_grid.json.
@pytest.mark.parametrize(("spec", "silicon_ms"), [
    # gpt-oss-120b on 1 x H200, TensorRT-LLM, 512 decodes at 2K context: silicon 47.57 ms (the roofline
    # priced 35.5 ms, -25%, before the refit: its mid-batch MoE step was too cheap).
    ("gpt-oss-120b@1xh200,engine=trtllm", 47.57),
    # Qwen3-235B BF16 on 8 x H200 TP8 (every expert sliced 8 ways), vLLM, 512 decodes at 2K: silicon 47.38 ms.
    ("qwen3-235b-a22b@8xh200,tp=8,engine=vllm", 47.38),
])
def test_refit_moe_step_is_within_10_percent_of_silicon(spec, silicon_ms):
    cost = CostModel(parse_sim_target(f"sim:{spec},backend=roofline,expert_skew=0"))
    got = cost.step(512, 512 * 2048).time_s * 1e3
    assert got == pytest.approx(silicon_ms, rel=0.10)


def test_moe_efficiency_falls_with_few_tokens_per_expert_and_thin_tp_slices():
    from dataclasses import replace
    dep = parse_sim_target("sim:qwen3-235b-a22b@8xh200,tp=8,engine=vllm,backend=roofline,expert_skew=0")
    fam = replace(dep.family, moe_compute_eff=0.5, moe_rows_half=8.0, moe_tp_slice_rows=0.0, engines=())
    cost = CostModel(replace(dep, family=fam))
    # dense curve at <= 64 rows is decode_compute_eff (0.45): 0.45 x 0.5 x r / (r + 8)
    assert cost._moe_eff(8.0) == pytest.approx(0.45 * 0.5 * 0.5)
    assert cost._moe_eff(24.0) == pytest.approx(0.45 * 0.5 * 0.75)
    sliced = CostModel(replace(dep, family=replace(fam, moe_tp_slice_rows=1.0)))
    # moe_tp = 8: 24 rows count as 24 / (1 + 7) = 3 -> 3 / 11 of the saturated efficiency
    assert sliced._moe_eff(24.0) == pytest.approx(0.45 * 0.5 * 3 / 11)


def test_soft_roofline_of_the_experts_is_between_max_and_sum():
    from dataclasses import replace
    dep = parse_sim_target("sim:gpt-oss-120b@1xh100,backend=roofline")
    hard = CostModel(replace(dep, family=replace(dep.family, moe_roof_k=0.0)))
    soft = CostModel(replace(dep, family=replace(dep.family, moe_roof_k=1.0)))
    # k = 1 sums compute and weight reads; 0 takes the larger: hand-worked on one kernel
    assert soft._roof(2e12, 1e15, 1.0, 0.0, 1.0) == (pytest.approx(2e-3), 0.0)
    tc, tm = 2e-3, 1e9 / hard.bw
    assert sum(soft._roof(2e12, 1e15, 1.0, 1e9, 1.0)) == pytest.approx(tc + tm)
    assert sum(hard._roof(2e12, 1e15, 1.0, 1e9)) == pytest.approx(max(tc, tm))


@pytest.mark.parametrize("value", [-1, "x", True])
def test_moe_family_constants_must_be_non_negative_numbers(value, tmp_path):
    from servelab.sim.catalog import _parse_family
    e = {"compute_eff": 0.7, "decode_compute_eff": 0.45, "mem_eff": 0.7, "comm_eff": 0.7,
         "step_overhead_us": 125, "layer_overhead_us": 50, "moe_rows_half": value}
    with pytest.raises(TargetError, match="moe_rows_half"):
        _parse_family("f", e, "families.f")


# Per-engine MoE constants (hardware.yaml families.<f>.engines, benchmarks/sim_fit_moe.py): the deployment's
# engine profile picks them; an engine the family has no entry for, or no engine at all, gets the family's.
def _engine_family(dep):
    from dataclasses import replace
    return replace(dep.family, moe_compute_eff=0.5, moe_rows_half=0.0, moe_tp_slice_rows=0.0, moe_roof_k=0.0,
                   moe_prefill_eff=1.0, engines=(("vllm", (("moe_compute_eff", 0.25),)),
                                                 ("trtllm", (("moe_prefill_eff", 0.8),))))


def _prefill_layer_compute(engine):
    from dataclasses import replace
    eng = "vllm" if engine == "none" else engine
    dep = parse_sim_target(f"sim:qwen3-30b-a3b@1xh100,engine={eng},backend=roofline,expert_skew=0")
    dep = replace(dep, family=_engine_family(dep))
    if engine == "none":
        dep = replace(dep, profile=None)
    cost = CostModel(dep)
    p = 4096
    return cost._layer(float(p), 0.0, 0.0, float(p), p * (p + 1) / 2, float(p), moe=True, sliding=False)[0]


def test_engine_moe_constants_are_picked_by_the_deployments_engine():
    # Qwen3-30B-A3B BF16 on 1 x H100 (128 experts, top-8, 4,718,592 parameters each), a 4,096-token prefill:
    # 32,768 assignments touch all 128 experts, 256 rows each; dense curve at 256 rows
    # 0.45 + (0.70 - 0.45) x log2(256 / 64) / 5 = 0.55; compute-bound (all experts' weights, 1.21 GB, read in
    # 0.52 ms against 1.14 ms of math at the family's 0.5), hard max (moe_roof_k 0).
    flops = 2 * 4_718_592 * 4096 * 8  # routed-expert FLOPs of the layer
    peak = 989e12 * 0.55
    none, sglang = _prefill_layer_compute("none"), _prefill_layer_compute("sglang")
    vllm, trtllm = _prefill_layer_compute("vllm"), _prefill_layer_compute("trtllm")
    # vLLM's moe_compute_eff 0.25 instead of the family's 0.5: the routed experts take twice as long
    assert vllm - none == pytest.approx(flops / peak * (1 / 0.25 - 1 / 0.5))  # +2.274 ms
    # TensorRT-LLM's prefill tokens at 0.8 of the decode efficiency: 4,096 / 0.8 = 5,120 tokens of work
    assert trtllm - none == pytest.approx(flops / peak / 0.5 * (1 / 0.8 - 1))  # +0.284 ms
    # SGLang has no entry: the family's constants, like a deployment without an engine profile
    assert sglang == pytest.approx(none)


def test_catalog_engines_give_vllm_and_trtllm_different_moe_steps():
    # The same gpt-oss-20b step shape on 1 x H100 under vLLM and TensorRT-LLM: both run the MXFP4 experts
    # in BF16 math with BF16 KV, so only the per-engine MoE constants of hardware.yaml tell them apart
    # (TensorRT-LLM has its own on Hopper; vLLM, whose own fit gained under 5%, the family's: its entry holds
    # only MLA constants, which a GQA model never reads).
    from dataclasses import replace
    vllm = CostModel(parse_sim_target("sim:gpt-oss-20b@1xh100,engine=vllm,backend=roofline,expert_skew=0"))
    trt = CostModel(parse_sim_target("sim:gpt-oss-20b@1xh100,engine=trtllm,backend=roofline,expert_skew=0"))
    for shape in ((256, 256 * 2048), (0, 0, 2048, 2048 * 2049 // 2, 2048)):
        assert vllm.step(*shape).time_s != pytest.approx(trt.step(*shape).time_s, rel=0.01)
    fam = vllm.dep.family
    assert vllm.fam == fam.for_engine("vllm")
    assert replace(vllm.fam, **MLA_NEUTRAL) == fam.for_engine(None)
    assert (vllm.attn_eff, vllm.act_passes, vllm.moe_comm, vllm.mla_floor, vllm.mla_pf_oh) == (1, 0, 0, 0, 0)
    assert trt.fam == fam.for_engine("trtllm") != fam.for_engine(None)
    assert (trt.fam.moe_compute_eff, trt.fam.moe_prefill_eff) == (0.6, 0.6)  # hardware.yaml's trtllm entry
    assert (vllm.fam.moe_compute_eff, vllm.fam.moe_prefill_eff) == (0.5, 1.0)  # the family's
    # an engine-less deployment keeps the family's constants
    bare = CostModel(replace(vllm.dep, profile=None))
    assert bare.fam == replace(fam, engines=())
    assert bare.fam.moe_compute_eff == fam.moe_compute_eff


def test_engine_moe_constants_parse_and_reject_unknown_keys():
    from servelab.sim.catalog import _parse_family
    e = {"compute_eff": 0.7, "decode_compute_eff": 0.45, "mem_eff": 0.7, "comm_eff": 0.7,
         "step_overhead_us": 125, "layer_overhead_us": 50, "moe_compute_eff": 0.5,
         "engines": {"vllm": {"moe_compute_eff": 0.4, "moe_prefill_eff": 0.7}}}
    fam = _parse_family("f", e, "families.f")
    assert fam.for_engine("vllm").moe_compute_eff == 0.4
    assert fam.for_engine("vllm").moe_prefill_eff == 0.7
    assert fam.for_engine("trtllm").moe_compute_eff == 0.5
    assert fam.for_engine("trtllm").moe_prefill_eff == 1.0
    e["engines"]["vllm"] = {"compute_eff": 0.9}
    with pytest.raises(TargetError, match="unknown key"):
        _parse_family("f", e, "families.f")
    e["engines"]["vllm"] = {"moe_prefill_eff": 0}
    with pytest.raises(TargetError, match="moe_prefill_eff"):
        _parse_family("f", e, "families.f")


def test_mla_down_projections_are_replicated_on_every_attention_tp_rank():
    # DeepSeek-V3's q_a (7168 x 1536) and kv_a (7168 x (512 + 64)) projections: 7168 x 2112 = 15,138,816
    # parameters that vLLM, SGLang and TensorRT-LLM replicate on each attention-TP rank; only q_b, kv_b and o
    # (187,105,280 - 15,138,816 = 171,966,464 parameters) are split. A dense layer of 8,192 tokens, TP8 on
    # H200 (FP8 peak 1,979 TFLOPS at compute_eff 0.7; dense FFN 3 x 7168 x 18432 = 396,361,728 parameters):
    #   projections 2 x (171,966,464 / 8 + 15,138,816) x 8,192 = 600.22 GFLOP   (was 383.19: all split 8 ways)
    #   dense FFN   2 x 396,361,728 / 8 x 8,192                 = 811.75 GFLOP
    #   (600.22 + 811.75) GFLOP / (1,979 x 0.7) TFLOPS = 1.01925 ms   (0.86259 ms before)
    # (SGLang: vLLM's MLA constants scale the projections, test_mla_attention_projection_efficiency)
    c = CostModel(parse_sim_target("sim:deepseek-v3@8xh200,dtype=fp8,tp=8,engine=sglang,backend=roofline"))
    compute_s = c._layer(8192, 0, 8192, 0, 0, 0, moe=False, sliding=False)[0]
    assert compute_s == pytest.approx(1.01925e-3, rel=1e-4)
    # Data-parallel attention (attn_tp 1) replicates nothing more: every rank already holds all projections.
    dp = CostModel(parse_sim_target("sim:deepseek-v3@8xh200,dtype=fp8,ep=8,dp_attention=true,"
                                    "engine=sglang,backend=roofline"))
    proj = 2 * 187_105_280 * 2048 / (1979e12 * 0.7)  # 2,048 tokens per rank (eff 0.7): all projections
    ffn = 2 * 396_361_728 * 2048 / (1979e12 * 0.7)  # the dense FFN data-parallel too
    got = dp._layer(16384, 0, 16384, 0, 0, 0, moe=False, sliding=False)[0]
    assert got == pytest.approx(proj + ffn, rel=1e-4)


# Per-expert GEMM size and expert quantization (issue 11; AIConfigurator's B200 TensorRT-LLM MoE table,
# balanced, 512 tokens per expert: FP8 CUTLASS 833 TFLOP/s for Qwen3-30B's 2048 x 768 experts, 1,831 for
# Qwen3-235B's 4096 x 1536, 2,162 for 4096 x 2048; NVFP4 CUTLASS 613 / 1,362 / 1,980: the smaller the
# expert, the further below peak, and more so at FP4's faster math).
def _b200_moe(spec, size_half):
    from dataclasses import replace
    dep = parse_sim_target(f"sim:{spec},backend=roofline,expert_skew=0")
    fam = replace(dep.family, moe_compute_eff=1.0, moe_rows_half=0.0, moe_tp_slice_rows=0.0,
                  moe_size_half=size_half, engines=())
    return CostModel(replace(dep, family=fam))


def test_moe_efficiency_falls_with_a_small_expert_and_more_so_at_fp4_rate():
    # Qwen3-30B-A3B NVFP4 on 1 x B200: one expert is 2048 x 768 = 1,572,864 weights per matrix (1.572864 M).
    # moe_size_half 2 (M, at FP8 rate) -> 2 x 9000 / 4500 = 4 M at FP4 rate: 1.572864 / 5.572864 = 0.28224.
    nvfp4 = _b200_moe("qwen3-30b-a3b@1xb200,dtype=fp4,engine=trtllm", 2.0)
    assert nvfp4.peak_e == 9000e12
    assert nvfp4.size_sat == pytest.approx(1.572864 / 5.572864)
    # dense curve at 512 rows: 0.35 + (0.50 - 0.35) x log2(512 / 64) / 5 = 0.44
    assert nvfp4._moe_eff(512.0) == pytest.approx(0.44 * 1.572864 / 5.572864)
    # The same experts in FP8: half at 2 M -> 1.572864 / 3.572864 = 0.44022
    fp8 = _b200_moe("qwen3-30b-a3b@1xb200,dtype=fp8,engine=trtllm", 2.0)
    assert fp8.size_sat == pytest.approx(1.572864 / 3.572864)
    # moe_size_half 0: no size term (every other family and engine)
    assert _b200_moe("qwen3-30b-a3b@1xb200,dtype=fp4,engine=trtllm", 0.0).size_sat == 1.0


def test_mxfp4_experts_run_fp8_math_under_trtllm_on_blackwell():
    # gpt-oss-20b's MXFP4 experts (2880 x 2880 = 8.2944 M): TensorRT-LLM quantizes the activations to MXFP8
    # (W4A8), so the expert GEMMs run at B200's FP8 rate (4,500 TFLOP/s), not FP4's; with moe_size_half 2 the
    # size term is 8.2944 / 10.2944 = 0.80572. vLLM's entry is not changed here (fp4 peak, as before).
    trt = _b200_moe("gpt-oss-20b@1xb200,engine=trtllm", 2.0)
    assert trt.peak_e == 4500e12
    assert trt.size_sat == pytest.approx(8.2944 / 10.2944)
    assert _b200_moe("gpt-oss-20b@1xb200,engine=vllm", 0.0).peak_e == 9000e12


# Marlin MXFP4 experts (vLLM before 0.12 on Hopper): the roofline's routed experts take at least what the
# kernel's measured TFLOP/s allows (hardware.yaml marlin_moe_tflops, AIConfigurator's H100 vLLM table).
H100_OSS = "sim:gpt-oss-120b@1xh100,max_model_len=32768,backend=roofline,engine="


def test_marlin_floor_hand_worked():
    c = CostModel(parse_sim_target(H100_OSS + "vllm:0.10.2,expert_skew=0"))  # balanced routing
    # 256 tokens per expert, between [54.857, 214.4] and [292.571, 229.6]:
    #   f = ln(256 / 54.857) / ln(292.571 / 54.857) = 1.54044 / 1.67398 = 0.92023
    #   rate = 214.4 x (229.6 / 214.4) ** 0.92023 = 214.4 x 1.065030 = 228.342 TFLOP/s
    # one layer's routed experts at 8,192 prefill tokens, top-4: 2 x 3 x 2880 x 2880 x 32,768 = 1.63081 PFLOP
    flops = 2 * 3 * 2880 * 2880 * 8192 * 4
    assert c._marlin_s(flops, 256.0) == pytest.approx(flops / 228.342e12, rel=1e-4)  # 7.1419 ms
    assert c._marlin_s(flops, 1e6) == pytest.approx(flops / 229.6e12)  # flat beyond the table
    assert c._marlin_s(flops, 0.1) == pytest.approx(flops / 17.4e12)
    # Skewed routing (the default): the rate over marlin_skew_ratio there: at 256 tokens per expert (a
    # point of the ratio table, 1.349) 228.342 / 1.349 = 169.268 TFLOP/s; beyond both tables 229.6 / 1.212
    # = 189.439; at 0.1 the ratio table's first point (0.779) is below 1 and counts as 1: 17.4.
    s = CostModel(parse_sim_target(H100_OSS + "vllm:0.10.2"))
    assert s._marlin_s(flops, 256.0) == pytest.approx(flops / 169.268e12, rel=1e-4)  # 9.6345 ms
    assert s._marlin_s(flops, 1e6) == pytest.approx(flops / 189.439e12, rel=1e-4)
    assert s._marlin_s(flops, 0.1) == pytest.approx(flops / 17.4e12)
    # vLLM 0.12 runs Triton: no floor
    assert CostModel(parse_sim_target(H100_OSS + "vllm:0.12.0"))._marlin_s(flops, 256.0) == 0.0


def test_marlin_makes_a_large_prefill_slower_and_leaves_a_small_decode_alone():
    marlin = CostModel(parse_sim_target(H100_OSS + "vllm:0.10.2"))
    triton = CostModel(parse_sim_target(H100_OSS + "vllm:0.12.0"))
    p = 8192
    big = [sum(x._layer(p, 0, 0, p, p * (p + 1) // 2, p, moe=True, sliding=False)[:2])
           for x in (marlin, triton)]
    floor = marlin._marlin_s(2 * 3 * 2880 * 2880 * p * 4, 256.0)
    # The floor replaces the routed experts' roofline time: the layer is at least the floor and costs less
    # than the floor plus the whole Triton-priced layer.
    assert big[0] > big[1] and floor <= big[0] < floor + big[1]
    small = [sum(x._layer(1, 2048, 1, 0, 0, 0, moe=True, sliding=False)[:2]) for x in (marlin, triton)]
    assert small[0] == small[1]  # one token: the weight reads bound both
    # monotone in tokens: a rate never rises faster than the tokens it serves
    steps = [marlin.step(0, 0, t, t * (t + 1) // 2, t).time_s for t in range(64, 8193, 64)]
    assert all(b >= a for a, b in zip(steps, steps[1:], strict=False))


@pytest.mark.parametrize("key", ["marlin_moe_tflops", "marlin_skew_ratio"])
@pytest.mark.parametrize("curve", [[[2, 10], [1, 20]], [[1, -5]], "fast", [[1, 2, 3]], []])
def test_marlin_curve_must_be_ascending_positive_pairs(curve, key):
    from servelab.sim.catalog import _parse_family
    e = {"compute_eff": 0.7, "decode_compute_eff": 0.45, "mem_eff": 0.7, "comm_eff": 0.7,
         "step_overhead_us": 125, "layer_overhead_us": 50, key: curve}
    with pytest.raises(TargetError, match=key):
        _parse_family("f", e, "families.f")


# DeepSeek-V3 FP8 under vLLM with TP8 on Hopper (issue 11): the nvidia-hopper family's vLLM entry adds the
# MLA path's work that the roofline left out, fitted on AIConfigurator's vLLM step times
# (benchmarks/sim_fit_mla.py: H100 rows fit, H200 rows check). Each term alone, on 8 x H200 (HBM 4.8 TB/s x
# mem_eff 0.7 = 3.36 TB/s; NVLink 900 / 2 GB/s x comm_eff 0.7 = 315 GB/s, 15 us latency); DeepSeek-V3: 61
# layers (58 MoE), hidden 7168.
MLA_NEUTRAL = {"mla_attn_eff": 1.0, "mla_act_passes": 0.0, "mla_moe_comm": 0.0,
               "mla_prefill_overhead_us": 0.0, "mla_layer_floor_us": 0.0}
DS_VLLM = "sim:deepseek-v3@8xh200,dtype=fp8,tp=8,engine=vllm,backend=roofline,expert_skew=0"


def _ds(**consts):
    from dataclasses import replace
    dep = parse_sim_target(DS_VLLM)
    fam = replace(dep.family.for_engine("vllm"), engines=(), **{**MLA_NEUTRAL, **consts})
    return CostModel(replace(dep, family=fam))


def test_mla_elementwise_passes_over_the_hidden_state():
    # 32 passes of 64 tokens x 7168 x 2 bytes = 29,360,128 bytes a layer / 3.36 TB/s = 8.7381 us; x 61 layers
    base, act = _ds(), _ds(mla_act_passes=32)
    extra = act.step(64, 64 * 2048).time_s - base.step(64, 64 * 2048).time_s
    assert extra == pytest.approx(61 * 29_360_128 / 3.36e12, rel=1e-6)  # 533.02 us
    assert act.step(64, 64 * 2048).memory_s - base.step(64, 64 * 2048).memory_s == pytest.approx(extra)


def test_mla_tensor_parallel_moe_moves_two_more_all_reduces():
    # one all-reduce of 64 x 7168 x 2 = 917,504 bytes through the switch: 15 / 3 us + 917,504 / 315e9 s
    # = 5 + 2.91271 = 7.91271 us; two more in each of the 58 MoE layers: 917.87 us
    base, comm = _ds(), _ds(mla_moe_comm=2)
    extra = comm.step(64, 64 * 2048).time_s - base.step(64, 64 * 2048).time_s
    assert extra == pytest.approx(58 * 2 * (5e-6 + 917_504 / 315e9), rel=1e-6)
    assert comm.step(64, 64 * 2048).comm_s - base.step(64, 64 * 2048).comm_s == pytest.approx(extra)


def test_mla_prefill_overhead_is_per_layer_in_steps_with_prefill_only():
    base, pf = _ds(), _ds(mla_prefill_overhead_us=200)
    p = (0, 0, 512, 512 * 513 // 2, 512)
    assert pf.step(*p).time_s - base.step(*p).time_s == pytest.approx(61 * 200e-6, rel=1e-6)  # 12.2 ms
    assert pf.step(8, 8 * 2048).time_s == pytest.approx(base.step(8, 8 * 2048).time_s)  # decode only: none


def test_mla_layer_floor_sets_a_small_decode_step():
    # One decode at 2K: every layer's kernels (~0.1 ms) are under the 260 us floor: 61 x 260 us = 15.86 ms;
    # the layer's two TP8 all-reduces come on top of the floor (it is the compute kernels' latency): each
    # 15 us / 3 + 7168 x 2 B / (900 / 2 GB/s x 0.7) = 5.04551 us, 61 x 2 x 5.04551 = 0.61555 ms; plus the LM
    # head: 7168 x 129,280 BF16 weights / 8 ranks = 231,690,240 bytes / 3.36 TB/s = 68.955 us (its math, 0.23
    # GFLOP at 989 x 0.45 TFLOP/s = 0.52 us, hides behind the read)
    floor = _ds(mla_layer_floor_us=260)
    ar = 15e-6 / 3 + 7168 * 2 / (450e9 * 0.7)
    assert floor.step(1, 2048).time_s == pytest.approx(61 * (260e-6 + 2 * ar) + 231_690_240 / 3.36e12,
                                                       rel=1e-6)
    assert _ds().step(1, 2048).time_s < 0.5 * floor.step(1, 2048).time_s
    # 256 decodes (~0.7 ms a layer) are above it: unchanged
    assert floor.step(256, 256 * 2048).time_s == pytest.approx(_ds().step(256, 256 * 2048).time_s)


def test_mla_attention_projection_efficiency():
    # A dense layer of 8,192 tokens (the replicated-projection test's): projections 600.22 GFLOP at FP8 peak x
    # compute_eff 0.7 x mla_attn_eff 0.3, the dense FFN's 811.75 GFLOP at 0.7:
    #   600.22 / (1,979 x 0.21) + 811.75 / (1,979 x 0.7) ms = 1.44429 + 0.58598 = 2.03027 ms
    # (the attention core, FlashAttention over the expanded heads, keeps the family's efficiency)
    c = _ds(mla_attn_eff=0.3)
    compute_s = c._layer(8192, 0, 0, 0, 0, 0, moe=False, sliding=False)[0]
    assert compute_s == pytest.approx(2.03027e-3, rel=1e-4)
    neutral = _ds()._layer(8192, 0, 0, 0, 0, 0, moe=False, sliding=False)[0]
    assert neutral == pytest.approx(1.01925e-3, rel=1e-4)


def test_catalog_vllm_hopper_prices_deepseek_tp8_near_aiconfigurator():
    # The catalog's constants against AIConfigurator 0.12's vLLM step times of the same deployment on 8 x H200
    # (benchmarks/data/sim_mla_grid.json, the check rows): a 2,048-token prefill 129.16 ms (the roofline
    # priced 64 ms before, -50%), one decode at 2K 14.10 ms (6.2 ms, -56%), 256 decodes 49.87 ms (43.4, -13%)
    c = CostModel(parse_sim_target(DS_VLLM))
    assert c.step(0, 0, 2048, 2048 * 2049 // 2, 2048).time_s * 1e3 == pytest.approx(129.16, rel=0.10)
    assert c.step(1, 2048).time_s * 1e3 == pytest.approx(14.10, rel=0.15)
    assert c.step(256, 256 * 2048).time_s * 1e3 == pytest.approx(49.87, rel=0.10)
    # other engines keep the family's constants for DeepSeek
    sg = CostModel(parse_sim_target("sim:deepseek-v3@8xh200,dtype=fp8,tp=8,engine=sglang,backend=roofline"))
    assert (sg.attn_eff, sg.act_passes, sg.moe_comm, sg.mla_floor, sg.mla_pf_oh) == (1, 0, 0, 0, 0)


@pytest.mark.parametrize("key", ["mla_attn_eff", "mla_act_passes", "mla_layer_floor_us"])
def test_mla_engine_constants_parse_and_must_be_valid(key):
    from servelab.sim.catalog import _parse_family
    e = {"compute_eff": 0.7, "decode_compute_eff": 0.45, "mem_eff": 0.7, "comm_eff": 0.7,
         "step_overhead_us": 125, "layer_overhead_us": 50, "engines": {"vllm": {key: 0.5}}}
    assert getattr(_parse_family("f", e, "families.f").for_engine("vllm"), key) == 0.5
    e["engines"]["vllm"] = {key: -1}
    with pytest.raises(TargetError, match=key):
        _parse_family("f", e, "families.f")
