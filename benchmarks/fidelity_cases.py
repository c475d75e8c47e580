"""The published check rows of benchmarks/fidelity_cases.yaml: load them and simulate each under a backend.

Each row names a sim target (the published serving conditions) and a workload mode:
- offline: every request submitted at once (trtllm-bench throughput, vllm bench serve at request rate inf);
- closed: ``concurrency`` requests in flight until ``requests`` are done (vllm bench --max-concurrency);
- batch: ``batch`` requests at once, the time until the last finishes (vLLM benchmark_latency).
Lengths are fixed (ignore_eos) unless the row drew ShareGPT prompts (``dataset: sharegpt``): then each
request's input and output lengths are drawn around the published means (:func:`sharegpt_lengths`). Prompts
are distinct token sequences, so no prefix is shared.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

import yaml

from servelab.clock import VirtualClock
from servelab.sim.api import SimRequest
from servelab.sim.deployment import Deployment
from servelab.sim.engine import Engine
from servelab.sim.fidelity import gpu_kind
from servelab.sim.target import parse_sim_target

CASES = Path(__file__).parent / "fidelity_cases.yaml"
METRICS = ("out_tok_s", "out_tok_s_per_gpu", "total_tok_s", "ttft_ms", "tpot_ms", "batch_latency_s")


@dataclass(frozen=True)
class Case:
    id: str
    set: str
    source: str
    model: str
    hardware: str
    engine: str
    mode: str
    isl: int
    osl: int
    requests: int
    concurrency: int
    metric: str
    published: float
    target: str
    template_tokens: int = 0  # chat-template tokens the server prefills on top of isl (chat endpoint)
    dataset: str = "fixed"  # "sharegpt": per-request lengths around the published means

    @property
    def prompt_len(self) -> int:
        """Tokens the engine prefills per request: the benchmark's ``isl`` plus the chat template's."""
        return self.isl + self.template_tokens

    @property
    def what(self) -> str:
        w = f"{self.isl}/{self.osl}"
        if self.mode == "closed":
            w += f" c={self.concurrency}"
        elif self.mode == "batch":
            w += f" batch {self.requests}"
        return f"{self.model}, {self.hardware}, {self.engine}, {w}, {self.metric}"


def load(path: Path = CASES) -> tuple[dict, list[Case]]:
    """(sources, cases) of the data file; a row missing a field or naming an unknown source/metric raises."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    sources, out = data["sources"], []
    for row in data["cases"]:
        w = row["workload"]
        if row["source"] not in sources:
            raise ValueError(f"{row['id']}: unknown source {row['source']!r}")
        if row["metric"] not in METRICS:
            raise ValueError(f"{row['id']}: unknown metric {row['metric']!r}")
        mode = w["mode"]
        n = int(w["batch"] if mode == "batch" else w["requests"])
        out.append(
            Case(
                id=row["id"],
                set=row["set"],
                source=row["source"],
                model=str(row["model"]),
                hardware=str(row["hardware"]),
                engine=str(row["engine"]),
                mode=mode,
                isl=int(w["isl"]),
                osl=int(w["osl"]),
                requests=n,
                concurrency=int(w.get("concurrency", n)),
                metric=row["metric"],
                published=float(row["published"]),
                target=row["target"],
                template_tokens=int(sources[row["source"]].get("chat_template_tokens", 0)),
                dataset=str(w.get("dataset", "fixed")),
            )
        )
    return sources, out


def kind_of(dep: Deployment) -> str:
    return "moe" if dep.model.ffn.get("kind") == "moe" else "dense"


def family_of(dep: Deployment) -> str:
    """hopper | blackwell | amd | tpu: the slice's hardware family (as runs' fidelity figures key it)."""
    return gpu_kind(dep.family.name)


def trtllm_bench_limits(dep: Deployment, isl: int, osl: int,
                        kv_fraction: float = 0.90) -> tuple[int, int] | None:
    """(max_batch_size, max_num_tokens) that ``trtllm-bench throughput`` picks when it is given neither, as in
    the TensorRT-LLM perf overviews (whose commands pass only --tp/--pp/--ep and extra LLM-API options).

    The tool estimates how many requests of ``isl + osl`` tokens its KV memory holds, from the checkpoint's
    config.json and stored parameter count: KV bytes per token = 2 x layers x max(tp, num_key_value_heads) x
    head_size x KV element bytes (head_size = head_dim, else hidden / heads: for MLA models the config's 128
    KV heads x 56, far more than MLA's real cache), memory = GPUs x device GiB - parameters x weight element
    bytes, times ``kv_fraction`` (its --kv_cache_free_gpu_mem_fraction, default 0.90). Batch size: that
    request count (at most 4096, per pipeline stage) rounded up to 32 (at least 64) below 256, to 128 below
    1024, else to 256; tokens per step: batch x (1 + isl / osl), at most 32768, rounded up to 256 (at least
    2048) below 4096, to 512 below 8192, else to 1024. With attention-DP the engine applies both per rank.
    Only for FP8, NVFP4 and unquantized checkpoints: others (MXFP4) get TensorRT-LLM's build defaults 2048 /
    8192, the engine profile's own. None then."""
    m = dep.model
    if m.ffn.get("expert_dtype") == "fp4" and dep.dtype != "fp4":  # MXFP4 checkpoint: not a tuned format
        return None
    elem = {"fp8": 1.0, "fp4": 0.5}.get(dep.dtype, 2.0)
    a = m.attention
    if a["kind"] == "mla":
        kv_heads, head = a["heads"], m.hidden // a["heads"]
    else:
        kv_heads, head = a.get("kv_heads", a["heads"]), a["head_dim"]
    kv_elem = 1.0 if dep.kv_dtype == "fp8" else 2.0
    gib = 1024**3
    per_token = 2 * m.layers * max(dep.tp, kv_heads) * head * kv_elem / gib
    stored = m.total_params() + m.mtp_layers * (m.total_params() - m.embed_params) / m.layers
    if dep.dtype == "fp4":  # two FP4 values per stored byte, one FP8 scale per 16 values
        q = stored - m.embed_params
        stored = q / 2 + q / 16 + m.embed_params
    n_gpus = dep.tp * dep.pp
    free = n_gpus * dep.hardware.hbm_gb - stored * elem / gib
    requests = free * kv_fraction / (per_token * (isl + osl))
    raw_bs = min(requests, 4096) / dep.pp
    raw_tok = min(raw_bs * (1 + isl / osl), 32768)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_tok < 4096:
        tok = max(2048, 256 * math.ceil(raw_tok / 256))
    elif raw_tok < 8192:
        tok = 512 * math.ceil(raw_tok / 512)
    else:
        tok = 1024 * math.ceil(raw_tok / 1024)
    return bs, tok


# The perf overviews' llm_options for every model they list (developer guide: gpt-oss, DeepSeek-R1, Qwen3 MoE,
# Llama 3.3; v1.0, docs/source/performance/perf-overview.md "Running the Benchmark": the dense and the MoE
# llm_options.yml): cuda_graph_config enable_padding true with these batch sizes, so decode-only steps run
# the graph of the next size up (sizes above max_batch_size are not captured).
PERF_DEV_GRAPH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)


def with_engine_version(target: str, engine: str) -> str:
    """``target`` with the row's engine version (``engine: vllm 0.10.2 ...``) in its ``engine=NAME`` (-> NAME:
    0.10.2), so version-dependent profile settings apply; a target that names a version or no engine, or a
    row without a version, is returned as it is."""
    words = engine.split()
    if len(words) < 2 or not re.fullmatch(r"v?\d+(\.\d+)*\S*", words[1]):
        return target
    parts = target.split(",")
    for i, p in enumerate(parts):
        key, _, val = p.partition("=")
        if key.strip() == "engine" and ":" not in val and val.strip().lower() == words[0].lower():
            parts[i] = f"{key}={val.strip()}:{words[1]}"
    return ",".join(parts)


def deployment(case: Case, backend: str) -> Deployment:
    """The row's deployment. TensorRT-LLM perf-overview rows ran under trtllm-bench, which sets the batch and
    token limits from its own heuristic (:func:`trtllm_bench_limits`; MXFP4: the build defaults, the engine
    profile's), not the engine's defaults; both overviews' rows also pad decode-only batches to CUDA-graph
    sizes (``PERF_DEV_GRAPH_SIZES``).

    trtllm-bench throughput runs without chunked prefill unless asked (``--enable_chunked_context`` and the
    LLM-API ``enable_chunked_prefill`` default off; the perf overviews' options set neither), and then raises
    max_num_tokens to at least the dataset's longest prompt plus max_batch_size, so every prompt is scheduled
    whole (tensorrt_llm/bench/benchmark/utils/general.py get_settings: "Chunked prefill is disabled ...
    Forcing max_num_tokens to max_isl + max_batch_size"); max_seq_len is the dataset's longest request."""
    target = with_engine_version(case.target, case.engine)
    if case.source.startswith("trtllm-perf") and "cuda_graph_batch_sizes" not in target:
        target += ",cuda_graph_batch_sizes=" + "/".join(map(str, PERF_DEV_GRAPH_SIZES))
    dep = parse_sim_target(f"sim:{target},backend={backend}")
    if case.source.startswith("trtllm-perf") and "max_num_seqs" not in case.target:
        limits = trtllm_bench_limits(dep, case.isl, case.osl)
        bs, tok = limits or (dep.max_num_seqs, dep.max_num_batched_tokens)
        tok = max(tok, case.isl + bs)
        dep = parse_sim_target(f"sim:{target},backend={backend},max_num_seqs={bs},"
                               f"max_num_batched_tokens={tok},chunked_prefill=false,"
                               f"max_model_len={case.isl + case.osl}")
    return dep


# ShareGPT turn lengths are heavy-tailed (a few tokens to the filter's limits); a lognormal of this sigma
# stands for them (an assumption: no per-request lengths are published for these runs). vllm bench's ShareGPT
# filter keeps prompts and outputs of at least 4 tokens, prompts up to 1024 and prompt + output up to 2048.
SHAREGPT_SIGMA = 1.0
SHAREGPT_MIN, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL = 4, 1024, 2048


def sharegpt_lengths(n: int, isl: int, osl: int, seed: int = 42) -> list[tuple[int, int]]:
    """``n`` (input, output) lengths, lognormal around the means ``isl`` and ``osl`` within vllm bench's
    ShareGPT filter, rescaled so that their means are the published ones (to within rounding)."""
    rng = random.Random(seed)
    sig = SHAREGPT_SIGMA
    raw = [(math.exp(sig * rng.gauss(0, 1)), math.exp(sig * rng.gauss(0, 1))) for _ in range(n)]
    out: list[tuple[int, int]] = []
    ki, ko = 1.0, 1.0
    for _ in range(20):  # rescale, clip, repeat: clipping moves the mean
        out = []
        for a, b in raw:
            i = min(max(SHAREGPT_MIN, round(isl * ki * a)), SHAREGPT_MAX_PROMPT)
            o = min(max(SHAREGPT_MIN, round(osl * ko * b)), SHAREGPT_MAX_TOTAL - i)
            out.append((i, o))
        ki *= isl / statistics.fmean(i for i, _ in out)
        ko *= osl / statistics.fmean(o for _, o in out)
    return out


def simulate(case: Case, dep: Deployment) -> float:
    """The simulated value of ``case.metric`` for deployment ``dep``."""
    clock = VirtualClock()
    lengths = (sharegpt_lengths(case.requests, case.isl, case.osl) if case.dataset == "sharegpt"
               else [(case.isl, case.osl)] * case.requests)

    def request(i: int) -> SimRequest:
        n_in, n_out = lengths[i]
        return SimRequest(
            rid=i + 1,
            prompt_ids=[(i * 131 + j) % 30011 + 1 for j in range(n_in + case.template_tokens)],
            max_tokens=n_out,
            ignore_eos=True,
        )

    async def main() -> float:
        eng = Engine(dep, clock, seed=0)
        eng.start()
        sent: dict[int, int] = {}
        done: list[SimRequest] = []
        if case.mode == "closed":
            async def worker(k: int) -> None:
                for i in range(k, case.requests, case.concurrency):
                    r = request(i)
                    sent[r.rid] = clock.now()
                    eng.submit(r)
                    await r.done
                    done.append(r)

            await asyncio.gather(*(worker(k) for k in range(case.concurrency)))
        else:
            reqs = [request(i) for i in range(case.requests)]
            for r in reqs:
                sent[r.rid] = clock.now()
                eng.submit(r)
            await asyncio.gather(*(r.done for r in reqs))
            done = reqs
        await eng.stop()
        bad = [r for r in done if r.finish_reason not in ("length", "stop")]
        if bad:
            raise RuntimeError(
                f"{case.id}: {len(bad)} requests failed ({bad[0].finish_reason}: {bad[0].error})"
            )
        end_s = max(r.token_times_ns[-1] for r in done) / 1e9
        out = sum(r.output_tokens for r in done)
        if case.metric == "out_tok_s":
            return out / end_s
        if case.metric == "out_tok_s_per_gpu":
            return out / end_s / dep.world
        if case.metric == "total_tok_s":
            return (out + sum(n for n, _ in lengths)) / end_s
        if case.metric == "ttft_ms":
            return statistics.fmean((r.first_token_ns - sent[r.rid]) / 1e6 for r in done)
        if case.metric == "tpot_ms":
            return statistics.fmean((r.token_times_ns[-1] - r.first_token_ns) / 1e6 / (r.output_tokens - 1)
                                    for r in done if r.output_tokens > 1)
        return end_s  # batch_latency_s: submitted at 0

    return clock.run(main)
