"""Shared by the resummary tests: run the CLI, then recompute the run's summary without its summary.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from servelab.bench.resummarize import summary_from_run
from servelab.cli.main import main
from servelab.records.rundir import read_run


def written_and_recomputed(args: list[str], out: Path, capsys: Any) -> tuple[dict, dict, Path]:
    """(summary.json as the run wrote it, the summary recomputed without it, the run directory)."""
    rc = main([*args, "--out", str(out), "--no-report"])
    capsys.readouterr()
    assert rc == 0
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    written = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").unlink()
    return written, summary_from_run(read_run(run_dir)), run_dir
