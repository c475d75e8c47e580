import copy

import numpy as np
import pytest

from servelab.analysis.compare import (
    DIMENSIONS,
    check_fair,
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
    return {
        "target": t,
        "config": {
            "target": {"model": "deepseek-v3", "tokenizer": None},
            "workload": {
                "kind": "requests",
                "input_tokens": {"kind": "fixed", "value": 512},
                "output_tokens": {"kind": "fixed", "value": 128},
                "seed": 1,
            },
            "load": {"concurrency": 16},
        },
    }


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


def test_a_mixed_traffic_run_differs_in_workload_from_a_plain_run():
    # --mix leaves config.workload and config.load at their defaults: the classes must be seen
    m = copy.deepcopy(_manifest())
    m["config"]["mix"] = [{"workload": "chat", "concurrency": 16}, {"workload": "batch-summarize",
                                                                    "concurrency": 64}]
    by = {r["dimension"]: r["status"] for r in manifest_diff([_manifest(), m])}
    assert by["prompts"] == "differs"
    n = copy.deepcopy(m)
    n["config"]["mix"][1]["concurrency"] = 32
    assert {r["dimension"]: r["status"] for r in manifest_diff([m, n])}["prompts"] == "differs"
    assert {r["dimension"]: r["status"] for r in manifest_diff([m, copy.deepcopy(m)])}["prompts"] == "same"


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
        recs.append(
            RequestRecord(
                request_id=i,
                status=OK,
                intended_ns=sent,
                sent_ns=sent,
                first_token_ns=first,
                last_token_ns=times[-1],
                end_ns=times[-1],
                token_times_ns=times,
                usage_completion_tokens=tokens,
                est_completion_tokens=tokens,
            )
        )
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


def _fixed(n: int, *, tokens: int, e2e_ms: float, users: int, ttft_ms: float = 20.0) -> list[RequestRecord]:
    """A deterministic closed loop: ``users`` back-to-back streams of identical requests."""
    recs, free = [], [0] * users
    for i in range(n):
        u = i % users
        sent = free[u]
        first = sent + int(ttft_ms * MS)
        end = sent + int(e2e_ms * MS)
        step = (end - first) // max(tokens - 1, 1)
        times = [first + k * step for k in range(tokens)]
        recs.append(
            RequestRecord(
                request_id=i,
                status=OK,
                intended_ns=sent,
                sent_ns=sent,
                first_token_ns=first,
                last_token_ns=times[-1],
                end_ns=end,
                token_times_ns=times,
                usage_completion_tokens=tokens,
                est_completion_tokens=tokens,
            )
        )
        free[u] = end
    return recs


def test_throughput_is_the_runs_figure_and_a_large_gain_is_never_noise():
    # 40 requests, 4 users, each 1000 ms: 10 rounds = 10 s; 100 tokens each -> 4000 tok / 10 s = 400 tok/s.
    a = _fixed(40, tokens=100, e2e_ms=1000, users=4)
    # The same with 183 tokens in the same time: 7320 / 10 = 732 tok/s, +83%.
    b = _fixed(40, tokens=183, e2e_ms=1000, users=4)
    rows = {r["figure"]: r for r in compare_figures(a, b, resamples=200)}
    thr = rows["output tokens/s"]
    assert thr["a"] == pytest.approx(400.0) and thr["b"] == pytest.approx(732.0)
    assert thr["rel"] == pytest.approx(0.83)
    assert thr["lo"] == pytest.approx(332.0) and thr["hi"] == pytest.approx(332.0)  # deterministic: exact
    assert thr["verdict"] == "better"
    assert rows["requests/s"]["a"] == pytest.approx(4.0) and rows["requests/s"]["verdict"] == "within noise"


def test_a_tiny_difference_with_a_zero_width_interval_is_within_noise():
    a = _fixed(40, tokens=100, e2e_ms=1000.0, users=4)
    b = _fixed(40, tokens=100, e2e_ms=1000.6, users=4)  # +0.06% e2e, exactly, every request
    rows = {r["figure"]: r for r in compare_figures(a, b, resamples=200)}
    e2e = rows["e2e_ms p50"]
    assert e2e["lo"] == e2e["hi"] == pytest.approx(0.6)  # the interval excludes 0...
    assert e2e["verdict"] == "within noise"  # ...but 0.06% is under the 2% floor
    assert compare_figures(a, b, resamples=200, noise_floor=0.0)[9]["verdict"] == "worse"
    assert rows["output tokens/s"]["verdict"] == "within noise"


def test_throughput_interval_by_hand():
    # Closed loop, 2 users, one request each: 10 and 30 tokens, both 1 s long; window 1 s -> 40 tok/s.
    # Resampling 2 requests: {10,10} -> 20 (p 1/4), {10,30} -> 40 (1/2), {30,30} -> 60 (1/4); the window
    # scales with the resampled busy time (always 2 s of 2 s), so the 95% interval is [20, 60].
    from servelab.analysis.stats import RateSample, rate_diff_ci, rate_replicates

    s = RateSample(np.array([10.0, 30.0]), np.array([1.0, 1.0]), 1.0, closed=True)
    reps = rate_replicates(s, resamples=4000, rng=np.random.default_rng(0))
    assert set(np.unique(reps)) == {20.0, 40.0, 60.0}
    assert np.mean(reps == 40.0) == pytest.approx(0.5, abs=0.03)
    lo, hi = np.percentile(reps, [2.5, 97.5])
    assert (lo, hi) == (20.0, 60.0)
    # Closed loop where each request streams 10 tok/s of its own time: 10 tokens in 1 s, 30 in 3 s;
    # window 1 s, busy 4 s in all. {a,a}: 20 tok over 1*2/4 = 0.5 s -> 40; {b,b}: 60 over 1.5 s -> 40; {a,b}:
    # 40 over 1 s. Every replicate is 40: the figure is set by the per-request rate, not by which requests
    # were drawn.
    t = RateSample(np.array([10.0, 30.0]), np.array([1.0, 3.0]), 1.0, closed=True)
    assert np.allclose(rate_replicates(t, resamples=400, rng=np.random.default_rng(1)), 40.0)
    # Open loop: the window is the schedule's, fixed: {10,10} -> 20, {30,30} -> 60, whatever the busy time.
    o = RateSample(np.array([10.0, 30.0]), np.array([1.0, 3.0]), 1.0, closed=False)
    reps = rate_replicates(o, resamples=400, rng=np.random.default_rng(2))
    assert set(np.unique(reps)) == {20.0, 40.0, 60.0}
    same = rate_diff_ci(s, s, resamples=400, rng=np.random.default_rng(3))
    assert same["diff"] == 0 and same["lo"] < 0 < same["hi"]


def test_two_facts_differing_are_unfair_and_must_match_dimensions():
    flags = ["--tensor-parallel-size", "8", "--max-num-seqs", "64", "--dtype", "bfloat16"]
    a = _manifest(server_flags=flags)
    b = _manifest(server_flags=["--tensor-parallel-size", "8", "--max-num-seqs", "256", "--dtype", "float16"])
    with pytest.raises(ComparisonError) as e:
        check_fair([a, b])
    assert "batch policy" in str(e.value) and "quantization" in str(e.value)
    tiny = copy.deepcopy(a)
    tiny["target"]["model"] = "sim-tiny"
    check_fair([a, tiny])  # compare: the model is the one thing varied
    with pytest.raises(ComparisonError) as e:
        check_fair([a, tiny], must_match=("model",))
    assert "model checkpoint (deepseek-v3 vs sim-tiny)" in str(e.value)


def test_a_sweeps_server_command_line_is_a_fact():
    # A sweep records the command that started each point's server beside the target's facts.
    a = {"target": {"engine": "vllm", "model": "m"},
         "server": {"command_line": ["vllm", "serve", "m", "--max-num-seqs", "64", "--dtype", "bfloat16"]}}
    b = copy.deepcopy(a)
    b["server"]["command_line"][4], b["server"]["command_line"][6] = "256", "float16"
    f = manifest_facts(a)
    assert f["batch_policy"] == "64" and f["quantization"] == "bfloat16"
    with pytest.raises(ComparisonError) as e:
        check_fair([a, b])
    assert "batch policy (64 vs 256)" in str(e.value)
    assert "quantization / dtype (bfloat16 vs float16)" in str(e.value)


def test_the_default_closed_loop_is_the_same_load_as_its_value_written_out():
    # `servelab run` (no --concurrency: 16 users) against `servelab config init` + `run --config` (the file
    # says concurrency: 16) is the same work: not "concurrency levels differ", and one level (16) for check
    from servelab.analysis.compare import DEFAULT_CONCURRENCY, run_level
    from servelab.config.models import DEFAULT_CONCURRENCY as CONFIG_DEFAULT

    assert DEFAULT_CONCURRENCY == CONFIG_DEFAULT
    default, written = copy.deepcopy(_manifest()), copy.deepcopy(_manifest())
    default["config"]["load"] = {"arrival": "poisson", "concurrency": None, "rate": None}
    written["config"]["load"] = {"arrival": "poisson", "concurrency": 16, "rate": None}
    by = {r["dimension"]: r["status"] for r in manifest_diff([default, written])}
    assert by["concurrency"] == "same"
    assert run_level(default) == run_level(written) == 16
    opened = copy.deepcopy(written)
    opened["config"]["load"] = {"arrival": "poisson", "concurrency": None, "rate": 5.0}
    assert run_level(opened) == 5.0
    assert {r["dimension"]: r["status"] for r in manifest_diff([default, opened])}["concurrency"] == "differs"


def test_workload_dimensions_read_as_key_value_words_not_json():
    # the console cut '{"arrival":"poisson","burstiness":1.0,"concurre…' to an ellipsis (JSON has no spaces to
    # wrap at); key=value words wrap, and unset (null) keys are left out
    m = copy.deepcopy(_manifest())
    m["config"]["load"] = {"arrival": "poisson", "burstiness": 1.0, "concurrency": None, "rate": None,
                           "think_time_s": 0.0}
    m["config"]["workload"]["ignore_eos"] = False
    f = manifest_facts(m)
    assert f["concurrency"] == "arrival=poisson burstiness=1 concurrency=16 think_time_s=0"
    assert f["prompts"] == "input_tokens.kind=fixed input_tokens.value=512 kind=requests"
    assert f["outputs"] == "ignore_eos=false output_tokens.kind=fixed output_tokens.value=128"
    m["config"]["mix"] = [{"workload": "chat", "concurrency": 16}]
    assert "mix[0].concurrency=16 mix[0].workload=chat" in manifest_facts(m)["prompts"]
