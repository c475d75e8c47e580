import pytest

from servelab.config import RunConfig, load_config
from servelab.config.distributions import Fixed, LogNormal
from servelab.errors import ConfigError


def _err(overrides, path=None, text=None):
    with pytest.raises(ConfigError) as e:
        load_config(RunConfig, path, overrides)
    return str(e.value)


@pytest.mark.parametrize("overrides,field", [
    ({"load.rate": -1}, "load.rate"),
    ({"workload.output_tokens": 0}, "workload.output_tokens"),
    ({"percentiles": [50, 120]}, "percentiles"),
    ({"limits.requests": 0}, "limits.requests"),
    ({"target.url": "ftp://x"}, "target.url"),
    ({"workload.input_tokens": {"kind": "uniform", "low": 10, "high": 5}}, "workload.input_tokens"),
    ({"load.concurrency": 4, "load.rate": 2.0}, "load"),
])
def test_bad_values_name_the_field(overrides, field):
    msg = _err(overrides)
    assert f"  {field}" in msg


def test_unknown_key_in_file_is_rejected_with_its_path(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("workload:\n  input_tokenz: 5\n")
    msg = _err({}, p)
    assert "workload.input_tokenz" in msg and "unknown key" in msg


def test_flag_beats_file_beats_default(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(
        "load:\n  concurrency: 8\nworkload:\n  input_tokens: {kind: lognormal, median: 100, sigma: 0.5}\n"
    )
    cfg = load_config(RunConfig, p, {"load.concurrency": 16})
    assert cfg.load.concurrency == 16
    assert isinstance(cfg.workload.input_tokens, LogNormal)
    assert isinstance(cfg.workload.output_tokens, Fixed) and cfg.workload.output_tokens.value == 256


def test_bad_yaml_says_where(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("load: [1,\n")
    assert "line" in _err({}, p)


def test_unbounded_run_gets_a_request_limit():
    assert load_config(RunConfig, None, {}).limits.requests == 200
    # 256 users: 4 requests each (never fewer requests than users, which is INVALID by construction)
    assert load_config(RunConfig, None, {"load.concurrency": 256}).limits.requests == 1024
    assert (
        load_config(RunConfig, None, {"load.concurrency": 256, "limits.requests": 10}).limits.requests == 10
    )


def test_unknown_keys_get_a_did_you_mean(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("concurrency: 4\nduration: 5\nload:\n  concurency: 3\nworkload:\n  input_tokenz: 5\n")
    msg = _err({}, p)
    assert "  concurrency: unknown key: did you mean load.concurrency?" in msg
    assert "  duration: unknown key: did you mean limits.duration_s?" in msg
    assert "  load.concurency: unknown key: did you mean load.concurrency?" in msg
    assert "  workload.input_tokenz: unknown key: did you mean workload.input_tokens?" in msg
    p.write_text("zzzzqqq: 1\n")
    assert "  zzzzqqq: unknown key (every key: docs/config.md)" in _err({}, p)
