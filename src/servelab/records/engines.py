"""The serving engines servelab knows, once: the name a manifest records, what people call it, the other
spellings servers use for it, and the Prometheus series prefixes only it exposes.

Read by the transport's probe (``owned_by``, ``Server`` headers, ``/metrics``), telemetry's engine detection
and the report's words. In ``records`` because a manifest records ``target.engine`` with these names, and it
is the lowest layer all three readers may import.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Engine:
    id: str  # the name manifests record (target.engine)
    display: str  # what people call it
    aliases: tuple[str, ...] = ()  # other spellings: /v1/models owned_by, Server headers, config values
    metric_prefixes: tuple[str, ...] = ()  # Prometheus series names only this engine exposes


SIMULATOR = "servelab-sim"

ENGINES: tuple[Engine, ...] = (
    Engine("vllm", "vLLM", (), ("vllm:",)),
    Engine("sglang", "SGLang", (), ("sglang:",)),
    Engine("llama.cpp", "llama.cpp", ("llamacpp",), ("llamacpp:",)),
    Engine("tensorrt-llm", "TensorRT-LLM", ("tensorrt_llm", "trtllm"), ("nv_trt_llm_", "trtllm_")),
    Engine("tgi", "TGI"),
    Engine(SIMULATOR, "servelab simulator", ("servelab",), ("servelab_sim_",)),
)
_BY_NAME: dict[str, Engine] = {n: e for e in ENGINES for n in (e.id, *e.aliases)}


def engine_id(name: object) -> str | None:
    """The engine ``name`` spells (its id or an alias, any case), or None when unknown."""
    e = _BY_NAME.get(str(name).strip().lower())
    return e.id if e else None


def display_name(name: object) -> str:
    """What people call engine ``name`` ('vllm' -> 'vLLM'); an unknown name as given."""
    e = _BY_NAME.get(str(name).strip().lower())
    return e.display if e else str(name)


def engines_named_in(text: str) -> list[str]:
    """Engines whose id or alias occurs in ``text`` (a ``Server`` header), in table order."""
    low = text.lower()
    return [e.id for e in ENGINES if any(n in low for n in (e.id, *e.aliases))]


def engine_of_series(name: str) -> str | None:
    """The engine whose metric prefix starts the series ``name``, or None."""
    return next((e.id for e in ENGINES if name.startswith(e.metric_prefixes)), None)


def engines_in_metrics(text: str) -> list[str]:
    """Engines with a metric prefix anywhere in a ``/metrics`` page, in table order."""
    return [e.id for e in ENGINES if any(p in text for p in e.metric_prefixes)]
