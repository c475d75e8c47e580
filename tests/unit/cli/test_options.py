import pytest

from servelab.cli.options import build_run_config
from servelab.errors import ConfigError


def _flags(**kw):
    names = ("concurrency", "sessions", "rate", "session_rate", "profile", "requests", "target")
    return {n: None for n in names} | kw


def test_flags_sharing_a_config_path_do_not_erase_each_other():
    # --concurrency and --sessions both map to load.concurrency; an absent one must not win.
    assert build_run_config(None, _flags(concurrency=32)).load.concurrency == 32
    cfg = build_run_config(None, _flags(profile="chat", sessions=8))
    assert cfg.load.concurrency == 8 and cfg.workload.kind == "agent"


def test_rate_flag_replaces_concurrency_from_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("load: {concurrency: 4}\n")
    cfg = build_run_config(str(p), _flags(rate=2.5))
    assert cfg.load.rate == 2.5 and cfg.load.concurrency is None


def test_sessions_without_an_agent_workload_is_a_clear_error():
    with pytest.raises(ConfigError, match="--profile"):
        build_run_config(None, _flags(sessions=4))


def test_header_flag_is_parsed():
    cfg = build_run_config(None, _flags(header=["X-Team: perf"]))
    assert cfg.target.headers == {"X-Team": "perf"}
    with pytest.raises(ConfigError, match="Name: value"):
        build_run_config(None, _flags(header=["nocolon"]))


def test_gpu_hour_price_flag_builds_the_cost_model_with_the_simulators_gpu_count():
    cfg = build_run_config(None, _flags(profile="chat", sessions=2, target="sim:llama-3.1-70b@2x8xh100,tp=8",
                                        gpu_hour_usd=2.5))
    assert cfg.cost.model.gpu_hour_usd == 2.5 and cfg.cost.model.gpus == 16
    cfg = build_run_config(None, _flags(gpu_hour_usd=1.0, gpus=4))
    assert cfg.cost.model.gpus == 4
