"""Server telemetry figures: one raw name per gauge, fractions averaged across engines (never summed),
KV time above 90 %, evictions, communication share and expert imbalance from the simulator's series.
Input goes through the real parser and row store (Prometheus text -> TelemetryRows)."""

import pytest

from servelab.analysis.telemetry import bucket_quantile, summarize_telemetry
from servelab.telemetry.parse import parse_metrics
from servelab.telemetry.scraper import TelemetryRows

S = 1_000_000_000


def _page(kv0: float, kv1: float, k: int) -> str:
    """Two data-parallel engines; vLLM's current and older KV gauge names carry the same value."""
    lines = ["# TYPE vllm:kv_cache_usage_perc gauge", "# TYPE vllm:gpu_cache_usage_perc gauge",
             "# TYPE vllm:num_requests_running gauge"]
    for eng, kv in (("0", kv0), ("1", kv1)):
        lines += [
            f'vllm:kv_cache_usage_perc{{engine="{eng}"}} {kv}',
            f'vllm:gpu_cache_usage_perc{{engine="{eng}"}} {kv}',
            f'vllm:num_requests_running{{engine="{eng}"}} {3 + k}',
        ]
    # simulator series, cumulative; at k = 2: evicted 37; 8 s of steps: 6 s compute, 2 s memory (overlapping)
    # and 2 s communication
    lines += [
        "# TYPE servelab_sim_kv_evicted_blocks_total counter",
        f"servelab_sim_kv_evicted_blocks_total {37 * (k == 2)}",
        "# TYPE servelab_sim_busy_seconds_total counter",
        f"servelab_sim_busy_seconds_total {4 * k}",
        "# TYPE servelab_sim_step_seconds_total counter",
        f'servelab_sim_step_seconds_total{{part="compute"}} {3 * k}',
        f'servelab_sim_step_seconds_total{{part="memory"}} {1 * k}',
        f'servelab_sim_step_seconds_total{{part="communication"}} {1 * k}',
        "# TYPE servelab_sim_expert_imbalance_ratio histogram",
    ]
    cum = (10, 60, 90, 100, 100, 100) if k == 2 else (0,) * 6
    for le, c in zip(("1.0", "1.5", "2.0", "4.0", "8.0", "+Inf"), cum, strict=True):
        lines.append(f'servelab_sim_expert_imbalance_ratio_bucket{{le="{le}"}} {c}')
    lines += [f"servelab_sim_expert_imbalance_ratio_sum {170.0 if k == 2 else 0}",
              f"servelab_sim_expert_imbalance_ratio_count {cum[-1]}"]
    return "\n".join(lines) + "\n"


def _cols():
    rows = TelemetryRows()
    for k, (a, b) in enumerate(((0.2, 0.4), (0.5, 0.95), (0.8, 1.0))):
        rows.add(k * S, "server", parse_metrics(_page(a, b, k)))
    return rows.columns()


def test_kv_usage_is_a_fraction_mean_across_engines_one_name():
    out = summarize_telemetry(_cols(), "servelab-sim")
    kv = out["gauges"]["kv_cache_usage"]
    # per instant, mean of the two engines: 0.3, 0.725, 0.9 (old code: both names x both engines = 4x)
    assert kv["mean"] == pytest.approx((0.3 + 0.725 + 0.9) / 3)
    assert kv["max"] == pytest.approx(0.9) and kv["max"] <= 1.0
    assert kv["max_engine"] == pytest.approx(1.0) and kv["engines"] == 2
    assert kv["share_above_90"] == pytest.approx(2 / 3)  # an engine above 0.9 at t = 1 s and 2 s
    assert kv["seconds_above_90"] == pytest.approx(2 * 2 / 3)
    # counts still add up across engines: 3 + 3, 4 + 4, 5 + 5
    assert out["gauges"]["requests_running"]["max"] == pytest.approx(10)


def test_simulator_evictions_communication_share_and_imbalance():
    out = summarize_telemetry(_cols(), "servelab-sim")
    assert out["kv_evicted_blocks"] == 37
    assert out["communication_share"] == pytest.approx(2 / 8)  # of the step time, not of the parts' sum
    imb = out["expert_imbalance"]
    # p50: rank 50 in (1.0, 1.5] holding 10..60 -> 1.0 + 0.5 * 40/50 = 1.4; p95: (2, 4] 90..100 -> 3.0
    assert imb["n"] == 100 and imb["p50"] == pytest.approx(1.4) and imb["p95"] == pytest.approx(3.0)
    assert imb["max_bound"] == 8.0


def test_bucket_quantile_in_the_inf_bucket_is_the_last_bound():
    assert bucket_quantile([1.0, 2.0, float("inf")], [0, 5, 10], 0.9) == 2.0
    assert bucket_quantile([1.0, 2.0, float("inf")], [4, 8, 8], 0.5, lowest=0.0) == pytest.approx(1.0)


def test_a_run_shorter_than_the_scrape_interval_reports_no_gauge_not_an_idle_zero():
    # Only the scrape before the load (t = 0) and the one after it (t = 3.25 s): the gauges never saw the
    # load, so their 0 readings are not the run's KV usage (the quick start printed "peak 0%" for a run that
    # held ~4% of the cache); counters still difference the two scrapes.
    rows = TelemetryRows()
    rows.add(0, "server", parse_metrics(_page(0.0, 0.0, 0)))
    rows.add(3_250_000_000, "server", parse_metrics(_page(0.0, 0.0, 2)))
    out = summarize_telemetry(rows.columns(), "servelab-sim")
    assert out["gauges"] == {} and out["scrapes"] == 2
    assert out["unsampled_gauges"] == ["requests_running", "kv_cache_usage"]
    assert out["kv_evicted_blocks"] == 37
    # one scrape inside the span is enough: the figures are over every scrape, as before
    assert summarize_telemetry(_cols(), "servelab-sim")["unsampled_gauges"] == []
