"""Numbers for people: three significant figures, durations in the unit that reads best, human names, and
the Pareto front."""

from __future__ import annotations

import pytest

from servelab.analysis.live import LiveStats
from servelab.analysis.pareto import pareto_front, point_of
from servelab.report.progress import fraction_done
from servelab.report.words import DEFAULT_CONCURRENCY, duration_ms, model_name, name, pct, sig


@pytest.mark.parametrize(("v", "want"), [
    (11872.3, "11,900"), (1950.4, "1,950"), (999.6, "1,000"), (365.115, "365"), (31.246, "31.2"),
    (7.8512, "7.85"), (0.40912, "0.409"), (0.00031, "0.000310"), (4.0, "4"), (0, "0"), (-12.345, "-12.3"),
    (None, "-"), (float("nan"), "-"),
])
def test_three_significant_figures_never_in_exponent_form(v, want):
    assert sig(v) == want


@pytest.mark.parametrize(
    ("ms", "want"),
    [
        (0.409, "409 µs"),
        (31.246, "31.2 ms"),
        (1993.0, "1.99 s"),
        (633572.0, "10.6 min"),
        (9_000_000.0, "2.50 h"),
        (0, "0 ms"),
        (None, "-"),
    ],
)
def test_durations_in_the_unit_that_reads_best(ms, want):
    assert duration_ms(ms) == want


def test_names_and_percentages():
    assert name("ttft_ms") == "time to first token" and name("requests_per_s") == "requests"
    assert name("some_new_key") == "some new key"
    assert pct(0.0545) == "5.45%" and pct(1.0) == "100%"


def test_the_simulator_model_card_is_named_not_printed():
    manifest = {"target": {"model": {"name": "sim-tiny", "layers": 4}}, "config": {"target": {"url": "sim"}}}
    assert model_name(manifest) == "sim-tiny"
    assert model_name({"target": {"models": ["served-a"]}}) == "served-a"


def test_the_mirrored_default_concurrency_matches_the_config():
    from servelab.config.models import DEFAULT_CONCURRENCY as CONFIG_DEFAULT

    assert DEFAULT_CONCURRENCY == CONFIG_DEFAULT


def test_pareto_points_and_front():
    # TPOT 10 ms -> 100 tokens/s per user; 8,000 output tokens/s on 8 GPUs -> 1,000 per GPU
    s = {"metrics": {"tpot_ms": {"p50": 10.0}}, "throughput": {"output_tokens_per_s": 8000.0}}
    assert point_of(s, 8) == (100.0, 1000.0)
    assert point_of(s, None) == (100.0, 8000.0)
    assert point_of({"metrics": {}, "throughput": {"output_tokens_per_s": 1.0}}, 1) is None
    pts = [(100, 1000), (50, 3000), (80, 900), (20, 2500), (10, 3500), (100, 800)]
    # (80, 900) is beaten by (100, 1000); (20, 2500) by (50, 3000); (100, 800) by (100, 1000)
    assert pareto_front(pts) == [4, 1, 0]


def test_progress_by_requests_or_by_time_on_the_run_clock():
    live = LiveStats()
    live.done, live.warmup = 40, 10
    assert fraction_done(live, requests=200, duration_s=None) == 0.25
    live.first_start_ns, live.last_end_ns = 0, 30_000_000_000
    assert fraction_done(live, requests=None, duration_s=60) == 0.5
    assert fraction_done(live, requests=200, duration_s=60) == 0.5  # the further of the two
    assert fraction_done(live, requests=None, duration_s=None) is None
    live.done = 10_000
    assert fraction_done(live, requests=200, duration_s=None) == 1.0


def test_agent_progress_by_sessions_finished():
    live = LiveStats()
    live.done = 500  # requests: no measure of an agent run's end
    for _ in range(4):
        live.session_done(None)
    assert fraction_done(live, requests=None, duration_s=None, sessions=16) == 0.25
    # sessions survive a worker's report-and-reset and the coordinator's merge
    total = LiveStats()
    total.merge(LiveStats.from_snapshot(live.take()))
    assert total.sessions == 4 and live.sessions == 0
