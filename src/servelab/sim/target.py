"""Parse simulator target specs into a :class:`Deployment`.

* ``sim`` - the small default (sim-tiny on one H100): simulates fast.
* ``sim:MODEL@COUNTxHARDWARE[,key=value,...]`` - e.g.
  ``sim:deepseek-v3@8xh200,dtype=fp8,ep=8,dp_attention=true``; ``sim:llama-3.1-70b@2x8xh100,tp=8,pp=2`` means
  2 nodes of 8 GPUs.
* ``sim:FILE.yaml`` - a YAML mapping with ``model``, ``hardware``, ``gpus`` (or ``nodes`` and
  ``gpus_per_node``), any setting below, and optionally ``catalog:`` (extra catalog files).

What-if: ``slowdown=F`` (F > 0) multiplies every engine step's time - a slower or throttled device, for
testing regression gates (``slowdown=2`` halves throughput at the same batch).

Names are case-insensitive. Unknown models, hardware or keys raise :class:`TargetError` listing known ones.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from servelab.errors import TargetError
from servelab.sim.catalog import Catalog, default_catalog, load_catalog
from servelab.sim.deployment import Deployment

DEFAULT_SPEC = "sim:sim-tiny@1xh100"


def _bool(v: str) -> bool:
    s = str(v).strip().lower()
    if s in ("1", "true", "on", "yes"):
        return True
    if s in ("0", "false", "off", "no"):
        return False
    raise ValueError(f"expected on/off/true/false, got {v!r}")


def _sizes(v: Any) -> tuple[int, ...]:
    """``1/2/4/8`` (or a list, in a target file) -> sorted distinct ints."""
    items = v if isinstance(v, list | tuple) else [x for x in str(v).replace(" ", "").split("/") if x]
    return tuple(sorted({int(x) for x in items}))


_KEYS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "tp": ("tp", int),
    "pp": ("pp", int),
    "dp": ("dp", int),
    "ep": ("ep", int),
    "dp_attention": ("dp_attention", _bool),
    "dtype": ("dtype", str.lower),
    "kv_dtype": ("kv_dtype", str.lower),
    "gpu_memory_utilization": ("gpu_memory_utilization", float),
    "max_num_seqs": ("max_num_seqs", int),
    "max_num_batched_tokens": ("max_num_batched_tokens", int),
    "max_model_len": ("max_model_len", int),
    "block_size": ("block_size", int),
    "prefix_caching": ("prefix_caching", _bool),
    "enable_prefix_caching": ("prefix_caching", _bool),
    "chunked_prefill": ("chunked_prefill", _bool),
    "enable_chunked_prefill": ("chunked_prefill", _bool),
    "overlap": ("overlap", _bool),
    "two_batch_overlap": ("overlap", _bool),
    "eplb": ("eplb", _bool),
    "expert_skew": ("expert_skew", float),
    "spec_tokens": ("spec_tokens", int),
    "mtp": ("spec_tokens", int),
    "spec_acceptance": ("spec_acceptance", float),
    "pd": ("pd", str),
    "disagg": ("pd", str),
    "natural_median": ("natural_median", int),
    "natural_sigma": ("natural_sigma", float),
    "gpus_per_node": ("gpus_per_node", int),
    "slowdown": ("slowdown", float),
    "engine": ("engine", str.lower),
    "backend": ("cost_backend", str.lower),
    "cost": ("cost_backend", str.lower),
    "jitter": ("jitter", float),
    "async_scheduling": ("async_scheduling", _bool),
    "step_cpu_us": ("step_cpu_us", float),
    "step_cpu_per_seq_us": ("step_cpu_per_seq_us", float),
    "cuda_graph_batch_sizes": ("cuda_graph_batch_sizes", _sizes),
}

_SPEC = re.compile(r"^(?P<model>[^@,]+)@(?:(?P<nodes>\d+)x)?(?P<count>\d+)x(?P<hw>[^,]+)$", re.IGNORECASE)


def known_keys() -> list[str]:
    return sorted(_KEYS)


def _settings(pairs: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for raw_key, raw_val in pairs.items():
        key = str(raw_key).strip().lower()
        if key not in _KEYS:
            raise TargetError(f"{where}: unknown simulator setting {raw_key!r}",
                              hint=f"known settings: {', '.join(known_keys())}")
        field, conv = _KEYS[key]
        try:
            out[field] = conv(raw_val.strip() if isinstance(raw_val, str) else raw_val)
        except (TypeError, ValueError) as exc:
            raise TargetError(f"{where}: bad value for {key}: {exc}") from None
    return out


def parse_sim_target(spec: str, catalog: Catalog | None = None) -> Deployment:
    """``"sim"``, ``"sim:MODEL@[NODESx]COUNTxHW[,k=v...]"`` or ``"sim:FILE.yaml"`` -> a validated
    Deployment."""
    s = spec.strip()
    if s.lower() == "sim":
        s = DEFAULT_SPEC
    if not s.lower().startswith("sim:"):
        raise TargetError(f"not a simulator target: {spec!r}",
                          hint="use sim, sim:MODEL@COUNTxHARDWARE[,key=value...] or sim:FILE.yaml")
    body = s[4:].strip()
    if body.lower().endswith((".yaml", ".yml")):
        return _from_file(Path(body), catalog)
    head, *rest = [p for p in body.split(",")]
    m = _SPEC.match(head.strip())
    if m is None:
        raise TargetError(f"cannot parse simulator target {spec!r}",
                          hint="expected sim:MODEL@COUNTxHARDWARE (e.g. sim:llama-3.1-8b@1xh100) or "
                          "sim:MODEL@NODESxGPUSxHARDWARE, then ,key=value settings")
    pairs: dict[str, str] = {}
    for item in rest:
        if "=" not in item:
            raise TargetError(f"{spec!r}: setting {item!r} is not key=value",
                              hint=f"known settings: {', '.join(known_keys())}")
        k, v = item.split("=", 1)
        pairs[k] = v
    settings = _settings(pairs, f"target {spec!r}")
    count = int(m["count"])
    nodes = int(m["nodes"]) if m["nodes"] else None
    gpn = settings.pop("gpus_per_node", None)
    if nodes is not None:
        gpn, count = count, nodes * count
    return Deployment.build(
        m["model"], m["hw"].strip(), count, catalog=catalog, gpus_per_node=gpn, **settings
    )


def _from_file(path: Path, catalog: Catalog | None) -> Deployment:
    try:
        data = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise TargetError(
            f"simulator target file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})",
            hint="save it as UTF-8",
        ) from None
    except OSError as exc:
        raise TargetError(f"cannot read simulator target file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise TargetError(f"simulator target file {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise TargetError(f"{path}: expected a mapping with model, hardware and gpus")
    data = dict(data)
    extra = data.pop("catalog", None) or []
    if isinstance(extra, str):
        extra = [extra]
    cat = load_catalog([path.parent / p for p in extra]) if extra else (catalog or default_catalog())
    missing = [k for k in ("model", "hardware") if k not in data]
    if missing:
        raise TargetError(f"{path}: missing {', '.join(missing)}", hint="give model:, hardware: and gpus:")
    model, hw = str(data.pop("model")), str(data.pop("hardware"))
    gpus = data.pop("gpus", None)
    nodes = data.pop("nodes", None)
    settings = _settings(data, str(path))
    gpn = settings.pop("gpus_per_node", None)
    if gpus is None:
        gpus = _count(nodes or 1, "nodes", path) * int(gpn or cat.get_hardware(hw).node_gpus)
    return Deployment.build(model, hw, _count(gpus, "gpus", path), catalog=cat, gpus_per_node=gpn, **settings)


def _count(v: object, key: str, path: Path) -> int:
    """A whole count of 1..4096 from a deployment file (``gpus: abc`` is an error, not a traceback)."""
    if isinstance(v, bool) or not isinstance(v, int | str) or not str(v).strip().isdigit():
        raise TargetError(f"{path}: {key} must be a whole number, got {v!r}", hint=f"e.g. {key}: 8")
    n = int(str(v).strip())
    if not 1 <= n <= 4096:
        raise TargetError(f"{path}: {key} must be between 1 and 4096, got {n}")
    return n
