"""The silicon backend's request to AIConfigurator: which measured tables a deployment is priced from."""

from __future__ import annotations

import pytest

from servelab.sim import silicon
from servelab.sim.target import parse_sim_target

needs_silicon = pytest.mark.skipif(
    not silicon.installed(), reason="the silicon extra (aiconfigurator-core) is not installed"
)


def _cfg(spec: str) -> dict:
    return silicon.engine_config(parse_sim_target(spec + ",backend=roofline"))


def test_gpt_oss_experts_on_blackwell_are_priced_with_mxfp8_activations_where_the_engine_runs_them():
    # TensorRT-LLM (CUTLASS/TRTLLM MoE) and SGLang (flashinfer mxfp4 MoE) run gpt-oss's MXFP4 experts on
    # Blackwell with MXFP8 activations: AIConfigurator files those kernels as w4a8_mxfp4_mxfp8. The name
    # "w4a8_mxfp4_mxfp8_trtllm" (DeepSeek-V4's SGLang kernel) is dropped by the native config, which then
    # prices the checkpoint's W4A16 table.
    assert _cfg("sim:gpt-oss-20b@1xb200,engine=trtllm")["moe_dtype"] == "w4a8_mxfp4_mxfp8"
    dep2 = _cfg("sim:gpt-oss-120b@2xb200,ep=2,dp_attention=true,engine=trtllm")
    assert dep2["moe_dtype"] == "w4a8_mxfp4_mxfp8"
    assert _cfg("sim:gpt-oss-20b@1xb200,engine=sglang")["moe_dtype"] == "w4a8_mxfp4_mxfp8"
    # vLLM's B200 table has W4A16 only (flashinfer mxfp4 x bf16); Hopper has no FP8-activation MXFP4 path
    assert _cfg("sim:gpt-oss-20b@1xb200,engine=vllm")["moe_dtype"] == "w4a16_mxfp4"
    assert _cfg("sim:gpt-oss-20b@1xh200,engine=trtllm")["moe_dtype"] == "w4a16_mxfp4"
    # an NVFP4 checkpoint is unchanged
    assert _cfg("sim:qwen3-30b-a3b@1xb200,dtype=fp4,kv_dtype=fp8,engine=trtllm")["moe_dtype"] == "nvfp4"


def test_mla_attention_is_priced_in_bf16_beside_an_fp8_latent_cache():
    # AIConfigurator measured MLA context kernels in BF16 only (with a BF16 or FP8 cache); FP8 attention
    # finds no data and the model does not build. GQA attention keeps FP8 with an FP8 cache.
    ds = _cfg("sim:deepseek-r1@4xb200,dtype=fp4,kv_dtype=fp8,ep=4,dp_attention=true,engine=trtllm")
    assert (ds["activation_dtype"], ds["kv_cache_dtype"]) == ("bfloat16", "fp8")
    llama = _cfg("sim:llama-3.1-8b@1xh100,dtype=fp8,kv_dtype=fp8,engine=trtllm")
    assert (llama["activation_dtype"], llama["kv_cache_dtype"]) == ("fp8", "fp8")


@needs_silicon
def test_gpt_oss_20b_b200_decode_step_reads_the_mxfp8_moe_table():
    # gpt-oss-20b on 1 x B200 (TensorRT-LLM), 1,024 decodes at 1,536 context. AIConfigurator's TRT-LLM B200
    # MoE table (32 experts, top-4, hidden 2880, power_law_1.2 routing, which the forward-pass model reads) at
    # 1,024 tokens: W4A16 0.882 ms per layer, W4A8 MXFP4xMXFP8 0.181 ms. 24 layers: the W4A16 MoE alone is
    # 21.2 ms, the MXFP8 one 4.3 ms. The step priced through the W4A16 table was 28.6 ms.
    from servelab.sim.stepcost import make_step_cost

    dep = parse_sim_target("sim:gpt-oss-20b@1xb200,kv_dtype=fp8,engine=trtllm,backend=silicon")
    cost = make_step_cost(dep)
    assert cost.name == "silicon"
    t = cost.step(1024, 1024 * 1536).time_s
    assert 24 * 0.181e-3 < t < 24 * 0.882e-3


@needs_silicon
@pytest.mark.parametrize(
    "spec",
    [
        "sim:deepseek-r1@4xb200,dtype=fp4,kv_dtype=fp8,ep=4,dp_attention=true,engine=trtllm",
        "sim:deepseek-r1@8xh200,dtype=fp8,kv_dtype=fp8,ep=8,dp_attention=true,engine=trtllm",
    ],
)
def test_deepseek_with_an_fp8_cache_is_covered(spec):
    # The TensorRT-LLM developer guide's DeepSeek-R1 rows (FP8 KV cache): the model failed to build ("context
    # MLA data missing for fmha_quant fp8") and backend=silicon refused them.
    from servelab.sim.stepcost import make_step_cost

    cost = make_step_cost(parse_sim_target(spec + ",backend=silicon"))
    assert cost.name == "silicon"
    assert cost.step(256, 256 * 1536).time_s > 0


H100_120B = "sim:gpt-oss-120b@1xh100,max_model_len=32768"


def test_marlin_is_used_for_gpt_oss_experts_on_hopper_by_vllm_before_0_12_only():
    def uses(spec: str) -> bool:
        return silicon.uses_marlin(parse_sim_target(spec + ",backend=roofline"))
    assert uses(H100_120B + ",engine=vllm:0.10.2")
    assert uses("sim:gpt-oss-120b@2xh100,tp=2,engine=vllm:0.11.0")
    assert not uses(H100_120B + ",engine=vllm:0.12.0")
    assert not uses(H100_120B + ",engine=vllm")  # no version: the profile's (Triton) kernel
    assert not uses("sim:gpt-oss-120b@1xb200,engine=vllm:0.10.2")  # Blackwell: FlashInfer MXFP4
    assert not uses("sim:gpt-oss-120b@1xmi300x,engine=vllm:0.10.2")  # AMD: not vLLM's SM90 selection
    assert not uses(H100_120B + ",engine=trtllm:1.0")
    assert not uses("sim:qwen3-30b-a3b@1xh100,engine=vllm:0.10.2")  # not an MXFP4 checkpoint


def test_marlin_factor_hand_worked():
    # Triton 10 TFLOP/s at 1 token per expert, 400 at 100; Marlin 10, 150, 100 (a dip), 200 at 1/10/50/100.
    tri = [(1.0, 10.0), (100.0, 400.0)]
    mar = [(1.0, 10.0), (10.0, 150.0), (50.0, 100.0), (100.0, 200.0)]
    assert silicon.envelope(mar) == [(1.0, 10.0), (10.0, 150.0), (50.0, 150.0), (100.0, 200.0)]
    # tpe 100: 400 / 200
    assert silicon.marlin_factor(100.0, tri, mar) == pytest.approx(2.0)
    # tpe 50: Triton 10 x 40 ** (ln 50 / ln 100) = 10 x 40 ** 0.849485 = 229.59; Marlin's envelope 150
    assert silicon.marlin_factor(50.0, tri, mar) == pytest.approx(229.59 / 150, rel=1e-4)
    # tpe 10: Triton 10 x 40 ** 0.5 = 63.2 < Marlin 150: held at 1 (never faster than Triton)
    assert silicon.marlin_factor(10.0, tri, mar) == 1.0
    assert silicon.marlin_factor(0.0, tri, mar) == 1.0
    # beyond the ends the curves are held flat: 400 / 200
    assert silicon.marlin_factor(1000.0, tri, mar) == pytest.approx(2.0)


@needs_silicon
def test_gpt_oss_120b_h100_vllm_0_10_2_prefill_is_priced_with_marlin_experts():
    # An 8,192-token gpt-oss-120b prefill on 1 x H100. AIConfigurator's vLLM H100 MoE table (0.24.0):
    # Triton (matmul_ogs) 128 experts, top-4, hidden/inter 2880, 8,192 tokens (256 per expert): balanced
    # 2.930928 ms = 2 x 8192 x 4 x 3 x 2880^2 / 2.930928 ms = 556.39 TFLOP/s; power_law_1.2 3.954317 ms.
    # Marlin MXFP4 W4A16 rows (896 experts, top-16, hidden 3584, inter 3072), envelope at 219.4 tokens per
    # expert 220.66 (6,144 tokens, 29.4293 ms), at 292.6 229.63 (16,384 tokens, 75.4128 ms); log-log at 256:
    # 225.43 TFLOP/s. Factor 556.39 / 225.43 = 2.4682; added 36 layers x 3.954317 ms x 1.4682 = 209.0 ms.
    from servelab.sim.stepcost import make_step_cost

    new = make_step_cost(parse_sim_target(H100_120B + ",engine=vllm:0.10.2,backend=silicon"))
    old = make_step_cost(parse_sim_target(H100_120B + ",engine=vllm:0.12.0,backend=silicon"))
    assert new.marlin is not None and old.marlin is None
    assert new.marlin.extra_s(8192) == pytest.approx(0.2090, abs=0.0005)
    pairs = 8192 * 8193 // 2
    added = new.step(0, 0, 8192, pairs, 8192).time_s - old.step(0, 0, 8192, pairs, 8192).time_s
    assert added == pytest.approx(0.2090, rel=0.02)
    # a 64-sequence decode step (2 tokens per expert): Marlin is not priced slower there
    assert new.step(64, 64 * 2048).time_s == pytest.approx(old.step(64, 64 * 2048).time_s)
