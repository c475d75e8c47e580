from __future__ import annotations

import math
import re

import pytest

from servelab.sim.api import SimRequest
from servelab.sim.prom import (
    Histogram,
    PromText,
    RequestMetrics,
    format_labels,
    format_value,
    render_metrics,
)

# One exposition line: name{labels} value, or a HELP/TYPE comment.
_SAMPLE = re.compile(
    r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})?'
    r" (?P<value>[-+]?(?:[0-9.e+-]+|Inf|NaN))$"
)
_META = re.compile(r"^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .*$")


def parse(text: str) -> dict[tuple[str, str], float]:
    """Strictly parse exposition text into {(name, labels): value}; fail on any bad line."""
    assert text.endswith("\n")
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert _META.match(line), line
            continue
        m = _SAMPLE.match(line)
        assert m, line
        key = (m["name"], m["labels"] or "")
        assert key not in out, f"duplicate sample {key}"
        out[key] = float(m["value"])
    return out


def test_histogram_bucket_edges_are_inclusive():
    h = Histogram([1.0, 2.0, 5.0])
    for v in (0.5, 1.0, 1.5, 2.0, 5.0, 7.0):
        h.observe(v)
    assert h.cumulative() == [(1.0, 2), (2.0, 4), (5.0, 5), (math.inf, 6)]
    assert h.count == 6
    assert h.sum == pytest.approx(17.0)


def test_histogram_merge_and_bad_bounds():
    a, b = Histogram([1, 2]), Histogram([1, 2])
    a.observe(0.5)
    b.observe(3)
    b.observe(1.5)
    a.merge(b)
    assert a.cumulative() == [(1.0, 1), (2.0, 2), (math.inf, 3)]
    with pytest.raises(ValueError):
        a.merge(Histogram([1, 3]))
    with pytest.raises(ValueError):
        Histogram([2, 1])


def test_values_and_labels_are_formatted_as_prometheus_does():
    assert format_value(3) == "3.0"
    assert format_value(0.25) == "0.25"
    assert format_value(math.inf) == "+Inf"
    assert format_value(-math.inf) == "-Inf"
    assert format_value(math.nan) == "NaN"
    assert format_labels({"a": 'x"y\\z\nw'}) == '{a="x\\"y\\\\z\\nw"}'


def test_promtext_families_and_histogram_series():
    p = PromText({"model_name": "m"})
    p.gauge("g", "a gauge", 1.5)
    p.counter("c_total", "a counter", [({"reason": "stop"}, 2), ({"reason": "length"}, 3)])
    h = Histogram([0.1, 1.0])
    h.observe(0.05)
    h.observe(0.5)
    p.histogram("h_seconds", "a histogram", h)
    text = p.text()
    assert (
        "# TYPE g gauge" in text and "# TYPE c_total counter" in text and "# TYPE h_seconds histogram" in text
    )
    s = parse(text)
    assert s[("g", '{model_name="m"}')] == 1.5
    assert s[("c_total", '{reason="stop",model_name="m"}')] == 2
    assert s[("h_seconds_bucket", '{le="0.1",model_name="m"}')] == 1
    assert s[("h_seconds_bucket", '{le="1.0",model_name="m"}')] == 2
    assert s[("h_seconds_bucket", '{le="+Inf",model_name="m"}')] == 2
    assert s[("h_seconds_count", '{model_name="m"}')] == 2
    assert s[("h_seconds_sum", '{model_name="m"}')] == pytest.approx(0.55)


def test_promtext_rejects_misnamed_counter_and_duplicates():
    p = PromText()
    with pytest.raises(ValueError):
        p.counter("requests", "no _total suffix", 1)
    p.gauge("x", "x", 1)
    with pytest.raises(ValueError):
        p.gauge("x", "again", 2)


def _finished(arrival, first, times, queue_ns, reason="length"):
    r = SimRequest(rid=1, prompt_ids=[1, 2, 3], max_tokens=len(times), arrival_ns=arrival)
    r.first_token_ns = first
    r.token_times_ns = times
    r.finish_ns = times[-1]
    r.queue_ns = queue_ns
    r.finish_reason = reason
    r.output_tokens = len(times)
    return r


def test_request_metrics_observe_ttft_itl_queue_e2e():
    m = RequestMetrics()
    ms = 1_000_000
    m.observe(_finished(0, 30 * ms, [30 * ms, 40 * ms, 60 * ms], queue_ns=5 * ms))
    m.observe(_finished(0, 200 * ms, [200 * ms], queue_ns=0, reason="stop"))
    assert m.ttft.count == 2 and m.ttft.sum == pytest.approx(0.23)
    assert m.itl.count == 2 and m.itl.sum == pytest.approx(0.03)
    assert m.e2e.sum == pytest.approx(0.26)
    assert m.queue.sum == pytest.approx(0.005)
    assert m.success == {"stop": 1, "length": 1, "abort": 0}


def test_render_metrics_uses_vllm_names_and_engine_figures():
    m = RequestMetrics()
    m.observe(_finished(0, 10_000_000, [10_000_000, 20_000_000], queue_ns=0))
    stats = {
        "running": 3,
        "waiting": 2,
        "kv_usage": 0.5,
        "preemptions_total": 1,
        "prefix_cache_queries_tokens": 100,
        "prefix_cache_hits_tokens": 40,
        "prompt_tokens_total": 100,
        "generation_tokens_total": 2,
        "step_compute_seconds_total": 1.0,
        "step_memory_seconds_total": 2.0,
        "step_comm_seconds_total": 0.5,
        "expert_imbalance": 1.3,
        "all_to_all_bytes_total": 1e9,
        "steps_total": 10,
    }
    s = parse(render_metrics(stats, m, "llama"))
    lab = '{model_name="llama",engine="0"}'
    assert s[("vllm:num_requests_running", lab)] == 3
    assert s[("vllm:num_requests_waiting", lab)] == 2
    assert s[("vllm:kv_cache_usage_perc", lab)] == 0.5
    assert s[("vllm:gpu_cache_usage_perc", lab)] == 0.5
    assert s[("vllm:num_preemptions_total", lab)] == 1
    assert s[("vllm:prefix_cache_queries_total", lab)] == 100
    assert s[("vllm:prefix_cache_hits_total", lab)] == 40
    assert s[("vllm:prompt_tokens_total", lab)] == 100
    assert s[("vllm:generation_tokens_total", lab)] == 2
    assert s[("vllm:request_success_total", '{finished_reason="length",model_name="llama",engine="0"}')] == 1
    for h in ("time_to_first_token_seconds", "inter_token_latency_seconds", "time_per_output_token_seconds",
              "request_queue_time_seconds", "e2e_request_latency_seconds"):
        assert s[(f"vllm:{h}_count", lab)] == 1, h
    assert s[("servelab_sim_step_seconds_total", '{part="memory",model_name="llama",engine="0"}')] == 2.0
    assert (
        s[("servelab_sim_step_seconds_total", '{part="communication",model_name="llama",engine="0"}')] == 0.5
    )
    assert s[("servelab_sim_steps_total", lab)] == 10
    assert s[("servelab_sim_expert_imbalance", lab)] == 1.3
    assert s[("servelab_sim_all_to_all_bytes_total", lab)] == 1e9


def test_observe_many_matches_observe_one_by_one():
    import numpy as np

    from servelab.sim.prom import ITL_BUCKETS, Histogram

    values = np.array([0.0005, 0.001, 0.0011, 0.02, 0.02, 0.5, 100.0])
    a, b = Histogram(ITL_BUCKETS), Histogram(ITL_BUCKETS)
    for v in values:
        a.observe(float(v))
    b.observe_many(values)
    assert a.counts == b.counts and a.count == b.count and abs(a.sum - b.sum) < 1e-12
