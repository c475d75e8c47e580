"""A job that raises is never swallowed (issue 9): a ServelabError stops the run and is raised with its
message; any other exception is counted and handed to ``on_job_error`` (the run records it as failed)."""

import asyncio

import pytest

from servelab.clock import NS_PER_S, VirtualClock
from servelab.errors import ConfigError
from servelab.load.runner import Runner, RunPlan


def _job(clock, fail_at: int, exc: BaseException, log: list):
    async def job(i: int, intended: int, warm: bool) -> None:
        try:
            await clock.sleep(1.0)
            if i == fail_at:
                raise exc
            log.append((i, "ok", clock.now()))
        except asyncio.CancelledError:
            log.append((i, "cancelled", clock.now()))
            raise

    return job


def test_a_servelab_error_in_a_job_stops_the_run_with_its_message():
    clock, log = VirtualClock(), []
    runner = Runner(clock, RunPlan(concurrency=2, max_jobs=100))

    async def main():
        return await runner.run(_job(clock, 3, ConfigError("no model given and the server lists none"), log))

    with pytest.raises(ConfigError, match="no model given"):
        clock.run(main)
    # Jobs 0-1 end at 1 s, 2-3 at 2 s (3 raises); job 2 ends ok at the same instant, nothing more is sent.
    assert sorted(i for i, s, _ in log if s == "ok") == [0, 1, 2]
    assert max(t for *_, t in log) == 2 * NS_PER_S


def test_any_other_exception_is_counted_and_handed_to_the_handler():
    clock, log, seen = VirtualClock(), [], []
    runner = Runner(clock, RunPlan(concurrency=1, max_jobs=5),
                    on_job_error=lambda i, intended, warm, e: seen.append((i, type(e).__name__, str(e))))

    async def main():
        return await runner.run(_job(clock, 2, OverflowError("int too large to convert"), log))

    out = clock.run(main)
    assert seen == [(2, "OverflowError", "int too large to convert")]
    assert out.job_errors == ["OverflowError: int too large to convert"]
    assert out.issued == 5 and out.completed == 5 and len(log) == 4  # the run went on after it
