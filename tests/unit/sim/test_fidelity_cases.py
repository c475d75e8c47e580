"""benchmarks/fidelity_cases.py: the published rows run under the conditions they were measured in."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import fidelity_cases as fc  # noqa: E402
from servelab.sim.target import parse_sim_target  # noqa: E402


def _dep(spec: str):
    return parse_sim_target(f"sim:{spec},backend=roofline")


def test_trtllm_bench_limits_dense_fp8_hand_worked():
    # Llama-3.1-8B FP8, FP8 KV, 1 x H100 (80 GiB), 128 in / 2048 out:
    # KV per token 2 x 32 layers x 8 heads x 128 x 1 B = 65,536 B; per request x 2,176 tokens
    # = 0.1328 GiB; weights ~8.03e9 x 1 B = 7.48 GiB; (80 - 7.48) x 0.90 / 0.1328 = 491 requests
    # -> batch rounded up to 128s: 512; tokens 491 x (1 + 128 / 2048) = 522 -> at least 2048.
    dep = _dep("llama-3.1-8b@1xh100,dtype=fp8,kv_dtype=fp8,engine=trtllm")
    assert fc.trtllm_bench_limits(dep, 128, 2048) == (512, 2048)
    # 2048 in / 128 out: 2,176 tokens again, 491 requests; tokens 491 x 17 = 8,353
    # -> rounded up to 1024s: 9216
    assert fc.trtllm_bench_limits(dep, 2048, 128) == (512, 9216)


def test_trtllm_bench_limits_mla_counts_config_heads():
    # DeepSeek-R1 FP8, FP8 KV, 8 x H200 (141 GiB each), 1024 / 1024: the tool's KV estimate takes
    # config.json's 128 KV heads x head size 7168 / 128 = 56 (not MLA's latent): 2 x 61 x 128 x 56 x 1 B
    # = 874,496 B a token, 1.668 GiB a request; weights ~682e9 B with the MTP layer = 635 GiB;
    # (1128 - 635) x 0.9 / 1.668 = 266 requests -> 384; tokens 532 -> 2048.
    dep = _dep("deepseek-r1@8xh200,dtype=fp8,kv_dtype=fp8,ep=8,dp_attention=true,engine=trtllm")
    assert fc.trtllm_bench_limits(dep, 1024, 1024) == (384, 2048)


def test_trtllm_bench_limits_mxfp4_keeps_engine_defaults():
    dep = _dep("gpt-oss-120b@1xh200,engine=trtllm")
    assert fc.trtllm_bench_limits(dep, 1024, 1024) is None


@pytest.mark.parametrize(("cid", "seqs", "tokens"), [("T-1", 512, 2048), ("N-6", 2048, 8192)])
def test_perf_overview_rows_run_with_the_bench_limits(cid, seqs, tokens):
    case = next(c for c in fc.load()[1] if c.id == cid)
    dep = fc.deployment(case, "roofline")
    assert (dep.max_num_seqs, dep.max_num_batched_tokens) == (seqs, tokens)


def test_chat_endpoint_rows_prefill_the_chat_template_too():
    # GPUStack's runs use vllm bench serve --backend openai-chat: the server prefills the prompt plus the
    # model's chat template (gpt-oss: harmony system message + markers, 65), while the reported input tokens
    # (isl) leave the template out. vLLM's offline batch-latency rows (AMD) send raw prompts.
    cases = {c.id: c for c in fc.load()[1]}
    assert (cases["V-1"].template_tokens, cases["V-1"].prompt_len) == (65, 128 + 65)
    assert cases["V-5"].prompt_len == 128 + 4
    assert cases["V-9"].prompt_len == 128 + 8
    assert (cases["A-1"].template_tokens, cases["A-1"].prompt_len) == (0, 128)
    assert cases["T-1"].prompt_len == 128


def test_perf_overview_rows_pad_decode_batches_to_the_published_graph_sizes():
    # Both overviews' llm_options (the developer guide's and v1.0's "Running the Benchmark", dense and MoE):
    # cuda_graph_config enable_padding true, batch_sizes 1, 2, 4, ..., 256, 384, 512, 1024, 2048, 4096, 8192.
    # The T-rows (v1.0) had run unpadded.
    cases = {c.id: c for c in fc.load()[1]}
    published = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)
    for cid in ("N-6", "T-1", "T-17"):
        assert fc.deployment(cases[cid], "roofline").cuda_graph_batch_sizes == published
    assert fc.deployment(cases["V-1"], "roofline").cuda_graph_batch_sizes == ()  # vLLM rows: not these


def test_sharegpt_rows_draw_lengths_around_the_published_means():
    # The c=4 ShareGPT rows: per-request lengths vary (fixed lengths made the four clients finish in the same
    # step and send again together, so each prefill waited behind another: TTFT 81 ms for L-1 on silicon).
    _, cases = fc.load()
    sharegpt = {c.id for c in cases if c.dataset == "sharegpt"}
    assert sharegpt == {"L-1", "L-2", "L-3", "L-4", "L-5", "L-6"}
    lengths = fc.sharegpt_lengths(100, 229, 217)
    assert abs(sum(i for i, _ in lengths) / 100 - 229) < 0.5
    assert abs(sum(o for _, o in lengths) / 100 - 217) < 0.5
    assert all(4 <= i <= 1024 and 4 <= o and i + o <= 2048 for i, o in lengths)
    assert len({o for _, o in lengths}) > 50  # not one length for all
    assert fc.sharegpt_lengths(100, 229, 217) == lengths  # seeded


def test_deepseek_developer_guide_rows_keep_the_default_expert_routing():
    # Their llm_options set attention_dp_config enable_balance true: the attention-DP ranks' scheduling
    # (context requests spread over the ranks), not a MoE load balancer (moe_config load_balancer is not set).
    # The rows had read it as eplb=true.
    cases = {c.id: c for c in fc.load()[1]}
    for cid in ("N-1", "N-2", "N-3"):
        dep = fc.deployment(cases[cid], "roofline")
        assert dep.dp_attention and not dep.eplb
        assert dep.skew == 0.6  # servelab's default routing skew


def test_the_rows_engine_version_reaches_the_target():
    t = "gpt-oss-120b@1xh100,max_model_len=32768,engine=vllm"
    assert fc.with_engine_version(t, "vllm 0.10.2") == t + ":0.10.2"
    assert fc.with_engine_version(t, "vllm 0.10.2 --async-scheduling").endswith(",engine=vllm:0.10.2")
    assert fc.with_engine_version(t, "vllm (2024 blog)") == t  # no version on the row
    assert fc.with_engine_version(t + ":0.9", "vllm 0.10.2") == t + ":0.9"  # the target's own version wins
    assert fc.with_engine_version("x@1xh100", "trtllm 1.0") == "x@1xh100"  # no engine in the target
    cases = {c.id: c for c in fc.load()[1]}
    dep = fc.deployment(cases["V-2"], "roofline")
    assert (dep.profile.version, dep.profile.mxfp4_moe_hopper) == ("0.10.2", "marlin")


@pytest.mark.parametrize(("cid", "seqs", "tokens", "max_len"), [
    # DeepSeek-R1 NVFP4 DEP4, 8192 / 1024: the heuristic's 96 requests and 2048 tokens; without chunked
    # prefill trtllm-bench raises the tokens to the longest prompt plus the batch: 8192 + 96 = 8288
    ("N-2", 96, 8192 + 96, 8192 + 1024),
    # gpt-oss-120b (MXFP4: build defaults 2048 / 8192), 8192 / 1024: 8192 + 2048 = 10240
    ("N-5", 2048, 8192 + 2048, 8192 + 1024),
    # 1024 / 1024: 1024 + 2048 = 3072 is below the default 8192, which stays
    ("N-4", 2048, 8192, 2048),
])
def test_trtllm_bench_rows_schedule_every_prompt_whole(cid, seqs, tokens, max_len):
    case = next(c for c in fc.load()[1] if c.id == cid)
    dep = fc.deployment(case, "roofline")
    assert not dep.chunked_prefill
    assert (dep.max_num_seqs, dep.max_num_batched_tokens, dep.max_model_len) == (seqs, tokens, max_len)


def test_vllm_rows_keep_chunked_prefill():
    case = next(c for c in fc.load()[1] if c.id == "V-2")
    assert fc.deployment(case, "roofline").chunked_prefill


def test_developer_guide_rows_are_distinct_cells_with_the_published_request_counts():
    # Each (model, GPUs, ISL/OSL) cell of the developer-guide tables is one row, run with the request count
    # the guide gives for its shape (3000 for 1024/1024, 1500 for 1024/8192 and 8192/1024, 1000 for the 32K
    # shapes), and its target's GPUs are the row's.
    requests = {(1024, 1024): 3000, (1024, 8192): 1500, (8192, 1024): 1500, (1024, 32768): 1000,
                (32768, 1024): 1000}
    _, cases = fc.load()
    rows = [c for c in cases if c.source == "trtllm-perf-dev"]
    assert len(rows) == 82
    cells = [(c.model, c.hardware, c.isl, c.osl) for c in rows]
    assert len(set(cells)) == len(cells)
    for c in rows:
        assert c.requests == requests[(c.isl, c.osl)], c.id
        dep = fc.deployment(c, "roofline")
        gpus, hw = c.hardware.split(" x ")[0], c.hardware.split(" x ")[1].split()[0]
        assert dep.world == int(gpus) and dep.hardware.name == hw, c.id
        assert dep.max_model_len == c.isl + c.osl, c.id
