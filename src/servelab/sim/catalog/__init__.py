"""Hardware and model catalogs of the simulated engine (YAML data files beside this module).

``load_catalog(extra_paths)`` returns a :class:`Catalog`; users add entries from their own YAML files with
the same layout (``hardware:``, ``models:``, ``families:`` lists/maps). Names and aliases are
case-insensitive. Unknown names raise :class:`servelab.errors.TargetError` listing the known ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from servelab.errors import TargetError

_HERE = Path(__file__).parent
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.53125}  # fp4 = MXFP4: 4 bits + 8-bit scale / 32
TOPOLOGIES = ("switched", "mesh", "torus2d", "torus3d")


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    compute_eff: float
    decode_compute_eff: float
    mem_eff: float
    comm_eff: float
    step_overhead_us: float
    layer_overhead_us: float
    source: str = ""
    moe_compute_eff: float = 1.0  # grouped expert GEMMs relative to dense ones at the same rows per matrix
    lowp_compute_eff: float = 1.0  # FP8/FP4 GEMMs relative to BF16 ones (fraction of their own peak)
    # MoE grouped GEMMs (benchmarks/sim_fit_moe.py): tokens per expert at which they reach half of
    # moe_compute_eff (0: no extra small-batch penalty), how much TP-slicing an expert costs (its rows
    # count as divided by 1 + (moe_tp - 1) * moe_tp_slice_rows), and the fixed time of one MoE layer.
    moe_rows_half: float = 0.0
    moe_tp_slice_rows: float = 0.0
    moe_layer_overhead_us: float = 15.0
    # Routed experts' compute and weight reads overlap imperfectly: time = (c^k + m^k)^(1/k); 0 = max(c, m).
    moe_roof_k: float = 0.0
    # Routed-expert GEMM efficiency of prefill tokens relative to decode tokens at the same rows per expert
    # (the engines run prefill's grouped GEMMs through other kernels and tile choices than decode's).
    moe_prefill_eff: float = 1.0
    # Per-expert GEMM size (hidden x moe-TP-sliced intermediate weights of one expert, in millions) at which
    # the grouped GEMM reaches half its efficiency at FP8 math rate; at another rate it scales with the peak
    # (a fixed time per routed row: activation quantization, permute, block scales, epilogue hides behind
    # less math when the math is faster). 0: no size term.
    moe_size_half: float = 0.0
    # MLA models (DeepSeek) as an engine runs them, fitted on AIConfigurator's step times of that engine
    # (benchmarks/sim_fit_mla.py; the defaults change nothing). mla_attn_eff scales the attention projections'
    # GEMM efficiency (FP8 block-scaled, small per-rank shapes); mla_act_passes counts the elementwise passes
    # over the BF16 hidden state a token and layer at HBM speed (residual adds and RMSNorms, activation
    # quantization, the MoE's per-expert output rows and their sum); mla_moe_comm the hidden-sized all-reduces
    # a tensor-parallel MoE layer moves beyond the one that reduces its output; mla_prefill_overhead_us a
    # layer's fixed extra time in a step with prefill tokens; mla_layer_floor_us the least time of a layer
    # (small decode steps are kernel-latency bound).
    mla_attn_eff: float = 1.0
    mla_act_passes: float = 0.0
    mla_moe_comm: float = 0.0
    mla_prefill_overhead_us: float = 0.0
    mla_layer_floor_us: float = 0.0
    # Marlin W4A16 MXFP4 expert GEMMs (vLLM before 0.12 on Hopper): achieved TFLOP/s by tokens per expert,
    # ((tokens per expert, TFLOP/s), ...) ascending, from AIConfigurator's measured kernel table; empty: none.
    marlin_moe_tflops: tuple[tuple[float, float], ...] = ()
    # How much longer skewed routing makes those experts take than balanced routing, by tokens per expert
    # ((tokens per expert, ratio), ...): applied to the Marlin rates when the deployment's routing is skewed.
    marlin_skew_ratio: tuple[tuple[float, float], ...] = ()
    # Per serving engine, the MoE constants above that its kernels need instead of the family's (fitted on
    # that engine's silicon step times); (engine name, ((constant, value), ...)) pairs, see for_engine.
    engines: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()

    def for_engine(self, engine: str | None) -> Family:
        """These constants as ``engine`` (vllm, sglang, trtllm) runs them: the family's, with the engine's
        own MoE constants where the catalog has them; an engine without any, or none, gets the family's."""
        for name, vals in self.engines:
            if name == engine:
                return replace(self, engines=(), **dict(vals))  # type: ignore[arg-type]
        return replace(self, engines=()) if self.engines else self


@dataclass(frozen=True, slots=True)
class Hardware:
    name: str
    family: str
    bf16_tflops: float
    fp8_tflops: float | None
    fp4_tflops: float | None
    hbm_gb: float
    hbm_tbps: float
    scaleup_gbps: float
    scaleup_topology: str
    scaleup_latency_us: float
    domain_size: int
    node_gpus: int
    scaleout_gbps: float | None
    scaleout_latency_us: float
    source: str
    aliases: tuple[str, ...] = ()
    provisional: bool = False

    def tflops(self, dtype: str) -> float:
        """Peak dense TFLOP/s for math in ``dtype`` (falls back to the next wider native path)."""
        if dtype == "fp4" and self.fp4_tflops:
            return self.fp4_tflops
        if dtype in ("fp4", "fp8") and self.fp8_tflops:
            return self.fp8_tflops
        return self.bf16_tflops

    def facts(self) -> dict[str, Any]:
        return {
            "name": self.name, "family": self.family, "bf16_tflops": self.bf16_tflops,
            "fp8_tflops": self.fp8_tflops, "fp4_tflops": self.fp4_tflops, "hbm_gb": self.hbm_gb,
            "hbm_tbps": self.hbm_tbps, "scaleup_gbps": self.scaleup_gbps,
            "scaleup_topology": self.scaleup_topology, "domain_size": self.domain_size,
            "scaleout_gbps": self.scaleout_gbps, "provisional": self.provisional, "source": self.source,
        }


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    vocab: int
    max_position: int
    attention: dict[str, Any]
    ffn: dict[str, Any]
    source: str
    params_b: float | None = None
    mtp_layers: int = 0
    tie_embeddings: bool = False
    aliases: tuple[str, ...] = ()
    # Derived (filled by __post_init__ through object.__setattr__).
    attn_params: int = 0  # per layer
    dense_ffn_params: int = 0  # per dense layer
    expert_params: int = 0  # one routed expert
    shared_params: int = 0  # all shared experts of one MoE layer
    router_params: int = 0
    embed_params: int = 0
    n_dense_layers: int = 0
    n_moe_layers: int = 0
    n_sliding_layers: int = 0
    kv_values_per_token_layer: int = 0  # cached values per token per layer (unsharded)
    attn_core_dim: int = 0  # qk dim + v dim per head used by the score/value matmuls
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        a, f, h = self.attention, self.ffn, self.hidden
        kind = a["kind"]
        if kind == "mla":
            heads, qr, kvr = a["heads"], a["q_lora_rank"], a["kv_lora_rank"]
            nope, rope, vd = a["qk_nope_head_dim"], a["qk_rope_head_dim"], a["v_head_dim"]
            attn = (
                h * qr
                + qr * heads * (nope + rope)
                + h * (kvr + rope)
                + kvr * heads * (nope + vd)
                + heads * vd * h
            )
            kv_values = kvr + rope
            core = (kvr + rope) + kvr  # absorbed MLA: scores over the latent+rope, values over the latent
        else:
            heads, kvh, hd = a["heads"], a.get("kv_heads", a["heads"]), a["head_dim"]
            attn = h * heads * hd + 2 * h * kvh * hd + heads * hd * h
            kv_values = 2 * kvh * hd
            core = 2 * hd
        moe = f["kind"] == "moe"
        n_dense = f.get("dense_layers", 0) if moe else self.layers
        dense_inter = f.get("dense_intermediate", f.get("intermediate", 0))
        s = object.__setattr__
        s(self, "attn_params", attn)
        s(self, "dense_ffn_params", 3 * h * dense_inter)
        s(self, "expert_params", 3 * h * f.get("expert_intermediate", 0) if moe else 0)
        s(
            self,
            "shared_params",
            3 * h * f.get("expert_intermediate", 0) * f.get("shared_experts", 0) if moe else 0,
        )
        s(self, "router_params", h * f.get("experts", 0) if moe else 0)
        s(self, "embed_params", self.vocab * h * (1 if self.tie_embeddings else 2))
        s(self, "n_dense_layers", n_dense)
        s(self, "n_moe_layers", self.layers - n_dense)
        every = a.get("sliding_every", 0)
        s(self, "n_sliding_layers", sum(1 for i in range(self.layers) if every and i % every == 0))
        s(self, "kv_values_per_token_layer", kv_values)
        s(self, "attn_core_dim", core)

    @property
    def is_moe(self) -> bool:
        return self.ffn["kind"] == "moe"

    @property
    def n_experts(self) -> int:
        return self.ffn.get("experts", 0)

    @property
    def top_k(self) -> int:
        return self.ffn.get("top_k", 0)

    @property
    def heads(self) -> int:
        return self.attention["heads"]

    @property
    def sliding_window(self) -> int:
        return self.attention.get("sliding_window", 0)

    def total_params(self) -> int:
        """Parameters of the main model (MTP modules excluded), from the shapes."""
        moe = self.n_moe_layers * (
            self.n_experts * self.expert_params + self.shared_params + self.router_params
        )
        return (
            self.layers * self.attn_params
            + self.n_dense_layers * self.dense_ffn_params
            + moe
            + self.embed_params
        )

    def active_params(self) -> int:
        moe = self.n_moe_layers * (self.top_k * self.expert_params + self.shared_params + self.router_params)
        return (
            self.layers * self.attn_params
            + self.n_dense_layers * self.dense_ffn_params
            + moe
            + self.embed_params
        )

    def facts(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "layers": self.layers,
            "hidden": self.hidden,
            "attention": self.attention["kind"],
            "moe": self.is_moe,
            "experts": self.n_experts,
            "top_k": self.top_k,
            "total_params_b": round(self.total_params() / 1e9, 2),
            "active_params_b": round(self.active_params() / 1e9, 2),
            "source": self.source,
        }


@dataclass(slots=True)
class Catalog:
    hardware: dict[str, Hardware]
    models: dict[str, ModelSpec]
    families: dict[str, Family]
    _hw_alias: dict[str, str] = field(default_factory=dict)
    _model_alias: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reindex()

    def reindex(self) -> None:
        self._hw_alias = {}
        for key, hw in self.hardware.items():
            for n in (hw.name, *hw.aliases):
                self._hw_alias[n.lower()] = key
        self._model_alias = {}
        for key, m in self.models.items():
            for n in (m.name, *m.aliases):
                self._model_alias[n.lower()] = key

    def get_hardware(self, name: str) -> Hardware:
        key = self._hw_alias.get(name.strip().lower())
        if key is None:
            raise TargetError(
                f"unknown simulator hardware {name!r}",
                hint=f"use one of: {', '.join(hw.name for hw in self.hardware.values())} "
                "(case-insensitive), or add an entry with load_catalog(extra_paths)",
            )
        return self.hardware[key]

    def get_model(self, name: str) -> ModelSpec:
        key = self._model_alias.get(name.strip().lower())
        if key is None:
            raise TargetError(
                f"unknown simulator model {name!r}",
                hint=f"use one of: {', '.join(m.name for m in self.models.values())} "
                "(case-insensitive), or add an entry with load_catalog(extra_paths)",
            )
        return self.models[key]

    def family(self, hw: Hardware) -> Family:
        return self.families[hw.family]


def _require(entry: dict[str, Any], keys: Iterable[str], where: str) -> None:
    missing = [k for k in keys if k not in entry]
    if missing:
        raise TargetError(f"{where}: missing field(s) {', '.join(missing)}",
                          hint="every catalog entry needs these fields, and a `source:`")


def _num(v: Any, where: str, *, allow_none: bool = False) -> float | None:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise TargetError(f"{where}: expected a positive number, got {v!r}")
    return float(v)


def _parse_family(name: str, e: dict[str, Any], where: str) -> Family:
    keys = (
        "compute_eff",
        "decode_compute_eff",
        "mem_eff",
        "comm_eff",
        "step_overhead_us",
        "layer_overhead_us",
    )
    _require(e, keys, where)
    vals: dict[str, Any] = {k: _num(e[k], f"{where}.{k}") for k in keys}
    if "lowp_compute_eff" in e:
        vals["lowp_compute_eff"] = _num(e["lowp_compute_eff"], f"{where}.lowp_compute_eff")
    vals.update(_moe_constants(e, where))
    if "marlin_moe_tflops" in e:
        vals["marlin_moe_tflops"] = _curve(e["marlin_moe_tflops"], f"{where}.marlin_moe_tflops")
    if "marlin_skew_ratio" in e:
        vals["marlin_skew_ratio"] = _curve(e["marlin_skew_ratio"], f"{where}.marlin_skew_ratio")
    engines = e.get("engines") or {}
    if not isinstance(engines, dict):
        raise TargetError(f"{where}.engines: expected a mapping of engine name to MoE constants")
    per_engine = []
    for eng, ev in engines.items():
        w = f"{where}.engines.{eng}"
        if not isinstance(ev, dict):
            raise TargetError(f"{w}: expected a mapping of MoE constants")
        unknown = sorted(set(ev) - set(_MOE_KEYS))
        if unknown:
            raise TargetError(f"{w}: unknown key(s) {', '.join(map(str, unknown))}",
                              hint=f"per-engine keys: {', '.join(_MOE_KEYS)}")
        per_engine.append((str(eng).lower(), tuple(sorted(_moe_constants(ev, w).items()))))
    return Family(name=name, source=str(e.get("source", "")), engines=tuple(per_engine),
                  **vals)  # type: ignore[arg-type]


def _curve(v: Any, where: str) -> tuple[tuple[float, float], ...]:
    """``[[x, y], ...]`` with x ascending and every value > 0."""
    ok = isinstance(v, list) and v and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(q, int | float) and not isinstance(q, bool)
                                                    and q > 0 for q in p) for p in v)
    if not ok or any(b[0] <= a[0] for a, b in zip(v, v[1:], strict=False)):
        raise TargetError(f"{where}: expected a list of [x, y] pairs of positive numbers, x ascending, "
                          f"got {v!r}",
                          hint="e.g. [[1, 17.4], [10, 84], [55, 214]]")
    return tuple((float(x), float(y)) for x, y in v)


# MoE constants a family sets and each engine may override (benchmarks/sim_fit_moe.py fits them), and the
# MLA ones (benchmarks/sim_fit_mla.py).
_MOE_KEYS = ("moe_compute_eff", "moe_rows_half", "moe_tp_slice_rows", "moe_layer_overhead_us", "moe_roof_k",
             "moe_prefill_eff", "moe_size_half", "mla_attn_eff", "mla_act_passes", "mla_moe_comm",
             "mla_prefill_overhead_us", "mla_layer_floor_us")


def _moe_constants(e: dict[str, Any], where: str) -> dict[str, float]:
    vals: dict[str, float] = {}
    for opt in _MOE_KEYS:
        if opt not in e:
            continue
        v = e[opt]
        positive = opt in ("moe_compute_eff", "moe_prefill_eff", "mla_attn_eff")
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or (positive and v == 0):
            raise TargetError(f"{where}.{opt}: expected a number {'> 0' if positive else '>= 0'}, got {v!r}")
        vals[opt] = float(v)
    return vals


_HW_NUM = ("bf16_tflops", "hbm_gb", "hbm_tbps", "scaleup_gbps", "scaleup_latency_us", "scaleout_latency_us")


def _parse_hw(e: dict[str, Any], where: str, families: dict[str, Family]) -> Hardware:
    _require(e, ("name", "family", *_HW_NUM, "scaleup_topology", "domain_size", "source"), where)
    if e["family"] not in families:
        raise TargetError(
            f"{where}: unknown family {e['family']!r}", hint=f"use one of: {', '.join(families)}"
        )
    if e["scaleup_topology"] not in TOPOLOGIES:
        raise TargetError(
            f"{where}.scaleup_topology: expected one of {TOPOLOGIES}, got {e['scaleup_topology']!r}"
        )
    nums = {k: _num(e[k], f"{where}.{k}") for k in _HW_NUM}
    domain = int(e["domain_size"])
    return Hardware(
        name=str(e["name"]), family=e["family"], scaleup_topology=e["scaleup_topology"], domain_size=domain,
        node_gpus=int(e.get("node_gpus", min(8, domain))), source=str(e["source"]),
        fp8_tflops=_num(e.get("fp8_tflops"), f"{where}.fp8_tflops", allow_none=True),
        fp4_tflops=_num(e.get("fp4_tflops"), f"{where}.fp4_tflops", allow_none=True),
        scaleout_gbps=_num(e.get("scaleout_gbps"), f"{where}.scaleout_gbps", allow_none=True),
        aliases=tuple(str(a) for a in e.get("aliases", ())), provisional=bool(e.get("provisional", False)),
        **nums,  # type: ignore[arg-type]
    )


def _parse_model(e: dict[str, Any], where: str) -> ModelSpec:
    _require(e, ("name", "layers", "hidden", "vocab", "max_position", "attention", "ffn", "source"), where)
    a, f = e["attention"], e["ffn"]
    if a.get("kind") not in ("mla", "gqa", "mha"):
        raise TargetError(f"{where}.attention.kind: expected mla, gqa or mha, got {a.get('kind')!r}")
    need = ("heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim") \
        if a["kind"] == "mla" else ("heads", "head_dim")
    _require(a, need, f"{where}.attention")
    if f.get("kind") not in ("dense", "moe"):
        raise TargetError(f"{where}.ffn.kind: expected dense or moe, got {f.get('kind')!r}")
    _require(f, ("experts", "top_k", "expert_intermediate") if f["kind"] == "moe" else ("intermediate",),
             f"{where}.ffn")
    for k in ("layers", "hidden", "vocab", "max_position"):
        _num(e[k], f"{where}.{k}")
    return ModelSpec(
        name=str(e["name"]),
        layers=int(e["layers"]),
        hidden=int(e["hidden"]),
        vocab=int(e["vocab"]),
        max_position=int(e["max_position"]),
        attention=dict(a),
        ffn=dict(f),
        source=str(e["source"]),
        params_b=e.get("params_b"),
        mtp_layers=int(e.get("mtp_layers", 0)),
        tie_embeddings=bool(e.get("tie_embeddings", False)),
        aliases=tuple(str(x) for x in e.get("aliases", ())),
    )


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise TargetError(f"cannot read simulator catalog {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise TargetError(f"simulator catalog {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise TargetError(
            f"simulator catalog {path}: expected a mapping with hardware:, models: or families:"
        )
    return data


def load_catalog(extra_paths: Iterable[str | Path] = ()) -> Catalog:
    """The built-in catalog plus entries from ``extra_paths`` (later entries replace same-named ones)."""
    families: dict[str, Family] = {}
    hardware: dict[str, Hardware] = {}
    models: dict[str, ModelSpec] = {}
    for path in (_HERE / "hardware.yaml", _HERE / "models.yaml", *map(Path, extra_paths)):
        data = _read_yaml(path)
        for name, e in (data.get("families") or {}).items():
            families[name] = _parse_family(name, e, f"{path.name}: families.{name}")
        for i, e in enumerate(data.get("hardware") or []):
            hw = _parse_hw(e, f"{path.name}: hardware[{i}]", families)
            hardware[hw.name.lower()] = hw
        for i, e in enumerate(data.get("models") or []):
            m = _parse_model(e, f"{path.name}: models[{i}]")
            models[m.name.lower()] = m
    return Catalog(hardware=hardware, models=models, families=families)


_default: Catalog | None = None


def default_catalog() -> Catalog:
    """The built-in catalog, loaded once."""
    global _default
    if _default is None:
        _default = load_catalog()
    return _default
