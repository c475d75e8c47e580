"""Fair comparisons: what differs between runs, the figures side by side, and regression gates.

A comparison is fair when the runs differ in one dimension only (the thing being compared: the engine,
the GPU, a batch policy...). :func:`manifest_diff` reads each dimension from the manifests;
:func:`check_fair` raises :class:`~servelab.errors.ComparisonError` when more than one differs (dimensions
named in ``allow_diff`` do not count). :func:`compare_figures` puts the figures of two runs side by side
with the difference, its bootstrap confidence interval from the raw request samples, and a verdict.
:mod:`servelab.analysis.gate` builds the regression gate (``servelab check``) on these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from servelab.analysis.cluster import cluster_percentile_diff_ci
from servelab.analysis.columns import Columns, as_columns
from servelab.analysis.metrics import (
    METRICS_BY_NAME,
    LoadMode,
    latency_start,
    lower_is_better,
    metric_values,
    output_tokens,
    scope_mask,
    unit_of,
)
from servelab.analysis.stats import RateSample, bootstrap_diff_ci, bootstrap_mean_diff_ci, rate_diff_ci
from servelab.errors import ComparisonError, ConfigError
from servelab.records.schema import CANCELLED
from servelab.records.summary import dig as _dig

# dimension -> (label, normalised key names searched in manifest["target"] (flattened), in order)
_TARGET_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "model": ("model checkpoint", ("model", "served_model", "model_name", "model_path")),
    "tokenizer": ("tokenizer", ("tokenizer", "tokenizer_name")),
    "quantization": (
        "quantization / dtype",
        ("quantization", "dtype", "weight_dtype", "precision", "kv_cache_dtype", "cache_dtype"),
    ),
    "engine": ("engine and version", ("engine", "version", "engine_version")),
    "gpu": ("GPU", ("gpu", "hardware", "accelerator", "gpu_name", "chip")),
    "driver": ("driver", ("driver", "driver_version")),
    "cuda": ("CUDA / runtime", ("cuda", "cuda_version", "rocm_version", "runtime_version")),
    "parallelism": (
        "parallelism",
        (
            "nodes",
            "count",
            "gpus",
            "num_gpus",
            "gpus_per_node",
            "tensor_parallel_size",
            "tp",
            "tp_size",
            "pipeline_parallel_size",
            "pp",
            "pp_size",
            "expert_parallel_size",
            "ep",
            "ep_size",
            "enable_expert_parallel",
            "data_parallel_size",
            "dp",
            "dp_size",
        ),
    ),
    "context_limit": (
        "context limit",
        ("max_model_len", "context_length", "max_context_len", "ctx_size", "n_ctx"),
    ),
    "output_limit": ("output limit", ("max_output_tokens", "max_new_tokens", "n_predict", "max_tokens")),
    "batch_policy": (
        "batch policy",
        (
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_batch_size",
            "max_running_requests",
            "max_num_tokens",
            "enable_chunked_prefill",
            "chunked_prefill",
            "chunked_prefill_size",
            "scheduling_policy",
            "total_slots",
            "n_parallel",
            "parallel",
        ),
    ),
    "prefix_caching": ("prefix caching", ("enable_prefix_caching", "prefix_caching", "disable_radix_cache")),
    "speculative": (
        "speculative decoding",
        (
            "speculative_config",
            "speculative_model",
            "num_speculative_tokens",
            "speculative_algorithm",
            "draft_model",
            "speculative",
        ),
    ),
}
_WORKLOAD_DIMS = {"prompts": "prompt distribution", "outputs": "output distribution",
                  "concurrency": "concurrency levels"}
DIMENSIONS: tuple[str, ...] = (*_TARGET_KEYS, *_WORKLOAD_DIMS)
_SAME_ONLY_KEYS = {"model", "tokenizer"}
# relative differences at or under 2% are "within noise" (practical significance)  # also read from
# config.target when the target omits them
DEFAULT_NOISE_FLOOR = 0.02


def _norm(key: str) -> str:
    return key.strip().lstrip("-").lower().replace("-", "_").replace(".", "_")


def _parse_flags(flags: Any) -> dict[str, Any]:
    """Server flags as {normalised name: value}, from a dict or an argv-like list."""
    if isinstance(flags, Mapping):
        return {_norm(str(k)): v for k, v in flags.items()}
    if isinstance(flags, str):
        flags = flags.split()
    out: dict[str, Any] = {}
    items = [str(x) for x in flags or []]
    i = 0
    while i < len(items):
        a = items[i]
        if a.startswith("-"):
            if "=" in a:
                k, v = a.split("=", 1)
                out[_norm(k)] = v
            elif i + 1 < len(items) and not items[i + 1].startswith("--"):
                out[_norm(a)] = items[i + 1]
                i += 1
            else:
                out[_norm(a)] = True
        i += 1
    return out


def _flatten(obj: Any, out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Leaf values by normalised leaf key; the first (shallowest, earliest) occurrence wins."""
    out = {} if out is None else out
    if not isinstance(obj, Mapping):
        return out
    nested: list[Mapping[str, Any]] = []
    for k, v in obj.items():
        nk = _norm(str(k))
        if nk in ("server_flags", "flags", "server_args", "engine_args"):
            nested.append(_parse_flags(v))
        elif isinstance(v, Mapping):
            nested.append(v)
        elif nk not in out:
            out[nk] = v
    for v in nested:
        _flatten(v, out)
    return out


def _render(v: Any) -> str | None:
    if v is None or v == {} or v == []:
        return None
    if isinstance(v, str):
        return v
    return orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode()


def _words(v: Any) -> str | None:
    """A workload setting as sorted ``key=value`` words (nested keys dotted, list items indexed, unset keys
    left out): it wraps in a table cell and reads without JSON."""
    pairs: list[tuple[str, str]] = []

    def walk(prefix: str, x: Any) -> None:
        if isinstance(x, Mapping):
            for k in sorted(x, key=str):
                walk(f"{prefix}.{k}" if prefix else str(k), x[k])
        elif isinstance(x, (list, tuple)):
            for i, item in enumerate(x):
                walk(f"{prefix}[{i}]", item)
        elif x is not None:
            text = ("true" if x else "false") if isinstance(x, bool) else \
                f"{x:g}" if isinstance(x, float) else str(x)
            pairs.append((prefix, text))

    walk("", v)
    return " ".join(f"{k}={t}" for k, t in pairs) or None


def manifest_facts(manifest: Mapping[str, Any]) -> dict[str, str | None]:
    """The value of every comparison dimension in one manifest (None: not recorded)."""
    flat = _flatten(manifest.get("target") or {})
    # A sweep records the command line that started each point's server beside the target's own facts.
    command = _dig(manifest, "server", "command_line")
    if command:
        _flatten({"server_flags": command}, flat)
    facts: dict[str, str | None] = {}
    for dim, (_, keys) in _TARGET_KEYS.items():
        found = {k: flat[k] for k in keys if k in flat and flat[k] is not None}
        if not found and dim in _SAME_ONLY_KEYS:
            v = _dig(manifest, "config", "target", dim)
            found = {dim: v} if v is not None else {}
        if dim == "speculative":
            found.update(
                {k: v for k, v in flat.items() if ("specul" in k or "draft" in k) and k not in found}
            )
        if not found:
            facts[dim] = None
        elif len(found) == 1:
            facts[dim] = _render(next(iter(found.values())))
        else:
            facts[dim] = " ".join(f"{k}={_render(v)}" for k, v in found.items())
    wl = dict(_dig(manifest, "config", "workload") or {})
    outputs = {k: wl.pop(k) for k in ("output_tokens", "ignore_eos") if k in wl}
    for k in ("seed", "temperature"):
        wl.pop(k, None)
    mix = _dig(manifest, "config", "mix")
    if mix:  # mixed traffic: the classes (each with its workload and load) replace workload and load
        wl["mix"] = mix
    facts["prompts"] = _words(wl)
    facts["outputs"] = _words(outputs)
    load = effective_load(manifest)
    levels = manifest.get("levels") or _dig(manifest, "sweep", "levels")
    facts["concurrency"] = _words({**load, **({"levels": levels} if levels else {})})
    return facts


# config.models.DEFAULT_CONCURRENCY, mirrored (analysis does not import config); a test keeps them equal
DEFAULT_CONCURRENCY = 16


def effective_load(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The run's load as it ran: a closed loop given no --concurrency and no --rate ran the default users
    (so `servelab run` and a config file saying `concurrency: 16` are the same load)."""
    load = dict(_dig(manifest, "config", "load") or {})
    plain = not _dig(manifest, "config", "mix") and _dig(manifest, "config", "workload", "kind") != "replay"
    if plain and load.get("concurrency") is None and load.get("rate") is None:
        load["concurrency"] = DEFAULT_CONCURRENCY
    return load


def run_level(manifest: Mapping[str, Any]) -> Any:
    """The load level of one run (its users, else its rate; None when neither: a replay or a mix)."""
    load = effective_load(manifest)
    return load.get("concurrency") or load.get("rate")


def manifest_diff(manifests: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per dimension: ``{dimension, label, values, status}``; status is ``same``, ``differs``,
    ``unknown`` (recorded in some runs only) or ``not recorded``."""
    facts = [manifest_facts(m) for m in manifests]
    rows = []
    for dim in DIMENSIONS:
        vals = [f[dim] for f in facts]
        present = [v for v in vals if v is not None]
        if not present:
            status = "not recorded"
        elif len(present) < len(vals):
            status = "unknown" if len(set(present)) == 1 else "differs"
        else:
            status = "same" if len(set(present)) == 1 else "differs"
        label = _TARGET_KEYS[dim][0] if dim in _TARGET_KEYS else _WORKLOAD_DIMS[dim]
        rows.append({"dimension": dim, "label": label, "values": vals, "status": status})
    return rows


def check_fair(manifests: Sequence[Mapping[str, Any]], allow_diff: Iterable[str] = (), *,
               must_match: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The diff rows, or :class:`ComparisonError` when more than one dimension differs (not counting
    ``allow_diff``), or when a dimension in ``must_match`` differs at all (``servelab check`` compares the
    same model on the same work)."""
    allowed = set(allow_diff)
    bad = allowed - set(DIMENSIONS)
    if bad:
        raise ConfigError(f"unknown comparison dimension(s) {sorted(bad)} in allow_diff",
                          hint=f"use some of: {', '.join(DIMENSIONS)}")
    if len(manifests) < 2:
        raise ComparisonError(f"a comparison needs at least two runs, got {len(manifests)}")
    rows = manifest_diff(manifests)
    differ = [r for r in rows if r["status"] == "differs" and r["dimension"] not in allowed]

    def what(rs: list[dict[str, Any]]) -> str:
        return "; ".join(f"{r['label']} ({' vs '.join(str(v) for v in r['values'])})" for r in rs)

    fixed = [r for r in differ if r["dimension"] in set(must_match)]
    if fixed:
        raise ComparisonError(
            f"the runs differ in {what(fixed)}: a regression gate compares the same model on the same work",
            hint="compare them with `servelab compare`, or pass --allow-diff "
                 f"{' --allow-diff '.join(r['dimension'] for r in fixed)} (or --force) if you mean it",
        )
    if len(differ) > 1:
        raise ComparisonError(
            f"the runs differ in {len(differ)} dimensions, so no figure can be pinned on one: {what(differ)}",
            hint="rerun holding all but one constant, or allow the extra ones "
                 f"(--allow-diff {' --allow-diff '.join(r['dimension'] for r in differ[1:])})",
        )
    return rows


# -- figures from raw samples -------------------------------------------------------------------------


def request_samples(data: Any, mode: LoadMode = "closed", *, owners: bool = False) -> dict[str, np.ndarray]:
    """Samples (ms) of the successful, non-warmup requests from :mod:`servelab.analysis.metrics` (ttft, itl
    per token gap, tpot, e2e...; latency from the intended send in an open loop), plus ``out_tokens``,
    ``sent_s``, ``end_s`` (ok requests), ``failed`` (0/1 over every non-warmup request) and, over every
    measured request, ``req_tokens`` (output tokens, 0 unless ok), ``req_ok`` (0/1), ``req_start_s`` and
    ``req_end_s`` (for throughput, as the summary computes it) and ``closed`` (1.0 in a closed loop).
    ``owners``: also ``itl_ms_owner``, the request index of every ``itl_ms`` gap (for a bootstrap that
    resamples requests, :mod:`servelab.analysis.cluster`; one more int per token held)."""
    c: Columns = as_columns(data)
    live = ~c.warmup
    ok = scope_mask(c, "ok")
    out = metric_values(c, mode)
    if owners:
        itl = METRICS_BY_NAME["itl_ms"]
        vals, own = itl.fn(c, latency_start(c, mode))
        keep = scope_mask(c, itl.scope)[own] & np.isfinite(vals)
        out["itl_ms"], out["itl_ms_owner"] = vals[keep], own[keep]
    tokens = np.nan_to_num(output_tokens(c))
    out.update({
        "out_tokens": output_tokens(c)[ok],
        "end_s": c.t("end_ns")[ok] * 1e-9,
        "sent_s": c.t("sent_ns")[ok] * 1e-9,
        "failed": (~ok[live] & (c.status[live] != CANCELLED)).astype(float),
        "req_tokens": np.where(ok, tokens, 0.0)[live],
        "req_ok": ok[live].astype(float),
        "req_start_s": latency_start(c, mode)[live] * 1e-9,
        "req_end_s": c.t("end_ns")[live] * 1e-9,
        "closed": np.array([1.0 if mode == "closed" else 0.0]),
    })
    return out


def _rate_buckets(s: Mapping[str, np.ndarray], buckets: int) -> np.ndarray:
    """Output tokens per second in equal time buckets over the run window."""
    end, tok = s["end_s"], s["out_tokens"]
    m = np.isfinite(end) & np.isfinite(tok)
    if m.sum() < 2:
        return np.array([])
    t0 = float(np.nanmin(s["sent_s"])) if np.isfinite(s["sent_s"]).any() else float(end[m].min())
    t1 = float(end[m].max())
    if t1 <= t0:
        return np.array([])
    edges = np.linspace(t0, t1, buckets + 1)
    per, _ = np.histogram(end[m], bins=edges, weights=tok[m])
    return per / ((t1 - t0) / buckets)


def rate_inputs(s: Mapping[str, np.ndarray], what: str = "req_tokens") -> RateSample | None:
    """The per-request inputs of a throughput figure (``what``: ``req_tokens`` for output tokens/s,
    ``req_ok`` for requests/s), or None when the samples lack them or the window is empty."""
    if what not in s or "req_start_s" not in s:
        return None
    start, end = s["req_start_s"], s["req_end_s"]
    fs, fe = start[np.isfinite(start)], end[np.isfinite(end)]
    if not fs.size or not fe.size or float(fe.max()) <= float(fs.min()):
        return None
    busy = np.where(np.isfinite(end) & np.isfinite(start), end - start, 0.0)
    closed = bool(s["closed"][0]) if "closed" in s and s["closed"].size else True
    return RateSample(
        np.asarray(s[what], dtype=float), np.maximum(busy, 0.0), float(fe.max() - fs.min()), closed
    )


def _verdict(ci: Mapping[str, float | None], metric: str, n: tuple[int, int], *,
             noise_floor: float = 0.0, min_n: int = 10) -> str:
    """better / worse / within noise / too few samples, for B against A on ``metric`` (its direction from
    :mod:`servelab.analysis.metrics`).

    ``within noise``: the interval contains 0, or the difference is inside the practical-significance floor
    (``|rel| <= noise_floor``) however narrow its interval (deterministic simulator runs have zero-width
    intervals, so without a floor a 0.06% difference would get a verdict). Otherwise ``better``/``worse``."""
    lo, hi, diff = ci["lo"], ci["hi"], ci["diff"]
    if lo is None or hi is None or diff is None or min(n) < min_n:
        return "too few samples"
    rel = ci.get("rel")
    if diff == 0 or (rel is not None and abs(rel) <= noise_floor) or lo <= 0 <= hi:
        return "within noise"
    b_higher = lo > 0
    return "worse" if b_higher == lower_is_better(metric) else "better"


def _rate_row(figure: str, metric: str, sa: Mapping[str, np.ndarray], sb: Mapping[str, np.ndarray],
              what: str, resamples: int, seed: int, noise_floor: float) -> dict[str, Any]:
    unit = unit_of(metric)
    ra, rb = rate_inputs(sa, what), rate_inputs(sb, what)
    n = (0 if ra is None else ra.tokens.size, 0 if rb is None else rb.tokens.size)
    row: dict[str, Any] = {"figure": figure, "unit": unit, "a": None if ra is None else ra.rate,
                           "b": None if rb is None else rb.rate, "n": n,
                           "note": "per-request bootstrap of the run's figure (sum over the window)"}
    if ra is None or rb is None or min(n) < 2:
        row.update(diff=None, lo=None, hi=None, rel=None, verdict="too few samples")
        return row
    rng = np.random.default_rng(seed)
    ci = rate_diff_ci(ra, rb, resamples=resamples, rng=rng)
    row.update(ci)
    row["verdict"] = _verdict(ci, metric, n, noise_floor=noise_floor)
    return row


def compare_figures(a: Any, b: Any, *, percentiles: Sequence[float] = (50, 95, 99), resamples: int = 1000,
                    seed: int = 0, mode: LoadMode = "closed",
                    noise_floor: float = DEFAULT_NOISE_FLOOR) -> list[dict[str, Any]]:
    """Figures of run A and run B side by side (B relative to A), each difference with its 95% bootstrap
    CI from the raw request samples and a verdict for B (see :func:`_verdict`). A pooled metric with many
    values per request (``itl_ms``: every gap) is bootstrapped by whole requests when the samples carry
    its owners (:mod:`servelab.analysis.cluster`), as they do when built here from records or a table.

    ``a``, ``b``: request records, a requests Table, or ready samples from :func:`request_samples`.
    Which way is better comes from the metric tables (:func:`servelab.analysis.metrics.lower_is_better`:
    latency lower, throughput higher, the failure rate lower). Throughput is the
    run's own figure (output tokens of ok requests over the measured window, as in ``summary.json``), its
    interval a per-request bootstrap (:func:`servelab.analysis.stats.rate_diff_ci`).
    ``noise_floor``: relative differences at or under it are "within noise" (practical significance).
    """
    sa = a if isinstance(a, Mapping) else request_samples(a, mode, owners=True)
    sb = b if isinstance(b, Mapping) else request_samples(b, mode, owners=True)
    rows: list[dict[str, Any]] = []
    for metric in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        fa, fb = np.isfinite(sa[metric]), np.isfinite(sb[metric])
        xa, xb = sa[metric][fa], sb[metric][fb]
        owned = f"{metric}_owner" in sa and f"{metric}_owner" in sb
        for p in percentiles:
            if owned:  # many values per request: resample requests, not single values
                oa, ob = sa[f"{metric}_owner"][fa], sb[f"{metric}_owner"][fb]
                ci = cluster_percentile_diff_ci(xa, oa, xb, ob, p, resamples=resamples, seed=seed)
            else:
                ci = bootstrap_diff_ci(xa, xb, p, resamples=resamples, seed=seed)
            va = float(np.percentile(xa, p)) if xa.size else None
            vb = float(np.percentile(xb, p)) if xb.size else None
            rows.append({"figure": f"{metric} p{p:g}", "unit": unit_of(metric), "a": va, "b": vb, **ci,
                         "n": (int(xa.size), int(xb.size)),
                         "verdict": _verdict(ci, metric, (xa.size, xb.size), noise_floor=noise_floor)})
    rows.append(_rate_row("output tokens/s", "output_tokens_per_s", sa, sb, "req_tokens", resamples, seed,
                          noise_floor))
    rows.append(_rate_row("requests/s", "requests_per_s", sa, sb, "req_ok", resamples, seed, noise_floor))
    fa, fb = sa["failed"], sb["failed"]
    ci = bootstrap_mean_diff_ci(fa, fb, resamples=resamples, seed=seed)
    rows.append({"figure": "failure rate", "unit": unit_of("failure_rate"),
                 "a": float(fa.mean()) if fa.size else None,
                 "b": float(fb.mean()) if fb.size else None, **ci, "n": (int(fa.size), int(fb.size)),
                 "verdict": _verdict(ci, "failure_rate", (fa.size, fb.size), noise_floor=noise_floor)})
    return rows
