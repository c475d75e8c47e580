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
