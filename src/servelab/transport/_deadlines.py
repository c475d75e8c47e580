"""The deadlines of a model exchange: first token, inter-token idle, total.

One timer at a time. Before the first token it waits for the first-token deadline; once a token came,
for whichever comes first of the total deadline and ``idle_s`` after the latest token. The idle check
re-arms itself from the latest token's time, so the hot path never touches a timer per token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from servelab.records.schema import TIMEOUT

IDLE_S = 60.0  # default inter-token idle timeout, seconds
_SSE = 1  # ModelExchange's streaming body mode (kept equal to _exchange._SSE)


class _Timed(Protocol):
    """The exchange state the timer methods read and write (held by ModelExchange, whose slots they are)."""

    _total_at: float
    _total_s: float
    _idle_s: float
    _stream: bool
    _finished: bool
    _mode: int
    _t: int
    _times: list[int]
    _timer: asyncio.TimerHandle | None
    _done_ns: int | None
    conn: Any
    rec: Any
    _now: Callable[[], int]

    def finish(self, status: str, error: str | None) -> None: ...
    def _conclude(self) -> None: ...
    def _watch(self) -> None: ...
    def _on_first_token_deadline(self, first_token_s: float) -> None: ...
    def _on_idle_deadline(self) -> None: ...
    def _on_total_deadline(self) -> None: ...


class Deadlines:
    """Timer methods of :class:`~servelab.transport._exchange.ModelExchange` (which holds the state: each
    method's ``self`` is typed by the :class:`_Timed` protocol it needs)."""

    __slots__ = ()
    # State owned by the subclass (declared for readers and type checkers; the slots live there).
    _total_at: float
    _total_s: float
    _idle_s: float
    _stream: bool
    _finished: bool
    _mode: int
    _t: int
    _times: list[int]
    _timer: asyncio.TimerHandle | None
    _done_ns: int | None
    conn: Any
    rec: Any

    def arm(self: _Timed, first_token_s: float) -> None:
        """Start the timeouts (call right after the request bytes were written)."""
        loop = asyncio.get_running_loop()
        self._total_at = loop.time() + self._total_s
        if self._stream and first_token_s < self._total_s:
            self._timer = loop.call_later(first_token_s, self._on_first_token_deadline, first_token_s)
        else:
            self._timer = loop.call_later(self._total_s, self._on_total_deadline)

    def _on_first_token_deadline(self: _Timed, first_token_s: float) -> None:
        self.conn.pool.inbox.flush()  # a token that arrived in time but is not parsed yet still counts
        if self._finished:
            return
        if self.rec.first_token_ns is None:
            self._t = self._now()
            self.finish(TIMEOUT, f"no token within the first-token timeout of {first_token_s:g} s")
            return
        self._watch()

    def _first(self: _Timed) -> None:
        """The first token arrived: from now on the stream may stay quiet for ``idle_s`` at most."""
        if not self._total_at:  # never armed (a reply played without timers): nothing to watch
            return
        if self._timer is not None:
            self._timer.cancel()
        self._watch()

    def _watch(self: _Timed) -> None:
        """Arm the next deadline: the total one, or the idle one when it comes first."""
        loop = asyncio.get_running_loop()
        at = self._total_at
        if self._mode == _SSE and self._times:
            idle_at = loop.time() + self._idle_s - (self._now() - self._times[-1]) / 1e9
            if idle_at < at:
                self._timer = loop.call_at(idle_at, self._on_idle_deadline)
                return
        self._timer = loop.call_at(at, self._on_total_deadline)

    def _on_idle_deadline(self: _Timed) -> None:
        self.conn.pool.inbox.flush()
        if self._finished:
            return
        now = self._now()
        if self._mode == _SSE and now - self._times[-1] >= self._idle_s * 1e9 - 1000:  # 1 us: float rounding
            self._t = now
            self.finish(TIMEOUT, f"stream stalled: no token for {self._idle_s:g} s (idle timeout) "
                                 f"after {len(self._times)} token(s)")
            return
        self._watch()  # a token came meanwhile (or [DONE]: only the total deadline is left)

    def _on_total_deadline(self: _Timed) -> None:
        self.conn.pool.inbox.flush()
        if self._finished:
            return
        self._t = self._now()
        if self._done_ns is not None:  # [DONE] arrived but the HTTP message never ended: data is whole
            self._conclude()
            return
        self.finish(TIMEOUT, f"response not complete within the total timeout of {self._total_s:g} s")
