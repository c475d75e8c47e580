"""A run killed with SIGKILL (no handler runs, nothing is flushed by hand) is read back from its journal,
and ``servelab show`` summarises exactly what the journal holds, marked incomplete."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from servelab.records.journal import REQUESTS_JOURNAL, read_journal
from servelab.records.rundir import read_run


def _journal_lines(out: Path) -> int:
    return sum(j.read_bytes().count(b"\n") for j in out.glob("*/requests*journal*"))


def test_a_killed_run_is_read_back_and_shown(tmp_path):
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servelab.cli.main",
            "run",
            "--target",
            "sim",
            "--concurrency",
            "4",
            "--duration",
            "36000",
            "--input-tokens",
            "32",
            "--output-tokens",
            "16",
            "--out",
            str(tmp_path),
            "--no-report",
            "--json",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while _journal_lines(tmp_path) < 50:  # poll the journal: measuring, not starting
            assert run.poll() is None, run.stderr.read().decode()
            assert time.monotonic() < deadline, "fewer than 50 requests journaled in 120 s"
            time.sleep(0.05)
    finally:
        run.send_signal(signal.SIGKILL)
        run.communicate(timeout=30)  # reaps it and closes the pipe
    run_dir = next(tmp_path.iterdir())
    assert not (run_dir / "requests.parquet").exists() and not (run_dir / "summary.json").exists()
    rows = list(read_journal(run_dir / REQUESTS_JOURNAL))  # a torn last line, if any, is skipped
    assert len(rows) >= 50

    data = read_run(run_dir)
    assert data.complete is False and data.requests.num_rows == len(rows)
    assert data.requests.column("request_id").to_pylist() == [r["request_id"] for r in rows]

    shown = subprocess.run([sys.executable, "-m", "servelab.cli.main", "show", str(run_dir), "--json"],
                           capture_output=True, timeout=120)
    assert shown.returncode == 0, shown.stderr.decode()
    assert b"Traceback" not in shown.stderr
    summary = json.loads(shown.stdout)
    r = summary["requests"]
    ok = sum(row["status"] == "ok" for row in rows)
    assert r["ok"] == ok and r["sent"] == len(rows) == r["ok"] + sum(r["failed"].values()) + r["cancelled"]
    assert summary["run"]["extra"]["stopped_by"] == "incomplete"
    assert summary["valid"] is not True  # a run that did not finish is never called valid
    said = summary.get("warnings", []) + summary.get("invalid_reasons", [])
    assert any("journal" in w for w in said), said
