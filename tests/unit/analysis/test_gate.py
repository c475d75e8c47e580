"""The regression gate: every gated figure, its direction, limits, the noise floor and refusals."""

import copy

import pytest

from servelab.analysis.gate import check_regression, invalid_reasons, refusals
from servelab.errors import ConfigError


def _sum(p: float, good: float, *, tpot: float = 5.0, itl: float = 5.0, tok_s: float = 1000.0) -> dict:
    return {"metrics": {"ttft_ms": {"p50": p, "p95": 2 * p, "p99": 3 * p},
                        "tpot_ms": {"p50": tpot, "p95": tpot, "p99": tpot},
                        "itl_ms": {"p50": itl, "p95": 2 * itl, "p99": 3 * itl},
                        "e2e_ms": {"p50": 10 * p, "p95": 20 * p, "p99": 30 * p}},
            "throughput": {"goodput_requests_per_s": good, "output_tokens_per_s": tok_s},
            "valid": True, "invalid_reasons": []}


def _agent(task_p95: float, completed: int, per_task: float) -> dict:
    return {**_sum(100, 10.0), "sessions": {"started": 100, "completed": completed},
            "task_ms": {"p95": task_p95}, "cost": {"per_successful_task": per_task}}


def test_latency_and_goodput():
    base = {1: _sum(100, 10.0), 8: _sum(200, 40.0)}
    assert check_regression(base, {1: _sum(105, 10.0), 8: _sum(210, 39.0)}, 0.1) == []
    fails = check_regression(base, {1: _sum(130, 10.0), 8: _sum(200, 30.0)}, 0.1)
    metrics = {(f["level"], f["metric"]) for f in fails}
    assert (1, "ttft_ms p99") in metrics and (1, "e2e_ms p50") in metrics
    assert (8, "goodput") in metrics and not any(lv == 8 and m.startswith("ttft") for lv, m in metrics)
    ttft = next(f for f in fails if f["metric"] == "ttft_ms p50")
    assert ttft["change"] == pytest.approx(0.3)
    assert ttft["message"] == "ttft_ms p50 at level 1: 130.0 ms vs 100.0 ms (+30.0%, limit +10%)"
    good = next(f for f in fails if f["metric"] == "goodput")
    assert good["message"] == "goodput at level 8: 30.0 req/s vs 40.0 req/s (-25.0%, limit -10%)"
    lacking = check_regression(base, {1: _sum(100, 10.0)}, 0.1)
    assert lacking == [{"level": 8, "metric": "level", "baseline": None, "candidate": None, "change": None,
                        "limit": 0.0, "message": "the candidate has no run at level 8"}]
    assert check_regression(_sum(100, 10.0), _sum(100, 9.6), {"latency": 0.1, "goodput": 0.05}) == []
    with pytest.raises(ConfigError):
        check_regression(base, base, {"latency": 0.1})


def test_tpot_itl_and_throughput_are_gated():
    fails = check_regression(_sum(100, 10.0), _sum(100, 10.0, tpot=6.0, itl=6.0, tok_s=800.0), 0.1)
    by = {f["metric"]: f for f in fails}
    assert set(by) == {"tpot_ms p50", "tpot_ms p95", "tpot_ms p99", "itl_ms p50", "itl_ms p95", "itl_ms p99",
                       "output tokens/s"}
    assert by["tpot_ms p50"]["change"] == pytest.approx(0.2)  # 6 / 5 - 1
    assert by["output tokens/s"]["change"] == pytest.approx(-0.2)
    assert by["output tokens/s"]["message"].startswith("output tokens/s: 800.0 tok/s vs 1,000.0 tok/s")


def test_agent_figures_are_gated():
    base = _agent(60_000, 95, 0.40)
    assert check_regression(base, _agent(63_000, 93, 0.42), 0.1) == []  # +5%, -2.1%, +5%
    fails = {f["metric"]: f for f in check_regression(base, _agent(72_000, 80, 0.50), 0.1)}
    assert set(fails) == {"task_ms p95", "task success rate", "cost per successful task"}
    assert fails["task success rate"]["baseline"] == pytest.approx(0.95)
    assert fails["task success rate"]["change"] == pytest.approx(80 / 95 - 1)
    assert fails["task success rate"]["message"] == "task success rate: 80.0% vs 95.0% (-15.8%, limit -10%)"
    assert fails["cost per successful task"]["message"] == (
        "cost per successful task: $0.5 vs $0.4 (+25.0%, limit +10%)")
    # An agent baseline whose candidate lost its agent figures fails on each.
    plain = {k: v for k, v in _agent(60_000, 95, 0.4).items() if k not in ("task_ms", "sessions", "cost")}
    assert {f["metric"] for f in check_regression(base, plain, 0.1)} == {
        "task_ms p95", "task success rate", "cost per successful task"}


def test_noise_floor():
    base = _sum(100.0, 10.0)
    tiny = _sum(100.06, 10.0)  # +0.06%
    assert check_regression(base, tiny, 0.0) == []  # the default 2% floor
    # Without the floor: TTFT and e2e at 3 percentiles, each +0.06%.
    assert len(check_regression(base, tiny, 0.0, noise_floor=0.0)) == 6
    over = check_regression(base, _sum(103.0, 10.0), 0.0)
    assert over and over[0]["message"].endswith("(+3.0%, limit +0%, noise floor 2%)")
    with pytest.raises(ConfigError):
        check_regression(base, base, 0.1, noise_floor=1.5)


def _side(name: str, summary: dict, model: str = "Llama-3.1-8B", **target) -> dict:
    manifest = {"target": {"engine": "servelab-sim", "deployment": {"model": model, "hardware": "H100",
                                                                      **target}},
                "config": {"workload": {"input_tokens": 256}, "load": {"concurrency": 4}}}
    return {"name": name, "manifest": manifest, "levels": {4: summary}}


def test_refusals():
    ok = _sum(100, 10.0)
    assert refusals(_side("a", ok), _side("b", ok)) == []
    bad = {**ok, "valid": False, "invalid_reasons": ["47 of 50 requests failed (94% > 5%)"]}
    why = refusals(_side("a", ok), _side("b", bad))
    assert why == ["the candidate b (level 4) is INVALID: 47 of 50 requests failed (94% > 5%)"]
    tiny = refusals(_side("a", ok), _side("b", ok, model="sim-tiny"))
    assert len(tiny) == 1 and "model checkpoint (Llama-3.1-8B vs sim-tiny)" in tiny[0]
    assert refusals(_side("a", ok), _side("b", ok, model="sim-tiny"), allow_diff=["model"]) == []
    # One engine fact differing is what a gate is for (a new version, one flag)...
    assert refusals(_side("a", ok, max_num_seqs=256), _side("b", ok, max_num_seqs=64)) == []
    # ...two are not.
    two = refusals(_side("a", ok, max_num_seqs=256, dtype="bf16"),
                   _side("b", ok, max_num_seqs=64, dtype="fp8"))
    assert len(two) == 1 and "2 dimensions" in two[0] and "batch policy" in two[0]
    other_load = _side("b", ok)
    other_load["manifest"] = copy.deepcopy(other_load["manifest"])
    other_load["manifest"]["config"]["load"]["concurrency"] = 8
    assert refusals(_side("a", ok), other_load) == []  # levels are matched one by one, not refused


def test_invalid_reasons_reads_both_shapes():
    assert invalid_reasons({"valid": True, "invalid_reasons": []}) is None
    assert invalid_reasons({"valid": False, "invalid_reasons": ["x"]}) == ["x"]
    assert invalid_reasons({"validity": {"valid": False, "reasons": ["y"]}}) == ["y"]
    assert invalid_reasons({"valid": False}) == ["marked invalid (no reason recorded)"]
    assert invalid_reasons({}) is None
    assert invalid_reasons({"valid": True, "interrupted": True}) == [
        "the run was interrupted: its figures cover only what finished"]


def test_split_by_noise_moves_only_figures_whose_interval_holds_zero():
    from servelab.analysis.gate import split_by_noise

    fails = [
        {"level": 16, "metric": "itl_ms p95", "message": "itl_ms p95 at level 16: 16.6 ms vs 12.9 ms"},
        {"level": 16, "metric": "ttft_ms p50", "message": "ttft_ms p50 at level 16: 80 ms vs 50 ms"},
        {"level": 16, "metric": "task_ms p95", "message": "task_ms p95: no raw row"},
        {"level": 32, "metric": "itl_ms p95", "message": "itl_ms p95 at level 32"},
    ]
    rows = {16: {"itl_ms p95": {"verdict": "within noise", "lo": -0.07, "hi": 13.2, "unit": "ms",
                                "n": (13428, 12148)},
                 "ttft_ms p50": {"verdict": "worse", "lo": 20.0, "hi": 40.0, "unit": "ms", "n": (64, 64)}},
            32: {"itl_ms p95": {"verdict": "too few samples", "lo": None, "hi": None, "unit": "ms"}}}
    kept, unsure = split_by_noise(fails, rows)
    assert [f["metric"] for f in kept] == ["ttft_ms p50", "task_ms p95", "itl_ms p95"]
    assert [(f["level"], f["metric"], f["lo"], f["hi"]) for f in unsure] == [(16, "itl_ms p95", -0.07, 13.2)]
    assert "-0.07 ms to 13.2 ms" in unsure[0]["message"] and "13,428 and 12,148" in unsure[0]["message"]
    assert split_by_noise(fails, {}) == (fails, [])
