"""Pre-flight checks and how a run ends, as pure functions (the CLI cases are in
tests/e2e/test_preflight.py)."""

from pathlib import Path

import pytest

from servelab.bench import ending, preflight
from servelab.config import RunConfig
from servelab.errors import ConfigError, RunDirError, TargetError


def cfg(**kw):
    return RunConfig.model_validate(kw)


def test_target_url_without_api_path_suggests_v1():
    with pytest.raises(TargetError) as e:
        preflight.check_target_url("http://127.0.0.1:8000")
    assert e.value.hint == "did you mean http://127.0.0.1:8000/v1?"
    preflight.check_target_url("http://127.0.0.1:8000/v1")
    preflight.check_target_url("https://gateway.example/openai/v1")  # any API path is the user's choice
    preflight.check_target_url("sim")


def test_no_model_and_a_failing_models_listing_is_refused_with_the_server_error():
    with pytest.raises(TargetError, match=r"no --model given .* \(HTTP 500: boom\)"):
        preflight.check_served(
            cfg(target={"url": "http://h:1/v1"}), {"models": [], "models_error": "HTTP 500: boom"}
        )
    preflight.check_served(cfg(target={"url": "http://h:1/v1"}), {"models": ["m"]})  # the first is used


def test_unserved_model_names_the_served_ones():
    with pytest.raises(TargetError, match=r"model 'x' is not served by http://h:1/v1; it serves: 'a', 'b'"):
        preflight.check_served(cfg(target={"url": "http://h:1/v1", "model": "x"}), {"models": ["a", "b"]})


def test_context_check_uses_the_longest_request_the_workload_can_make():
    c = cfg(target={"url": "http://h:1/v1", "model": "m"},
            workload={"input_tokens": {"kind": "uniform", "low": 100, "high": 3000}, "output_tokens": 200,
                      "shared_prefix": {"tokens": 1000}})
    facts = {"models": ["m"], "max_model_len": {"m": 4096}}
    with pytest.raises(ConfigError, match=r"up to 4000 prompt \+ 200 output = 4200 tokens .* 4096 tokens"):
        preflight.check_context(c, facts)
    preflight.check_context(c, {"models": ["m"], "max_model_len": {"m": 4200}})  # exactly fits
    preflight.check_context(
        c.model_copy(update={"target": c.target.model_copy(update={"allow_over_context": True})}), facts
    )
    # Unbounded lengths (a lognormal without max) cannot be checked up front: not refused.
    free = cfg(workload={"input_tokens": {"kind": "lognormal", "median": 500, "sigma": 1}})
    assert preflight.longest_request(free) is None


def test_unwritable_out_and_failed_start_cleanup(tmp_path: Path):
    blocker = tmp_path / "f"
    blocker.write_text("x")
    with pytest.raises(RunDirError, match="cannot write run directories under"):
        preflight.check_out_dir(blocker / "runs")
    empty = tmp_path / "run-a"
    empty.mkdir()
    (empty / "manifest.json").write_text("{}")
    (empty / "requests.journal.jsonl").write_text("")
    assert preflight.discard_failed_start(empty) is True and not empty.exists()
    measured = tmp_path / "run-b"
    measured.mkdir()
    (measured / "requests.journal.jsonl").write_text('{"request_id": 0}\n')
    assert preflight.discard_failed_start(measured) is False and measured.exists()


def test_api_key_with_a_trailing_cr_is_refused_without_showing_it(monkeypatch):
    monkeypatch.setenv("K_CR", "sk-abc\r")
    with pytest.raises(ConfigError) as e:
        preflight.check_api_key("K_CR")
    assert "$K_CR" in str(e.value) and "sk-abc" not in str(e.value)
    monkeypatch.setenv("K_OK", "sk-abc")
    preflight.check_api_key("K_OK")


def test_requests_issued_is_compared_only_when_each_job_is_one_request():
    assert ending.requests_issued(False, {}, 7) == 7
    assert ending.requests_issued(True, {}, 7) is None  # agent sessions
    # session replay
    assert ending.requests_issued(False, {"trace": {"units": 10, "requests": 24}}, 10) is None
    assert ending.requests_issued(False, {"trace": {"units": 24, "requests": 24}}, 24) == 24
    assert ending.run_status("interrupt") == {"status": "interrupted", "interrupted": True}
    assert ending.run_status("limit") == {"status": "complete", "interrupted": False}
