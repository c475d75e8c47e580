"""The step-cost interface: how long one engine step takes, and which backend said so.

The scheduler hands a step's shape - decoding sequences and the sum of their contexts, prefill tokens with
their causal attention pairs and context reads, split evenly over the attention ranks of one replica - to
one :class:`StepCost`. Backends (``make_step_cost`` picks one):

* ``silicon`` (optional extra ``servelab[silicon]``, NVIDIA AIConfigurator's core): prices the forward pass
  from kernel latencies measured on real GPUs (``sim/silicon.py``). Chosen by default where it is
  installed and covers the model, GPU and engine.
* ``roofline`` (built in, ``sim/costmodel.py``): a roofline per layer part with fitted efficiencies; the
  only backend for AMD, TPU, H800 and models the silicon data lacks.

:class:`EngineStep` wraps either with what belongs to the serving engine rather than the GPU: the CPU time of
a scheduler step (hidden behind the GPU when the engine schedules asynchronously), the ``slowdown`` what-if,
and a seeded lognormal jitter of every step (``jitter``, default 2%) that keeps closed-loop clients from
marching in lockstep.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from servelab.sim.fidelity import fidelity

if TYPE_CHECKING:
    from servelab.sim.deployment import Deployment


@dataclass(frozen=True, slots=True)
class StepTime:
    time_s: float
    compute_s: float  # part of the time bound by arithmetic
    memory_s: float  # part bound by HBM traffic (weights, KV cache)
    comm_s: float  # communication not hidden behind compute
    imbalance: float  # expert load, busiest EP rank over the mean (1.0 = balanced or dense)
    a2a_bytes: float  # all-to-all bytes sent by all GPUs this step
    cpu_s: float = 0.0  # engine CPU time not hidden behind the GPU


class StepCost(Protocol):
    """A step-cost backend for one deployment (one replica's group of GPUs)."""

    name: str

    def step(self, n_dec: int, ctx_dec: int, p_tok: int = 0, p_pairs: int = 0, p_ctx: int = 0) -> StepTime:
        """Time of a step with ``n_dec`` decoding sequences (sum of contexts ``ctx_dec``) and prefill chunks
        totalling ``p_tok`` tokens, ``p_pairs`` causal attention pairs and ``p_ctx`` context tokens read."""
        ...


def make_step_cost(dep: Deployment) -> StepCost:
    """The backend ``dep.cost_backend`` asks for: ``auto`` = silicon where installed and covering, else
    roofline; ``silicon`` fails with the reason when it cannot price this deployment."""
    from servelab.errors import DeploymentError
    from servelab.sim.costmodel import RooflineCost
    from servelab.sim.silicon import SiliconCost, coverage

    roof = RooflineCost(dep)
    if dep.cost_backend == "roofline":
        return roof
    why = coverage(dep)
    if why is None:
        try:
            return SiliconCost(dep, roof)
        except Exception as exc:  # the database lacks a kernel for this shape or setting
            why = f"AIConfigurator could not build the model: {str(exc)[:300]}"
    if dep.cost_backend == "silicon":
        raise DeploymentError(f"backend=silicon cannot price this deployment: {why}",
                              hint="use backend=roofline (or backend=auto to fall back silently)")
    return roof


class EngineStep:
    """A backend plus the serving engine's own time: CPU scheduling, async overlap, slowdown, jitter."""

    def __init__(self, dep: Deployment, seed: int = 0, backend: StepCost | None = None) -> None:
        self.dep = dep
        self.backend = backend if backend is not None else make_step_cost(dep)
        fixed_us, per_seq_us = dep.host_step_us
        self.cpu0, self.cpu_seq = fixed_us * 1e-6, per_seq_us * 1e-6
        self.async_sched = dep.async_sched
        self.sigma = dep.jitter
        self.rng = random.Random(seed)
        self.slowdown = dep.slowdown
        # Captured CUDA-graph batch sizes per attention rank (at most max_num_seqs and the token budget).
        cap = min(dep.max_num_seqs, dep.max_num_batched_tokens) if dep.max_num_seqs else 0
        self.graphs = [b for b in dep.cuda_graph_batch_sizes if not cap or b <= cap]
        self.ranks = max(1, dep.attn_dp)

    @property
    def name(self) -> str:
        return self.backend.name

    def step(self, n_dec: int, ctx_dec: int, p_tok: int = 0, p_pairs: int = 0, p_ctx: int = 0,
             n_seqs: int = 0) -> StepTime:
        """The step's wall time on the engine: GPU time from the backend, plus the CPU time of scheduling
        ``n_seqs`` running sequences, each attention rank its share (or, with async scheduling, whichever of
        the two is longer)."""
        g = self.backend.step(n_dec, ctx_dec, p_tok, p_pairs, p_ctx)
        padded = self._padded(n_dec)
        if padded > n_dec:
            # A decode-only step runs the CUDA graph of the next captured size: padding requests (no context)
            # fill it. A mixed step runs eagerly; it is priced no lower than its decodes padded, which keeps
            # the step monotone (one prefill token never makes a step cheaper).
            gp = self.backend.step(padded, ctx_dec)
            if not p_tok or gp.time_s > g.time_s:
                g = gp
        # Host time: under attention DP every rank is its own scheduler process (TensorRT-LLM, SGLang and vLLM
        # alike), working in parallel on its own share; the busiest rank's share sets the step.
        cpu = self.cpu0 + self.cpu_seq * -(-(n_seqs or n_dec) // self.ranks)
        gpu = g.time_s
        if self.async_sched:
            total, cpu_vis = max(gpu, cpu), max(0.0, cpu - gpu)
        else:
            total, cpu_vis = gpu + cpu, cpu
        k = self.slowdown
        if self.sigma > 0:
            k *= math.exp(self.sigma * self.rng.gauss(0.0, 1.0) - self.sigma * self.sigma / 2)
        return replace(g, time_s=total * k, compute_s=g.compute_s * k, memory_s=g.memory_s * k,
                       comm_s=g.comm_s * k, cpu_s=cpu_vis * k)

    def _padded(self, n_dec: int) -> int:
        """Decodes of the whole replica after padding each rank's share to a captured graph size."""
        if not self.graphs or n_dec <= 0:
            return n_dec
        per = -(-n_dec // self.ranks)
        i = bisect.bisect_left(self.graphs, per)
        return self.graphs[i] * self.ranks if i < len(self.graphs) else n_dec


def simulator_facts(dep: Deployment) -> dict[str, Any]:
    """What a run's manifest and summary say about the simulator, without building the backend: the backend
    ``auto`` resolves to (silicon where installed and covering; a model build that still fails falls back to
    the roofline at run time) and the fidelity class of that configuration."""
    from servelab.sim.silicon import coverage

    backend = "roofline" if dep.cost_backend == "roofline" or coverage(dep) is not None else "silicon"
    f = fidelity(dep, backend)
    return {
        "backend": backend,
        "fidelity": f["class"],
        "fidelity_note": f["note"],
        "fidelity_check": f["check"],
        "serving_engine": dep.engine,
    }
