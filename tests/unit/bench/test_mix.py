"""Mixed traffic (issue 10, item 6): --mix parsing, the mix config, and mixed runs on the simulator.

The simulator runs on virtual time and is deterministic for a seed, so directions are asserted with margins:
a chat class beside 8 bulk summarisers on one simulated H100 waits measurably longer for its first token
than alone (measured: TTFT p95 6.9x with 4 chat users; here 2 users, 2.3x, asserted > 1.5x).
"""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from servelab.analysis.mix import interference
from servelab.bench.mix import class_seed
from servelab.bench.mix_run import BASELINE_DIR, execute_mix
from servelab.config import RunConfig
from servelab.config.mix import parse_mix
from servelab.errors import ConfigError


def cfg(tmp_path, **kw) -> RunConfig:
    return RunConfig.model_validate({"out": str(tmp_path / "runs"), **kw})


# ---- parsing and config ----------------------------------------------------------------------------------

def test_parse_mix_closed_and_open_classes():
    assert parse_mix("chat:16,batch-summarize:64") == [{"workload": "chat", "concurrency": 16},
                                                        {"workload": "batch-summarize", "concurrency": 64}]
    assert parse_mix(" chat:2 , batch-summarize@0.5 ") == [{"workload": "chat", "concurrency": 2},
                                                          {"workload": "batch-summarize", "rate": 0.5}]
    assert parse_mix("./p/my.yaml:3") == [{"workload": "./p/my.yaml", "concurrency": 3}]


@pytest.mark.parametrize(
    "bad, says",
    [
        ("chat", "is not NAME:USERS or NAME@RATE"),
        ("chat:0", "users must be at least 1"),
        ("chat:1.5", "is not a whole number"),
        ("chat:4,", "empty class"),
        ("", "empty"),
        ("chat@0", "rate must be a positive"),
        ("chat@inf", "rate must be a positive"),
        ("chat@x", "is not a number"),
        ("chat:4:5", "is not NAME:USERS"),
        ("chat:4@2", "is not NAME:USERS"),
    ],
)
def test_parse_mix_refuses_bad_input_with_a_message(bad, says):
    with pytest.raises(ConfigError, match=says) as e:
        parse_mix(bad)
    assert "--mix chat:16,batch-summarize:64" in (e.value.hint or "")


def test_mix_config_defaults_the_first_class_sessions_and_is_an_agent_run(tmp_path):
    c = cfg(
        tmp_path,
        mix=[
            {"workload": "chat", "concurrency": 12, "tenant": "a", "headers": {"X-Tenant": "a"}},
            {"workload": "batch-summarize", "rate": 2},
        ],
    )
    assert c.is_agent and c.mix_baseline
    assert [m.label for m in c.mix] == ["chat", "batch-summarize"]
    # max(16, 2 x 12); the others follow the first
    assert c.mix[0].sessions == 24 and c.mix[1].sessions is None
    assert c.limits.requests is None and c.limits.sessions is None
    assert cfg(tmp_path, mix=[{"workload": "chat", "concurrency": 2}]).mix[0].sessions == 16
    timed = cfg(tmp_path, mix=[{"workload": "chat", "concurrency": 2}], limits={"duration_s": 30})
    assert timed.mix[0].sessions is None  # a duration ends it


@pytest.mark.parametrize(
    "kw, says",
    [
        (
            {"mix": [{"workload": "chat", "concurrency": 2}, {"workload": "chat", "concurrency": 3}]},
            "appears twice",
        ),
        ({"mix": [{"workload": "chat"}]}, "needs concurrency"),
        ({"mix": [{"workload": "chat", "concurrency": 2, "rate": 1}]}, "not both"),
        (
            {"mix": [{"workload": "chat", "concurrency": 2}], "load": {"concurrency": 4}},
            "each class sets its own load",
        ),
        ({"mix": [{"workload": "chat", "concurrency": 2}], "limits": {"requests": 9}}, "limits.duration_s"),
        (
            {
                "mix": [{"workload": "chat", "concurrency": 2}],
                "workload": {"kind": "agent", "profile": "chat"},
            },
            "not both",
        ),
        ({"mix": [{"workload": "chat", "concurrency": 2, "headers": {"X-A": "a\nb"}}]}, "X-A"),
        ({"mix": []}, "at least one class"),
    ],
)
def test_bad_mix_configs_are_refused(tmp_path, kw, says):
    with pytest.raises(ValueError, match=says):
        cfg(tmp_path, **kw)


def test_a_class_seed_depends_on_its_name_not_its_place():
    assert class_seed(0, "chat") == class_seed(0, "chat") != class_seed(0, "batch-summarize")
    assert class_seed(1, "chat") != class_seed(0, "chat")


def test_interference_by_hand():
    alone = {"requests": {"ok": 10}, "metrics": {"ttft_ms": {"p50": 20.0, "p95": 50.0, "p99": 60.0},
                                                 "e2e_ms": {"p50": 1000.0, "p95": 2000.0, "p99": None}}}
    mixed = {"requests": {"ok": 10}, "metrics": {"ttft_ms": {"p50": 30.0, "p95": 200.0, "p99": 240.0},
                                                 "e2e_ms": {"p50": 1500.0, "p95": 2500.0, "p99": 3000.0}}}
    i = interference(mixed, alone, "chat", ["bulk"])
    assert i["class"] == "chat" and i["with"] == ["bulk"] and i["requests"] == {"alone": 10, "mixed": 10}
    assert i["metrics"]["ttft_ms"]["p95"] == {"alone": 50.0, "mixed": 200.0, "delta": 150.0, "ratio": 4.0}
    assert i["metrics"]["e2e_ms"]["p50"] == {"alone": 1000.0, "mixed": 1500.0, "delta": 500.0, "ratio": 1.5}
    assert i["metrics"]["e2e_ms"]["p99"] == {"alone": None, "mixed": 3000.0, "delta": None, "ratio": None}
    assert i["metrics"]["itl_ms"]["p95"]["ratio"] is None  # not measured on either side


# ---- mixed runs on the simulator -------------------------------------------------------------------------

MIX = [{"workload": "chat", "concurrency": 2, "sessions": 8, "tenant": "team-a"},
       {"workload": "batch-summarize", "concurrency": 8, "tenant": "bulk"}]


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mix")
    return execute_mix(cfg(tmp, mix=MIX, seed=3), report=False)


def test_per_class_counts_add_up_to_the_run(mixed_run):
    s, d = mixed_run.summary, mixed_run.run_dir
    classes = s["classes"]
    assert list(classes) == ["chat", "batch-summarize"]
    for key in ("sent", "ok", "cancelled", "warmup"):
        assert sum(c["requests"][key] for c in classes.values()) == s["requests"][key]
    assert sum(c["sessions"]["started"] for c in classes.values()) == s["sessions"]["started"]
    assert classes["chat"]["sessions"]["started"] == 8  # the first class's own count
    assert classes["batch-summarize"]["sessions"]["started"] > 8  # kept busy until chat was done
    req = pq.read_table(d / "requests.parquet")
    assert set(req.column("mix_class").to_pylist()) == {"chat", "batch-summarize"}  # no untagged record
    tenants = dict(zip(req.column("mix_class").to_pylist(), req.column("tenant").to_pylist(), strict=True))
    assert tenants == {"chat": "team-a", "batch-summarize": "bulk"}
    ses = pq.read_table(d / "sessions.parquet")
    ids = ses.column("session_id").to_pylist()
    assert len(ids) == len(set(ids))  # interleaved ids: k * 2 + class index
    chat_ids = sorted(i for i, c in zip(ids, ses.column("mix_class").to_pylist(), strict=True) if c == "chat")
    assert chat_ids == [0, 2, 4, 6, 8, 10, 12, 14]


def test_the_interactive_class_waits_longer_beside_the_bulk_class(mixed_run):
    inter = mixed_run.summary["interference"]
    assert inter["class"] == "chat" and inter["with"] == ["batch-summarize"]
    ttft = inter["metrics"]["ttft_ms"]
    # measured (seed 3): TTFT p50 24.1 -> 83.3 ms, p95 159 -> 359 ms; E2E p95 4.23 -> 7.29 s
    assert ttft["p50"]["mixed"] > 2 * ttft["p50"]["alone"], ttft
    assert ttft["p95"]["mixed"] > 1.5 * ttft["p95"]["alone"], ttft
    assert ttft["p95"]["ratio"] == pytest.approx(ttft["p95"]["mixed"] / ttft["p95"]["alone"])
    assert inter["metrics"]["e2e_ms"]["p95"]["mixed"] > 1.3 * inter["metrics"]["e2e_ms"]["p95"]["alone"]
    base = mixed_run.run_dir / BASELINE_DIR
    assert (base / "summary.json").exists() and (mixed_run.run_dir / "summary.json").read_text().count(
        '"interference"') == 1


def test_the_baseline_sends_the_same_chat_sessions_as_the_mix(mixed_run):
    def sessions(path):
        t = pq.read_table(path / "sessions.parquet").to_pylist()
        chat = sorted((r for r in t if r["mix_class"] == "chat"), key=lambda r: r["session_id"])
        return [(r["input_tokens"], r["output_tokens"], r["turns"]) for r in chat]

    alone, mixed = sessions(mixed_run.run_dir / BASELINE_DIR), sessions(mixed_run.run_dir)
    assert len(alone) == len(mixed) == 8
    assert alone == mixed


def test_no_baseline_when_asked_or_with_one_class(tmp_path):
    r = execute_mix(cfg(tmp_path, mix=[{"workload": "chat", "concurrency": 2, "sessions": 2}]), report=False)
    assert "interference" not in r.summary and not (r.run_dir / BASELINE_DIR).exists()
    assert list(r.summary["classes"]) == ["chat"]
    r2 = execute_mix(cfg(tmp_path, mix=[{"workload": "chat", "concurrency": 1, "sessions": 2},
                                        {"workload": "batch-summarize", "rate": 1}], mix_baseline=False),
                     report=False)
    assert "interference" not in r2.summary and not (r2.run_dir / BASELINE_DIR).exists()
    bulk = r2.summary["classes"]["batch-summarize"]
    assert bulk["mode"] == "open" and bulk["requests"]["sent"] >= 1


def test_an_unknown_profile_fails_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigError, match="unknown profile 'nosuch'"):
        execute_mix(
            cfg(tmp_path, mix=[{"workload": "chat", "concurrency": 1}, {"workload": "nosuch", "rate": 1}])
        )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
