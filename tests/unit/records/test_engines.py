"""One engine table, read three ways: probe (owned_by, Server header, /metrics), telemetry, report words."""

from servelab.records.engines import (
    SIMULATOR,
    display_name,
    engine_id,
    engine_of_series,
    engines_in_metrics,
    engines_named_in,
)
from servelab.report.words import engine_words
from servelab.telemetry.vocabulary import detect_engine


def test_aliases_name_one_engine():
    assert engine_id("TRTLLM") == engine_id("tensorrt_llm") == engine_id("tensorrt-llm") == "tensorrt-llm"
    assert engine_id("llamacpp") == "llama.cpp"
    assert engine_id("servelab") == SIMULATOR  # the simulator's owned_by
    assert engine_id("openai") is None
    assert display_name("trtllm") == "TensorRT-LLM"
    assert display_name("my-engine") == "my-engine"


def test_every_reader_agrees_on_trtllm():
    # before the table, telemetry knew 'nv_trt_llm_' and the probe only 'trtllm_'
    assert engine_of_series("nv_trt_llm_kv_cache_utilization") == "tensorrt-llm"
    assert engine_of_series("trtllm_request_success_total") == "tensorrt-llm"
    assert detect_engine(["trtllm_request_success_total", "DCGM_FI_DEV_GPU_UTIL"]) == "tensorrt-llm"
    assert engines_in_metrics("# HELP trtllm_x\ntrtllm_x 1\n") == ["tensorrt-llm"]
    assert engines_named_in("uvicorn (vLLM 0.11)") == ["vllm"]
    assert engine_words({"target": {"engine": "tensorrt-llm"}}) == "TensorRT-LLM"


def test_simulator_wins_over_its_vllm_names_and_gpu_exporters_name_none():
    assert detect_engine(["vllm:num_requests_running", "vllm:x", "servelab_sim_steps_total"]) == SIMULATOR
    assert detect_engine(["DCGM_FI_DEV_GPU_UTIL"]) is None
