"""Run and sweep directories built from synthetic records, for report tests (no engine, no sockets).

The synthetic server has capacity ``CAPACITY`` concurrent requests: below it latency is flat, above it
requests queue, so throughput flattens at ``CAPACITY`` (the knee a sweep report must show).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from servelab.analysis.knee import find_knee
from servelab.analysis.summary import build_summary
from servelab.config import RunConfig
from servelab.records.rundir import REQUEST_SCHEMA, SESSION_SCHEMA, rows_to_table, write_json
from servelab.records.schema import (
    HTTP_ERROR,
    OK,
    RequestRecord,
    SessionRecord,
    record_to_row,
    session_to_row,
)

MS = 1_000_000
CAPACITY = 4
EVIL = '<script>alert("x")</script>'  # a model name a hostile server might report


def synth(concurrency: int, per_user: int = 12, seed: int = 0, tokens: int = 48, capacity: int = CAPACITY):
    rng = np.random.default_rng(seed)
    slow = max(1.0, concurrency / capacity)
    recs, sess = [], []
    rid = 0
    for u in range(concurrency):
        t = 10**15 + u * 3 * MS
        start = t
        model_ns = tool_ns = 0
        for k in range(per_user):
            queue = int((slow - 1) * 420 * MS * rng.uniform(0.8, 1.2))  # waits for the requests ahead
            prefill = int(30 * MS * rng.lognormal(0, 0.2))
            first = t + queue + prefill
            gaps = (8 * MS * rng.lognormal(0, 0.15, tokens - 1)).astype(np.int64)
            times = [first, *(first + np.cumsum(gaps)).tolist()]
            end = times[-1] + MS
            status = HTTP_ERROR if rid % 97 == 13 else OK
            recs.append(
                RequestRecord(
                    request_id=rid,
                    session_id=u,
                    turn=k,
                    status=status,
                    intended_ns=t,
                    sent_ns=t,
                    first_token_ns=first if status == OK else None,
                    last_token_ns=times[-1] if status == OK else None,
                    end_ns=end,
                    token_times_ns=times if status == OK else [],
                    usage_prompt_tokens=900,
                    usage_completion_tokens=tokens if status == OK else None,
                    est_completion_tokens=tokens,
                    http_status=200 if status == OK else 500,
                    error=None if status == OK else "upstream <b>boom</b>",
                    srv_queue_ns=queue,
                    srv_prefill_ns=prefill,
                    srv_decode_ns=int(times[-1] - first),
                    srv_preempted_ns=0,
                    srv_comm_ns=0,
                )
            )
            model_ns += end - t
            tool = int(100 * MS * rng.lognormal(0, 0.5))
            tool_ns += tool
            t = end + tool
            rid += 1
        sess.append(SessionRecord(session_id=u, profile="agent", status="ok", accepted=True, start_ns=start,
                                  end_ns=t, turns=per_user, requests=per_user, tool_calls=per_user,
                                  model_ns=model_ns, tool_ns=tool_ns))
    return recs, sess


def telemetry_table(t0: int, seconds: int = 20) -> pa.Table:
    rows = {"t_ns": [], "name": [], "labels": [], "value": []}
    for i in range(seconds):
        for name, v in (("requests_running", min(4, i % 7)), ("kv_cache_usage", 0.1 + 0.04 * i),
                        ("requests_waiting", max(0, i % 7 - 4))):
            rows["t_ns"].append(t0 + i * 10**9)
            rows["name"].append(name)
            rows["labels"].append("{}")
            rows["value"].append(float(v))
    return pa.table(rows)


def write_run(d: Path, concurrency: int, *, seed: int = 0, telemetry: bool = True, model: str = EVIL,
              capacity: int = CAPACITY, nodes: int = 1) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    recs, sess = synth(concurrency, seed=seed, capacity=capacity)
    cfg = RunConfig.model_validate(
        {"load": {"concurrency": concurrency}, "slo": {"ttft_ms": 150, "percentile": 95}}
    )
    started = min(r.intended_ns for r in recs)
    ended = max(r.end_ns for r in recs)
    summary = build_summary(recs, cfg, started_ns=started, ended_ns=ended)
    pq.write_table(rows_to_table([record_to_row(r) for r in recs], REQUEST_SCHEMA), d / "requests.parquet")
    pq.write_table(rows_to_table([session_to_row(s) for s in sess], SESSION_SCHEMA), d / "sessions.parquet")
    if telemetry:
        pq.write_table(telemetry_table(started), d / "telemetry.parquet")
    write_json(d / "summary.json", summary)
    manifest = {
        "schema_version": 1,
        "kind": "run",
        "servelab_version": "0.1.0",
        "command_line": ["servelab", "run"],
        "config": cfg.model_dump(mode="json"),
        "seed": 0,
        "target": {
            "engine": "servelab-sim",
            "version": "0.1.0",
            "model": model,
            "deployment": {
                "hardware": "H100",
                "gpus": nodes,
                "nodes": nodes,
                "gpus_per_node": 1,
                "kv_tokens": 400_000,
            },
        },
        "host": {},
        "started_at": "2026-01-01T00:00:00Z",
        "ended_at": "2026-01-01T00:01:00Z",
    }
    (d / "manifest.json").write_bytes(orjson.dumps(manifest))
    return d


def write_sweep(d: Path, levels=(1, 2, 4, 8, 16)) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    points = []
    for i, c in enumerate(levels):
        key = f"p{i:03d}-concurrency={c}"
        run = write_run(d / key, c, seed=i, telemetry=(c == CAPACITY))
        summary = orjson.loads((run / "summary.json").read_bytes())
        points.append(
            {
                "index": i,
                "key": key,
                "params": {"concurrency": c},
                "level": float(c),
                "status": "ok",
                "run_dir": key,
                "summary": summary,
                "error": None,
            }
        )
    tp = [p["summary"]["throughput"]["output_tokens_per_s"] for p in points]
    lat = [p["summary"]["metrics"]["ttft_ms"]["p95"] for p in points]
    knee = find_knee([p["level"] for p in points], tp, latency_p95=lat)
    state = {"schema_version": 1, "kind": "sweep", "axes": {"concurrency": list(levels)},
             "base_config": {"slo": {"ttft_ms": 150, "percentile": 95}}, "points": points, "knee": knee,
             "knee_reason": None, "complete": True}
    write_json(d / "sweep.json", state)
    return d


def write_grouped_sweep(d: Path, groups: dict[str, tuple[dict, int, int]], levels=(1, 2, 4, 8, 16),
                        accuracy: dict[str, dict] | None = None) -> Path:
    """A sweep over several groups of points, as ``servelab sweep`` writes it (``knees`` per group,
    ``scaling`` when the groups ran on different node counts, per-point ``accuracy`` when given).

    ``groups``: name -> (fixed params, capacity, nodes); ``accuracy``: name -> the point's accuracy entry.
    """
    from servelab.sweep.knee_of import knees_for
    from servelab.sweep.scaling_of import scaling_for

    d.mkdir(parents=True, exist_ok=True)
    points = []
    for name, (fixed, capacity, nodes) in groups.items():
        for c in levels:
            i = len(points)
            key = f"p{i:03d}-{name}_concurrency={c}"
            run = write_run(d / key, c, seed=i, telemetry=False, capacity=capacity, nodes=nodes)
            summary = orjson.loads((run / "summary.json").read_bytes())
            points.append({"index": i, "key": key, "params": {**fixed, "concurrency": c}, "level": float(c),
                           "status": "ok", "run_dir": key, "summary": summary, "error": None,
                           **({"accuracy": accuracy[name]} if accuracy and name in accuracy else {})})
    knees, knee, reason = knees_for(points)
    state = {"schema_version": 1, "kind": "sweep", "axes": {}, "base_config": {}, "points": points,
             "knees": knees, "knee": knee, "knee_reason": reason, "scaling": scaling_for(d, points),
             "complete": True}
    write_json(d / "sweep.json", state)
    return d
