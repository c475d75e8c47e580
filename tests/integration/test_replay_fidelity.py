"""Replaying public traces against the in-process simulator on virtual time: the arrival process the
replay achieved matches the trace's (rate, inter-arrival CV, KS), every request carries the trace's
lengths, and the simulator's prefix cache sees the trace's reuse.

The trace figures are computed by the trace module from the trace itself (``trace_stats``), not taken
from the replay's own summary. Slices of tests/data/traces always run; windows of the full public traces
run where ../shared/traces sits beside the checkout.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from servelab.bench.run import execute
from servelab.config.models import RunConfig
from servelab.workload.traces import load_trace, select, trace_stats

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "traces"
SHARED = ROOT.parent / "shared" / "traces"
AZURE_FULL = SHARED / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
MOONCAKE_FULL = SHARED / "mooncake_fast25" / "synthetic_trace.jsonl"
SMALL = "sim:llama-3.1-8b@1xh200"
# 8 GPUs, tensor parallel: ~7.5M tokens of KV cache, more than any window here holds, so nothing reusable
# is evicted and the cached fraction should reach the trace's reusable fraction.
BIG_CACHE = "sim:llama-3.1-8b@8xh200,tp=8,prefix_caching=on"
SPEED = 10.0


def _replay(tmp_path: Path, path: Path, fmt: str, target: str, **w):
    cfg = RunConfig.model_validate({
        "target": {"url": target},
        "workload": {"kind": "replay", "path": str(path), "format": fmt, **w},
        "telemetry": {"enabled": False},
        "out": str(tmp_path),
    })
    return execute(cfg, report=False)


def _check_arrivals(result, trace, speed: float) -> None:
    stats = trace_stats(trace)
    rep = result.summary["replay"]
    n = len(trace)
    assert result.summary["requests"]["sent"] == rep["requests"] == n
    assert result.outcome.stopped_by == "schedule"
    assert rep["achieved_rate"] == pytest.approx(speed * stats["rate_rps"], rel=0.02)
    assert rep["achieved_cv"] == pytest.approx(stats["interarrival_cv"], rel=0.05)
    assert rep["ks"]["statistic"] < 1.36 * math.sqrt(2 / (n - 1))  # 5% critical value
    assert rep["lag_ms_p99"] is not None and rep["lag_ms_p99"] <= 1.0


def _check_lengths(result, trace) -> None:
    """Each request asked for the trace's output length and sent its input length (the sim counts words)."""
    rows = pq.read_table(result.run_dir / "requests.parquet").to_pydict()
    asked = Counter(zip(rows["usage_prompt_tokens"], rows["requested_output_tokens"], strict=True))
    want = Counter((r.input_tokens, max(1, r.output_tokens)) for r in trace.requests)
    assert asked == want


@pytest.mark.parametrize("name,path,fmt", [
    ("azure", DATA / "azure_conv_head.csv", "azure"),
    ("mooncake", DATA / "mooncake_head.jsonl", "mooncake"),
])
def test_slice_replay_at_10x_keeps_rate_and_burstiness(tmp_path, name, path, fmt):
    trace = load_trace(path, fmt)
    result = _replay(tmp_path, path, fmt, BIG_CACHE if fmt == "mooncake" else SMALL, speed=SPEED)
    _check_arrivals(result, trace, SPEED)
    _check_lengths(result, trace)
    assert result.summary["requests"]["ok"] == len(trace)


@pytest.mark.skipif(not AZURE_FULL.is_file(), reason="the full public traces are not beside the checkout")
def test_azure_window_of_2000_requests_at_10x(tmp_path):
    # 2,000 requests: the CV of a window this long is within ~5% of the whole hour's (1.14 here, 1.09 overall)
    trace = select(load_trace(AZURE_FULL, "azure"), max_requests=2000)
    result = _replay(tmp_path, AZURE_FULL, "azure", SMALL, speed=SPEED, max_requests=2000)
    _check_arrivals(result, trace, SPEED)


def test_mooncake_slice_prefix_reuse_reaches_the_simulator_cache(tmp_path):
    path = DATA / "mooncake_head.jsonl"
    reuse = trace_stats(load_trace(path, "mooncake"))["prefix_reuse"]
    result = _replay(tmp_path, path, "mooncake", BIG_CACHE)
    cached = result.summary["replay"]["cached_fraction"]
    assert reuse > 0.05
    assert cached == pytest.approx(reuse, abs=0.01)


@pytest.mark.skipif(not MOONCAKE_FULL.is_file(), reason="the full public traces are not beside the checkout")
def test_mooncake_window_with_heavy_reuse_at_10x(tmp_path):
    # seconds 900-1000 of the trace: 435 requests, 62% of their input tokens repeat an earlier prefix
    # inside the window (the first 200 requests only 6%, as the cache starts cold)
    trace = select(load_trace(MOONCAKE_FULL, "mooncake"), start_s=900, duration_s=100)
    reuse = trace_stats(trace)["prefix_reuse"]
    result = _replay(tmp_path, MOONCAKE_FULL, "mooncake", BIG_CACHE, speed=SPEED, start_s=900, duration_s=100)
    _check_arrivals(result, trace, SPEED)
    assert reuse > 0.5
    # the simulator matches 16-token blocks, so the last, partial 512-token block of an earlier prompt
    # can hit too: the cached share may exceed the trace's (whole-block) figure a little
    assert result.summary["replay"]["cached_fraction"] == pytest.approx(reuse, abs=0.02)
