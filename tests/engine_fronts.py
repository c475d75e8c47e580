"""aiohttp apps that imitate what vLLM, SGLang and llama.cpp servers say about themselves (their info
endpoints, as documented and as the real servers answer), in front of a tiny OpenAI chat endpoint that
streams ``TOKENS`` tokens with usage. Serve one with :func:`tests.loopback.serve_app`.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

TOKENS = 4


async def _chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    n = int(body.get("max_tokens") or TOKENS)
    prompt = sum(len(str(m.get("content", "")).split()) for m in body.get("messages") or [])
    if not body.get("stream"):
        return web.json_response({"id": "c", "object": "chat.completion", "model": body.get("model"),
                                  "choices": [{"index": 0, "finish_reason": "length",
                                               "message": {"role": "assistant", "content": " w" * n}}],
                                  "usage": {"prompt_tokens": prompt, "completion_tokens": n,
                                            "total_tokens": prompt + n}})
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i in range(n):
        chunk = {"id": "c", "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {"content": f" w{i}"}, "finish_reason": None}]}
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    end = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {},
                                                                      "finish_reason": "length"}],
           "usage": {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}}
    await resp.write(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")
    await resp.write_eof()
    return resp


def _app(routes: dict[str, Any], models: list[dict[str, Any]], server: str) -> web.Application:
    async def on_headers(_req: web.Request, resp: web.StreamResponse) -> None:
        resp.headers["Server"] = server

    app = web.Application()
    app.on_response_prepare.append(on_headers)
    app.router.add_get("/v1/models", _answer({"object": "list", "data": models}))
    app.router.add_post("/v1/chat/completions", _chat)
    for path, answer in routes.items():
        app.router.add_get(path, _answer(answer))
    return app


def _answer(obj: Any) -> Any:
    """A GET handler answering ``obj`` (text as Prometheus text, else JSON)."""
    async def handler(_request: web.Request) -> web.Response:
        if isinstance(obj, str):
            return web.Response(text=obj, content_type="text/plain")
        return web.json_response(obj)

    return handler


def vllm_app(*, model: str = "meta-llama/Llama-3.1-8B-Instruct", max_model_len: int = 8192,
             cache_dtype: str = "auto", prefix_caching: bool = True,
             version: str = "0.10.1") -> web.Application:
    """vLLM's OpenAI server: /version, /v1/models with max_model_len, vllm:* metrics (cache_config_info)."""
    metrics = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        f'vllm:cache_config_info{{block_size="16",cache_dtype="{cache_dtype}",'
        f'enable_prefix_caching="{prefix_caching}",gpu_memory_utilization="0.9",'
        'num_gpu_blocks="27000"} 1.0\n'
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{model_name="{model}"}} 0.0\n'
        f'vllm:prompt_tokens_total{{model_name="{model}"}} 0.0\n')
    models = [{"id": model, "object": "model", "owned_by": "vllm", "max_model_len": max_model_len}]
    return _app({"/version": {"version": version}, "/metrics": metrics}, models, "uvicorn")


def sglang_app(*, model: str = "meta-llama/Llama-3.1-8B-Instruct", max_running_requests: int = 256,
               dtype: str = "auto", kv_cache_dtype: str = "auto", tp_size: int = 1,
               context_length: int = 8192) -> web.Application:
    """SGLang's server: /get_server_info (server args, version), /v1/models (owned_by sglang), metrics."""
    info = {"model_path": model, "tokenizer_path": model, "tp_size": tp_size, "dp_size": 1, "dtype": dtype,
            "kv_cache_dtype": kv_cache_dtype, "max_running_requests": max_running_requests,
            "context_length": context_length, "chunked_prefill_size": 8192, "disable_radix_cache": False,
            "quantization": None, "mem_fraction_static": 0.88, "version": "0.4.10",
            "chat_template": "x" * 1000,  # long values are not settings: left out
            "internal_states": [{"last_gen_throughput": 0.0}]}
    metrics = f'sglang:num_running_reqs{{model_name="{model}"}} 0.0\n'
    models = [{"id": model, "object": "model", "owned_by": "sglang", "root": model}]
    return _app({"/get_server_info": info, "/metrics": metrics}, models, "uvicorn")


def llamacpp_app(*, total_slots: int = 4, n_ctx: int = 4096) -> web.Application:
    """llama.cpp's server: /props (slots, n_ctx, build_info), /v1/models (owned_by llamacpp), metrics."""
    props = {"default_generation_settings": {"n_ctx": n_ctx, "params": {"n_predict": -1}},
             "total_slots": total_slots, "model_path": "/models/SmolLM2-135M-Instruct-Q8_0.gguf",
             "chat_template": "{{ messages }}", "build_info": "b6000-abcdef"}
    metrics = "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 0\n"
    models = [{"id": "SmolLM2-135M-Instruct-Q8_0.gguf", "object": "model", "owned_by": "llamacpp"}]
    return _app({"/props": props, "/metrics": metrics}, models, "llama.cpp")
