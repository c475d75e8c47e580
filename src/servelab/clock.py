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
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

NS_PER_S = 1_000_000_000


class Clock(Protocol):
    virtual: bool

    def now(self) -> int:
        """Current time in integer nanoseconds."""

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""

    async def sleep_until(self, t_ns: int) -> None:
        """Wait until ``now() >= t_ns`` (absolute; never drifts)."""

    def run(self, main: Callable[[], Awaitable[T]]) -> T:
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

    def run(self, main: Callable[[], Awaitable[T]]) -> T:
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
            # Nothing scheduled and nothing ready: a real loop would block forever. On virtual time
            # that means a deadlock in the simulated world (or a task waiting on a real socket).
            ready = self._real.select(0.05)
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
        super().__init__(selector=_JumpingSelector(clock))

    def time(self) -> float:
        return self._vclock._t / NS_PER_S


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

    def run(self, main: Callable[[], Awaitable[T]]) -> T:
        loop = self.new_loop()
        try:
            asyncio.set_event_loop(loop)
            return loop.run_until_complete(main())
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()
