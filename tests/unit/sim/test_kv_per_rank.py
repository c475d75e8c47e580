"""KV values per token per layer on one GPU: one definition, read by the memory plan and the cost model."""

import pytest

from servelab.sim.costmodel import CostModel
from servelab.sim.deployment import Deployment
from servelab.sim.target import parse_sim_target


@pytest.mark.parametrize(("spec", "values"), [
    # GQA: K and V (2) x KV heads on this rank x head_dim 128. Llama-3.1-8B has 8 KV heads.
    ("sim:llama-3.1-8b@1xh100", 2 * 8 * 128),  # 2048: every head on one GPU
    ("sim:llama-3.1-8b@8xh100,tp=8", 2 * 1 * 128),  # 256: one head per rank
    ("sim:llama-3.1-8b@2x8xh100,tp=16", 2 * 1 * 128),  # 256: 16 ranks > 8 heads, heads replicated
    # MLA: the latent (kv_lora_rank 512 + rope 64) is kept whole on every rank, sharded or not.
    ("sim:deepseek-v3@8xh200,dtype=fp8", 512 + 64),
    ("sim:deepseek-v3@8xh200,dtype=fp8,dp_attention=true", 512 + 64),
])
def test_kv_values_per_rank_hand_worked(spec, values):
    d = parse_sim_target(spec)
    assert d.kv_values_per_rank == values
    assert CostModel(d).kv_vals == values  # the cost model reads the same number


def test_memory_plan_and_cost_model_read_the_one_definition(monkeypatch):
    spec = "sim:llama-3.1-8b@8xh100,tp=8"
    before = parse_sim_target(spec).memory.kv_tokens
    monkeypatch.setattr(Deployment, "kv_values_per_rank", property(lambda self: 512))  # twice 256
    d = parse_sim_target(spec)
    assert CostModel(d).kv_vals == 512
    assert d.memory.kv_tokens == pytest.approx(before / 2, rel=0.001)  # twice the bytes per token


def test_trtllm_kv_fraction_applies_to_the_memory_the_model_leaves():
    # Llama-3.1-8B FP8 on 1 x H100 (80 GiB = 85,899,345,920 B), FP8 KV (65,536 B a token), 256 seqs and
    # 8192 tokens:
    # weights 9,080,668,160 B (FP8 layers, BF16 embeddings and head); activations 1e9 + 8192 x 4096 x 2 x 12
    # + 256 x 128,256 x 4 = 1,936,640,512 B.
    # TensorRT-LLM (kv_cache_config.free_gpu_memory_fraction 0.9 of what is left after the profiling run):
    # (85,899,345,920 - 9,080,668,160 - 1,936,640,512) x 0.9 / 65,536 = 1,028,348 tokens.
    # vLLM (gpu_memory_utilization 0.9 of the device): (85,899,345,920 x 0.9 - 11,017,308,672) / 65,536
    # = 1,011,537 tokens.
    spec = ("sim:llama-3.1-8b@1xh100,dtype=fp8,kv_dtype=fp8,max_num_seqs=256,max_num_batched_tokens=8192,"
            "engine=")
    trt, vllm = parse_sim_target(spec + "trtllm").memory, parse_sim_target(spec + "vllm").memory
    assert (trt.weights, trt.activations, trt.kv_bytes_per_token) == (9_080_668_160, 1_936_640_512, 65_536)
    assert trt.kv_tokens == 1_028_348
    assert vllm.kv_tokens == 1_011_537
