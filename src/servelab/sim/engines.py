"""Serving-engine profiles: each engine's published defaults and its CPU-side overheads.

``engine=vllm|sglang|trtllm[:VERSION]`` in a sim target selects a profile from ``catalog/engines.yaml``; it
fills every setting the user left unset (``max_num_seqs``, ``max_num_batched_tokens``,
``gpu_memory_utilization``, the KV dtype an FP8/FP4 checkpoint runs with, the compute precision of FP4
experts on GPUs without an FP4 path, asynchronous scheduling) and carries the overheads the cost model adds
per step and per request. An explicit setting always wins. Under ``dp_attention`` the limits are per
attention rank, as in all three engines.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from servelab.errors import TargetError

_FILE = Path(__file__).parent / "catalog" / "engines.yaml"
BIG_GPU_GB = 70.0  # vLLM's threshold for its large-GPU batch defaults (70 GiB ~ 75 GB)
HUGE_GPU_GB = 160.0  # SGLang raises its chunked prefill size on B200-class memory


@dataclass(frozen=True, slots=True)
class EngineProfile:
    name: str
    version: str
    max_num_seqs: int
    max_num_seqs_small_gpu: int
    max_num_batched_tokens: int
    max_num_batched_tokens_small_gpu: int
    max_num_batched_tokens_big_gpu: int
    gpu_memory_utilization: float
    kv_dtype: str
    fp4_compute_hopper: str
    async_scheduling: bool
    step_cpu_us: float
    step_cpu_per_seq_us: float
    api_ms: float
    api_sigma: float
    source: str
    # Sliding-window layers get their own window-sized KV pages (vLLM's hybrid KV manager, SGLang's SWA pool);
    # False: every layer's cache is allocated for the whole sequence (the window only masks attention).
    window_kv_pools: bool = True
    # Admission reserves KV for the whole request (prompt + max_tokens) and never preempts (TensorRT-LLM's
    # GUARANTEED_NO_EVICT); False: blocks on demand, preempt when they run out.
    reserve_full: bool = False
    # gpu_memory_utilization is a fraction of what the model leaves free (TensorRT-LLM's
    # kv_cache_config.free_gpu_memory_fraction: KV = (device memory - peak memory of the profiling run) x
    # fraction); False: of the whole device, weights and activations included (vLLM, SGLang).
    kv_fraction_of_free: bool = False
    # Without chunked prefill, max_num_batched_tokens bounds each prompt (TensorRT-LLM refuses a longer one
    # per request) rather than max_model_len (vLLM's check at start-up); False: vLLM's check.
    unchunked_checks_prompt: bool = False
    # The API server's CPU work on its one core, serialised across requests (vLLM runs one API-server process
    # by default): per request (HTTP, validation, chat template, tokenization, hand-off to the engine) and per
    # output token (detokenization, building and writing the stream chunk). Part of ``api_ms`` on an idle
    # server; under load requests and tokens queue for that core. 0: not modelled.
    frontend_req_ms: float = 0.0
    frontend_tok_us: float = 0.0
    # Kernel of MXFP4 (gpt-oss) experts on Hopper: "triton" (OpenAI's triton_kernels matmul_ogs, what
    # AIConfigurator measured) or "marlin" (W4A16 Marlin). ``mxfp4_moe_hopper_below`` maps a version to the
    # kernel of every engine version below it; a spec without a version keeps ``mxfp4_moe_hopper``.
    mxfp4_moe_hopper: str = "triton"
    mxfp4_moe_hopper_below: tuple[tuple[str, str], ...] = ()

    def batch_defaults(self, hbm_gb: float) -> tuple[int, int]:
        """(max_num_seqs, max_num_batched_tokens) this engine picks on a GPU with ``hbm_gb`` of memory."""
        if hbm_gb < BIG_GPU_GB:
            return self.max_num_seqs_small_gpu, self.max_num_batched_tokens_small_gpu
        if hbm_gb >= HUGE_GPU_GB:
            return self.max_num_seqs, self.max_num_batched_tokens_big_gpu
        return self.max_num_seqs, self.max_num_batched_tokens

    def facts(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "async_scheduling": self.async_scheduling,
                "step_cpu_us": self.step_cpu_us, "step_cpu_per_seq_us": self.step_cpu_per_seq_us,
                "api_ms": self.api_ms, "frontend_req_ms": self.frontend_req_ms,
                "frontend_tok_us": self.frontend_tok_us, "mxfp4_moe_hopper": self.mxfp4_moe_hopper,
                "source": self.source}


@lru_cache(maxsize=1)
def profiles() -> dict[str, EngineProfile]:
    data = yaml.safe_load(_FILE.read_text())["engines"]
    out = {}
    for name, e in data.items():
        e = dict(e)
        e.setdefault("max_num_batched_tokens_big_gpu", e["max_num_batched_tokens"])
        below = e.pop("mxfp4_moe_hopper_below", None) or {}
        e["mxfp4_moe_hopper_below"] = tuple(sorted(((str(v), str(k)) for v, k in below.items()),
                                                   key=lambda vk: version_key(vk[0])))
        out[name] = EngineProfile(name=name, version=str(e.pop("version")), **e)
    return out


def version_key(version: str) -> tuple[int, ...]:
    """``"0.10.2"`` -> (0, 10, 2); a part's leading digits only (``"1.0rc3"`` -> (1, 0)); none -> ()."""
    out = []
    for part in version.strip().lstrip("vV").split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        out.append(int(digits))
        if digits != part:
            break
    return tuple(out)


def mxfp4_kernel_for(version: str, default: str, below: tuple[tuple[str, str], ...]) -> str:
    """The Hopper MXFP4 MoE kernel of engine ``version``: the kernel of the lowest bound above it, else
    ``default``. An unparseable version keeps ``default``."""
    key = version_key(version)
    if not key:
        return default
    for bound, kernel in below:  # ascending bounds
        if key < version_key(bound):
            return kernel
    return default


def engine_profile(spec: str) -> EngineProfile:
    """``"vllm"`` or ``"vllm:0.11"`` -> its profile. A version is recorded and picks the version-dependent
    settings (the Hopper MXFP4 MoE kernel); everything else is the engine's profile."""
    name, _, version = spec.strip().lower().partition(":")
    name = {"tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm", "trt-llm": "trtllm"}.get(name, name)
    prof = profiles().get(name)
    if prof is None:
        raise TargetError(
            f"unknown serving engine {spec!r} for the simulator",
            hint=f"use engine=one of {', '.join(profiles())} (optionally :VERSION, e.g. vllm:0.11)",
        )
    if version:
        from dataclasses import replace
        kernel = mxfp4_kernel_for(version, prof.mxfp4_moe_hopper, prof.mxfp4_moe_hopper_below)
        prof = replace(prof, version=version, mxfp4_moe_hopper=kernel)
    return prof
