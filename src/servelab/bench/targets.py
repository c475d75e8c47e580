"""Open a target: the HTTP client on the wall clock, or the in-process simulator on virtual time."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.clock import Clock, VirtualClock, WallClock
from servelab.config.models import TargetConfig
from servelab.transport.base import Transport
from servelab.transport.probe import TargetProbe


@dataclass
class OpenTarget:
    transport: Transport
    clock: Clock
    kind: str  # "sim" | "http"


def make_clock(target: TargetConfig) -> Clock:
    return VirtualClock() if target.is_sim else WallClock()


def make_transport(target: TargetConfig, clock: Clock, *, concurrency: int, seed: int) -> Transport:
    """Build the transport for ``target`` (call inside the clock's running loop)."""
    if target.is_sim:
        from servelab.sim.target import parse_sim_target
        from servelab.transport.sim import SimTransport

        return SimTransport(parse_sim_target(target.url), clock, seed=seed)
    from servelab.transport.http import HttpTransport

    return HttpTransport(target, clock, concurrency=concurrency)


def make_probe(target: TargetConfig, clock: Clock, transport: Transport | None = None) -> TargetProbe:
    """The probe of ``target`` (facts, token counts, the model to ask for), apart from the data path. For
    the simulator it reads the transport's deployment when given (one engine, one set of facts)."""
    if target.is_sim:
        from servelab.sim.target import parse_sim_target
        from servelab.transport.sim_probe import SimProbe

        deployment = getattr(transport, "deployment", None) or parse_sim_target(target.url)
        return SimProbe(deployment)
    from servelab.transport.http import probe_options
    from servelab.transport.probe import HttpProbe

    return HttpProbe(probe_options(target), clock)


def validate_target(target: TargetConfig) -> None:
    """Fail early (before any clock starts) on a simulator spec that cannot be built."""
    if target.is_sim:
        from servelab.sim.target import parse_sim_target

        parse_sim_target(target.url)
