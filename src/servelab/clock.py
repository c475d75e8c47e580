"""Time as a seam: every piece of servelab asks a :class:`Clock` for time.

``now()`` returns integer nanoseconds; ``sleep()`` / ``sleep_until()`` wait. Two clocks:

* :class:`WallClock` - the monotonic wall clock, for real endpoints.
* :class:`VirtualClock` - virtual time for the in-process simulator. It owns an asyncio event loop whose
  selector never blocks: when no callback is ready, the loop's clock jumps straight to the next timer.
  The same asyncio code (run loop, sessions, the simulated engine) therefore runs unchanged on virtual
  time, deterministically, as fast as the CPU allows.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, Protocol, TypeVar, TypeVarTuple

from servelab.errors import SimulationDeadlock

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

NS_PER_S = 1_000_000_000


class Clock(Protocol):
    virtual: bool

    def now(self) -> int:
        """Current time in integer nanoseconds."""

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""

    async def sleep_until(self, t_ns: int) -> None:
        """Wait until ``now() >= t_ns`` (absolute; never drifts)."""

    def run(self, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run the coroutine returned by ``main`` to completion on this clock's event loop."""


class WallClock:
    """The monotonic wall clock."""

    virtual = False

    def __init__(self, use_uvloop: bool = True) -> None:
        self._use_uvloop = use_uvloop

    def now(self) -> int:
        return time.monotonic_ns()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def sleep_until(self, t_ns: int) -> None:
        delay = (t_ns - time.monotonic_ns()) / NS_PER_S
        if delay > 0:
            await asyncio.sleep(delay)

    def run(self, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
        if self._use_uvloop:
            try:
                import uvloop

                return uvloop.run(main())
            except ImportError:  # pragma: no cover - uvloop missing on the platform
                pass
        return asyncio.run(main())


class _JumpingSelector(selectors.BaseSelector):
    """A selector that polls its real twin without blocking, then advances virtual time."""

    def __init__(self, clock: VirtualClock) -> None:
        self._real = selectors.DefaultSelector()
        self._clock = clock
        self._busy = 0
        self._loop: _VirtualLoop | None = None

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout == 0:
            # Callbacks are ready: the loop only wants I/O news. On virtual time the only I/O is the
            # wake-up pipe (signals, other threads), so polling it every 32nd busy pass is enough.
            self._busy += 1
            if self._busy & 31:
                return []
        ready = self._real.select(0)
        if ready:
            return ready
        if timeout is None:
            # Nothing scheduled and nothing ready: a real loop would block forever. On virtual time only
            # a worker thread or a real socket can still wake it; give those a short real wait.
            ready = self._real.select(_IDLE_POLL_S)
            if not ready and self._loop is not None and not self._loop._may_be_woken():
                raise SimulationDeadlock(_pending_tasks(self._loop), self._clock.now())
            return ready
        if timeout > 0:
            # Round to the nearest ns: asyncio fires timers within its clock resolution (1 ns), so virtual
            # time stays on exact integer-ns ticks instead of drifting by float error.
            self._clock._advance(max(1, round(timeout * NS_PER_S)))
        return []

    def close(self) -> None:
        self._real.close()

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.get_key(fileobj)

    def get_map(self) -> Any:
        return self._real.get_map()


class _VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, clock: VirtualClock) -> None:
        self._vclock = clock
        self._in_executor = 0
        selector = _JumpingSelector(clock)
        super().__init__(selector=selector)
        selector._loop = self

    def time(self) -> float:
        return self._vclock._t / NS_PER_S

    def run_in_executor(self, executor: Executor | None, func: Callable[[*Ts], T],
                        *args: *Ts) -> asyncio.Future[T]:
        # Counted so that an idle loop waiting on a worker thread is not taken for a deadlock.
        fut = super().run_in_executor(executor, func, *args)
        self._in_executor += 1
        fut.add_done_callback(self._executor_done)
        return fut

    def _executor_done(self, _fut: asyncio.Future[Any]) -> None:
        self._in_executor -= 1

    def _may_be_woken(self) -> bool:
        """True while something outside the loop (a worker thread, a real socket) can still wake it."""
        if self._in_executor > 0:
            return True
        own = self._ssock.fileno() if self._ssock is not None else -1  # type: ignore[attr-defined]
        return any(key.fd != own for key in self._selector.get_map().values())  # type: ignore[attr-defined]


_IDLE_POLL_S = 0.05


def _pending_tasks(loop: asyncio.AbstractEventLoop) -> list[str]:
    """One line per unfinished task: its name, coroutine and where it waits."""
    lines = []
    for task in asyncio.all_tasks(loop):
        coro = task.get_coro()
        where = getattr(coro, "__qualname__", repr(coro)).rsplit("<locals>.", 1)[-1]
        # The innermost frame outside asyncio itself: the line of our code that waits.
        frames = [f for f in task.get_stack() if not f.f_code.co_filename.startswith(_ASYNCIO_DIR)]
        if frames:
            f = frames[-1]
            where += f" at {f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_lineno} in {f.f_code.co_name}"
        lines.append(f"{task.get_name()} ({where})")
    return sorted(lines)


_ASYNCIO_DIR = asyncio.__file__.rsplit("/", 1)[0]


class VirtualClock:
    """Virtual time: jumps to the next timer whenever nothing is runnable.

    ``now()`` starts at ``start_ns`` (default 0). Use :meth:`run` to execute a coroutine on it.
    """

    virtual = True

    def __init__(self, start_ns: int = 0) -> None:
        self._t = int(start_ns)

    def _advance(self, dt_ns: int) -> None:
        self._t += dt_ns

    def now(self) -> int:
        return self._t

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def sleep_until(self, t_ns: int) -> None:
        while self._t < t_ns:
            await asyncio.sleep((t_ns - self._t) / NS_PER_S)

    def new_loop(self) -> asyncio.AbstractEventLoop:
        return _VirtualLoop(self)

    def run(self, main: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run ``main()`` to completion on virtual time.

        Raises :class:`~servelab.errors.SimulationDeadlock` (naming the pending tasks) when nothing is
        runnable, no timer is set and nothing outside the loop can wake it: awaiting a future that nothing
        will resolve would otherwise wait forever.
        """
        loop = self.new_loop()
        try:
            asyncio.set_event_loop(loop)
            try:
                return loop.run_until_complete(main())
            except SimulationDeadlock:
                _cancel_all(loop)
                raise
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    """Let the tasks of a deadlocked loop unwind (their ``finally`` blocks run), as ``asyncio.run`` does."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    try:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    except SimulationDeadlock:  # a task that swallows its cancellation and waits again
        pass
