"""Sweeps and the verdict contract (issue 9): Ctrl-C cuts the current point, which is marked `interrupted`
(not `ok`), the sweep is not complete and exits 130, and `--resume` runs the cut point again; `--resume`
with a different target, workload or grid refuses (exit 2, naming what differs) unless `--force`."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from servelab.cli.main import main

SMALL = ["--input-tokens", "32", "--output-tokens", "8", "--no-report"]


def _sweep_dir(out: Path) -> Path:
    return next(d for d in out.iterdir() if (d / "sweep.json").exists())


def test_resume_with_a_different_grid_target_or_workload_refuses_unless_forced(tmp_path, capsys):
    base = ["sweep", "--target", "sim", "--requests", "8", "--out", str(tmp_path), "--json", *SMALL]
    assert main([*base, "--concurrency", "1,2"]) == 0
    sweep_dir = _sweep_dir(tmp_path)
    capsys.readouterr()
    assert main([*base, "--concurrency", "1,4", "--resume", str(sweep_dir)]) == 2
    err = capsys.readouterr().err
    assert "differs from the one stored there: grid: was" in err and "--force" in err
    assert main(["sweep", "--target", "sim:llama-3.1-8b@1xh100", *base[3:], "--concurrency", "1,2",
                 "--resume", str(sweep_dir)]) == 2
    assert "target: was" in capsys.readouterr().err
    assert main([*base, "--concurrency", "1,2", "--input-tokens", "64", "--resume", str(sweep_dir)]) == 2
    assert "workload: was" in capsys.readouterr().err
    # The same sweep resumes (nothing to do); --force resumes a different one.
    assert main([*base, "--concurrency", "1,2", "--resume", str(sweep_dir)]) == 0
    capsys.readouterr()
    assert main([*base, "--concurrency", "1,4", "--resume", str(sweep_dir), "--force"]) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
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


def test_ctrl_c_cuts_the_point_marks_it_interrupted_and_resume_reruns_it(http_target, tmp_path):
    args = [
        sys.executable,
        "-m",
        "servelab.cli.main",
        "sweep",
        "--target",
        http_target,
        "--concurrency",
        "2,4",
        "--output-tokens",
        "256",
        "--ignore-eos",
        "--input-tokens",
        "32",
        "--out",
        str(tmp_path),
        "--no-report",
    ]
    proc = subprocess.Popen([*args, "--duration", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not any(j.stat().st_size for j in tmp_path.glob("*/p000-*/requests*journal*")):
        assert time.monotonic() < deadline, "the first point never journaled a request"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    sweep_dir = _sweep_dir(tmp_path)
    state = json.loads((sweep_dir / "sweep.json").read_text())
    assert [p["status"] for p in state["points"]] == ["interrupted", "pending"]
    assert state["complete"] is False and state["interrupted"] is True
    assert "rerun with --resume" in err.decode()
    first = state["points"][0]["key"]
    cut_started = json.loads((sweep_dir / first / "manifest.json").read_text())["started_at"]
    # Resume (a shorter duration is not part of what must match): the cut point runs again, then the rest.
    resumed = subprocess.run([*args, "--duration", "1", "--resume", str(sweep_dir)], capture_output=True,
                             timeout=120)
    assert resumed.returncode == 0, resumed.stderr.decode()
    after = json.loads((sweep_dir / "sweep.json").read_text())
    assert [p["status"] for p in after["points"]] == ["ok", "ok"] and after["complete"] is True
    manifest = json.loads((sweep_dir / first / "manifest.json").read_text())
    assert manifest["started_at"] != cut_started and manifest["status"] == "complete"
