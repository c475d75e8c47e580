"""The exit-code contract (issue 9, docs/exit-codes.md): 0 ran and valid; 1 a check failed or the run is
INVALID (one line says why); 2 bad input or nothing trustworthy measured; 130 interrupted (what was measured
is kept, summarised and marked ``interrupted``). In process against the simulator, and as a user sees it:
a subprocess against the simulator's HTTP server, interrupted with SIGINT."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from servelab.cli.main import main
from servelab.records.rundir import read_run

SMALL = ["--input-tokens", "32", "--output-tokens", "8", "--no-report"]


def test_valid_run_exits_0(tmp_path, capsys):
    assert main(["run", "--requests", "16", "--concurrency", "4", "--out", str(tmp_path), *SMALL]) == 0
    assert "valid: yes" in capsys.readouterr().out


def test_failed_slo_check_exits_1(tmp_path, capsys):
    cfg = tmp_path / "slo.yaml"
    cfg.write_text("slo: {ttft_ms: 0.01, min_goodput_fraction: 0.9}\n")
    rc = main(["run", "--config", str(cfg), "--requests", "16", "--concurrency", "4", "--out", str(tmp_path),
               *SMALL])
    assert rc == 1
    assert "SLO check failed: goodput fraction 0.000 < 0.9" in capsys.readouterr().err


def test_invalid_run_exits_1_with_one_line(tmp_path, capsys):
    rc = main(["run", "--requests", "4", "--concurrency", "8", "--out", str(tmp_path), *SMALL])
    assert rc == 1
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("INVALID run: ")]
    assert lines == [
        "INVALID run: only 4 measured requests at concurrency 8: fewer requests than users, so the "
        "run never reached a steady state (send at least 8 requests, ideally many more)"
    ]


def test_show_does_not_call_a_half_written_run_valid(tmp_path, capsys):
    assert main(["run", "--requests", "16", "--concurrency", "4", "--out", str(tmp_path), *SMALL]) == 0
    run_dir = next(tmp_path.iterdir())
    # What a run killed before it finished leaves: the manifest and its journal, no Parquet, no summary.
    (run_dir / "summary.json").unlink()
    (run_dir / "requests.parquet").unlink()
    capsys.readouterr()
    assert main(["show", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "incomplete" in out and "valid: yes" not in out
    assert "the run did not finish" in out


# --- As a user sees it: a subprocess, SIGINT --------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def http_target():
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "servelab.cli.main", "sim", "serve", "--deployment",
                               "sim:llama-3.1-8b@1xh100", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=20)


def _start(target: str, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servelab.cli.main",
            "run",
            "--target",
            target,
            "--concurrency",
            "4",
            "--duration",
            "60",
            "--output-tokens",
            "256",
            "--ignore-eos",
            "--out",
            str(out),
            "--no-report",
            "--json",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_for_records(out: Path, timeout_s: float = 30) -> None:
    """Poll until the run has journaled a finished request (so it is measuring, not starting)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for j in out.glob("*/requests*journal*"):
            if j.stat().st_size > 0:
                return
        time.sleep(0.05)
    raise AssertionError("no request was journaled")


def test_graceful_ctrl_c_exits_130_with_the_summary_marked_interrupted(http_target, tmp_path):
    run = _start(http_target, tmp_path)
    _wait_for_records(tmp_path)
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 130, err.decode()
    summary = json.loads(out)
    assert summary["interrupted"] is True and summary["requests"]["ok"] > 0
    m = re.search(r"interrupted: (\d+) request\(s\) in flight were cancelled", err.decode())
    assert m is not None and int(m.group(1)) == summary["requests"]["cancelled"] <= 4, err.decode()[-600:]
    data = read_run(next(tmp_path.iterdir()))
    assert data.complete and data.manifest["status"] == "interrupted" and data.manifest["interrupted"] is True


def test_an_interrupted_run_is_not_called_valid_in_the_terminal_show_or_report(http_target, tmp_path, capsys):
    # Before: "valid: yes" printed above the "interrupted" line, and show / report.html said VALID.
    env = {**os.environ, "COLUMNS": "250"}
    run = subprocess.Popen([sys.executable, "-m", "servelab.cli.main", "run", "--target", http_target,
                            "--concurrency", "4", "--requests", "100000", "--output-tokens", "64",
                            "--ignore-eos", "--out", str(tmp_path)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    _wait_for_records(tmp_path)
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130, err.decode()
    run_dir = next(tmp_path.iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    r = summary["requests"]
    sent = r["sent"] + r["warmup"]  # every request sent before Ctrl-C, of the 100,000 asked for
    assert 0 < sent < 100_000 and summary["valid"] is False
    line = (f"the run was interrupted after {sent:,} of 100,000 planned requests: the figures cover only "
            "what finished (a partial run)")
    assert summary["invalid_reasons"] == [line]
    text = out.decode()
    assert "valid: yes" not in text and f"INVALID: {line}" in text
    assert main(["show", str(run_dir)]) == 0  # show prints; it is not the run's verdict
    shown = capsys.readouterr().out
    assert "valid: yes" not in shown and "INVALID: the run was interrupted after" in shown
    html = (run_dir / "report.html").read_text()
    assert "<b>VALID</b>" not in html and "<b>INVALID</b>: the run was interrupted after" in html


def test_second_ctrl_c_while_finishing_still_writes_the_summary(http_target, tmp_path):
    run = _start(http_target, tmp_path)
    _wait_for_records(tmp_path)
    run.send_signal(signal.SIGINT)
    time.sleep(0.05)
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 130, err.decode()
    assert json.loads(out)["interrupted"] is True
    assert "Traceback" not in err.decode()
    assert read_run(next(tmp_path.iterdir())).complete


def test_ctrl_c_while_servelab_imports_is_one_line_and_130():
    # The interrupt is raised in the main thread while `servelab.cli.main` (typer, rich, every command) loads.
    code = ("import os, signal, threading\n"
            "threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
            "import servelab.cli.main\n"
            "threading.Event().wait(5)\n")  # only reached if the import beat the timer
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert proc.returncode == 130, proc.stderr.decode()
    assert proc.stderr.decode().strip() == "interrupted"


@pytest.mark.parametrize("after_s", [0.8, 1.5])
def test_ctrl_c_at_the_start_exits_130_in_one_line_and_leaves_nothing_half_written(http_target, tmp_path,
                                                                                   after_s):
    """While setting up or at the first requests: never a traceback, never a run `show` would call valid."""
    run = _start(http_target, tmp_path)
    time.sleep(after_s)
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=60)
    text = err.decode()
    # 130, or death by SIGINT (-2 here), which a shell also reports as 130 (128 + 2): CPython ends that way
    # when the interrupt lands in its own start-up or shutdown.
    assert run.returncode in (130, -signal.SIGINT), text
    assert "Traceback" not in text and "interrupted" in text
    for run_dir in tmp_path.iterdir():  # whatever is left must say it is interrupted or incomplete
        data = read_run(run_dir)
        assert data.manifest.get("status") == "interrupted" or not data.complete


DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


@pytest.mark.parametrize(("trace", "fmt", "extra"), [("mt_bench_slice.jsonl", "mt-bench", ["--rate", "1"]),
                                                     ("claude_code", "claude-code", [])])
def test_a_session_trace_replay_is_valid_and_exits_0(trace, fmt, extra, tmp_path, capsys):
    # One runner job per session: its turns are many records, which is not "records lost".
    rc = main(["replay", str(DATA / trace), "--format", fmt, *extra, "--target", "sim:llama-3.1-8b@1xh100",
               "--out", str(tmp_path), "--json", "--no-report"])
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("{"):])
    assert rc == 0 and summary["valid"] is True, summary["invalid_reasons"]
    r = summary["requests"]
    assert r["sent"] == r["ok"] + sum(r["failed"].values()) + r["cancelled"] > 0
    assert summary["run"]["extra"]["requests_issued"] is None  # jobs are sessions: not compared with records
