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
