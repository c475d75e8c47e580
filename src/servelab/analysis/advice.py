"""Deployment advice: decision rules evaluated on the measured evidence, and shown with it.

The rules are the ones practitioners use for LLM serving (single node vs multi-node vs a smaller dense
model; separate endpoints for interactive and bulk traffic). Each rule has conditions; each condition is
tested on one fact gathered from the run (:func:`collect_evidence`) and holds, fails, or is unknown when
the run did not measure that fact. A rule's verdict:

    required / not possible   a decisive condition settles it (the model does not fit one node)
    not indicated (veto)      a veto condition was measured and fails: the figure the advice rests on says
                              no (split traffic when the mix measured no interference)
    recommended               at least 3/4 of the known conditions hold (and at least two are known; one
                              for a rule of one condition or in ONE_FACT_RULES)
    not indicated             at most 1/4 hold
    mixed                     in between
    not enough evidence       fewer than two conditions could be tested

Every advice item is ``{"rule", "verdict", "why", "evidence": [{"fact", "label", "value", "unit", "test",
"holds", "source"}]}`` so the reader sees the figures behind it, never a bare recommendation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servelab.analysis.attribution import int_columns
from servelab.records.summary import dig as _get

Fact = dict[str, Any]  # {"value", "unit", "label", "source"}

# Thresholds, named so the report can show them.
KV_COMFORT = 0.8  # expected KV need / capacity below this fits comfortably
BURSTY_CV = 1.3  # coefficient of variation of inter-arrival gaps above this is bursty
SUSTAINED_CV = 1.1
TOOL_TURN_RATIO = 0.5  # tool calls per model turn at or above this: tools interrupt often
TOOL_SHARE = 0.5  # tools + retrieval + code over task wall clock: tools dominate
LONG_OUTPUT = 512  # mean output tokens
SHORT_OUTPUT = 300  # median output tokens of a "short" agent call
MANY_CALLS = 5  # model requests per task
PREEMPT_SHARE = 0.01  # share of requests preempted at least once
KV_FULL = 0.95  # peak KV-cache usage
SPLIT_LOSS = 0.6  # throughput at the SLO-meeting level below this share of the peak
# the interactive class's TTFT p95 with the bulk class / alone (a --mix run's baseline) at or above this:
# bulk traffic interferes; below it, splitting the endpoint has nothing to fix
INTERFERENCE_RATIO = 1.25
INTERFERENCE_MS = 50.0  # ...and it adds at least this much (ms) to that p95: 15 ms more is not worth a split


def _fact(facts: dict[str, Fact], name: str, value: Any, unit: str, label: str, source: str) -> None:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return
    facts[name] = {"value": value, "unit": unit, "label": label, "source": source}


def _flat_target(manifest: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(d: Mapping[str, Any]) -> None:
        for k, v in d.items():
            if isinstance(v, Mapping):
                walk(v)
            else:
                out.setdefault(str(k).lower().replace("-", "_"), v)

    walk(manifest.get("target") or {})
    return out


def _memory_facts(facts: dict[str, Fact], manifest: Mapping[str, Any]) -> None:
    t = _flat_target(manifest)
    nodes, gpn = t.get("nodes"), t.get("gpus_per_node")
    _fact(facts, "nodes", nodes, "", "nodes in the deployment", "manifest")
    if "fits_one_node" in t:
        _fact(facts, "fits_one_node", bool(t["fits_one_node"]), "", "model fits one node", "manifest")
    elif nodes == 1:
        _fact(facts, "fits_one_node", True, "", "model fits one node (it was served on one)", "manifest")
    elif t.get("weights_gb_per_gpu") and t.get("hbm_gb") and gpn:
        total = float(t["weights_gb_per_gpu"]) * float(t.get("gpus") or gpn * (nodes or 1))
        room = float(t["hbm_gb"]) * gpn * float(t.get("gpu_memory_utilization") or 0.9)
        _fact(facts, "fits_one_node", total < room, "", f"weights {total:.0f} GB vs one node {room:.0f} GB",
              "manifest")
    if t.get("kv_tokens"):
        _fact(facts, "kv_tokens", int(t["kv_tokens"]), "tokens", "KV-cache capacity", "manifest")


def _request_facts(facts: dict[str, Fact], manifest: Mapping[str, Any], requests: Any) -> None:
    c = int_columns(
        requests,
        (
            "intended_ns",
            "end_ns",
            "usage_prompt_tokens",
            "est_prompt_tokens",
            "usage_completion_tokens",
            "est_completion_tokens",
            "srv_preempted_ns",
        ),
    )
    live = ~c["warmup"]
    ok = live & (c["status"] == "ok")
    if not ok.any():
        return
    out = np.where(c["usage_completion_tokens?"], c["est_completion_tokens"], c["usage_completion_tokens"])[
        ok
    ]
    inp = np.where(c["usage_prompt_tokens?"], c["est_prompt_tokens"], c["usage_prompt_tokens"])[ok]
    _fact(facts, "mean_output_tokens", float(out.mean()), "tokens", "mean output length", "requests")
    _fact(facts, "median_output_tokens", float(np.median(out)), "tokens", "median output length", "requests")
    if not c["srv_preempted_ns?"][ok].all():
        pre = (c["srv_preempted_ns"][ok] > 0).mean()
        _fact(
            facts, "preempted_share", float(pre), "", "requests preempted at least once", "requests (srv_*)"
        )
    mode = "open" if _get(manifest, "config", "load", "rate") is not None else "closed"
    # Measured in both modes, from the requests' intended send times (in a closed loop, arrivals follow
    # completions: their spread is measured too, never assumed).
    t = np.sort(c["intended_ns"][live]).astype(np.float64)
    gaps = np.diff(t)
    if gaps.size >= 20 and gaps.mean() > 0:
        label = "inter-arrival CV (1 = Poisson)" if mode == "open" else \
            "inter-arrival CV in a closed loop (arrivals follow completions)"
        _fact(
            facts, "arrival_cv", float(gaps.std() / gaps.mean()), "", label, "requests (intended send times)"
        )
    conc = _get(manifest, "config", "load", "concurrency")
    how = "concurrency"
    if conc is None and ok.sum() >= 2:  # open loop: Little's law, arrival rate x mean time in system
        t = c["intended_ns"][ok].astype(np.float64)
        lat = (c["end_ns"] - c["intended_ns"])[ok & ~c["end_ns?"]].astype(np.float64)
        span = t.max() - t.min()
        conc = ok.sum() / span * lat.mean() if span > 0 and lat.size else None
        how = "rate x mean latency"
    if conc and "kv_tokens" in facts:
        need = float(conc) * float(inp.mean() + out.mean())
        _fact(facts, "kv_need_ratio", need / facts["kv_tokens"]["value"], "",
              f"expected KV need ({float(conc):.1f} seqs from {how}, x mean context) / capacity",
              "requests + manifest")


def _session_facts(facts: dict[str, Fact], sessions: Any) -> None:
    c = int_columns(
        sessions,
        (
            "start_ns",
            "end_ns",
            "turns",
            "requests",
            "tool_calls",
            "tool_ns",
            "retrieval_ns",
            "code_ns",
            "model_ns",
        ),
    )
    done = ~c["warmup"] & ~c["end_ns?"]
    if not done.any():
        return
    wall = (c["end_ns"][done] - c["start_ns"][done]).astype(np.float64)
    tools = (c["tool_ns"] + c["retrieval_ns"] + c["code_ns"])[done].astype(np.float64)
    if wall.sum() > 0:
        _fact(
            facts,
            "tool_share",
            float(tools.sum() / wall.sum()),
            "",
            "tools + retrieval + code / task time",
            "sessions",
        )
    turns = c["turns"][done].sum()
    if turns > 0:
        _fact(facts, "tool_calls_per_turn", float(c["tool_calls"][done].sum() / turns), "",
              "tool calls per model turn", "sessions")
    _fact(
        facts,
        "requests_per_task",
        float(c["requests"][done].mean()),
        "",
        "model requests per task",
        "sessions",
    )


def collect_evidence(
    manifest: Mapping[str, Any],
    summary: Mapping[str, Any] | None = None,
    requests: Any = None,
    sessions: Any = None,
    sweep: Mapping[str, Any] | None = None,
) -> dict[str, Fact]:
    """Facts the rules test, from whatever the run has. ``sweep``: optional ``{"levels", "throughput",
    "slo_level"}`` (``slo_level`` from :func:`servelab.analysis.knee.max_load_meeting_slo`)."""
    facts: dict[str, Fact] = {}
    _memory_facts(facts, manifest)
    if requests is not None:
        _request_facts(facts, manifest, requests)
    if sessions is not None:
        _session_facts(facts, sessions)
    slo = _get(manifest, "config", "slo") or {}
    has_latency_slo = any(slo.get(k) for k in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"))
    if has_latency_slo:
        _fact(facts, "slo_percentile", float(slo.get("percentile") or 99), "", "SLO percentile", "config")
    tel = (summary or {}).get("server") or {}  # summarize_telemetry's output
    kv = _get(tel, "gauges", "kv_cache_usage", "max")
    _fact(facts, "kv_usage_max", None if kv is None else float(kv), "", "peak KV-cache usage", "telemetry")
    pre = _get(tel, "counters", "preemptions_total")
    if pre is not None and "preempted_share" not in facts:
        _fact(facts, "preemptions", float(pre), "", "server preemptions during the run", "telemetry")
    _interference_fact(facts, (summary or {}).get("interference"), slo)
    if sweep and sweep.get("slo_level") is not None:
        lv, tp = list(sweep["levels"]), [float(x) for x in sweep["throughput"]]
        if sweep["slo_level"] in lv and tp:
            at = tp[lv.index(sweep["slo_level"])]
            _fact(facts, "slo_throughput_share", at / max(tp), "",
                  f"throughput at the highest SLO-meeting level ({sweep['slo_level']:g}) / peak", "sweep")
    return facts


def _interference_fact(facts: dict[str, Fact], inter: Any, slo: Mapping[str, Any]) -> None:
    """A --mix run's interference: the first (interactive) class's TTFT p95 with the others / alone, what
    that adds (ms), and, with a TTFT SLO, the mixed TTFT at the SLO's percentile over its limit."""
    if not isinstance(inter, Mapping):
        return
    v = _get(inter, "metrics", "ttft_ms", "p95") or {}
    if v.get("ratio") is None:
        return
    who, others = inter.get("class"), ", ".join(inter.get("with") or []) or "the other classes"
    _fact(facts, "interference_ttft_p95", float(v["ratio"]), "x",
          f"{who} TTFT p95 with {others} / alone ({v.get('mixed'):.3g} / {v.get('alone'):.3g} ms)",
          "mix interference")
    _fact(facts, "interference_ttft_p95_ms", float(v["mixed"]) - float(v["alone"]), " ms",
          f"{who} TTFT p95 added by {others}", "mix interference")
    pct = float(slo.get("percentile") or 99)
    key = {50.0: "p50", 95.0: "p95", 99.0: "p99"}.get(pct)
    mixed = (_get(inter, "metrics", "ttft_ms", key) or {}).get("mixed") if key else None
    if slo.get("ttft_ms") and mixed is not None:
        _fact(facts, "interference_ttft_slo", float(mixed) / float(slo["ttft_ms"]), "x",
              f"{who} TTFT {key} with {others} / the SLO's {float(slo['ttft_ms']):g} ms", "mix interference")


@dataclass(frozen=True)
class Condition:
    fact: str
    test: str  # shown to the reader
    fn: Callable[[Any], bool]
    decisive: str | None = None  # verdict when this condition alone settles the rule
    veto: bool = False  # measured and failing: the rule is not indicated, whatever else holds


def _cond(fact: str, op: str, x: float, decisive: str | None = None, veto: bool = False) -> Condition:
    fns = {"<": lambda v: v < x, "<=": lambda v: v <= x, ">": lambda v: v > x, ">=": lambda v: v >= x}
    return Condition(fact, f"{op} {x:g}", fns[op], decisive, veto)


def _is(fact: str, want: bool, decisive: str | None = None) -> Condition:
    return Condition(fact, f"is {str(want).lower()}", lambda v: bool(v) == want, decisive)


# rules whose every condition is a direct measurement of the question: one known fact can decide them
ONE_FACT_RULES = frozenset({"split traffic"})
RULES: tuple[tuple[str, str, tuple[Condition, ...]], ...] = (
    ("single node", "serve from one node",
     (_is("fits_one_node", True, decisive=None), _cond("kv_need_ratio", "<", KV_COMFORT),
      _cond("slo_percentile", ">=", 95), _cond("arrival_cv", ">", BURSTY_CV),
      _cond("tool_calls_per_turn", ">=", TOOL_TURN_RATIO))),
    ("multi-node", "spread the model over several nodes",
     (_is("fits_one_node", False, decisive="required"), _cond("preempted_share", ">=", PREEMPT_SHARE),
      _cond("kv_usage_max", ">=", KV_FULL), _cond("arrival_cv", "<=", SUSTAINED_CV),
      _cond("mean_output_tokens", ">=", LONG_OUTPUT))),
    ("smaller dense model", "try a smaller dense model",
     (_cond("requests_per_task", ">=", MANY_CALLS), _cond("median_output_tokens", "<=", SHORT_OUTPUT),
      _cond("tool_share", ">=", TOOL_SHARE))),
    ("split traffic", "split interactive and bulk traffic into endpoints with different max-num-seqs",
     (_cond("slo_throughput_share", "<", SPLIT_LOSS),
      _cond("interference_ttft_p95", ">=", INTERFERENCE_RATIO, veto=True),
      _cond("interference_ttft_p95_ms", ">=", INTERFERENCE_MS, veto=True),
      _cond("interference_ttft_slo", ">", 1.0, veto=True))),
)


def _evaluate(
    name: str, action: str, conds: Sequence[Condition], facts: Mapping[str, Fact]
) -> dict[str, Any]:
    ev, holds = [], []
    settled = None
    vetoed = None
    for c in conds:
        f = facts.get(c.fact)
        h = None if f is None else bool(c.fn(f["value"]))
        ev.append({"fact": c.fact, "label": f["label"] if f else c.fact.replace("_", " "),
                   "value": f["value"] if f else None, "unit": f["unit"] if f else "", "test": c.test,
                   "holds": h, "source": f["source"] if f else "not measured"})
        if h is not None:
            holds.append(h)
        if c.decisive and h:
            settled = c.decisive
        if c.veto and h is False and f is not None and vetoed is None:
            vetoed = f"{f['label']} is {f['value']:.3g}{f['unit']}, not {c.test}{f['unit']}"
    if name == "single node" and facts.get("fits_one_node", {}).get("value") is False:
        settled = "not possible"
    s, n = sum(holds), len(holds)
    min_known = 1 if len(conds) == 1 or name in ONE_FACT_RULES else 2
    if settled:
        verdict = settled
    elif vetoed:
        verdict = "not indicated"
    elif n < min_known:
        verdict = "not enough evidence"
    elif s / n >= 0.75:
        verdict = "recommended"
    elif s / n <= 0.25:
        verdict = "not indicated"
    else:
        verdict = "mixed"
    why = f"{action}: {s} of {n} tested conditions hold"
    if n < len(conds):
        why += f", {len(conds) - n} not measured"
    if name in ("single node", "multi-node") and not settled and n:
        why += (
            "; from one run's evidence only: a sweep over topologies (servelab sweep with several --target) "
            "decides it on measured tasks/h and $/task in its decision table"
        )
    if vetoed and not settled:
        why = f"{action}: not indicated, the measured figure it rests on says no: {vetoed}"
    if settled == "required":
        why = f"{action}: required, the model does not fit one node"
    elif settled == "not possible":
        why = f"{action}: not possible, the model does not fit one node"
    return {"rule": name, "verdict": verdict, "why": why, "evidence": ev}


def advise(facts: Mapping[str, Fact]) -> list[dict[str, Any]]:
    """Evaluate every rule on ``facts`` (from :func:`collect_evidence`, possibly with user-given facts
    added, e.g. ``{"fits_one_node": {"value": False, ...}}``)."""
    return [_evaluate(name, action, conds, facts) for name, action, conds in RULES]
