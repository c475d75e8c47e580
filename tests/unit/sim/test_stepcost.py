"""The step-cost interface: backend choice, engine CPU time and async overlap, jitter, MoE routing."""

from __future__ import annotations

import math

import pytest

from servelab.errors import DeploymentError, TargetError
from servelab.sim import silicon
from servelab.sim.costmodel import LL_A2A_US, RooflineCost
from servelab.sim.stepcost import EngineStep, make_step_cost
from servelab.sim.target import parse_sim_target

DSV3 = "sim:deepseek-v3@8xh200,dtype=fp8,ep=8,dp_attention=true"


class _Fixed:
    """A backend with a fixed GPU time, to check what the engine adds around it."""

    name = "fixed"

    def __init__(self, t: float) -> None:
        self.t = t

    def step(self, n_dec, ctx_dec, p_tok=0, p_pairs=0, p_ctx=0):
        from servelab.sim.stepcost import StepTime
        return StepTime(self.t, self.t, 0.0, 0.0, 1.0, 0.0)


def test_engine_cpu_time_adds_when_synchronous_and_hides_when_async():
    # vLLM profile: 125 us + 1 us per running sequence, synchronous by default.
    sync = EngineStep(parse_sim_target("sim:llama-3.1-8b@1xh100,jitter=0"), backend=_Fixed(0.010))
    assert sync.step(100, 1000).time_s == pytest.approx(0.010 + 125e-6 + 100e-6)
    assert sync.step(100, 1000).cpu_s == pytest.approx(225e-6)
    asy = EngineStep(
        parse_sim_target("sim:llama-3.1-8b@1xh100,jitter=0,async_scheduling=on"), backend=_Fixed(0.010)
    )
    assert asy.step(100, 1000).time_s == pytest.approx(0.010) and asy.step(100, 1000).cpu_s == 0.0
    # A GPU step shorter than the CPU's: the CPU sets the pace even when overlapped.
    short = EngineStep(
        parse_sim_target("sim:llama-3.1-8b@1xh100,jitter=0,engine=sglang"), backend=_Fixed(50e-6)
    )
    assert short.step(10, 100).time_s == pytest.approx(100e-6 + 10 * 0.8e-6)


def test_host_time_is_per_attention_rank_and_overridable_from_the_target():
    # TensorRT-LLM profile (async) with a measured host cost set in the target: 100 us + 20 us per sequence.
    # Two attention-DP ranks each schedule their own 200 of the 400 running sequences, in parallel:
    # 100 + 20 x 200 = 4.1 ms, longer than the 1 ms GPU step, so the host sets the pace (8.1 ms if one
    # process handled all 400).
    spec = "sim:qwen3-30b-a3b@2xh100,ep=2,dp_attention=true,engine=trtllm,jitter=0"
    dep = parse_sim_target(spec + ",step_cpu_us=100,step_cpu_per_seq_us=20")
    assert dep.host_step_us == (100.0, 20.0)
    assert dep.describe()["step_cpu_per_seq_us"] == 20.0
    t = EngineStep(dep, backend=_Fixed(0.001)).step(400, 400 * 1000, n_seqs=400)
    assert t.time_s == pytest.approx(4.1e-3) and t.cpu_s == pytest.approx(3.1e-3)
    # An odd count: the busier rank's 201 sequences.
    assert EngineStep(dep, backend=_Fixed(0.001)).step(401, 401 * 1000, n_seqs=401).time_s == pytest.approx(
        100e-6 + 201 * 20e-6)
    # Without the keys, the engine profile's figures (catalog/engines.yaml trtllm: 80 us + 0.5 us).
    prof = parse_sim_target(spec)
    assert prof.host_step_us == (prof.profile.step_cpu_us, prof.profile.step_cpu_per_seq_us) == (80.0, 0.5)
    # Synchronous: the host time adds to the GPU's.
    sync = parse_sim_target(spec + ",step_cpu_us=0,step_cpu_per_seq_us=10,async_scheduling=off")
    assert EngineStep(sync, backend=_Fixed(0.001)).step(400, 400 * 1000, n_seqs=400).time_s == pytest.approx(
        0.001 + 200 * 10e-6)


@pytest.mark.parametrize("bad", ["step_cpu_per_seq_us=-5", "step_cpu_us=nan", "step_cpu_us=2e6"])
def test_host_time_out_of_range_is_refused(bad):
    with pytest.raises(DeploymentError, match="step_cpu"):
        parse_sim_target("sim:llama-3.1-8b@1xh100," + bad)


def test_host_time_that_is_not_a_number_is_refused():
    with pytest.raises(TargetError, match="step_cpu_per_seq_us"):
        parse_sim_target("sim:llama-3.1-8b@1xh100,step_cpu_per_seq_us=fast")


def test_jitter_is_seeded_mean_preserving_and_off_at_zero():
    dep = parse_sim_target("sim:llama-3.1-8b@1xh100,jitter=0.05")
    a, b = EngineStep(dep, seed=1, backend=_Fixed(0.01)), EngineStep(dep, seed=1, backend=_Fixed(0.01))
    xs = [a.step(1, 10).time_s for _ in range(4000)]
    assert xs == [b.step(1, 10).time_s for _ in range(4000)]
    assert len(set(xs)) > 3900
    base = 0.01 + 126e-6
    assert sum(xs) / len(xs) == pytest.approx(base, rel=0.005)  # lognormal with mean 1
    sd = math.sqrt(sum((x / base - 1) ** 2 for x in xs) / len(xs))
    assert 0.04 < sd < 0.06
    off = EngineStep(parse_sim_target("sim:llama-3.1-8b@1xh100,jitter=0"), backend=_Fixed(0.01))
    assert {off.step(1, 10).time_s for _ in range(50)} == {base}


def test_jitter_out_of_range_is_refused():
    with pytest.raises(DeploymentError, match="jitter"):
        parse_sim_target("sim:llama-3.1-8b@1xh100,jitter=1.5")


def test_roofline_backend_when_asked_or_when_silicon_does_not_cover():
    assert make_step_cost(parse_sim_target("sim:llama-3.1-8b@1xh100,backend=roofline")).name == "roofline"
    for spec in ("sim:llama-3.1-8b@1xmi300x", "sim:sim-tiny@1xh100", "sim:llama-3.1-8b@1xh800"):
        assert make_step_cost(parse_sim_target(spec)).name == "roofline"
    with pytest.raises(DeploymentError, match="backend=silicon"):
        make_step_cost(parse_sim_target("sim:llama-3.1-8b@1xmi300x,backend=silicon"))
    with pytest.raises(DeploymentError, match="backend"):
        parse_sim_target("sim:llama-3.1-8b@1xh100,backend=magic")


def test_imbalance_stalls_the_moe_step_and_eplb_recovers_part_of_it():
    skewed = RooflineCost(parse_sim_target(DSV3))
    balanced = RooflineCost(parse_sim_target(DSV3 + ",expert_skew=0"))
    eplb = RooflineCost(parse_sim_target(DSV3 + ",eplb=true"))
    for n in (8, 256, 2048):
        s, b, e = skewed.step(n, n * 2000), balanced.step(n, n * 2000), eplb.step(n, n * 2000)
        assert b.imbalance == 1.0 and 1.0 < e.imbalance < s.imbalance <= 8
        assert e.time_s < s.time_s
        assert b.comm_s < e.comm_s < s.comm_s  # the all-to-all waits for the busiest rank
        if n >= 2048:  # (smaller batches: skewed routing touches fewer distinct experts: less to read)
            assert b.time_s < e.time_s
    # Sampling spread: 8 tokens x top-8 over 8 ranks = 8 assignments per rank: 1 + sqrt(2 ln 8 / 8) = 1.721.
    assert eplb.imbalance(8 * 8) == pytest.approx(1 + math.sqrt(2 * math.log(8) / 8))
    # Never above ep: one token cannot load more than every rank's share onto one.
    assert skewed.imbalance(1) == 8.0


def test_low_latency_all_to_all_matches_deepep_at_its_measured_point():
    # H800 + 400 Gb/s NICs, EP128, hidden 7168, top-8, 128 tokens per GPU: DeepEP measured 192 + 369 us.
    cm = RooflineCost(
        parse_sim_target("sim:deepseek-v3@16x8xh800,dtype=fp8,ep=128,dp_attention=true,expert_skew=0")
    )
    t, _ = cm._all_to_all(128 * 128, 1.0, low_latency=True)
    assert t == pytest.approx(LL_A2A_US[128] * 1e-6, rel=0.01)
    # a third of it is fixed: one token per GPU still costs ~0.35 of the measured time
    t1, _ = cm._all_to_all(128, 1.0, low_latency=True)
    assert t1 == pytest.approx(LL_A2A_US[128] * 1e-6 * (0.35 + 0.65 / 128), rel=0.01)
    assert t > 150e-6  # not the 30 us per layer of the previous model


def test_fp4_experts_on_hopper_run_at_the_engines_precision():
    vllm = RooflineCost(parse_sim_target("sim:gpt-oss-120b@1xh100"))
    # (TensorRT-LLM caches every layer for the whole sequence: 128K tokens do not fit one H100 beside the
    # weights, so a shorter max_model_len)
    trt = RooflineCost(parse_sim_target("sim:gpt-oss-120b@1xh100,engine=trtllm,max_model_len=32768"))
    b200 = RooflineCost(parse_sim_target("sim:gpt-oss-120b@1xb200"))
    assert vllm.peak_e == 989e12  # W4A16: BF16 math (Hopper has no FP4 path)
    # TensorRT-LLM too: its Hopper MXFP4 MoE is W4A16 (AIConfigurator's measured TRT-LLM H200 MoE table has
    # only w4a16_mxfp4 rows for MXFP4), not W4A8 as this test asserted before
    assert trt.peak_e == 989e12
    assert b200.peak_e == 9000e12  # native FP4
    assert vllm.eb == trt.eb < 0.6  # the weights stay 4-bit either way


@pytest.mark.skipif(
    not silicon.installed(), reason="the silicon extra (aiconfigurator-core) is not installed"
)
def test_silicon_backend_prices_covered_deployments_from_measured_kernels():
    dep = parse_sim_target("sim:llama-3.1-8b@1xh100,dtype=fp8,engine=trtllm")
    cost = make_step_cost(dep)
    assert cost.name == "silicon"
    small, big = cost.step(1, 1000), cost.step(256, 256 * 1000)
    assert 0.002 < small.time_s < big.time_s < 0.2
    # parts are the roofline's split, scaled to the silicon total
    assert 0.5 * small.time_s < small.compute_s + small.memory_s + small.comm_s <= small.time_s
    assert cost.step(1, 1000) is small  # memoized by step shape
    assert parse_sim_target("sim:llama-3.1-8b@1xmi300x").hardware.name not in silicon.SYSTEMS


def test_decode_only_steps_are_padded_to_the_next_cuda_graph_batch_size():
    # TensorRT-LLM with cuda_graph_config enable_padding: 600 decodes run the 1,024 graph (424 padding
    # requests); above the largest captured size (1,024) a step runs eagerly, unpadded. A mixed step runs
    # eagerly but costs no less than its decodes padded.
    dep = parse_sim_target("sim:gpt-oss-20b@1xh100,engine=trtllm,jitter=0,backend=roofline,"
                           "cuda_graph_batch_sizes=256/512/1024")
    assert dep.cuda_graph_batch_sizes == (256, 512, 1024)
    es = EngineStep(dep)
    b = es.backend
    ctx = 600 * 2048
    assert es.step(600, ctx).time_s == pytest.approx(b.step(1024, ctx).time_s)
    assert b.step(1024, ctx).time_s > 1.2 * b.step(600, ctx).time_s
    assert es.step(1100, 1100 * 2048).time_s == pytest.approx(b.step(1100, 1100 * 2048).time_s)
    assert es.step(600, ctx, 1, 1, 1).time_s >= es.step(600, ctx).time_s
    plain = EngineStep(parse_sim_target("sim:gpt-oss-20b@1xh100,engine=trtllm,jitter=0,backend=roofline"))
    assert plain.step(600, ctx).time_s == pytest.approx(b.step(600, ctx).time_s)


def test_silicon_prices_the_context_a_prefill_chunk_continues():
    # AIConfigurator's forward-pass record has scheduled prefill tokens and requests, no earlier context: the
    # 2nd chunk of 8,192 tokens of a long prompt (8,192 already cached) read as a fresh 8,192-token prompt.
    # The backend adds the roofline's price of the pairs beyond a fresh chunk's (8,192 x 8,192 here).
    from servelab.sim.silicon import SiliconCost

    class _Flat:  # stands in for the measured model: 100 ms for any 8,192-token prefill
        def estimate_forward_pass_time_ms(self, fpm):
            return 100.0

    dep = parse_sim_target("sim:gpt-oss-120b@1xh100,backend=roofline,max_model_len=32768")
    roof = RooflineCost(dep)
    sc = SiliconCost.__new__(SiliconCost)
    sc.dep, sc.roof, sc.balanced, sc.model, sc.ranks, sc.misses, sc._memo = dep, roof, None, _Flat(), 1, 0, {}
    n = 8192
    fresh = sc.step(0, 0, n, n * (n + 1) // 2, n).time_s
    assert fresh == pytest.approx(0.100)
    cont = sc.step(0, 0, n, n * (n + (n + 1) // 2), 2 * n).time_s
    extra = (roof.step(0, 0, n, n * (n + (n + 1) // 2), 2 * n).time_s
             - roof.step(0, 0, n, n * (n + 1) // 2, n).time_s)
    assert extra > 0.005  # 18 full layers x 16,384 FLOP x 67M pairs at ~70% of 989 TFLOP/s: ~29 ms
    assert cont == pytest.approx(0.100 + extra, rel=0.02)
