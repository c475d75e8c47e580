"""The verdict of a finished run as an exit code (the contract in docs/exit-codes.md).

Checked in this order, after the summary is printed and the run directory is written:

* interrupted (Ctrl-C)                                   -> 130 (what was measured is kept)
* nothing trustworthy measured (no request succeeded)    -> 2
* INVALID (any validity rule), one line with the reasons -> 1
* a configured check failed (SLO goodput fraction)       -> 1
* otherwise                                              -> 0
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from servelab.errors import Interrupted

NOTHING_MEASURED = 2
CHECK_FAILED = 1


def nothing_measured(summary: Mapping[str, Any]) -> bool:
    req = summary.get("requests") or {}
    return not req.get("ok")


def run_verdict(summary: Mapping[str, Any], *, interrupted: bool, cancelled_in_flight: int, where: str,
                min_goodput_fraction: float | None, err: Console) -> None:
    """Raise the exit the run deserves (returns normally for exit 0)."""
    if interrupted:
        raise Interrupted(
            f"interrupted: {cancelled_in_flight} request(s) in flight were cancelled and recorded as "
            f"such; everything finished before is kept and summarised in {where}"
        )
    reasons = list(summary.get("invalid_reasons") or [])
    if nothing_measured(summary):
        err.print(
            f"[red]nothing trustworthy measured[/]: {escape('; '.join(reasons) or 'no request succeeded')}"
        )
        raise typer.Exit(NOTHING_MEASURED)
    if not summary.get("valid", True):
        err.print(f"[red]INVALID run[/]: {escape('; '.join(reasons) or 'unknown reason')}")
        raise typer.Exit(CHECK_FAILED)
    good = (summary.get("goodput") or {}).get("fraction")
    if min_goodput_fraction is not None and good is not None and good < min_goodput_fraction:
        err.print(f"[red]SLO check failed[/]: goodput fraction {good:.3f} < {min_goodput_fraction}")
        raise typer.Exit(CHECK_FAILED)


def sweep_verdict(state: Mapping[str, Any], where: str) -> None:
    """A sweep cut by Ctrl-C exits 130 (its finished points are kept; --resume reruns the cut one)."""
    if state.get("interrupted"):
        cut = [e["key"] for e in state.get("points", []) if e.get("status") == "interrupted"]
        what = (f"point {cut[0]} was cut and is marked interrupted; " if len(cut) == 1 else
                f"points {', '.join(cut)} were cut and are marked interrupted; " if cut else "")
        raise Interrupted(
            f"interrupted: {what}finished points are kept in {where}; rerun with --resume {where} to "
            "finish the sweep"
        )
