"""The README's run-directory table names every file a run writes (seen in real run directories: a plain
run, a --mix run, and a --workers 4 run that was stopped while it measured)."""

from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
WRITTEN = ["manifest.json", "requests.parquet", "sessions.parquet", "telemetry.parquet", "summary.json",
           "report.html", "report-ttft.png", "report-timeline.png", "baseline",
           "requests.journal.jsonl", "requests.journal.w3.jsonl", "sessions.journal.w1.jsonl",
           "issued.journal.txt", "issued.journal.w2.txt"]


def test_the_readme_table_lists_every_file_a_run_writes():
    text = README.read_text()
    table = text[text.index("A run directory"):text.index("A sweep directory")]
    patterns = [p.rstrip("/") for p in re.findall(r"`([^`]+)`", table)]
    missing = [f for f in WRITTEN if not any(fnmatch(f, p) for p in patterns)]
    assert not missing, f"files a run writes that the README's table does not name: {missing}"
