"""Bad input (issue 9): every case exits 2 with a message naming what is wrong, never a traceback, a hang
or garbage figures. Each runs the real CLI; none reaches a server (the checks come first)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.cli.main import main

NOWHERE = "http://127.0.0.1:9/v1"  # the discard port: nothing listens, and nothing may be sent to it


def _write(tmp: Path, name: str, data: bytes | str) -> str:
    p = tmp / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(p)


CASES = {
    "duration inf": (lambda t: ["run", "--duration", "inf"], "limits.duration_s"),
    "requests 1e20 flag": (lambda t: ["run", "--requests", "1e20"], "Invalid value for '--requests'"),
    "requests 1e20 yaml": (
        lambda t: ["run", "--config", _write(t, "c.yaml", "limits: {requests: 1e20}\n")],
        "limits.requests",
    ),
    "input tokens 2e9": (lambda t: ["run", "--input-tokens", "2000000000"], "workload.input_tokens"),
    "output tokens 2e7": (lambda t: ["run", "--output-tokens", "20000000"], "more than 10,000,000 tokens"),
    "rate 1e-300": (lambda t: ["run", "--rate", "1e-300"], "load.rate"),
    "concurrency 1e8": (lambda t: ["run", "--concurrency", "100000000"], "load.concurrency"),
    "lognormal median 1e300": (
        lambda t: [
            "run",
            "--config",
            _write(t, "c.yaml", "workload: {input_tokens: {kind: lognormal, median: 1e300, sigma: 1}}\n"),
        ],
        "workload.input_tokens.median",
    ),
    "non-utf8 yaml": (lambda t: ["run", "--config", _write(t, "c.yaml", b"name: caf\xe9\n")], "not UTF-8"),
    "ipv6 bracket": (lambda t: ["run", "--target", "http://[::1/v1"], "not a valid URL"),
    "port 0": (lambda t: ["run", "--target", "http://127.0.0.1:0/v1"], "port 0"),
    "header not latin-1": (
        lambda t: ["run", "--target", NOWHERE, "--header", "X-Team: snow\u2603"],
        "outside latin-1",
    ),
    "header with CR": (
        lambda t: [
            "run",
            "--target",
            NOWHERE,
            "--config",
            _write(t, "c.yaml", 'target: {headers: {X-Api-Key: "K\\r"}}\n'),
        ],
        "control character",
    ),
    "api key with CR": (
        lambda t: ["run", "--target", NOWHERE, "--api-key-env", "SERVELAB_TEST_KEY_CR"],
        "$SERVELAB_TEST_KEY_CR cannot be sent",
    ),
    "api key not latin-1": (
        lambda t: ["run", "--target", NOWHERE, "--api-key-env", "SERVELAB_TEST_KEY_SNOW"],
        "$SERVELAB_TEST_KEY_SNOW cannot be sent",
    ),
    "sim gpus abc": (
        lambda t: [
            "run",
            "--target",
            "sim:" + _write(t, "d.yaml", "model: llama-3.1-8b\nhardware: h100\ngpus: abc\n"),
        ],
        "gpus must be a whole number",
    ),
    "jsonl t 1e308": (
        lambda t: [
            "replay",
            "-f",
            "jsonl",
            _write(
                t,
                "t.jsonl",
                '{"t": 1e308, "input_tokens": 8, "output_tokens": 2}\n'
                '{"t": -1e308, "input_tokens": 8, "output_tokens": 2}\n',
            ),
        ],
        "must be finite and within",
    ),
    "jsonl tokens 1e30": (
        lambda t: [
            "replay",
            "-f",
            "jsonl",
            _write(t, "t.jsonl", '{"t": 0, "input_tokens": 1e30, "output_tokens": 2}\n'),
        ],
        "at most 10,000,000",
    ),
    "speed 1e-300": (
        lambda t: [
            "replay",
            "-f",
            "jsonl",
            "--speed",
            "1e-300",
            _write(t, "t.jsonl", '{"t": 0, "input_tokens": 8, "output_tokens": 2}\n'),
        ],
        "workload.speed",
    ),
    "repeat 1e9": (
        lambda t: [
            "run",
            "--target",
            "sim",
            "--profile",
            _write(
                t,
                "p.yaml",
                "name: p\ndescription: d\nsource: s\nsession:\n  steps:\n"
                "    - {kind: repeat, count: 1000000000, steps: [{kind: model, output_tokens: 8}]}\n",
            ),
        ],
        "repeats is more than 10,000 repeats",
    ),
    "real command on virtual time": (
        lambda t: [
            "run",
            "--target",
            "sim",
            "--sessions",
            "1",
            "--max-sessions",
            "2",
            "--profile",
            _write(
                t,
                "p.yaml",
                "name: p\ndescription: d\nsource: s\nsession:\n  steps:\n"
                "    - {kind: model, output_tokens: 8}\n    - {kind: tool, command: ['true']}\n",
            ),
        ],
        "cannot be timed on virtual time",
    ),
    "non-utf8 csv": (
        lambda t: [
            "replay",
            "-f",
            "azure",
            _write(
                t,
                "a.csv",
                b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,caf\xe9,2\n",
            ),
        ],
        "not UTF-8",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_with_a_message(case, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SERVELAB_TEST_KEY_CR", "sk-test\r")
    monkeypatch.setenv("SERVELAB_TEST_KEY_SNOW", "sk-\u2603")
    build, expected = CASES[case]
    out = tmp_path / "runs"
    args = build(tmp_path)
    rc = main([*args, "--no-report", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert expected in err, err
    assert "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())  # nothing half-written
    assert "sk-test" not in err and "sk-\u2603" not in err  # a key is never echoed
