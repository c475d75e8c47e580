"""Prometheus text exposition (format 0.0.4) for the simulator's ``/metrics``.

Three small pieces:

* :class:`Histogram` - fixed upper bounds, bounded memory, mergeable; ``observe`` is a bisect and an add.
* :class:`PromText` - writes metric families (gauge, counter, histogram) with HELP/TYPE lines, escaped
  labels and Prometheus number formatting.
* :class:`RequestMetrics` - what the HTTP front observes per finished request (TTFT, inter-token latency,
  queue time, end-to-end latency, successes by finish reason), rendered under vLLM's metric names.

The engine's own gauges and counters (running, waiting, KV usage, preemptions, prefix cache, tokens, step
time split, expert imbalance, all-to-all bytes) are mapped in :func:`render_metrics`.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from servelab.sim.api import SimRequest

NS = 1e-9

# Upper bounds, seconds. A 1-2.5-5 progression wide enough for a 1-GPU toy and a saturated cluster.
TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15,
               0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 80.0)
REQUEST_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                   40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


class Histogram:
    """Cumulative-on-render histogram over fixed upper bounds (``+Inf`` implied)."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: Sequence[float]) -> None:
        b = tuple(float(x) for x in bounds)
        if any(b[i] >= b[i + 1] for i in range(len(b) - 1)):
            raise ValueError(f"histogram bounds must increase strictly, got {b}")
        self.bounds = b
        self.counts = [0] * (len(b) + 1)  # last slot: above every bound
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le = "less or equal").
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def observe_many(self, values: np.ndarray) -> None:
        """``observe`` for every value of an array, in one vectorised pass."""
        if values.size == 0:
            return
        idx = np.searchsorted(np.asarray(self.bounds), values, side="left")
        for i, c in enumerate(np.bincount(idx, minlength=len(self.counts)).tolist()):
            self.counts[i] += c
        self.sum += float(values.sum())
        self.count += int(values.size)

    def merge(self, other: Histogram) -> None:
        if other.bounds != self.bounds:
            raise ValueError("cannot merge histograms with different bounds")
        for i, c in enumerate(other.counts):
            self.counts[i] += c
        self.sum += other.sum
        self.count += other.count

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations <= bound)`` pairs, ending with ``(inf, count)``."""
        out = []
        acc = 0
        for bound, c in zip((*self.bounds, math.inf), self.counts, strict=True):
            acc += c
            out.append((bound, acc))
        return out


def format_value(v: float) -> str:
    """A sample value as Prometheus writes it (``+Inf``, ``-Inf``, ``NaN``, Go-style floats)."""
    if isinstance(v, bool):
        v = int(v)
    if isinstance(v, int):
        return f"{v}.0" if abs(v) < 10**15 else repr(float(v))
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + "}"


Samples = float | int | Iterable[tuple[Mapping[str, str], float]]


class PromText:
    """Accumulates metric families and renders them as one exposition text."""

    def __init__(self, labels: Mapping[str, str] | None = None) -> None:
        self._base = dict(labels or {})
        self._lines: list[str] = []
        self._names: set[str] = set()

    def _family(self, name: str, kind: str, help_text: str) -> None:
        if name in self._names:
            raise ValueError(f"metric family {name} written twice")
        self._names.add(name)
        self._lines.append(f"# HELP {name} {help_text.replace(chr(92), chr(92) * 2).replace(chr(10), ' ')}")
        self._lines.append(f"# TYPE {name} {kind}")

    def _samples(self, name: str, samples: Samples) -> None:
        if isinstance(samples, int | float):
            samples = [({}, samples)]
        for labels, value in samples:
            self._lines.append(f"{name}{format_labels({**labels, **self._base})} {format_value(value)}")

    def gauge(self, name: str, help_text: str, samples: Samples) -> None:
        self._family(name, "gauge", help_text)
        self._samples(name, samples)

    def counter(self, name: str, help_text: str, samples: Samples) -> None:
        if not name.endswith("_total"):
            raise ValueError(f"counter {name} must end with _total")
        self._family(name, "counter", help_text)
        self._samples(name, samples)

    def histogram(self, name: str, help_text: str, hist: Histogram,
                  labels: Mapping[str, str] | None = None) -> None:
        self._family(name, "histogram", help_text)
        extra = {**(labels or {}), **self._base}
        for bound, acc in hist.cumulative():
            le = "+Inf" if math.isinf(bound) else format_value(bound)
            self._lines.append(f"{name}_bucket{format_labels({'le': le, **extra})} {format_value(acc)}")
        self._lines.append(f"{name}_count{format_labels(extra)} {format_value(hist.count)}")
        self._lines.append(f"{name}_sum{format_labels(extra)} {format_value(hist.sum)}")

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


class RequestMetrics:
    """Per-request latency histograms and outcome counters, observed by the HTTP front."""

    def __init__(self) -> None:
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.queue = Histogram(REQUEST_BUCKETS)
        self.e2e = Histogram(REQUEST_BUCKETS)
        self.success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.failed = 0

    def observe(self, req: SimRequest, reason: str | None = None) -> None:
        """Record one finished request (call once, after ``req.done`` resolved); ``reason`` overrides
        the engine's finish reason (a front that stopped a request on a stop string says "stop")."""
        reason = reason or req.finish_reason or "error"
        if reason in ("stop", "length"):
            self.success[reason] += 1
        elif reason == "abort":
            self.success["abort"] += 1
        else:
            self.failed += 1
        if req.first_token_ns is not None:
            self.ttft.observe(max(0, req.first_token_ns - req.arrival_ns) * NS)
        if req.finish_ns is not None:
            self.e2e.observe(max(0, req.finish_ns - req.arrival_ns) * NS)
        if req.first_token_ns is not None or req.finish_ns is not None:
            self.queue.observe(req.queue_ns * NS)
        times = req.token_times_ns
        if len(times) > 16:
            self.itl.observe_many(np.diff(np.asarray(times, dtype=np.int64)) * NS)
            return
        observe = self.itl.observe
        for i in range(1, len(times)):
            observe((times[i] - times[i - 1]) * NS)


def _num(stats: Mapping[str, Any], *keys: str, default: float = 0.0) -> float:
    """The first of ``keys`` present in ``stats`` (engine versions may name a figure differently)."""
    for k in keys:
        v = stats.get(k)
        if v is not None:
            return v
    return default


def render_metrics(stats: Mapping[str, Any], req: RequestMetrics, model_name: str) -> str:
    """The whole ``/metrics`` text: vLLM-named series plus the simulator's own ``servelab_sim_*``."""
    p = PromText({"model_name": model_name, "engine": "0"})
    p.gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
            _num(stats, "running", "num_running"))
    p.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
            _num(stats, "waiting", "num_waiting"))
    kv = _num(stats, "kv_usage", "kv_cache_usage", "kv_usage_frac")
    p.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv)
    p.gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage (older name).", kv)
    p.counter("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.",
              _num(stats, "preemptions_total", "preemptions"))
    p.counter("vllm:prefix_cache_queries_total",
              "Prefix cache queries, in terms of number of queried tokens.",
              _num(stats, "prefix_cache_queries_tokens", "prefix_cache_queries"))
    p.counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
              _num(stats, "prefix_cache_hits_tokens", "prefix_cache_hits"))
    p.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
              _num(stats, "prompt_tokens_total", "prompt_tokens"))
    p.counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
              _num(stats, "generation_tokens_total", "generation_tokens"))
    p.counter("vllm:request_success_total", "Count of successfully processed requests.",
              [({"finished_reason": k}, v) for k, v in req.success.items()])
    p.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", req.ttft)
    p.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", req.itl)
    p.histogram("vllm:time_per_output_token_seconds",
                "Histogram of time per output token in seconds (older name of the inter-token latency).",
                req.itl)
    p.histogram("vllm:request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.", req.queue)
    p.histogram("vllm:e2e_request_latency_seconds",
                "Histogram of end to end request latency in seconds.", req.e2e)
    _render_sim(p, stats, req)
    return p.text()


def _render_sim(p: PromText, stats: Mapping[str, Any], req: RequestMetrics) -> None:
    p.counter("servelab_sim_steps_total", "Engine steps (forward passes) simulated.",
              _num(stats, "steps_total", "steps"))
    p.counter("servelab_sim_busy_seconds_total", "Time the engine spent stepping (seconds).",
              _num(stats, "busy_seconds_total"))
    p.counter("servelab_sim_step_seconds_total",
              "Simulated step time by bound: compute, memory, communication (seconds).",
              [({"part": "compute"}, _num(stats, "step_compute_seconds_total")),
               ({"part": "memory"}, _num(stats, "step_memory_seconds_total")),
               ({"part": "communication"}, _num(stats, "step_comm_seconds_total"))])
    p.counter("servelab_sim_kv_transfer_seconds_total",
              "Disaggregated prefill/decode: time spent shipping KV caches (seconds).",
              _num(stats, "kv_transfer_seconds_total"))
    p.gauge("servelab_sim_kv_blocks", "KV-cache blocks in the deployment (all replicas).",
            _num(stats, "kv_blocks_total"))
    p.counter("servelab_sim_kv_evicted_blocks_total",
              "Cached KV blocks evicted (least recently freed first) to make room for new allocations.",
              _num(stats, "kv_evicted_blocks_total"))
    p.gauge("servelab_sim_expert_imbalance",
            "Mixture-of-experts load imbalance of the last step (max over mean tokens per expert; 1 = even).",
            _num(stats, "expert_imbalance", default=1.0))
    snap = stats.get("expert_imbalance_ratio")
    if isinstance(snap, Mapping) and snap.get("buckets"):
        p.histogram(
            "servelab_sim_expert_imbalance_ratio",
            "Per-step expert load imbalance: tokens on the busiest EP rank over the mean (1 = even, at most "
            "ep). The slowest rank sets the step.",
            _hist_from_snapshot(snap),
        )
    p.counter("servelab_sim_step_cpu_seconds_total",
              "Engine CPU time per step (scheduling, input preparation) not hidden behind the GPU (seconds).",
              _num(stats, "step_cpu_seconds_total"))
    p.counter("servelab_sim_all_to_all_bytes_total", "Bytes moved by expert-parallel all-to-all.",
              _num(stats, "all_to_all_bytes_total", "all_to_all_bytes"))
    p.counter("servelab_sim_requests_failed_total", "Requests that ended in an engine error.", req.failed)


def _hist_from_snapshot(snap: Mapping[str, Any]) -> Histogram:
    """A :class:`Histogram` from the engine's snapshot (bounds, cumulative counts with +Inf last, sum,
    count)."""
    h = Histogram(snap["buckets"])
    prev = 0
    for i, c in enumerate(snap["cumulative_counts"]):
        h.counts[i] = c - prev
        prev = c
    h.sum, h.count = float(snap["sum"]), int(snap["count"])
    return h
