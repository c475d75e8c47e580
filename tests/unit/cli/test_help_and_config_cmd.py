"""Help that helps (-h, --version, an example per command, defaults shown, no <bool>), `servelab config
init`/`doc`, docs/config.md kept up to date, and the context line printed before a run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servelab import __version__
from servelab.cli.config_cmd import render_doc, rows
from servelab.cli.context import context_text
from servelab.cli.help import EXAMPLES
from servelab.cli.main import app, main
from servelab.cli.options import build_run_config
from servelab.config import RunConfig, load_config

ROOT = Path(__file__).resolve().parents[3]


def test_version_and_short_help(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "140")
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"servelab {__version__}"
    assert main(["run", "-h"]) == 0
    out = capsys.readouterr().out
    assert "Usage: servelab run" in out
    assert "<bool>" not in out  # flags take no value: no type shown
    assert "[default: (sim:llama-3.1-8b@1xh100)]" in out and "[default: (16 when no --rate)]" in out
    assert " ".join(f"Example: {EXAMPLES['run']}".split()) in " ".join(out.split())


def test_every_command_has_an_example():
    names = [c.name for c in app.registered_commands]
    names += [c.name for g in app.registered_groups for c in g.typer_instance.registered_commands]
    assert names and all(n in EXAMPLES for n in names), sorted(set(names) - set(EXAMPLES))


def test_sweep_and_run_help_show_the_effective_defaults(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["sweep", "-h"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for shown in ("(sim:llama-3.1-8b@1xh100)", "(1024)", "(256)", "(poisson)", "(runs)", "(stream)",
                  "(max(200, 4 x users) unless --duration)"):
        assert f"[default: {shown}]" in text, shown
    assert main(["run", "-h"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "[default: (stream)]" in text and "[default: (max(200, 4 x users) unless --duration)]" in text
    # the requests default is what the config resolves to
    assert RunConfig.model_validate({"load": {"concurrency": 100}}).limits.requests == 400
    assert RunConfig.model_validate({}).limits.requests == 200


def test_sweep_help_documents_power_of_two_ranges(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["sweep", "-h"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(1..256 = 1,2,4,...,256)" in text


def test_docs_config_md_is_up_to_date():
    doc = (ROOT / "docs" / "config.md").read_text()
    assert doc == render_doc(), "docs/config.md is stale: run `servelab config doc > docs/config.md`"


def test_the_doc_lists_every_key_with_its_flag():
    by_key = {r["key"]: r for r in rows()}
    assert by_key["load.concurrency"]["flags"] == "--concurrency, --sessions"
    assert by_key["limits.duration_s"]["flags"] == "--duration"
    assert by_key["target.url"]["default"] == "sim:llama-3.1-8b@1xh100"
    assert by_key["workload.input_tokens"]["default"] == "1024"
    for section in ("target", "workload", "load", "limits", "slo", "telemetry", "seed", "out"):
        assert section in by_key
    assert all(r["description"] for r in rows()), [r["key"] for r in rows() if not r["description"]]


def test_the_doc_lists_each_mix_class_key():
    # `mix` is a list of classes: each class's keys are listed as mix[].KEY (issue 10's per-class mix keys).
    by_key = {r["key"]: r for r in rows()}
    for k in ("workload", "name", "concurrency", "rate", "sessions", "tenant", "api_key_env", "headers"):
        assert f"mix[].{k}" in by_key, k
    assert by_key["mix[].workload"]["default"] == "required"
    assert "mix[].workload" in render_doc()


def test_the_doc_names_replay_flags_on_the_replay_workload_keys():
    replay = {r["key"]: r["flags"] for r in rows() if "(kind: replay)" in r["description"]}
    assert replay["workload.speed"] == "replay --speed" and replay["workload.start_s"] == "replay --start"
    assert replay["workload.ignore_eos"] == "replay --no-ignore-eos"
    requests = {r["key"]: r["flags"] for r in rows() if "(kind: requests)" in r["description"]}
    assert requests["workload.ignore_eos"] == "--ignore-eos"


def test_config_init_writes_a_file_that_validates_and_refuses_to_overwrite(tmp_path, capsys):
    p = tmp_path / "run.yaml"
    assert main(["config", "init", str(p)]) == 0
    cfg = load_config(RunConfig, p)
    assert cfg.target.url == "sim:llama-3.1-8b@1xh100" and cfg.load.concurrency == 16
    assert cfg.workload.input_tokens.value == 1024 and cfg.limits.requests == 200
    assert sum(1 for line in p.read_text().splitlines() if "#" in line) >= 10  # commented
    assert main(["config", "init", str(p)]) == 2
    assert "exists" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "want"),
    [
        (
            {},
            "sim:llama-3.1-8b@1xh100 | Llama-3.1-8B on 1 x H100, BF16 (simulated, vLLM engine profile) | "
            "closed loop, 16 concurrent users | 1,024 in / 256 out tokens | 200 requests",
        ),
        (
            {
                "target": "http://127.0.0.1:9/v1",
                "model": "m",
                "rate": 2.5,
                "duration": 90.0,
                "arrival": "gamma",
                "burstiness": 0.5,
            },
            "http://127.0.0.1:9/v1 | m (real endpoint at http://127.0.0.1:9/v1) | open loop, 2.50 "
            "requests/s (gamma, "
            "burstiness 0.500) | 1,024 in / 256 out tokens | for 1.50 min",
        ),
    ],
)
def test_the_context_line_says_what_is_benchmarked(flags, want):
    assert context_text(build_run_config(None, flags)) == want


def test_no_python_repr_in_the_context_of_a_simulated_model():
    text = context_text(build_run_config(None, {"target": "sim", "profile": "chat", "sessions": 4}))
    assert not re.search(r"\{|'", text) and text.startswith("sim | sim-tiny on 1 x H100")


def test_show_understands_a_sweep_directory(tmp_path, capsys):
    import json

    from tests.unit.report.fake_runs import CAPACITY, write_sweep

    d = write_sweep(tmp_path / "sweep")
    assert main(["show", str(d)]) == 0
    out = capsys.readouterr().out
    assert "servelab sweep" in out and f"knee at {CAPACITY}" in out
    assert main(["show", str(d), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["points"]
