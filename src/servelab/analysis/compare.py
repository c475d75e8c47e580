"""Fair comparisons: what differs between runs, the figures side by side, and regression gates.

A comparison is fair when the runs differ in one dimension only (the thing being compared: the engine,
the GPU, a batch policy...). :func:`manifest_diff` reads each dimension from the manifests;
:func:`check_fair` raises :class:`~servelab.errors.ComparisonError` when more than one differs (dimensions
named in ``allow_diff`` do not count). :func:`compare_figures` puts the figures of two runs side by side
with the difference, its bootstrap confidence interval from the raw request samples, and a verdict.
:func:`check_regression` gates a candidate sweep against a baseline at every level.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from servelab.analysis.columns import Columns, as_columns
from servelab.analysis.metrics import LoadMode, metric_values, output_tokens, scope_mask
from servelab.analysis.stats import bootstrap_diff_ci
from servelab.errors import ComparisonError, ConfigError
from servelab.records.schema import CANCELLED

# dimension -> (label, normalised key names searched in manifest["target"] (flattened), in order)
_TARGET_KEYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "model": ("model checkpoint", ("model", "served_model", "model_name", "model_path")),
    "tokenizer": ("tokenizer", ("tokenizer", "tokenizer_name")),
    "quantization": ("quantization / dtype", ("quantization", "dtype", "weight_dtype", "precision", "kv_cache_dtype")),
    "engine": ("engine and version", ("engine", "version", "engine_version")),
    "gpu": ("GPU", ("gpu", "hardware", "accelerator", "gpu_name", "chip")),
    "driver": ("driver", ("driver", "driver_version")),
    "cuda": ("CUDA / runtime", ("cuda", "cuda_version", "rocm_version", "runtime_version")),
    "parallelism": ("parallelism", ("nodes", "count", "gpus", "num_gpus", "gpus_per_node", "tensor_parallel_size",
                                    "tp", "pipeline_parallel_size", "pp", "expert_parallel_size", "ep",
                                    "enable_expert_parallel", "data_parallel_size", "dp")),
    "context_limit": ("context limit", ("max_model_len", "context_length", "max_context_len", "ctx_size")),
    "output_limit": ("output limit", ("max_output_tokens", "max_new_tokens", "n_predict", "max_tokens")),
    "batch_policy": ("batch policy", ("max_num_seqs", "max_num_batched_tokens", "max_batch_size",
                                      "max_running_requests", "max_num_tokens", "enable_chunked_prefill",
                                      "chunked_prefill", "scheduling_policy")),
    "prefix_caching": ("prefix caching", ("enable_prefix_caching", "prefix_caching", "disable_radix_cache")),
    "speculative": ("speculative decoding", ("speculative_config", "speculative_model", "num_speculative_tokens",
                                             "speculative_algorithm", "draft_model", "speculative")),
}
_WORKLOAD_DIMS = {"prompts": "prompt distribution", "outputs": "output distribution",
                  "concurrency": "concurrency levels"}
DIMENSIONS: tuple[str, ...] = (*_TARGET_KEYS, *_WORKLOAD_DIMS)
_SAME_ONLY_KEYS = {"model", "tokenizer"}  # also read from config.target when the target omits them


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
    nested = []
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


def _dig(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, Mapping):
            return None
        d = d.get(p)
    return d


def manifest_facts(manifest: Mapping[str, Any]) -> dict[str, str | None]:
    """The value of every comparison dimension in one manifest (None: not recorded)."""
    flat = _flatten(manifest.get("target") or {})
    facts: dict[str, str | None] = {}
    for dim, (_, keys) in _TARGET_KEYS.items():
        found = {k: flat[k] for k in keys if k in flat and flat[k] is not None}
        if not found and dim in _SAME_ONLY_KEYS:
            v = _dig(manifest, "config", "target", dim)
            found = {dim: v} if v is not None else {}
        if dim == "speculative":
            found.update({k: v for k, v in flat.items() if ("specul" in k or "draft" in k) and k not in found})
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
    facts["prompts"] = _render(wl)
    facts["outputs"] = _render(outputs)
    load = _dig(manifest, "config", "load") or {}
    levels = manifest.get("levels") or _dig(manifest, "sweep", "levels")
    facts["concurrency"] = _render({**load, **({"levels": levels} if levels else {})})
    return facts


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


def check_fair(manifests: Sequence[Mapping[str, Any]], allow_diff: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The diff rows, or :class:`ComparisonError` when more than one dimension differs (not counting
    ``allow_diff``)."""
    allowed = set(allow_diff)
    bad = allowed - set(DIMENSIONS)
    if bad:
        raise ConfigError(f"unknown comparison dimension(s) {sorted(bad)} in allow_diff",
                          hint=f"use some of: {', '.join(DIMENSIONS)}")
    if len(manifests) < 2:
        raise ComparisonError(f"a comparison needs at least two runs, got {len(manifests)}")
    rows = manifest_diff(manifests)
    differ = [r for r in rows if r["status"] == "differs" and r["dimension"] not in allowed]
    if len(differ) > 1:
        what = "; ".join(f"{r['label']} ({' vs '.join(str(v) for v in r['values'])})" for r in differ)
        raise ComparisonError(
            f"the runs differ in {len(differ)} dimensions, so no figure can be pinned on one: {what}",
            hint="rerun holding all but one constant, or allow the extra ones "
                 f"(--allow-diff {' --allow-diff '.join(r['dimension'] for r in differ[1:])})",
        )
    return rows


# -- figures from raw samples -------------------------------------------------------------------------


def request_samples(data: Any, mode: LoadMode = "closed") -> dict[str, np.ndarray]:
    """Samples (ms) of the successful, non-warmup requests from :mod:`servelab.analysis.metrics` (ttft, itl
    per token gap, tpot, e2e...; latency from the intended send in an open loop), plus ``out_tokens``,
    ``sent_s``, ``end_s`` (for throughput) and ``failed`` (0/1 over every non-warmup request)."""
    c: Columns = as_columns(data)
    live = ~c.warmup
    ok = scope_mask(c, "ok")
    out = metric_values(c, mode)
    out.update({
        "out_tokens": output_tokens(c)[ok],
        "end_s": c.t("end_ns")[ok] * 1e-9,
        "sent_s": c.t("sent_ns")[ok] * 1e-9,
        "failed": (~ok[live] & (c.status[live] != CANCELLED)).astype(float),
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


def _boot_means(x: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    rows = max(1, (1 << 20) // x.size)  # bounded memory: about a million values per chunk
    out = np.empty(resamples)
    for i in range(0, resamples, rows):
        k = min(rows, resamples - i)
        out[i:i + k] = x[rng.integers(0, x.size, size=(k, x.size))].mean(axis=1)
    return out


def _bootstrap_mean_diff(a: np.ndarray, b: np.ndarray, resamples: int, seed: int) -> dict[str, float | None]:
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size < 2 or b.size < 2:
        return {"diff": None, "lo": None, "hi": None, "rel": None}
    rng = np.random.default_rng(seed)
    ma, mb = _boot_means(a, resamples, rng), _boot_means(b, resamples, rng)
    lo, hi = np.percentile(mb - ma, [2.5, 97.5])
    diff = float(b.mean() - a.mean())
    return {"diff": diff, "lo": float(lo), "hi": float(hi), "rel": diff / a.mean() if a.mean() else None}


def _verdict(ci: Mapping[str, float | None], lower_is_better: bool, n: tuple[int, int]) -> str:
    if ci["lo"] is None or min(n) < 10:
        return "too few samples"
    if ci["lo"] <= 0 <= ci["hi"]:
        return "within noise"
    b_higher = ci["lo"] > 0
    return "worse" if b_higher == lower_is_better else "better"


def compare_figures(a: Any, b: Any, *, percentiles: Sequence[float] = (50, 95, 99), resamples: int = 1000,
                    seed: int = 0, buckets: int = 40) -> list[dict[str, Any]]:
    """Figures of run A and run B side by side (B relative to A), each difference with its 95% bootstrap
    CI from the raw request samples and a verdict for B: better / worse / within noise / too few samples.

    ``a``, ``b``: request records, a requests Table, or ready samples from :func:`request_samples`.
    Latency is better lower; throughput better higher; the failure rate better lower.
    """
    sa = a if isinstance(a, Mapping) else request_samples(a)
    sb = b if isinstance(b, Mapping) else request_samples(b)
    rows: list[dict[str, Any]] = []
    for metric in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        xa, xb = sa[metric][np.isfinite(sa[metric])], sb[metric][np.isfinite(sb[metric])]
        for p in percentiles:
            ci = bootstrap_diff_ci(xa, xb, p, resamples=resamples, seed=seed)
            va = float(np.percentile(xa, p)) if xa.size else None
            vb = float(np.percentile(xb, p)) if xb.size else None
            rows.append({"figure": f"{metric} p{p:g}", "unit": "ms", "a": va, "b": vb, **ci,
                         "n": (int(xa.size), int(xb.size)),
                         "verdict": _verdict(ci, True, (xa.size, xb.size))})
    ra, rb = _rate_buckets(sa, buckets), _rate_buckets(sb, buckets)
    ci = _bootstrap_mean_diff(ra, rb, resamples, seed)
    rows.append({"figure": "output tokens/s", "unit": "tok/s", "a": float(ra.mean()) if ra.size else None,
                 "b": float(rb.mean()) if rb.size else None, **ci, "n": (int(ra.size), int(rb.size)),
                 "verdict": _verdict(ci, False, (ra.size, rb.size)), "note": f"block bootstrap, {buckets} time buckets"})
    fa, fb = sa["failed"], sb["failed"]
    ci = _bootstrap_mean_diff(fa, fb, resamples, seed)
    rows.append({"figure": "failure rate", "unit": "fraction", "a": float(fa.mean()) if fa.size else None,
                 "b": float(fb.mean()) if fb.size else None, **ci, "n": (int(fa.size), int(fb.size)),
                 "verdict": "within noise" if ci["lo"] is not None and ci["lo"] == ci["hi"] == 0
                 else _verdict(ci, True, (fa.size, fb.size))})
    return rows


# -- regression gate ----------------------------------------------------------------------------------


def _by_level(x: Mapping[Any, Any]) -> dict[Any, Mapping[str, Any]]:
    if "metrics" in x or "throughput" in x:
        return {None: x}  # a single summary
    return dict(x)


def _goodput(summary: Mapping[str, Any]) -> float | None:
    v = _dig(summary, "throughput", "goodput_requests_per_s")
    if v is None:
        v = _dig(summary, "goodput", "requests_per_s")
    return None if v is None else float(v)


def _limit(max_regression: float | Mapping[str, float], kind: str) -> float:
    if isinstance(max_regression, Mapping):
        if kind not in max_regression:
            raise ConfigError(f"check_regression: max_regression has no '{kind}' entry",
                              hint="give a fraction for 'latency' and 'goodput', e.g. {'latency': 0.1, 'goodput': 0.05}")
        v = float(max_regression[kind])
    else:
        v = float(max_regression)
    if not 0 <= v:
        raise ConfigError(f"check_regression: max_regression must be a non-negative fraction, got {v}")
    return v


def check_regression(baseline: Mapping[Any, Any], candidate: Mapping[Any, Any],
                     max_regression: float | Mapping[str, float] = 0.1, *,
                     metrics: Sequence[str] = ("ttft_ms", "e2e_ms"),
                     percentiles: Sequence[float] = (50, 95, 99)) -> list[dict[str, Any]]:
    """Failures of ``candidate`` against ``baseline`` (empty list: no regression).

    Both are ``{level: summary}`` (or one summary each). At every baseline level: each latency metric at
    each percentile may grow by at most ``max_regression`` (a fraction, or ``{"latency": f, "goodput": g}``),
    goodput (requests/s) may fall by at most that much; a baseline level or figure the candidate lacks fails.
    """
    base, cand = _by_level(baseline), _by_level(candidate)
    lat_lim, good_lim = _limit(max_regression, "latency"), _limit(max_regression, "goodput")
    fails: list[dict[str, Any]] = []

    def fail(level: Any, metric: str, b: float | None, c: float | None, limit: float, msg: str) -> None:
        change = None if b in (None, 0) or c is None else (c - b) / b
        fails.append({"level": level, "metric": metric, "baseline": b, "candidate": c, "change": change,
                      "limit": limit, "message": msg})

    for level in sorted(base, key=lambda v: (v is None, v)):
        where = "" if level is None else f" at level {level:g}"
        if level not in cand:
            fail(level, "level", None, None, 0.0, f"the candidate has no run{where}")
            continue
        bs, cs = base[level], cand[level]
        for m in metrics:
            for p in percentiles:
                key = f"p{p:g}"
                b = _dig(bs, "metrics", m, key)
                if b is None:
                    continue
                c = _dig(cs, "metrics", m, key)
                if c is None:
                    fail(level, f"{m} {key}", float(b), None, lat_lim, f"{m} {key}{where}: missing in the candidate")
                elif float(c) > float(b) * (1 + lat_lim):
                    fail(level, f"{m} {key}", float(b), float(c), lat_lim,
                         f"{m} {key}{where}: {float(c):.1f} ms vs {float(b):.1f} ms "
                         f"(+{(float(c) / float(b) - 1):.1%}, limit +{lat_lim:.0%})")
        gb, gc = _goodput(bs), _goodput(cs)
        if gb is not None:
            if gc is None:
                fail(level, "goodput", gb, None, good_lim, f"goodput{where}: missing in the candidate")
            elif gc < gb * (1 - good_lim):
                fail(level, "goodput", gb, gc, good_lim,
                     f"goodput{where}: {gc:.2f} req/s vs {gb:.2f} req/s "
                     f"({(gc / gb - 1) if gb else 0:.1%}, limit -{good_lim:.0%})")
    return fails
