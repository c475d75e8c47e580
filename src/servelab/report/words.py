"""Numbers and names for people: three significant figures with units, human names for summary keys,
durations in the unit that reads best, and the one-line context of a run (what was benchmarked, how).

Used by the terminal (the context line before a run), the HTML report (headline, tables) and ``show``.
Everything here is a pure function of plain dicts (a manifest, its config, a summary).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from servelab.records.engines import display_name
from servelab.records.schema import STATUS_WORDS
from servelab.records.summary import dig as _get

# summary keys -> what a person calls them (the unit is shown beside, never in the key)
NAMES: dict[str, str] = {
    "ttft_ms": "time to first token",
    "ttft_content_ms": "time to first visible token",
    "itl_ms": "inter-token latency (all gaps)",
    "itl_request_ms": "inter-token latency (per request)",
    "tpot_ms": "time per output token",
    "e2e_ms": "end-to-end latency",
    "ttlt_ms": "time to last token",
    "queue_ms": "client-side queue",
    "lag_ms": "schedule lag",
    "task_ms": "task time",
    "model_ms": "model time",
    "tool_ms": "tool time",
    "retrieval_ms": "retrieval time",
    "context_ms": "context building",
    "waiting_ms": "waiting",
    "requests_per_s": "requests",
    "output_tokens_per_s": "output tokens",
    "input_tokens_per_s": "input tokens",
    "total_tokens_per_s": "total tokens",
    "goodput_requests_per_s": "goodput (requests meeting the SLO)",
    "duration_s": "measured window",
    **STATUS_WORDS,  # http_error -> "HTTP error", ... (records.schema keeps the one table)
    "per_successful_task": "per successful task",
    "per_million_output_tokens": "per million output tokens",
    "kv_cache_usage": "KV cache usage",
    "requests_running": "requests running",
    "requests_waiting": "requests waiting",
    "gpu_utilization": "GPU utilisation",
}
# config.models.DEFAULT_CONCURRENCY, mirrored (report does not import config); a test keeps them equal
DEFAULT_CONCURRENCY = 16
UNITS: dict[str, str] = {"requests_per_s": "req/s", "output_tokens_per_s": "tokens/s",
                         "input_tokens_per_s": "tokens/s", "total_tokens_per_s": "tokens/s",
                         "goodput_requests_per_s": "req/s", "duration_s": "s"}


def name(key: str) -> str:
    """The human name of a summary key (the key itself, underscores as spaces, when unknown)."""
    return NAMES.get(key, key.replace("_", " "))


def sig(v: Any, digits: int = 3) -> str:
    """``v`` to ``digits`` significant figures, thousands separated, never in exponent form; '-' for none."""
    if v is None or isinstance(v, bool):
        return "-" if v is None else ("yes" if v else "no")
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if not math.isfinite(f):
        return "-"
    if f == 0:
        return "0"
    mag = math.floor(math.log10(abs(f)))
    if mag >= digits - 1:  # an integer part with at least `digits` figures: round to them
        return f"{round(f, -(mag - digits + 1)):,.0f}"
    if f.is_integer():  # 4, not 4.00
        return f"{f:,.0f}"
    return f"{f:,.{digits - 1 - mag}f}"


def count(v: Any) -> str:
    return "-" if v is None else f"{int(v):,}"


def pct(v: Any, digits: int = 3) -> str:
    """A fraction as a percentage, 3 significant figures (0.0545 -> '5.45%')."""
    if v is None:
        return "-"
    return f"{sig(100 * float(v), digits)}%"


def duration_ms(ms: Any) -> str:
    """A duration given in ms, in the unit that reads best: 310 µs, 31.2 ms, 1.99 s, 10.6 min, 2.50 h."""
    if ms is None:
        return "-"
    v = float(ms)
    if not math.isfinite(v):
        return "-"
    a = abs(v)
    if a == 0:
        return "0 ms"
    if a < 1:
        return f"{sig(v * 1000)} µs"
    if a < 1000:
        return f"{sig(v)} ms"
    if a < 60_000:
        return f"{sig(v / 1000)} s"
    if a < 3_600_000:
        return f"{sig(v / 60_000)} min"
    return f"{sig(v / 3_600_000)} h"


def run_title(config: Mapping[str, Any] | None, name: str) -> str:
    """'servelab run: NAME', or 'servelab replay: NAME' for a trace replay (the command that made it)."""
    kind = _get(config or {}, "workload", "kind")
    return f"servelab {'replay' if kind == 'replay' else 'run'}: {name}"


def money(v: Any) -> str:
    if v is None:
        return "-"
    f = float(v)
    return f"${f:,.2f}" if abs(f) >= 100 else f"${sig(f)}"


# -- what was benchmarked -----------------------------------------------------------------------------


def _dist(d: Any) -> str:
    """A length distribution in a few characters: 1,024; ~512 (lognormal); 100-900."""
    if isinstance(d, int | float):
        return count(d)
    if not isinstance(d, Mapping):
        return "-"
    kind = d.get("kind")
    if kind == "fixed":
        return count(d.get("value"))
    if kind == "uniform":
        return f"{count(d.get('low'))}-{count(d.get('high'))}"
    for key in ("median", "mean"):
        if d.get(key) is not None:
            return f"~{count(d[key])} ({kind})"
    return str(kind or "-")


def model_name(manifest: Mapping[str, Any]) -> str:
    t = manifest.get("target") or {}
    m = t.get("model")
    if isinstance(m, Mapping):  # the simulator's model card
        m = m.get("name")
    if not m:
        m = _get(manifest, "config", "target", "model") or _get(t, "deployment", "model")
    if not m and t.get("models"):
        m = t["models"][0]
    return str(m) if m else "the served model"


def is_simulated(manifest: Mapping[str, Any]) -> bool:
    url = str(_get(manifest, "config", "target", "url") or (manifest.get("target") or {}).get("url") or "")
    return url == "sim" or url.startswith("sim:")


def hardware_words(manifest: Mapping[str, Any]) -> str | None:
    t = manifest.get("target") or {}
    dep = t.get("deployment") or {}
    hw = dep.get("hardware") or _get(t, "hardware", "name") or (t.get("hardware") if isinstance(
        t.get("hardware"), str) else None)
    if not hw:
        return None
    gpus, nodes = dep.get("gpus"), dep.get("nodes")
    par = ", ".join(f"{k.upper()}{dep[k]}" for k in ("tp", "pp", "dp", "ep") if (dep.get(k) or 1) > 1)
    where = (f"{nodes} x {gpus // nodes} x {hw}" if nodes and nodes > 1 and gpus else
             f"{gpus} x {hw}" if gpus else str(hw))
    dtype = dep.get("dtype")
    extra = ", ".join(x for x in (par, str(dtype).upper() if dtype else "") if x)
    return where + (f", {extra}" if extra else "")


def engine_words(manifest: Mapping[str, Any]) -> str | None:
    t = manifest.get("target") or {}
    eng = _get(t, "deployment", "engine") or t.get("engine")
    if isinstance(eng, Mapping):
        eng = eng.get("name")
    if not eng or eng == "unknown":
        return "engine not identified" if eng == "unknown" else None
    eng = display_name(eng)
    ver = t.get("version")
    return f"{eng} {ver}" if ver and str(eng) == t.get("engine") else str(eng)


def _mix_label(c: Mapping[str, Any]) -> str:
    w = str(c.get("workload") or "?")
    return str(
        c.get("name") or (w.rsplit("/", 1)[-1].rsplit(".", 1)[0] if w.endswith((".yaml", ".yml")) else w)
    )


def mix_words(config: Mapping[str, Any]) -> str:
    """'mixed traffic: chat 16 users + batch-summarize 2 sessions/s (tenant bulk)'."""
    parts = []
    for c in config.get("mix") or []:
        load = (f"{count(c['concurrency'])} users" if c.get("concurrency") is not None
                else f"{sig(c.get('rate'))} sessions/s")
        parts.append(f"{_mix_label(c)} {load}" + (f" (tenant {c['tenant']})" if c.get("tenant") else ""))
    return "mixed traffic: " + " + ".join(parts)


def load_words(config: Mapping[str, Any]) -> str:
    if config.get("mix"):
        return mix_words(config)
    load, wl = config.get("load") or {}, config.get("workload") or {}
    agent = wl.get("kind") == "agent"
    unit = "sessions" if agent else "users"
    if load.get("rate") is not None:
        start = "new sessions" if agent else "requests"
        arrival = load.get("arrival") or "poisson"
        burst = f", burstiness {sig(load.get('burstiness'))}" if arrival == "gamma" else ""
        return f"open loop, {sig(load['rate'])} {start}/s ({arrival}{burst})"
    if wl.get("kind") == "replay":
        speed = wl.get("speed") or 1
        return (
            f"trace replay at {sig(speed)}x"
            if not wl.get("rate")
            else f"trace replay at {sig(wl['rate'])} req/s"
        )
    n = load.get("concurrency")
    return f"closed loop, {count(n if n is not None else DEFAULT_CONCURRENCY)} concurrent {unit}"


def workload_words(config: Mapping[str, Any]) -> str:
    if config.get("mix"):
        return "agent profiles " + ", ".join(str(c.get("workload")) for c in config["mix"])
    wl = config.get("workload") or {}
    if not wl:
        return "workload not recorded"
    kind = wl.get("kind") or "requests"
    if kind == "agent":
        return f"agent profile {wl.get('profile') or 'custom'}"
    if kind == "replay":
        return f"{wl.get('format')} trace {wl.get('path')}"
    return f"{_dist(wl.get('input_tokens'))} in / {_dist(wl.get('output_tokens'))} out tokens" + (
        " (EOS ignored)" if wl.get("ignore_eos") else "")


def limit_words(config: Mapping[str, Any]) -> str:
    lim = config.get("limits") or {}
    parts = []
    first = (config.get("mix") or [{}])[0]
    if first.get("sessions") is not None:
        parts.append(f"until {_mix_label(first)} has run {count(first['sessions'])} sessions")
    if lim.get("requests") is not None:
        parts.append(f"{count(lim['requests'])} requests")
    if lim.get("sessions") is not None:
        parts.append(f"{count(lim['sessions'])} sessions")
    if lim.get("duration_s") is not None:
        parts.append(f"for {duration_ms(lim['duration_s'] * 1000)}")
    if lim.get("warmup_requests"):
        parts.append(f"+{count(lim['warmup_requests'])} warm-up")
    return ", ".join(parts) or "until the trace ends"


def target_words(manifest: Mapping[str, Any]) -> str:
    """'Llama-3.1-8B on 1 x H100 (BF16), simulated (servelab-sim 0.1.0)' - model, hardware, real or not."""
    hw = hardware_words(manifest)
    eng = engine_words(manifest)
    kind = "simulated" if is_simulated(manifest) else "real endpoint"
    url = _get(manifest, "config", "target", "url") or (manifest.get("target") or {}).get("url")
    dep_engine = _get(manifest, "target", "deployment", "engine")
    if is_simulated(manifest) and dep_engine:
        eng = f"{display_name(dep_engine)} engine profile"
    how = f"{kind}, {eng}" if eng else kind
    where = "" if is_simulated(manifest) or not url else f" at {url}"
    return f"{model_name(manifest)}" + (f" on {hw}" if hw else "") + f" ({how}{where})"


def context_line(manifest: Mapping[str, Any]) -> str:
    """One line saying what is benchmarked and how: target, simulated or real, model, hardware, engine,
    load mode and level, token lengths, request count or duration."""
    cfg = manifest.get("config") or {}
    url = _get(cfg, "target", "url") or (manifest.get("target") or {}).get("url") or "?"
    return (f"{url} | {target_words(manifest)} | {load_words(cfg)} | {workload_words(cfg)} | "
            f"{limit_words(cfg)}")
