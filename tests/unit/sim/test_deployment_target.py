"""Catalog, deployment fit / no-fit messages, target parsing errors, tokenizer."""

from __future__ import annotations

import pytest

from servelab.errors import DeploymentError, TargetError
from servelab.sim.catalog import default_catalog, load_catalog
from servelab.sim.target import parse_sim_target
from servelab.sim.tokenizer import filler_ids, filler_text, tokenize


@pytest.mark.parametrize("name", [m for m in default_catalog().models])
def test_catalog_shapes_reproduce_published_parameter_totals(name):
    m = default_catalog().models[name]
    assert m.source
    assert abs(m.total_params() / 1e9 - m.params_b) / m.params_b < 0.03


def test_every_hardware_entry_has_a_source_and_family():
    cat = default_catalog()
    assert {
        "h100",
        "h200",
        "h800",
        "b200",
        "gb200",
        "mi300x",
        "mi325x",
        "mi355x",
        "mi455x",
        "tpu-v5e",
        "tpu-v5p",
        "tpu-v6e",
        "tpu7x",
    } <= set(cat.hardware)
    for hw in cat.hardware.values():
        assert hw.source and hw.family in cat.families


def test_kv_bytes_mla_vs_gqa():
    ds = parse_sim_target("sim:deepseek-v3@8xh200,dtype=fp8,kv_dtype=bf16")
    ll = parse_sim_target("sim:llama-3.1-70b@8xh200,tp=1,dp=8,dtype=fp8,kv_dtype=bf16")
    # MLA: (512 + 64) values x 61 layers x 2 bytes ~ 70 KB, every TP rank holds the whole latent
    assert ds.memory.kv_bytes_per_token == 576 * 61 * 2
    # GQA: 2 x 8 x 128 x 80 x 2 bytes ~ 320 KB per token on one GPU
    assert ll.memory.kv_bytes_per_token == 2 * 8 * 128 * 80 * 2


def test_dp_attention_multiplies_mla_kv_capacity():
    tp = parse_sim_target("sim:deepseek-v3@8xh200,dtype=fp8")
    dpa = parse_sim_target("sim:deepseek-v3@8xh200,dtype=fp8,ep=8,dp_attention=true")
    assert dpa.memory.kv_tokens > 3 * tp.memory.kv_tokens


def test_model_that_does_not_fit_explains_with_numbers_and_suggestions():
    with pytest.raises(DeploymentError) as e:
        parse_sim_target("sim:deepseek-v3@8xh100")
    msg = str(e.value)
    assert "DeepSeek-V3 in BF16 needs 1.34 TB" in msg and "8 x H100 hold 640 GB" in msg
    assert "dtype=fp8" in msg and "2 node(s)" in msg


def test_parallel_sizes_must_multiply_to_the_gpu_count():
    with pytest.raises(DeploymentError, match=r"tp\*pp\*dp = 4\*1\*1 = 4, but the deployment has 8 GPUs"):
        parse_sim_target("sim:llama-3.1-8b@8xh100,tp=4,dp=1")
    with pytest.raises(DeploymentError, match="ep=3 must divide tp=8"):
        parse_sim_target("sim:mixtral-8x7b@8xh100,ep=3")


def test_target_forms():
    d = parse_sim_target("sim")
    assert d.model.name == "sim-tiny" and d.world == 1
    d = parse_sim_target(
        "SIM:DeepSeek-V3@8xH200,dtype=fp8,ep=8,dp_attention=true,max_num_seqs=256,prefix_caching=on"
    )
    assert (d.tp, d.ep, d.dp_attention, d.max_num_seqs, d.prefix_caching) == (8, 8, True, 256, True)
    d = parse_sim_target("sim:llama-3.1-70b@2x8xh100,tp=8,pp=2")
    assert (d.nodes, d.gpus_per_node, d.tp, d.pp) == (2, 8, 8, 2)


def test_target_file_and_extra_catalog(tmp_path):
    (tmp_path / "cat.yaml").write_text(
        "hardware:\n  - {name: X1, family: nvidia-hopper, bf16_tflops: 100, hbm_gb: 40, hbm_tbps: 1,"
        " scaleup_gbps: 100, scaleup_topology: switched, scaleup_latency_us: 5, scaleout_latency_us: 10,"
        " domain_size: 4, source: test}\n")
    (tmp_path / "t.yaml").write_text("model: sim-tiny\nhardware: x1\ngpus: 2\ncatalog: cat.yaml\ntp: 2\n")
    d = parse_sim_target(f"sim:{tmp_path / 't.yaml'}")
    assert d.hardware.name == "X1" and d.tp == 2
    assert load_catalog([tmp_path / "cat.yaml"]).get_hardware("x1").hbm_gb == 40


@pytest.mark.parametrize("spec,needle", [
    ("sim:gpt-5@8xh100", "DeepSeek-V3"),
    ("sim:llama-3.1-8b@1xa100", "H100"),
    ("sim:llama-3.1-8b@1xh100,turbo=on", "max_num_seqs"),
    ("sim:llama-3.1-8b@1xh100,max_num_seqs", "key=value"),
    ("sim:llama-3.1-8b", "COUNTxHARDWARE"),
    ("sim:llama-3.1-8b@1xh100,prefix_caching=maybe", "on/off"),
])
def test_target_errors_list_what_is_known(spec, needle):
    with pytest.raises(TargetError) as e:
        parse_sim_target(spec)
    assert needle in str(e.value)


def test_tokenizer_one_token_per_word_and_stable():
    assert tokenize("a  b\nc") == tokenize("a b c") and len(tokenize("a b c")) == 3
    assert tokenize("hello") == [907060870 % 131072]  # crc32("hello")
    text = filler_text(37, seed=5)
    assert len(text.split()) == 37 and text == filler_text(37, seed=5) and text != filler_text(37, seed=6)
    assert tokenize(text, 5000) == filler_ids(37, 5, 5000).tolist()


def test_without_chunked_prefill_trtllm_bounds_prompts_not_max_model_len():
    # vLLM refuses to start when max_num_batched_tokens < max_model_len without chunked prefill; TensorRT-LLM
    # starts and refuses, per request, a prompt longer than max_num_tokens (trtllm-bench's 8192 / 1024 runs:
    # max_num_tokens 8192 + max_batch_size, max_seq_len 9216).
    spec = ("sim:llama-3.1-8b@1xh100,chunked_prefill=false,max_num_seqs=96,max_num_batched_tokens=8288,"
            "max_model_len=9216")
    dep = parse_sim_target(spec + ",engine=trtllm")
    assert (dep.chunked_prefill, dep.max_num_batched_tokens, dep.max_model_len) == (False, 8288, 9216)
    with pytest.raises(DeploymentError, match="without chunked prefill"):
        parse_sim_target(spec + ",engine=vllm")
