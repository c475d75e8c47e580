"""The one context line printed before a run: what is benchmarked and how (like vLLM's and AIPerf's
config echo). The same words as the report's headline (:mod:`servelab.report.words`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from servelab.config.models import RunConfig


def target_facts(cfg: RunConfig) -> dict[str, Any]:
    """What is known of the target before it is reached: for a simulator, its deployment."""
    facts: dict[str, Any] = {"url": cfg.target.url}
    if cfg.target.is_sim:
        try:
            from servelab.sim.target import parse_sim_target

            facts.update(engine="servelab-sim", deployment=parse_sim_target(cfg.target.url).describe())
        except Exception:  # noqa: BLE001 - the run itself reports a bad spec, with its message
            pass
    return facts


def context_text(cfg: RunConfig) -> str:
    from servelab.report.words import context_line

    return context_line({"config": cfg.model_dump(mode="json"), "target": target_facts(cfg)})


def print_context(cfg: RunConfig, console: Console | None = None) -> None:
    """Print the context line to stderr (stdout stays clean for --json)."""
    con = console or Console(stderr=True, soft_wrap=True, highlight=False)
    con.print(f"benchmarking: {context_text(cfg)}", markup=False, highlight=False)
