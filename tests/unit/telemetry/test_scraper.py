import asyncio

from servelab.analysis.telemetry import summarize_telemetry, token_agreement
from servelab.clock import NS_PER_S, VirtualClock
from servelab.telemetry.scraper import Scraper, TelemetryRows


def _page(running, hits, queries, ttft_sum, ttft_n):
    return (f"vllm:num_requests_running {running}\n"
            f"vllm:prefix_cache_hits_total {hits}\nvllm:prefix_cache_queries_total {queries}\n"
            f"# TYPE vllm:time_to_first_token_seconds histogram\n"
            f'vllm:time_to_first_token_seconds_bucket{{le="+Inf"}} {ttft_n}\n'
            f"vllm:time_to_first_token_seconds_sum {ttft_sum}\n"
            f"vllm:time_to_first_token_seconds_count {ttft_n}\n")


def test_scraper_ticks_on_absolute_times_and_summary_uses_deltas():
    clock = VirtualClock()
    rows = TelemetryRows()
    pages = iter([_page(0, 100, 1000, 1.0, 10), _page(4, 150, 1100, 1.5, 20), "garbage{{{",
                  _page(2, 400, 1500, 3.0, 30), _page(0, 400, 1500, 3.0, 30)])
    calls: list[int] = []

    async def fetch():
        calls.append(clock.now())
        await clock.sleep(0.3)  # a slow scrape does not shift the next tick
        return next(pages)

    async def main():
        s = Scraper(fetch, clock, rows, interval_s=1.0)
        s.start()
        await clock.sleep(3.5)
        await s.stop(final=True)

    clock.run(main)
    assert calls[:4] == [0, NS_PER_S, 2 * NS_PER_S, 3 * NS_PER_S]
    assert len(rows.errors) == 1 and rows.scrapes == 4
    out = summarize_telemetry(rows.columns(), "vllm")
    assert out["counters"]["prefix_cache_hits_total"] == 300
    assert out["prefix_cache_hit_rate"] == 300 / 500
    assert out["gauges"]["requests_running"]["max"] == 4
    assert abs(out["histograms"]["ttft_seconds"]["mean_ms"] - 2000 * 1.0 / 20) < 1e-9


def test_token_agreement_relative_difference():
    server = {"counters": {"generation_tokens_total": 1000.0}}
    assert token_agreement(server, 1010, 0)["generation_tokens_total"]["relative_difference"] == 0.01


def test_empty_telemetry_is_unavailable():
    assert summarize_telemetry(TelemetryRows().columns()) == {"available": False}
    asyncio.set_event_loop(None)


def test_final_scrape_waits_for_counters_to_settle():
    clock = VirtualClock()
    rows = TelemetryRows()
    pages = iter([_page(0, 10, 10, 0.1, 1), _page(0, 10, 10, 0.1, 1), _page(0, 12, 12, 0.1, 2),
                  _page(0, 13, 13, 0.1, 3), _page(0, 13, 13, 0.1, 3), _page(0, 99, 99, 0.1, 9)])

    async def fetch():
        return next(pages)

    async def main():
        s = Scraper(fetch, clock, rows, interval_s=10.0)
        s.start()
        await clock.sleep(1)  # one tick at t=0
        await s.stop(final=True, settle_s=5.0, poll_s=0.25)

    clock.run(main)
    out = summarize_telemetry(rows.columns())
    assert out["counters"]["prefix_cache_hits_total"] == 3  # settled at 13, never read the later 99
    assert rows.scrapes == 5


def test_no_settle_wait_when_the_source_shows_no_counter():
    clock = VirtualClock()
    rows = TelemetryRows()
    stopped_at: list[int] = []

    async def fetch():
        return "<html>not a metrics page</html>\n"  # a server without /metrics: no series, no counter

    async def main():
        s = Scraper(fetch, clock, rows, interval_s=10.0)
        s.start()
        await clock.sleep(1)  # one tick at t=0
        await s.stop(final=True, settle_s=2.0, poll_s=0.25)
        stopped_at.append(clock.now())

    clock.run(main)
    assert stopped_at == [NS_PER_S]  # the final scrape at t=1 s, and no 0.25 s poll after it
    assert len(rows.errors) == 2  # the baseline tick and the final scrape, both kept as errors


def test_begin_takes_the_baseline_before_returning():
    clock = VirtualClock()
    rows = TelemetryRows()
    seen: list[int] = []

    async def fetch():
        seen.append(clock.now())
        return _page(0, 1, 1, 0.1, 1)

    async def main():
        s = Scraper(fetch, clock, rows, interval_s=1.0)
        await s.begin()
        assert seen == [0]  # taken before any load could start
        await clock.sleep(2.5)
        await s.stop(final=False)

    clock.run(main)
    assert seen == [0, 0, NS_PER_S, 2 * NS_PER_S]  # baseline, then the first poll under load
