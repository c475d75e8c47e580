"""decision_of reads each point's manifest (GPU count, model) and sessions.parquet (task end times) from a
sweep directory and prices every target at its own GPU count."""

import json
from pathlib import Path

import pyarrow.parquet as pq

from servelab.records.rundir import SESSION_SCHEMA, rows_to_table
from servelab.records.schema import SessionRecord, session_to_row
from servelab.report.sweep_table import decision_csv
from servelab.sweep.decision_of import decision_for, target_label

S = 1_000_000_000


def _point(root: Path, key: str, target: str, gpus: int, level: int, tasks: int) -> dict:
    d = root / key
    d.mkdir()
    manifest = {"target": {"models": ["DeepSeek-V3"], "deployment": {"gpus": gpus, "nodes": gpus // 8}},
                "config": {"limits": {"duration_s": 400.0}}}
    (d / "manifest.json").write_text(json.dumps(manifest))
    # tasks end evenly inside the window [100, 400] s; one ends at 50 s (before it), one was cancelled
    sess = [
        SessionRecord(
            session_id=i,
            status="ok",
            accepted=True,
            start_ns=0,
            end_ns=int((100 + 300 * (i + 0.5) / tasks) * S),
        )
        for i in range(tasks)
    ]
    sess += [SessionRecord(session_id=900, status="ok", accepted=True, start_ns=0, end_ns=50 * S),
             SessionRecord(session_id=901, status="cancelled", start_ns=0, end_ns=399 * S)]
    pq.write_table(rows_to_table([session_to_row(s) for s in sess], SESSION_SCHEMA), d / "sessions.parquet")
    summary = {
        "run": {"started_ns": 0},
        "sessions": {"started": tasks + 2, "accepted": tasks + 1, "cancelled": 1},
        "throughput": {"output_tokens_per_s": 100.0},
    }
    return {"key": key, "status": "ok", "run_dir": key, "level": float(level), "summary": summary,
            "params": {"target": target, "concurrency": level}, "server_ready_s": 12.5}


def test_decision_for_a_sweep_directory(tmp_path: Path):
    pts = [_point(tmp_path, "a", "sim:deepseek-v3@8xh200,dtype=fp8", 8, 16, 30),
           _point(tmp_path, "b", "sim:deepseek-v3@2x8xh200,dtype=fp8", 16, 16, 45)]
    state = {"base_config": {"cost": {"model": {"kind": "gpu_hour", "gpu_hour_usd": 3.0, "gpus": 1}}},
             "points": pts}
    d = decision_for(tmp_path, state)
    assert d["window_s"] == [100.0, 400.0]
    rows = {r["target"]: r for r in d["rows"]}
    one, two = rows["deepseek-v3@8xh200"], rows["deepseek-v3@2x8xh200"]
    # 30 tasks in 300 s = 360 tasks/h; $ = 3.0 x 8 GPUs x (300/3600) h / 30 tasks = 0.0667 (not 1 GPU's price)
    assert one["tasks_in_window"] == 30 and abs(one["tasks_per_hour"] - 360) < 1e-9
    assert abs(one["usd_per_task"] - 3.0 * 8 * 300 / 3600 / 30) < 1e-12
    assert abs(two["usd_per_task"] - 3.0 * 16 * 300 / 3600 / 45) < 1e-12  # 0.0889: priced at 16 GPUs
    assert one["ready_s"] == 12.5 and one["success_rate"] == 31 / 31
    csv = decision_csv(d).splitlines()
    assert csv[0].startswith("target,GPUs,level") and len(csv) == 3


def test_target_label_is_short():
    assert target_label({"target": "sim:deepseek-v3@2x8xh200,dtype=fp8", "max_num_seqs": 64}, {}) == \
        "deepseek-v3@2x8xh200 max_num_seqs=64"
