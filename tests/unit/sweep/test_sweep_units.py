import json

import pytest

from servelab.errors import ConfigError
from servelab.sweep.grid import expand, parse_list, parse_set
from servelab.sweep.runner import _with_sim_keys, point_config
from servelab.sweep.scaling_of import scaling_for
from servelab.sweep.server import render_command


def test_lists_ranges_and_sets():
    assert parse_list("1..256", "--concurrency") == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert parse_list("1, 4,16", "x") == [1, 4, 16]
    assert parse_set(["prefix_caching=on,off"]) == {"prefix_caching": [True, False]}
    with pytest.raises(ConfigError, match="KEY=V1"):
        parse_set(["nokey"])
    with pytest.raises(ConfigError):
        parse_list("8..2", "x")


def test_grid_order_puts_load_levels_fastest_and_keys_are_stable():
    pts = expand({"concurrency": [1, 4], "max_num_seqs": [8, 16]})
    assert [p.params for p in pts] == [
        {"max_num_seqs": 8, "concurrency": 1},
        {"max_num_seqs": 8, "concurrency": 4},
        {"max_num_seqs": 16, "concurrency": 1},
        {"max_num_seqs": 16, "concurrency": 4},
    ]
    assert pts[1].key == "p001-max_num_seqs=8_concurrency=4" and pts[1].level == 4


def test_point_config_routes_each_key():
    cfg = point_config(
        {"load": {"rate": 3}}, {"concurrency": 8, "workload.input_tokens": 64, "max_num_seqs": 4}
    )
    assert cfg.load.concurrency == 8 and cfg.load.rate is None
    assert cfg.workload.input_tokens.value == 64
    assert cfg.target.url.endswith(",max_num_seqs=4") and cfg.target.url.startswith("sim:")
    assert (
        _with_sim_keys("sim:m@1xh100,max_num_seqs=2,tp=1", {"max_num_seqs": 8})
        == "sim:m@1xh100,tp=1,max_num_seqs=8"
    )


def test_server_template_names_missing_values_clearly():
    assert render_command("vllm serve {model} --max-num-seqs {max_num_seqs}",
                          {"model": "m", "max_num_seqs": 8}) == ["vllm", "serve", "m", "--max-num-seqs", "8"]
    with pytest.raises(ConfigError, match="dtype"):
        render_command("x --dtype {dtype}", {})


def test_scaling_from_point_manifests(tmp_path):
    points = []
    for i, (nodes, level, tput) in enumerate(
        [(1, 16, 100.0), (1, 64, 200.0), (2, 16, 150.0), (2, 64, 360.0)]
    ):
        d = tmp_path / f"p{i}"
        d.mkdir()
        (d / "manifest.json").write_text(json.dumps({"target": {"deployment": {"nodes": nodes}}}))
        points.append({"status": "ok", "level": level, "run_dir": f"p{i}",
                       "summary": {"throughput": {"output_tokens_per_s": tput}}})
    out = scaling_for(tmp_path, points)
    peaks = {p["nodes"]: p["efficiency"] for p in out["peaks"]}
    assert peaks == {1: 1.0, 2: pytest.approx(0.9)}
    assert scaling_for(tmp_path, points[:2]) is None


def test_knee_words_for_every_shape_of_result():
    from servelab.report.sweep_table import knee_words

    assert knee_words(None, "no points") == "no knee: no points"
    assert knee_words({"level": None, "beyond": False, "reason": "too little data"}, None) == \
        "no knee: too little data"
    assert "256 or beyond" in knee_words({"level": None, "beyond": True, "low": 256.0}, None)
    assert knee_words({"level": 16.0, "low": 4.0, "high": 64.0, "confidence": "high"}, None) == \
        "knee at 16 (range 4-64), confidence high"


def test_the_sweeps_default_sim_spec_is_the_simulators():
    from servelab.sim.target import DEFAULT_SPEC
    from servelab.sweep.runner import DEFAULT_SIM_SPEC

    assert DEFAULT_SIM_SPEC == DEFAULT_SPEC
