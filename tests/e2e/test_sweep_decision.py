"""`servelab sweep` against the in-process simulator: the decision table over two topologies (each priced at
its own GPU count, decision.csv beside sweep.json) and a max-num-seqs sweep that reports its knee and the
split-traffic pair."""

import json

from servelab.cli.main import main

LOAD = ["--input-tokens", "256", "--output-tokens", "128", "--ignore-eos"]


def _sweep(tmp_path, capsys, *args):
    assert main(["sweep", "--out", str(tmp_path), "--json", "--no-report", *LOAD, *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_decision_table_prices_each_target_at_its_gpu_count(tmp_path, capsys):
    state = _sweep(
        tmp_path,
        capsys,
        "--target",
        "sim:llama-3.1-8b@1xh100",
        "--target",
        "sim:llama-3.1-8b@2xh100,dp=2",
        "--concurrency",
        "2,8,32",
        "--requests",
        "96",
        "--gpu-hour-usd",
        "2.0",
    )
    d = state["decision"]
    rows = {(r["target"], r["level"]): r for r in d["rows"]}
    assert {r["gpus"] for r in d["rows"]} == {1, 2} and len(rows) == 6
    for r in d["rows"]:  # $/request = price x GPUs / 3600 / requests per second, at that target's GPU count
        assert abs(r["usd_per_request"] - 2.0 * r["gpus"] / 3600 / r["requests_per_s"]) < 1e-12
    two = rows[("llama-3.1-8b@2xh100 dp=2", 32.0)] if ("llama-3.1-8b@2xh100 dp=2", 32.0) in rows else \
        rows[("llama-3.1-8b@2xh100", 32.0)]
    assert two["scaling_efficiency"] is not None  # against 1 GPU at the same level
    assert d["advice"][0]["kind"] == "choice"
    sweep_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    assert (sweep_dir / "decision.csv").read_text().startswith("target,GPUs,level")


def test_max_num_seqs_sweep_reports_its_knee_and_the_split(tmp_path, capsys):
    state = _sweep(tmp_path, capsys, "--target", "sim:llama-3.1-8b@1xh100", "--set", "max_num_seqs=1,4,16,64",
                   "--concurrency", "16", "--requests", "256", "--slo-ttft-ms", "2000")
    (g,) = state["knees"]
    # 16 users: more than 16 sequences buys nothing, so the knee lies at 16 (+- one grid level)
    assert g["axis"] == "max_num_seqs" and g["knee"]["level"] in (4.0, 16.0), g
    assert 0 < g["knee"]["bootstrap"]["share"] <= 1
    (sp,) = state["split"]
    assert sp["axis"] == "max_num_seqs" and sp["interactive"] in (4.0, 16.0, 64.0)
    if sp["split_helps"]:  # a smaller interactive setting meets the SLO where the knee misses it
        assert sp["bulk"] == g["knee"]["level"] and sp["interactive"] < sp["bulk"]
        assert "interactive endpoint: max_num_seqs" in sp["text"]
    else:  # 16 closed-loop users bound the batch: the knee meets TTFT p99 <= 2 s too, one endpoint
        assert sp["interactive"] == sp["bulk"] == g["knee"]["level"]
        assert sp["text"].startswith("no split needed: the throughput knee max_num_seqs")
