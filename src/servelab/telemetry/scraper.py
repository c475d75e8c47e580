"""Scrape a metrics source every interval on the run's clock; keep every sample as a telemetry row."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from servelab.clock import NS_PER_S, Clock
from servelab.telemetry.parse import Sample, parse_metrics

# A source answers exposition text (parsed by ``parse``) or samples it has already taken (NVML).
Fetch = Callable[[], Awaitable[str | list[Sample]]]


@dataclass
class TelemetryRows:
    """Column-wise rows of telemetry.parquet."""

    t_ns: list[int] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    name: list[str | None] = field(default_factory=list)
    raw_name: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    scrapes: int = 0

    def add(self, t_ns: int, source: str, samples: list[Sample]) -> None:
        for s in samples:
            self.t_ns.append(t_ns)
            self.source.append(source)
            self.name.append(s.name)
            self.raw_name.append(s.raw_name)
            self.labels.append(orjson.dumps(dict(s.labels)).decode())
            self.value.append(s.value)
        self.scrapes += 1

    def columns(self) -> dict[str, list[Any]]:
        return {"t_ns": self.t_ns, "source": self.source, "name": self.name, "raw_name": self.raw_name,
                "labels": self.labels, "value": self.value}

    def __len__(self) -> int:
        return len(self.t_ns)


class Scraper:
    """Polls ``fetch`` at absolute ticks (no drift); failures are kept as errors, never raised."""

    def __init__(self, fetch: Fetch, clock: Clock, rows: TelemetryRows, *, source: str = "server",
                 interval_s: float = 1.0, parse: Callable[[str], list[Sample]] = parse_metrics) -> None:
        self.fetch = fetch
        self.clock = clock
        self.rows = rows
        self.source = source
        self.interval_ns = int(interval_s * NS_PER_S)
        self.parse = parse
        self._task: asyncio.Task[None] | None = None
        self.names_seen: set[str] = set()
        self._last: list[Sample] = []

    async def scrape_once(self) -> None:
        t = self.clock.now()
        try:
            got = await self.fetch()
            samples = got if isinstance(got, list) else self.parse(got)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a failing /metrics must never fail the run
            if len(self.rows.errors) < 100:
                self.rows.errors.append(
                    {"t_ns": t, "source": self.source, "error": f"{type(e).__name__}: {e}"}
                )
            return
        self.names_seen.update(s.raw_name for s in samples)
        self._last = samples
        self.rows.add(t, self.source, samples)

    def _totals(self) -> tuple[tuple[str, tuple[tuple[str, str], ...], float], ...]:
        return tuple(sorted((s.raw_name, s.labels, s.value) for s in self._last
                            if s.raw_name.endswith(("_total", "_count"))))

    async def _loop(self) -> None:
        next_t = self.clock.now()
        while True:
            await self.scrape_once()
            next_t += self.interval_ns
            now = self.clock.now()
            if next_t < now:  # a slow scrape: skip missed ticks rather than bunch them
                next_t = now + self.interval_ns - (now - next_t) % self.interval_ns
            await self.clock.sleep_until(next_t)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    async def begin(self) -> None:
        """Take the baseline scrape now (before any load is sent), then poll in the background; the first
        poll runs as soon as the caller yields (the load has just started), so even a run shorter than one
        interval is seen under load."""
        await self.scrape_once()
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self, final: bool = True, settle_s: float = 0.0, poll_s: float = 0.25) -> None:
        """Stop polling; with ``final``, take the end state so counters' deltas cover the whole run.

        A real server may count a request a moment after its last byte was sent: with ``settle_s`` the
        final scrape repeats every ``poll_s`` until two in a row agree on every counter (or time is up); a
        source that shows no counter at all (a server without metrics) is not waited for.
        """
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if not final:
            return
        await self.scrape_once()
        deadline = self.clock.now() + int(settle_s * NS_PER_S)
        prev = self._totals()
        if not prev:  # no counter to settle (no /metrics, or no series that counts): no wait
            return
        while self.clock.now() < deadline:
            await self.clock.sleep(poll_s)
            await self.scrape_once()
            cur = self._totals()
            if cur == prev:
                return
            prev = cur
