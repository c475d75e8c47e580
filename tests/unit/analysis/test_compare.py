import copy

import numpy as np
import pytest

from servelab.analysis.compare import (
    DIMENSIONS,
    check_fair,
    check_regression,
    compare_figures,
    manifest_diff,
    manifest_facts,
    request_samples,
)
from servelab.errors import ComparisonError, ConfigError
from servelab.records.schema import HTTP_ERROR, OK, RequestRecord

MS = 1_000_000


def _manifest(**target) -> dict:
    t = {"engine": "vllm", "version": "0.6.3", "model": "deepseek-v3", "hardware": "H100",
         "server_flags": ["--tensor-parallel-size", "8", "--max-num-seqs", "64", "--max-model-len=16384",
                          "--enable-prefix-caching"]}
    t.update(target)
    return {"target": t, "config": {"target": {"model": "deepseek-v3", "tokenizer": None},
                                    "workload": {"kind": "requests", "input_tokens": {"kind": "fixed", "value": 512},
                                                 "output_tokens": {"kind": "fixed", "value": 128}, "seed": 1},
                                    "load": {"concurrency": 16}}}


def test_facts_read_flags_lists_and_nested_deployment():
    f = manifest_facts(_manifest())
    assert f["engine"] == "engine=vllm version=0.6.3"
    assert f["parallelism"] == "8"
    assert f["batch_policy"] == "64"
    assert f["context_limit"] == "16384"
    assert f["prefix_caching"] == "true"
    assert f["speculative"] is None and f["driver"] is None
    assert "512" in f["prompts"] and "128" in f["outputs"] and "128" not in f["prompts"]
    sim = manifest_facts({"target": {"engine": "servelab-sim", "deployment": {"hardware": "h200", "count": 8,
                                                                               "tp": 8, "dtype": "fp8"}}})
    assert sim["gpu"] == "h200" and sim["quantization"] == "fp8"
    assert sim["parallelism"] == "count=8 tp=8"


def test_one_difference_is_fair():
    rows = check_fair([_manifest(), _manifest(hardware="H200")])
    by = {r["dimension"]: r for r in rows}
    assert by["gpu"]["status"] == "differs" and by["gpu"]["values"] == ["H100", "H200"]
    assert by["model"]["status"] == "same"
    assert by["driver"]["status"] == "not recorded"
    assert [r["dimension"] for r in rows] == list(DIMENSIONS)


def test_two_differences_raise_unless_allowed():
    b = _manifest(hardware="H200", engine="trtllm", version="0.12")
    with pytest.raises(ComparisonError) as e:
        check_fair([_manifest(), b])
    assert "2 dimensions" in str(e.value) and "GPU (H100 vs H200)" in str(e.value)
    assert "--allow-diff" in str(e.value)
    check_fair([_manifest(), b], allow_diff=["gpu"])
    with pytest.raises(ConfigError):
        check_fair([_manifest(), b], allow_diff=["colour"])


def test_workload_and_batch_policy_differences_are_seen():
    b = copy.deepcopy(_manifest())
    b["config"]["workload"]["input_tokens"]["value"] = 2048
    b["target"]["server_flags"][3] = "256"
    by = {r["dimension"]: r["status"] for r in manifest_diff([_manifest(), b])}
    assert by["prompts"] == "differs" and by["batch_policy"] == "differs" and by["outputs"] == "same"
    c = _manifest()
    del c["target"]["hardware"]
    assert {r["dimension"]: r["status"] for r in manifest_diff([_manifest(), c])}["gpu"] == "unknown"


def _records(n: int, ttft_ms: float, itl_ms: float, seed: int, tokens: int = 20, fail_every: int = 0):
    rng = np.random.default_rng(seed)
    recs = []
    t = 10**15  # a large monotonic clock reading
    for i in range(n):
        sent = t + i * 50 * MS
        if fail_every and i % fail_every == 0:
            recs.append(RequestRecord(request_id=i, status=HTTP_ERROR, intended_ns=sent, sent_ns=sent,
                                      end_ns=sent + MS, http_status=500))
            continue
        first = sent + int(ttft_ms * MS * rng.lognormal(0, 0.2))
        gaps = (itl_ms * MS * rng.lognormal(0, 0.1, tokens - 1)).astype(np.int64)
        times = [first, *(first + np.cumsum(gaps)).tolist()]
        recs.append(RequestRecord(request_id=i, status=OK, intended_ns=sent, sent_ns=sent, first_token_ns=first,
                                  last_token_ns=times[-1], end_ns=times[-1], token_times_ns=times,
                                  usage_completion_tokens=tokens, est_completion_tokens=tokens))
    return recs


def test_request_samples_values():
    s = request_samples(_records(30, 100, 10, seed=1, fail_every=10))
    assert s["ttft_ms"].size == 27 and s["failed"].sum() == 3
    assert s["itl_ms"].size == 27 * 19  # no gap across two requests
    assert np.all(s["itl_ms"] > 5) and np.all(s["itl_ms"] < 20)
    assert np.allclose(s["e2e_ms"], s["ttft_ms"] + s["tpot_ms"] * 19)


def test_compare_figures_verdicts():
    a = _records(300, 100, 10, seed=1)
    slower_ttft = _records(300, 150, 10, seed=2)
    rows = {r["figure"]: r for r in compare_figures(a, slower_ttft, resamples=300)}
    assert rows["ttft_ms p50"]["verdict"] == "worse"
    assert rows["ttft_ms p50"]["lo"] > 0 and rows["ttft_ms p50"]["b"] > rows["ttft_ms p50"]["a"]
    assert rows["itl_ms p50"]["verdict"] == "within noise"
    same = {r["figure"]: r for r in compare_figures(a, _records(300, 100, 10, seed=3), resamples=300)}
    assert same["ttft_ms p50"]["verdict"] == "within noise"
    faster = {r["figure"]: r for r in compare_figures(a, _records(300, 100, 5, seed=4), resamples=300)}
    assert faster["itl_ms p95"]["verdict"] == "better"
    tiny = {r["figure"]: r for r in compare_figures(_records(3, 100, 10, 1), _records(3, 100, 10, 2))}
    assert tiny["e2e_ms p99"]["verdict"] == "too few samples"


def _sum(p: float, good: float) -> dict:
    return {"metrics": {"ttft_ms": {"p50": p, "p95": 2 * p, "p99": 3 * p},
                        "e2e_ms": {"p50": 10 * p, "p95": 20 * p, "p99": 30 * p}},
            "throughput": {"goodput_requests_per_s": good}}


def test_check_regression():
    base = {1: _sum(100, 10.0), 8: _sum(200, 40.0)}
    assert check_regression(base, {1: _sum(105, 10.0), 8: _sum(210, 39.0)}, 0.1) == []
    fails = check_regression(base, {1: _sum(130, 10.0), 8: _sum(200, 30.0)}, 0.1)
    metrics = {(f["level"], f["metric"]) for f in fails}
    assert (1, "ttft_ms p99") in metrics and (1, "e2e_ms p50") in metrics
    assert (8, "goodput") in metrics and not any(lv == 8 and m.startswith("ttft") for lv, m in metrics)
    lacking = check_regression(base, {1: _sum(100, 10.0)}, 0.1)
    assert lacking == [{"level": 8, "metric": "level", "baseline": None, "candidate": None, "change": None,
                        "limit": 0.0, "message": "the candidate has no run at level 8"}]
    assert check_regression(_sum(100, 10.0), _sum(100, 9.6), {"latency": 0.1, "goodput": 0.05}) == []
    with pytest.raises(ConfigError):
        check_regression(base, base, {"latency": 0.1})
