from servelab.telemetry.parse import parse_metrics
from servelab.telemetry.vocabulary import detect_engine

VLLM = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="m"} 128.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 4.0
vllm:time_to_first_token_seconds_count{model_name="m"} 4.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.8
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
"""

LLAMACPP = """# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 5
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 900
"""


def _by_name(samples):
    return {(s.name or s.raw_name): s.value for s in samples}


def test_vllm_old_and_new_names_map_to_one_vocabulary():
    s = _by_name(parse_metrics(VLLM))
    assert s["requests_running"] == 3.0
    assert s["kv_cache_usage"] == 0.25  # the older gpu_cache_usage_perc
    assert s["prefix_cache_hits_total"] == 128.0
    assert s["ttft_seconds_count"] == 4.0 and s["ttft_seconds_sum"] == 0.8
    assert s["process_cpu_seconds_total"] == 12.5  # unknown series are kept raw


def test_llamacpp_slots_and_deferred():
    s = _by_name(parse_metrics(LLAMACPP))
    assert s["requests_running"] == 2 and s["requests_waiting"] == 5 and s["generation_tokens_total"] == 900


def test_engine_detection():
    assert detect_engine({s.raw_name for s in parse_metrics(VLLM)}) == "vllm"
    assert detect_engine({s.raw_name for s in parse_metrics(LLAMACPP)}) == "llama.cpp"
    assert detect_engine({"foo"}) is None


def test_dcgm_units_are_scaled():
    s = _by_name(parse_metrics('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 50\nDCGM_FI_DEV_FB_USED{gpu="0"} 1024\n'))
    assert s["gpu_utilization"] == 0.5 and s["gpu_memory_used_bytes"] == 1024 * 1024 * 1024
