"""Telemetry for one run: which sources to scrape, started before the load and stopped after it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from servelab.clock import Clock
from servelab.config.models import RunConfig
from servelab.telemetry.parse import Sample
from servelab.telemetry.scraper import Scraper, TelemetryRows
from servelab.telemetry.sources import HttpMetrics, NvmlSampler, metrics_url_for
from servelab.telemetry.vocabulary import detect_engine
from servelab.transport.base import Transport


class RunTelemetry:
    def __init__(self, cfg: RunConfig, transport: Transport, clock: Clock) -> None:
        self.rows = TelemetryRows()
        self.scrapers: list[Scraper] = []
        self._closers: list[Any] = []
        tc = cfg.telemetry
        if not tc.enabled:
            return
        interval = tc.interval_s or (5.0 if clock.virtual else 1.0)
        sim_text = getattr(transport, "metrics_text", None)
        if cfg.target.is_sim and sim_text is not None:
            async def fetch_sim() -> str:
                return sim_text()

            self.scrapers.append(Scraper(fetch_sim, clock, self.rows, source="server", interval_s=interval))
        elif not cfg.target.is_sim:
            http = HttpMetrics(tc.metrics_url or metrics_url_for(cfg.target.url), headers=cfg.target.headers)
            self._closers.append(http)
            self.scrapers.append(Scraper(http, clock, self.rows, source="server", interval_s=interval))
        if tc.dcgm_url:
            dcgm = HttpMetrics(tc.dcgm_url)
            self._closers.append(dcgm)
            self.scrapers.append(Scraper(dcgm, clock, self.rows, source="dcgm", interval_s=interval))
        if tc.nvml and not clock.virtual:
            nvml = NvmlSampler()
            if nvml.available:
                async def fetch_nvml() -> list[Sample]:  # samples already: nothing to parse
                    return nvml.sample()

                self.scrapers.append(
                    Scraper(fetch_nvml, clock, self.rows, source="nvml", interval_s=interval)
                )

    async def start(self) -> None:
        """Baselines first: a counter's delta must not miss what the first requests add."""
        for s in self.scrapers:
            await s.begin()

    async def stop(self) -> None:
        for s in self.scrapers:
            # A real server's counters settle a moment after the last response; the simulator's at once.
            settle = 2.0 if s.source in ("server", "dcgm") and not s.clock.virtual else 0.0
            with contextlib.suppress(Exception):
                await s.stop(settle_s=settle)
        for c in self._closers:
            await c.aclose()

    @property
    def engine(self) -> str | None:
        names: set[str] = set()
        for s in self.scrapers:
            if s.source == "server":
                names |= s.names_seen
        return detect_engine(names)

    def write(self, run_dir: Path) -> None:
        from servelab.records.telemetry import write_telemetry  # pyarrow: never in a worker process

        write_telemetry(run_dir, self.rows.columns())
