"""Ctrl-C during a run against the simulator's HTTP server: requests in flight become `cancelled` records,
everything measured before is kept, the run directory is complete, and the CLI says how many."""

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} not healthy")


def _wait_for_records(out: Path, n: int = 8, timeout_s: float = 60) -> None:
    """Poll until the run has journaled ``n`` finished requests."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for j in out.glob("*/requests*journal*"):
            if j.read_bytes().count(b"\n") >= n:
                return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} requests journaled in {timeout_s} s")


def test_sigint_keeps_what_was_measured(tmp_path: Path):
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "servelab.cli.main", "sim", "serve", "--deployment",
                               "sim:llama-3.1-8b@1xh100", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/health")
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "servelab.cli.main",
                "run",
                "--target",
                f"http://127.0.0.1:{port}/v1",
                "--concurrency",
                "4",
                "--duration",
                "60",
                "--output-tokens",
                "256",
                "--ignore-eos",
                "--out",
                str(tmp_path),
                "--no-report",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _wait_for_records(tmp_path)  # measuring, not starting: poll the journal, never sleep-and-hope
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=60)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=20)
    assert run.returncode == 130, err.decode()  # interrupted: what was measured is kept (docs/exit-codes.md)
    summary = json.loads(out)
    r = summary["requests"]
    assert r["ok"] >= 8 and r["cancelled"] == 4  # one per user was in flight
    assert r["sent"] == r["ok"] + sum(r["failed"].values()) + r["cancelled"]
    assert "interrupted: 4 request(s) in flight were cancelled" in err.decode()
    run_dir = next(tmp_path.iterdir())
    assert (run_dir / "requests.parquet").exists() and (run_dir / "summary.json").exists()
