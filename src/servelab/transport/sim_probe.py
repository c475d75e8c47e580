"""The in-process simulator's :class:`~servelab.transport.probe.TargetProbe`: facts from its deployment."""

from __future__ import annotations

from typing import Any

import servelab
from servelab.sim.deployment import Deployment
from servelab.sim.stepcost import simulator_facts
from servelab.sim.tokenizer import count_tokens


class SimProbe:
    """What the simulated target is (engine, model, hardware, deployment settings) and its token counts."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment

    async def describe(self) -> dict[str, Any]:
        d = self.deployment
        return {"engine": "servelab-sim", "version": servelab.__version__, "models": [d.model.name],
                "deployment": d.describe(), "hardware": d.hardware.facts(), "model": d.model.facts(),
                "simulator": simulator_facts(d)}

    async def count_tokens(self, text: str) -> int | None:
        return count_tokens(text)

    async def resolve_model(self) -> str:
        return self.deployment.model.name

    async def aclose(self) -> None:
        return None
