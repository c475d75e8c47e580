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
    spec = "sim:deepseek-v3@16x8xh800,dtype=fp8,ep=128,overlap=true,max_num_seqs=16384,max_num_batched_tokens=16384"
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
