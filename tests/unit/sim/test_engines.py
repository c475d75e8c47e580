"""Engine profiles: each engine's published defaults fill what the target leaves unset."""

from __future__ import annotations

import pytest

from servelab.errors import TargetError
from servelab.sim.target import parse_sim_target


@pytest.mark.parametrize("engine,seqs,tokens,async_", [
    ("vllm", 1024, 8192, False),  # vLLM's API server on >= 70 GiB GPUs
    ("sglang", 2048, 8192, True),
    ("trtllm", 2048, 8192, True),  # max_batch_size / max_num_tokens
])
def test_engine_defaults_on_a_large_gpu(engine, seqs, tokens, async_):
    d = parse_sim_target(f"sim:llama-3.1-8b@1xh100,engine={engine}")
    assert (d.max_num_seqs, d.max_num_batched_tokens, d.async_sched) == (seqs, tokens, async_)
    assert d.describe()["engine"] == engine


def test_vllm_is_the_default_and_small_gpus_get_the_small_batch_defaults():
    assert parse_sim_target("sim:llama-3.1-8b@1xh100").engine == "vllm"
    d = parse_sim_target("sim:llama-3.1-8b@1xv5e,dtype=fp8,max_model_len=2048")  # 16 GB
    assert (d.max_num_seqs, d.max_num_batched_tokens) == (256, 2048)
    assert parse_sim_target("sim:llama-3.1-8b@1xb200,engine=sglang").max_num_batched_tokens == 16384


def test_explicit_settings_win_over_the_profile():
    d = parse_sim_target("sim:llama-3.1-8b@1xh100,engine=trtllm,max_num_seqs=64,async_scheduling=off")
    assert d.max_num_seqs == 64 and d.max_num_batched_tokens == 8192 and not d.async_sched


def test_fp8_checkpoints_keep_a_bf16_kv_cache_unless_asked():
    for eng in ("vllm", "sglang", "trtllm"):
        assert parse_sim_target(f"sim:llama-3.1-70b@8xh100,dtype=fp8,engine={eng}").kv_dtype == "bf16"
    assert parse_sim_target("sim:llama-3.1-70b@8xh100,dtype=fp8,kv_dtype=fp8").kv_dtype == "fp8"
    assert parse_sim_target("sim:llama-3.1-70b@8xh100").kv_dtype == "bf16"


def test_limits_are_per_attention_rank_under_dp_attention():
    d = parse_sim_target(
        "sim:deepseek-v3@8xh200,dtype=fp8,ep=8,dp_attention=true,engine=sglang,max_num_seqs=256"
    )
    assert d.max_num_seqs == 256 and d.sched_max_seqs == 8 * 256
    assert d.sched_max_tokens == 8 * 8192
    plain = parse_sim_target("sim:llama-3.1-70b@8xh100,engine=sglang")
    assert plain.sched_max_seqs == plain.max_num_seqs  # one scheduler for the whole tp group


def test_nvidia_mlperf_h200_setting_is_expressible():
    # batch 2048, 1,536 tokens per step: MLPerf's H200 Llama-2-70B layout is TP1 x PP2 per replica
    # (the per-step token budget is below the batch: decode-only steps, prefill squeezed in).
    d = parse_sim_target("sim:llama-2-70b@8xh200,tp=1,pp=2,dtype=fp8,kv_dtype=fp8,engine=trtllm,"
                         "max_num_seqs=2048,max_num_batched_tokens=2048")
    assert d.max_num_seqs == 2048


def test_gpt_oss_120b_fits_one_h100_at_vllm_defaults():
    d = parse_sim_target("sim:gpt-oss-120b@1xh100")
    assert d.max_num_seqs == 1024 and d.max_model_len == 131072
    assert d.memory.kv_tokens >= d.max_model_len


def test_unknown_engine_lists_the_known_ones():
    with pytest.raises(TargetError, match="trtllm"):
        parse_sim_target("sim:llama-3.1-8b@1xh100,engine=tgi")
    assert parse_sim_target("sim:llama-3.1-8b@1xh100,engine=vllm:0.10.2").profile.version == "0.10.2"


def test_sliding_window_layers_cache_the_whole_sequence_on_trtllm():
    # gpt-oss-120b: 36 layers, every other one a 128-token window; 8 KV heads x 64, BF16 KV:
    # 2 (K, V) x 8 x 64 x 2 B = 2,048 B per token and layer. vLLM and SGLang page the 18 window layers
    # separately (a window per sequence), so a token costs the 18 full layers: 36,864 B. TensorRT-LLM's
    # KV manager, without kv_cache_config.max_attention_window, sizes every layer for the whole sequence:
    # 36 x 2,048 = 73,728 B, and no per-sequence window reserve.
    for eng in ("vllm", "sglang"):
        mem = parse_sim_target(f"sim:gpt-oss-120b@1xh200,engine={eng}").memory
        assert mem.kv_bytes_per_token == 36_864 and mem.sliding_reserve > 0
    mem = parse_sim_target("sim:gpt-oss-120b@1xh200,engine=trtllm").memory
    assert mem.kv_bytes_per_token == 73_728 and mem.sliding_reserve == 0


@pytest.mark.parametrize("engine,kernel", [
    # vLLM's get_mxfp4_backend picks Marlin on SM90 when triton_kernels does not import; vLLM installs it
    # only from 0.12 (PR #28788 vendors it; before, a manual install: PR #27370, issues #26582, #27672)
    ("vllm:0.10.2", "marlin"),
    ("vllm:0.11.0", "marlin"),
    ("vllm:0.11.1", "marlin"),
    ("vllm:v0.11.2rc1", "marlin"),
    ("vllm:0.12.0", "triton"),
    ("vllm:0.12", "triton"),
    ("vllm:0.24.0", "triton"),
    ("vllm", "triton"),  # no version: the profile's kernel (AIConfigurator's vLLM 0.24.0 tables)
    ("vllm:nightly", "triton"),  # no number: the profile's kernel
    ("sglang:0.5", "triton"),
    ("trtllm:1.0", "triton"),
])
def test_hopper_mxfp4_moe_kernel_follows_the_engine_version(engine, kernel):
    from servelab.sim.engines import engine_profile
    assert engine_profile(engine).mxfp4_moe_hopper == kernel


def test_version_key_reads_the_leading_numbers():
    from servelab.sim.engines import version_key
    assert version_key("0.10.2") == (0, 10, 2)
    assert version_key("v0.11.2rc1") == (0, 11, 2)
    assert version_key("1.0rc3") == (1, 0)
    assert version_key("nightly") == ()
    assert version_key("0.11.1") < version_key("0.12") <= version_key("0.12.0")
