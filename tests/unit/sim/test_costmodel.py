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
    # GPU at 5.3 TB/s x 0.75 = 2.2 ms, plus 80 layers x 50 us = 4.0 ms: at least 6.2 ms (was ~4.3 ms).
    spec = "sim:llama-3.1-70b@8xmi300x,tp=8,dtype=fp8,kv_dtype=fp8,backend=roofline"
    cost = CostModel(parse_sim_target(spec))
    assert cost.layer_oh == pytest.approx(50e-6)
    assert cost.step(1, 128).time_s >= 6.2e-3
