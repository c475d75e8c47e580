import asyncio

import pytest

from servelab.clock import NS_PER_S, VirtualClock
from servelab.load.runner import Runner, RunPlan


def _run(plan: RunPlan, service_s, clock=None):
    clock = clock or VirtualClock()
    log: list[tuple] = []

    async def job(i: int, intended: int, warm: bool) -> None:
        try:
            await clock.sleep(service_s(i))
            log.append((i, "ok", intended, clock.now(), warm))
        except asyncio.CancelledError:
            log.append((i, "cancelled", intended, clock.now(), warm))
            raise

    async def main():
        return await Runner(clock, plan).run(job)

    return clock.run(main), log


def test_closed_loop_keeps_n_in_flight_and_stops_at_the_request_limit():
    out, log = _run(RunPlan(concurrency=4, max_jobs=10), lambda i: 1.0)
    assert out.issued == 10 and out.completed == 10 and out.cancelled_in_flight == 0
    # 4 workers, 1 s each: requests 0-3 finish at 1 s, 4-7 at 2 s, 8-9 at 3 s.
    finish = sorted(t for *_, t, _ in log)
    assert finish == [NS_PER_S] * 4 + [2 * NS_PER_S] * 4 + [3 * NS_PER_S] * 2
    assert out.stopped_by == "limit"


def test_closed_loop_duration_drains_then_cancels_and_counts_add_up():
    out, log = _run(RunPlan(concurrency=2, duration_s=5, drain_timeout_s=0.5), lambda i: 2.0)
    ok = [x for x in log if x[1] == "ok"]
    cancelled = [x for x in log if x[1] == "cancelled"]
    # Sends at 0, 2, 4 per worker; those at 4 s would end at 6 s, past 5 s + 0.5 s drain.
    assert len(ok) == 4 and len(cancelled) == 2
    assert out.issued == len(ok) + len(cancelled)
    assert out.cancelled_in_flight == 2
    assert out.ended_ns == int(5.5 * NS_PER_S)


def test_open_loop_sends_at_absolute_offsets_even_when_jobs_are_slow():
    offsets = [0, NS_PER_S // 10, NS_PER_S // 5, 3 * NS_PER_S]
    out, log = _run(RunPlan(offsets_ns=offsets), lambda i: 10.0)
    intended = sorted(x[2] for x in log)
    assert intended == offsets
    assert out.issued == 4


def test_open_loop_respects_duration():
    offsets = [i * NS_PER_S for i in range(10)]
    out, log = _run(RunPlan(offsets_ns=offsets, duration_s=4.5), lambda i: 0.1)
    assert out.issued == 5 and out.stopped_by == "duration"


@pytest.mark.parametrize("plan,expected", [
    (RunPlan(concurrency=1, max_jobs=5, warmup_jobs=2), [True, True, False, False, False]),
    (RunPlan(concurrency=1, max_jobs=4, warmup_s=1.5), [True, True, False, False]),
])
def test_warmup_by_count_and_by_time(plan, expected):
    _, log = _run(plan, lambda i: 1.0)
    assert [x[4] for x in sorted(log)] == expected


def test_interrupt_cancels_in_flight_and_stops_issuing():
    clock = VirtualClock()
    seen: list[str] = []

    async def job(i, intended, warm):
        try:
            await clock.sleep(100)
            seen.append("ok")
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main():
        r = Runner(clock, RunPlan(concurrency=3, max_jobs=100))
        asyncio.get_running_loop().call_later(1.0, r.request_stop)
        return await r.run(job)

    out = clock.run(main)
    assert out.stopped_by == "interrupt"
    assert seen == ["cancelled"] * 3
    assert out.cancelled_in_flight == 3
    assert out.issued == 3


def test_closed_loop_user_sends_the_next_job_in_the_same_loop_turn():
    """A user's next job starts as its last one ends, before anything else the loop has queued runs (a
    spawned task and a woken waiter cost two turns each of a busy loop, ~10 ms a request under load)."""
    clock = VirtualClock()
    ended: set[int] = set()
    previous_end_seen: list[bool] = []

    async def job(i: int, intended: int, warm: bool) -> None:
        previous_end_seen.append(i - 1 in ended)  # has a callback queued at the end of job i-1 run yet?
        await clock.sleep(1.0)
        asyncio.get_running_loop().call_soon(ended.add, i)

    async def main():
        return await Runner(clock, RunPlan(concurrency=1, max_jobs=3)).run(job)

    out = clock.run(main)
    assert out.issued == out.completed == 3 and out.stopped_by == "limit"
    assert previous_end_seen == [False, False, False]


def test_closed_loop_think_time_stops_at_the_deadline():
    out, log = _run(RunPlan(concurrency=1, duration_s=2.5, think_time_s=10.0), lambda i: 1.0)
    assert [x[1] for x in log] == ["ok"] and out.issued == 1 and out.stopped_by == "duration"
    assert out.ended_ns == int(2.5 * NS_PER_S)  # the think pause is cut at the deadline, nothing in flight


@pytest.mark.parametrize("mode", ["closed", "open"])
def test_jobs_cut_at_the_end_are_cancelled_in_the_order_they_started(mode):
    # 64 jobs still running when the drain ends: each records its cancellation, so the order is what the
    # records get. In start order every time (a set of tasks cancelled them in memory-address order,
    # which changed the same seed's session order and the last digit of time_split).
    n = 64
    if mode == "closed":
        plan = RunPlan(concurrency=n, duration_s=1, drain_timeout_s=0.5)
    else:
        plan = RunPlan(offsets_ns=[i * 1000 for i in range(n)], duration_s=1, drain_timeout_s=0.5)
    out, log = _run(plan, lambda i: 100.0)
    cancelled = [i for i, what, *_ in log if what == "cancelled"]
    assert out.cancelled_in_flight == n and cancelled == list(range(n))
