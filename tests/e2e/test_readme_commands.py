"""Every `servelab` command in the README's bash blocks works as written on a fresh machine (exit 0), except
the ones listed as needing something a test machine does not have (a real endpoint, a Ray cluster, a port
to hold). Placeholders (`runs/<run>`, `runs/<a>`...) are replaced by directories the test made.

Each command runs as a subprocess in an empty directory (with `tests/` linked, for the trace slices the
README points to), with a time limit; the commands run in README order.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TIMEOUT_S = 600
# why a command is not run here (matched in this order)
SKIP = (
    (re.compile(r"https?://"), "needs a real OpenAI-compatible endpoint"),
    (re.compile(r"--ray\b"), "needs a Ray cluster"),
    (re.compile(r"\bsim serve\b"), "a server that runs until stopped (tests/e2e/test_sim_server.py)"),
    (re.compile(r"--server-cmd"), "starts a real serving engine"),
)
pytestmark = pytest.mark.slow


def readme_commands(text: str) -> list[str]:
    """The `servelab ...` commands of the README's bash blocks, continuation lines joined, comments
    dropped."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split(" # ")[0].strip() if not line.lstrip().startswith("#") else ""
            for part in line.split("&&"):
                part = part.strip()
                if part.startswith("servelab "):
                    out.append(part)
    return out


def skip_reason(cmd: str) -> str | None:
    return next((why for rx, why in SKIP if rx.search(cmd)), None)


def test_the_readme_lists_commands_and_says_which_are_not_run_here():
    cmds = readme_commands(README.read_text())
    assert "servelab run" in cmds  # the quick start
    assert len([c for c in cmds if skip_reason(c) is None]) >= 8
    skipped = [c for c in cmds if skip_reason(c)]
    assert all(skip_reason(c) for c in skipped)


def _servelab() -> list[str]:
    exe = shutil.which("servelab")
    return [exe] if exe else [sys.executable, "-m", "servelab.cli.main"]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "140"}
    return subprocess.run([*_servelab(), *args], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S,
                          env=env)


def _newest(d: Path, before: set[Path]) -> Path:
    new = [p for p in d.iterdir() if p.is_dir() and p not in before]
    assert new, f"no new directory in {d}"
    return max(new, key=lambda p: p.stat().st_mtime)


def test_every_simulator_command_in_the_readme_works_as_written(tmp_path):
    (tmp_path / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    runs = tmp_path / "runs"
    # two comparable runs (they differ in the seed only) for compare/check placeholders
    pair = []
    for seed in ("1", "2"):
        before = set(runs.iterdir()) if runs.exists() else set()
        r = _run(["run", "--requests", "64", "--seed", seed, "--no-report"], tmp_path)
        assert r.returncode == 0, r.stderr[-3000:]
        pair.append(_newest(runs, before))
    # what a finished run directory holds: the crash journals are gone once the Parquet files are written
    assert sorted(p.name for p in pair[0].iterdir()) == ["manifest.json", "requests.parquet", "summary.json",
                                                         "telemetry.parquet"]
    made: dict[str, Path] = {}
    ran, skipped = [], []
    for cmd in readme_commands(README.read_text()):
        why = skip_reason(cmd)
        if why:
            skipped.append((cmd, why))
            continue
        args = shlex.split(cmd)[1:]
        subs = {
            "runs/<a>": pair[0],
            "runs/<baseline>": pair[0],
            "runs/<b>": pair[1],
            "runs/<candidate>": pair[1],
            "runs/<run>": made.get("run", pair[0]),
            "runs/<run-or-sweep>": made.get("sweep", made.get("run", pair[0])),
        }
        args = [str(subs.get(a, a)) for a in args]
        assert not any("<" in a and ">" in a for a in args), f"unresolved placeholder in {cmd!r}"
        before = set(runs.iterdir()) if runs.exists() else set()
        r = _run(args, tmp_path)
        assert r.returncode == 0, f"{cmd!r} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        ran.append(cmd)
        if args[0] in ("run", "sweep", "replay") and runs.exists():
            new = [p for p in runs.iterdir() if p not in before]
            if new:
                made["sweep" if args[0] == "sweep" else "run"] = max(new, key=lambda p: p.stat().st_mtime)
    assert any(c == "servelab run" for c in ran) and any(c.startswith("servelab sweep") for c in ran)
    assert skipped, "the README's real-endpoint examples are listed as skipped"
    print("\nnot run here (needs a real endpoint, cluster or long-running server):")
    for cmd, why in skipped:
        print(f"  {why}: {cmd}")
