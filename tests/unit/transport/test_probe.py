"""TargetProbe over loopback servers that imitate vLLM, SGLang and llama.cpp, and the pure parsers."""

from __future__ import annotations

import pytest
from aiohttp import web
from tests.engine_fronts import llamacpp_app, sglang_app, vllm_app
from tests.loopback import serve_app

from servelab.analysis.compare import manifest_facts
from servelab.clock import WallClock
from servelab.errors import TargetError
from servelab.transport.probe import HttpProbe, ProbeOptions, engine_facts, info_metrics


async def _describe(app: web.Application, **opts) -> dict:
    async with serve_app(app) as root:
        probe = HttpProbe(ProbeOptions(url=root + "/v1", **opts), WallClock(use_uvloop=False))
        try:
            return await probe.describe()
        finally:
            await probe.aclose()


async def test_vllm_facts():
    f = await _describe(vllm_app(max_model_len=16384, cache_dtype="fp8_e5m2"))
    assert f["engine"] == "vllm" and f["version"] == "0.10.1"
    model = "meta-llama/Llama-3.1-8B-Instruct"
    assert f["models"] == [model] and f["model"] == model
    assert f["max_model_len"] == {"meta-llama/Llama-3.1-8B-Instruct": 16384} and f["max_context_len"] == 16384
    assert f["info_metrics"]["vllm:cache_config_info"]["cache_dtype"] == "fp8_e5m2"
    assert f["server_header"] == "uvicorn"
    facts = manifest_facts({"target": f})
    assert facts["context_limit"] == "16384"
    assert facts["quantization"] == "fp8_e5m2"
    assert facts["prefix_caching"] == "True"
    assert facts["engine"] == "engine=vllm version=0.10.1"


async def test_sglang_facts():
    f = await _describe(sglang_app(max_running_requests=64, dtype="float16", tp_size=2))
    assert f["engine"] == "sglang" and f["version"] == "0.4.10"
    info = f["server_info"]
    assert info["max_running_requests"] == 64 and info["dtype"] == "float16" and info["tp_size"] == 2
    assert "chat_template" not in info and "internal_states" not in info  # not settings
    facts = manifest_facts({"target": f})
    assert facts["batch_policy"] == "max_running_requests=64 chunked_prefill_size=8192"
    assert facts["quantization"] == "dtype=float16 kv_cache_dtype=auto"
    assert facts["parallelism"] == "tp_size=2 dp_size=1"
    assert facts["context_limit"] == "8192"


async def test_llamacpp_facts():
    f = await _describe(llamacpp_app(total_slots=8, n_ctx=2048))
    assert f["engine"] == "llama.cpp" and f["version"] == "b6000-abcdef"
    assert f["props"]["total_slots"] == 8 and f["props"]["n_ctx"] == 2048
    facts = manifest_facts({"target": f})
    assert facts["batch_policy"] == "8" and facts["context_limit"] == "2048"


async def test_server_command_line_and_secrets(monkeypatch):
    monkeypatch.setenv("PROBE_KEY", "sk-probe-secret")
    f = await _describe(vllm_app(), api_key_env="PROBE_KEY",
                        server_cmd="vllm serve m --max-num-seqs 64 --dtype bfloat16")
    assert f["server_flags"] == ["vllm", "serve", "m", "--max-num-seqs", "64", "--dtype", "bfloat16"]
    facts = manifest_facts({"target": f})
    assert facts["batch_policy"] == "64"  # --max-num-seqs
    assert facts["quantization"] == "dtype=bfloat16 cache_dtype=auto"  # the flag, and vllm:cache_config_info
    assert "sk-probe-secret" not in repr(f)


async def test_model_resolution_and_token_counts():
    app = vllm_app()

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        if "content" in body:
            return web.json_response({"tokens": list(range(len(body["content"].split())))})
        return web.json_response({"tokens": []})  # llama.cpp's answer to a vLLM-style body

    app.router.add_post("/tokenize", tokenize)
    async with serve_app(app) as root:
        probe = HttpProbe(ProbeOptions(url=root + "/v1"), WallClock(use_uvloop=False))
        try:
            assert await probe.resolve_model() == "meta-llama/Llama-3.1-8B-Instruct"
            assert await probe.count_tokens("a b c d") == 4
            assert await probe.count_tokens("a b") == 2
        finally:
            await probe.aclose()


async def test_unreachable_is_a_target_error():
    probe = HttpProbe(ProbeOptions(url="http://127.0.0.1:9/v1", connect_s=2.0), WallClock(use_uvloop=False))
    try:
        with pytest.raises(TargetError) as e:
            await probe.describe()
    finally:
        await probe.aclose()
    assert "127.0.0.1:9" in str(e.value)


def test_info_metrics_parse_labels():
    text = ('# HELP x\nvllm:cache_config_info{block_size="16",cache_dtype="auto",note="a \\"q\\""} 1.0\n'
            'vllm:num_requests_running{model_name="m"} 3\n'
            'other_build_info{version="1.2"} 1\n')
    assert info_metrics(text) == {"vllm:cache_config_info": {"block_size": "16", "cache_dtype": "auto",
                                                             "note": 'a "q"'},
                                  "other_build_info": {"version": "1.2"}}


def test_engine_guess_from_metrics_and_header():
    assert engine_facts([], {"/metrics": b"sglang:num_running_reqs 0\n"}, None)["engine"] == "sglang"
    assert engine_facts([], {}, "llama.cpp")["engine"] == "llama.cpp"
    assert engine_facts([], {}, None) == {"engine": "unknown", "version": None}


async def test_static_probe_feeds_the_work_builders_token_counts():
    from servelab.transport.probe import StaticProbe
    from servelab.workload.tokens import resolve_counter

    probe = StaticProbe({"engine": "vllm", "models": ["m"]}, tokens=lambda text: len(text.split()))
    assert await probe.resolve_model() == "m" and (await probe.describe())["engine"] == "vllm"
    counter = await resolve_counter(probe.count_tokens)
    assert await counter.count("one two three") == 3  # the target's count, not an estimate
    with pytest.raises(TargetError):
        await StaticProbe().resolve_model()
