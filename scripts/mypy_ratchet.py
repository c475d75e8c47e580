#!/usr/bin/env python3
"""mypy ratchet: the number of mypy errors in src/ may only go down.

Runs mypy (settings in pyproject.toml's [tool.mypy]) on ``src``, counts the errors and compares them with the
committed baseline in ``scripts/mypy_baseline.txt``. Exit 1 when there are more errors than the baseline
(the new ones are printed), 0 otherwise. When there are fewer, it says so: lower the baseline with
``--update`` in the same commit, so the ratchet holds the gain.

    python3 scripts/mypy_ratchet.py            # check (CI)
    python3 scripts/mypy_ratchet.py --update   # write the current count as the baseline
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "scripts" / "mypy_baseline.txt"
_ERROR = re.compile(r"^[^:\n]+:\d+: error: ", re.MULTILINE)


def count_errors(output: str) -> int:
    """Error lines in mypy's output (notes and the summary line are not errors)."""
    return len(_ERROR.findall(output))


def run_mypy() -> str:
    proc = subprocess.run([sys.executable, "-m", "mypy", "src"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 1):  # 2: mypy itself failed (bad config, crash): not a count
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"mypy failed to run (exit {proc.returncode})")
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="write the current error count as the baseline")
    args = ap.parse_args(argv)
    out = run_mypy()
    now = count_errors(out)
    if args.update:
        BASELINE.write_text(f"{now}\n")
        print(f"mypy baseline set to {now} error(s)")
        return 0
    try:
        base = int(BASELINE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        print(f"error: {BASELINE} is missing or not a number; create it with --update", file=sys.stderr)
        return 2
    if now > base:
        print(out, end="")
        print(f"mypy ratchet: {now} error(s), baseline {base}: {now - base} new; fix them (the count only "
              "goes down)", file=sys.stderr)
        return 1
    if now < base:
        print(f"mypy ratchet: {now} error(s), baseline {base}: lower the baseline "
              "(python3 scripts/mypy_ratchet.py --update) in this commit to keep the gain")
    else:
        print(f"mypy ratchet: {now} error(s), baseline {base}: ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
