"""One vocabulary for server metrics, mapped from each engine's own names.

Each canonical name has a kind: ``gauge`` (a level), ``counter`` (monotone total: use deltas) or
``histogram`` (``_sum`` / ``_count`` / ``_bucket`` series: use deltas of sum and count). Series whose names
are not mapped are still kept raw (canonical name ``None``).
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.records.engines import SIMULATOR, engine_of_series


@dataclass(frozen=True)
class Canon:
    name: str
    kind: str  # gauge | counter | histogram
    scale: float = 1.0  # multiply the engine's value by this to get the canonical unit
    match: tuple[tuple[str, str], ...] = ()  # label constraints, e.g. (("request_type", "active"),)


CANONICAL = {
    "requests_running": "requests being processed (batch occupancy)",
    "requests_waiting": "requests queued in the server",
    "kv_cache_usage": "fraction of KV-cache capacity in use (0-1)",
    "preemptions_total": "requests preempted (recompute or swap)",
    "prefix_cache_queries_total": "prompt tokens looked up in the prefix cache",
    "prefix_cache_hits_total": "prompt tokens found in the prefix cache",
    "prompt_tokens_total": "prompt tokens processed",
    "generation_tokens_total": "tokens generated",
    "request_success_total": "requests finished successfully",
    "ttft_seconds": "time to first token as the server sees it",
    "itl_seconds": "inter-token latency as the server sees it",
    "queue_time_seconds": "time a request waited in the server queue",
    "e2e_seconds": "request latency as the server sees it",
    "slots_busy": "llama.cpp busy slots per decode",
    "requests_deferred": "llama.cpp requests deferred (no free slot)",
    "gpu_utilization": "GPU utilization (0-1)",
    "gpu_memory_used_bytes": "GPU memory used",
    "gpu_power_watts": "GPU power draw",
    "gpu_sm_clock_mhz": "GPU SM clock",
}

G, C, H = "gauge", "counter", "histogram"

# Each engine's series name -> its canonical metric (engines themselves: servelab.records.engines).
ENGINE_SERIES: dict[str, Canon] = {
    # vLLM (current names, and the older ones renamed in recent versions)
    "vllm:num_requests_running": Canon("requests_running", G),
    "vllm:num_requests_waiting": Canon("requests_waiting", G),
    "vllm:kv_cache_usage_perc": Canon("kv_cache_usage", G),
    "vllm:gpu_cache_usage_perc": Canon("kv_cache_usage", G),
    "vllm:num_preemptions_total": Canon("preemptions_total", C),
    "vllm:num_preemptions": Canon("preemptions_total", C),
    "vllm:prefix_cache_queries_total": Canon("prefix_cache_queries_total", C),
    "vllm:prefix_cache_queries": Canon("prefix_cache_queries_total", C),
    "vllm:gpu_prefix_cache_queries_total": Canon("prefix_cache_queries_total", C),
    "vllm:gpu_prefix_cache_queries": Canon("prefix_cache_queries_total", C),
    "vllm:prefix_cache_hits_total": Canon("prefix_cache_hits_total", C),
    "vllm:prefix_cache_hits": Canon("prefix_cache_hits_total", C),
    "vllm:gpu_prefix_cache_hits_total": Canon("prefix_cache_hits_total", C),
    "vllm:gpu_prefix_cache_hits": Canon("prefix_cache_hits_total", C),
    "vllm:prompt_tokens_total": Canon("prompt_tokens_total", C),
    "vllm:prompt_tokens": Canon("prompt_tokens_total", C),
    "vllm:generation_tokens_total": Canon("generation_tokens_total", C),
    "vllm:generation_tokens": Canon("generation_tokens_total", C),
    "vllm:request_success_total": Canon("request_success_total", C),
    "vllm:request_success": Canon("request_success_total", C),
    "vllm:time_to_first_token_seconds": Canon("ttft_seconds", H),
    "vllm:inter_token_latency_seconds": Canon("itl_seconds", H),
    "vllm:time_per_output_token_seconds": Canon("itl_seconds", H),
    "vllm:request_queue_time_seconds": Canon("queue_time_seconds", H),
    "vllm:e2e_request_latency_seconds": Canon("e2e_seconds", H),
    # SGLang
    "sglang:num_running_reqs": Canon("requests_running", G),
    "sglang:num_queue_reqs": Canon("requests_waiting", G),
    "sglang:token_usage": Canon("kv_cache_usage", G),
    "sglang:prompt_tokens_total": Canon("prompt_tokens_total", C),
    "sglang:generation_tokens_total": Canon("generation_tokens_total", C),
    "sglang:cached_tokens_total": Canon("prefix_cache_hits_total", C),
    "sglang:num_requests_total": Canon("request_success_total", C),
    "sglang:time_to_first_token_seconds": Canon("ttft_seconds", H),
    "sglang:inter_token_latency_seconds": Canon("itl_seconds", H),
    "sglang:time_per_output_token_seconds": Canon("itl_seconds", H),
    "sglang:queue_time_seconds": Canon("queue_time_seconds", H),
    "sglang:e2e_request_latency_seconds": Canon("e2e_seconds", H),
    # llama.cpp server (--metrics)
    "llamacpp:requests_processing": Canon("requests_running", G),
    "llamacpp:requests_deferred": Canon("requests_waiting", G),
    "llamacpp:kv_cache_usage_ratio": Canon("kv_cache_usage", G),
    "llamacpp:prompt_tokens_total": Canon("prompt_tokens_total", C),
    "llamacpp:tokens_predicted_total": Canon("generation_tokens_total", C),
    "llamacpp:prompt_tokens_cached_total": Canon("prefix_cache_hits_total", C),
    "llamacpp:n_busy_slots_per_decode": Canon("slots_busy", G),
    # TensorRT-LLM behind Triton
    "nv_trt_llm_request_metrics": Canon("requests_running", G, match=(("request_type", "active"),)),
    "nv_inference_pending_request_count": Canon("requests_waiting", G),
    "nv_inference_request_success": Canon("request_success_total", C),
    # GPU: DCGM exporter
    "DCGM_FI_DEV_GPU_UTIL": Canon("gpu_utilization", G, scale=0.01),
    "DCGM_FI_DEV_FB_USED": Canon("gpu_memory_used_bytes", G, scale=1024 * 1024),
    "DCGM_FI_DEV_POWER_USAGE": Canon("gpu_power_watts", G),
    "DCGM_FI_DEV_SM_CLOCK": Canon("gpu_sm_clock_mhz", G),
}


def canonical(name: str, labels: dict[str, str]) -> Canon | None:
    """The canonical metric for an engine series name (without histogram suffix), or None."""
    c = ENGINE_SERIES.get(name)
    if c is None:
        return None
    for k, v in c.match:
        if labels.get(k) != v:
            return None
    return c


def detect_engine(names: set[str] | list[str]) -> str | None:
    """The engine whose metric prefix covers most series; the simulator wins over its vLLM names."""
    counts: dict[str, int] = {}
    for n in names:
        engine = engine_of_series(n)  # GPU exporters (DCGM_FI_*) name no engine
        if engine is not None:
            counts[engine] = counts.get(engine, 0) + 1
    if SIMULATOR in counts:
        return SIMULATOR
    return max(counts, key=lambda k: counts[k]) if counts else None
