"""The run loop: when work starts (closed loop or an open-loop schedule), limits, warm-up, drain, stop.

The runner knows nothing of what a unit of work is. It calls ``job(index, intended_ns, warmup)`` for each
request (single-turn runs) or session (agent runs); the job sends, journals and records. The runner owns
the clock discipline: open-loop sends are scheduled at absolute offsets computed up front, so a slow send
never shifts the ones after it, and the intended send time travels with the job so lag is measured.

A job that raises is never swallowed: a :class:`~servelab.errors.ServelabError` (bad input found late, such
as a model the server does not list) stops the run and is raised from :meth:`Runner.run` once what was in
flight is drained; any other exception goes to ``on_job_error`` (the run records it as a failed request)
and is counted in :attr:`RunOutcome.job_errors`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from servelab.clock import NS_PER_S, Clock
from servelab.errors import ServelabError

Job = Callable[[int, int, bool], Awaitable[None]]
# (index, intended_ns, warmup, the exception) for a job that raised something other than a ServelabError.
JobErrorHandler = Callable[[int, int, bool, BaseException], None]


@dataclass(frozen=True)
class RunPlan:
    """What the runner needs to know, independent of the config models."""

    concurrency: int | None = None  # closed loop: concurrent workers
    # open loop: absolute send offsets from the start
    offsets_ns: Sequence[int] | npt.NDArray[np.int64] | None = None
    max_jobs: int | None = None
    duration_s: float | None = None
    warmup_jobs: int = 0
    warmup_s: float = 0.0
    drain_timeout_s: float = 60.0
    think_time_s: float = 0.0


@dataclass
class RunOutcome:
    started_ns: int
    ended_ns: int = 0
    issued: int = 0
    completed: int = 0
    cancelled_in_flight: int = 0
    stopped_by: str = "limit"  # limit | duration | interrupt | schedule
    loop_lag_ms: list[float] = field(default_factory=list)
    job_errors: list[str] = field(default_factory=list)  # "TypeName: message" of each job that raised

    @property
    def loop_lag_p99_ms(self) -> float | None:
        if not self.loop_lag_ms:
            return None
        return float(np.percentile(np.asarray(self.loop_lag_ms), 99))


class Runner:
    """Runs jobs on a clock under a :class:`RunPlan`."""

    def __init__(self, clock: Clock, plan: RunPlan, on_job_error: JobErrorHandler | None = None) -> None:
        if plan.concurrency is None and plan.offsets_ns is None:
            raise ValueError("a RunPlan needs concurrency (closed loop) or offsets_ns (open loop)")
        self.clock = clock
        self.plan = plan
        self._stop = asyncio.Event()
        self._interrupted = False
        # jobs in flight in start order (a dict as an ordered set): what is cancelled at the end is cancelled
        # in that order, so the same seed gives the same records (a set's order follows memory addresses)
        self._tasks: dict[asyncio.Task[None], None] = {}
        self._next = 0
        self._cancelled_on_interrupt = 0
        self._on_job_error = on_job_error
        self._fatal: ServelabError | None = None

    def request_stop(self, interrupt: bool = True) -> None:
        """Stop issuing work; with ``interrupt`` also cancel what is in flight (Ctrl-C)."""
        self._interrupted = self._interrupted or interrupt
        self._stop.set()
        if interrupt:
            for t in list(self._tasks):
                if t.cancel():
                    self._cancelled_on_interrupt += 1

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def _warm(self, index: int, intended_ns: int, start_ns: int) -> bool:
        p = self.plan
        return index < p.warmup_jobs or (intended_ns - start_ns) < p.warmup_s * NS_PER_S

    def _deadline(self, start_ns: int) -> int | None:
        d = self.plan.duration_s
        return None if d is None else start_ns + int(d * NS_PER_S)

    async def run(self, job: Job) -> RunOutcome:
        out = RunOutcome(started_ns=self.clock.now())
        monitor = None if self.clock.virtual else asyncio.ensure_future(self._watch_loop(out))
        try:
            if self.plan.offsets_ns is not None:
                await self._open_loop(job, out)
            else:
                await self._closed_loop(job, out)
            await self._drain(out)
        finally:
            if monitor is not None:
                monitor.cancel()
            out.ended_ns = self.clock.now()
        if self._interrupted:
            out.stopped_by = "interrupt"
            out.cancelled_in_flight += self._cancelled_on_interrupt
        if self._fatal is not None:
            raise self._fatal
        return out

    def _spawn(
        self, job: Job, index: int, intended_ns: int, warm: bool, out: RunOutcome
    ) -> asyncio.Task[None]:
        task = asyncio.ensure_future(job(index, intended_ns, warm))
        self._tasks[task] = None
        out.issued += 1

        def _done(t: asyncio.Task[None]) -> None:
            self._tasks.pop(t, None)
            if t.cancelled():
                return
            out.completed += 1
            exc = t.exception()
            if exc is not None:
                self._job_failed(index, intended_ns, warm, exc, out)

        task.add_done_callback(_done)
        return task

    def _job_failed(
        self, index: int, intended_ns: int, warm: bool, exc: BaseException, out: RunOutcome
    ) -> None:
        if isinstance(exc, ServelabError):
            if self._fatal is None:
                self._fatal = exc
            self._stop.set()  # stop sending; what is in flight is cancelled by _drain (and recorded so)
            for t in list(self._tasks):
                t.cancel()
            return
        out.job_errors.append(f"{type(exc).__name__}: {exc}"[:500])
        if self._on_job_error is not None:
            self._on_job_error(index, intended_ns, warm, exc)

    async def _open_loop(self, job: Job, out: RunOutcome) -> None:
        start = out.started_ns
        deadline = self._deadline(start)
        limit = self.plan.max_jobs
        out.stopped_by = "schedule"
        offsets = self.plan.offsets_ns if self.plan.offsets_ns is not None else ()
        for index, off in enumerate(offsets):
            if limit is not None and index >= limit:
                out.stopped_by = "limit"
                break
            intended = start + int(off)
            if deadline is not None and intended >= deadline:
                out.stopped_by = "duration"
                break
            if self.clock.now() < intended:
                stop_wait = asyncio.ensure_future(self._stop.wait())
                sleeper = asyncio.ensure_future(self.clock.sleep_until(intended))
                await asyncio.wait({stop_wait, sleeper}, return_when=asyncio.FIRST_COMPLETED)
                stop_wait.cancel()
                sleeper.cancel()
            if self._stop.is_set():
                break
            self._spawn(job, index, intended, self._warm(index, intended, start), out)

    async def _closed_loop(self, job: Job, out: RunOutcome) -> None:
        """Each user's jobs run one after another inside its own worker task: a job that ends hands over
        to the next at once, as a user would, with no task to start and no waiter to wake in between
        (each of those cost a turn of a busy event loop: ~10 ms per request at 32 users on 50k-token
        prompts). A worker with a job in flight is in ``_tasks``, so an interrupt or ``_drain`` cancels
        that job exactly as it would cancel a job's own task."""
        start = out.started_ns
        deadline = self._deadline(start)
        limit = self.plan.max_jobs
        think = self.plan.think_time_s
        clock = self.clock

        async def worker() -> None:
            me = asyncio.current_task()
            assert me is not None
            while not self._stop.is_set():
                index = self._next
                if limit is not None and index >= limit:
                    out.stopped_by = "limit"
                    return
                now = clock.now()
                if deadline is not None and now >= deadline:
                    out.stopped_by = "duration"
                    return
                self._next += 1
                await self._run_inline(me, job, index, now, self._warm(index, now, start), out)
                if think > 0 and not self._stop.is_set():
                    left = None if deadline is None else (deadline - clock.now()) / NS_PER_S
                    if left is None or left > 0:
                        await clock.sleep(think if left is None else min(think, left))

        workers = [asyncio.ensure_future(worker()) for _ in range(self.plan.concurrency or 1)]
        try:
            timeout = None if deadline is None else max(0.0, (deadline - clock.now()) / NS_PER_S)
            done, pending = await asyncio.wait(workers, timeout=timeout)
        except asyncio.CancelledError:
            for w in workers:
                w.cancel()
            raise
        if pending:  # the deadline passed: jobs in flight are left to _drain, idle workers just stop
            out.stopped_by = "duration"
            for w in pending:
                if w not in self._tasks:
                    w.cancel()
        for w in done:
            if not w.cancelled() and w.exception() is not None:
                raise w.exception()  # type: ignore[misc]  # a bug in the loop itself, never swallowed

    async def _run_inline(self, me: asyncio.Task[None], job: Job, index: int, intended_ns: int, warm: bool,
                          out: RunOutcome) -> None:
        """Run one job in the calling worker task, with the bookkeeping ``_spawn`` gives a job's task."""
        self._tasks[me] = None
        out.issued += 1
        try:
            await job(index, intended_ns, warm)
        except asyncio.CancelledError:
            self._tasks.pop(me, None)
            raise  # cancelled (an interrupt, a drain timeout, a fatal error elsewhere): this user stops
        except Exception as exc:  # noqa: BLE001 - handed on exactly as a job task's exception is
            self._tasks.pop(me, None)
            out.completed += 1
            self._job_failed(index, intended_ns, warm, exc, out)
            return
        self._tasks.pop(me, None)
        out.completed += 1

    async def _drain(self, out: RunOutcome) -> None:
        if not self._tasks:
            return
        in_flight = list(self._tasks)  # in start order
        pending = set(in_flight)
        if not self._interrupted and self.plan.drain_timeout_s > 0:
            _, pending = await asyncio.wait(pending, timeout=self.plan.drain_timeout_s)
        if pending:
            left = [t for t in in_flight if t in pending]
            out.cancelled_in_flight += len(left)
            for t in left:
                t.cancel()
            await asyncio.gather(*left, return_exceptions=True)

    async def _watch_loop(self, out: RunOutcome, period_s: float = 0.05) -> None:
        """Measure event-loop saturation: how late a periodic timer fires."""
        while True:
            t0 = self.clock.now()
            await asyncio.sleep(period_s)
            late = (self.clock.now() - t0) / 1e6 - period_s * 1e3
            out.loop_lag_ms.append(max(0.0, late))
