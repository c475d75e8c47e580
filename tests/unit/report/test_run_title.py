"""A replay is titled as a replay (console and report), not 'servelab run: ...'."""

from __future__ import annotations

from servelab.report.words import run_title


def test_a_replay_is_titled_servelab_replay():
    assert run_title({"workload": {"kind": "replay", "path": "t.jsonl"}}, "20261204-150534") == \
        "servelab replay: 20261204-150534"
    assert run_title({"workload": {"kind": "requests"}}, "x") == "servelab run: x"
    assert run_title({"workload": {"kind": "agent"}}, "x") == "servelab run: x"
    assert run_title(None, "x") == "servelab run: x"


def test_the_report_of_a_replay_is_titled_as_one(tmp_path):
    import orjson

    from servelab.report.html import write_run_report
    from tests.unit.report.fake_runs import write_run

    d = write_run(tmp_path / "run", 2)
    m = orjson.loads((d / "manifest.json").read_bytes())
    m["config"]["workload"] = {"kind": "replay", "path": "t.jsonl", "format": "mooncake"}
    (d / "manifest.json").write_bytes(orjson.dumps(m))
    page = write_run_report(d).read_text()
    assert "<h1>servelab replay: run</h1>" in page or "servelab replay: run</h1>" in page
