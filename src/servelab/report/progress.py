"""The live progress display of a run (and a replay): a bar with percent, elapsed and remaining time when
the run's end is known (a request or session count, or a duration), else a spinner with elapsed time;
beside it the live figures (done, errors, req/s, tok/s, TTFT p50). Drawn on stderr, only on a terminal.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from rich.console import Console, Group
from rich.live import Live
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from servelab.analysis.live import LiveStats
from servelab.report.terminal import progress_line


def fraction_done(live: LiveStats, *, requests: int | None, duration_s: float | None,
                  sessions: int | None = None) -> float | None:
    """How far the run is, 0..1, by requests (or, for agents, sessions) finished or by time on the run's
    clock (whichever is further); None when no end is known."""
    parts = []
    if requests:
        parts.append((live.done + live.warmup) / requests)
    if sessions:
        parts.append(live.sessions / sessions)
    if duration_s and live.elapsed_s is not None:
        parts.append(live.elapsed_s / duration_s)
    return min(1.0, max(parts)) if parts else None


@contextlib.contextmanager
def progress_display(live: LiveStats, *, requests: int | None, duration_s: float | None,
                     label: str = "run", console: Console | None = None,
                     sessions: int | None = None) -> Iterator[None]:
    con = console or Console(stderr=True)
    if not con.is_terminal:
        yield
        return
    known = bool(requests or duration_s or sessions)
    cols = [SpinnerColumn(), TextColumn("{task.description}")]
    if known:
        cols += [BarColumn(bar_width=28), TaskProgressColumn(), TextColumn("elapsed"), TimeElapsedColumn(),
                 TextColumn("left"), TimeRemainingColumn()]
    else:
        cols += [TextColumn("elapsed"), TimeElapsedColumn()]
    stop = threading.Event()
    bar = Progress(*cols, console=con, auto_refresh=False)
    task = bar.add_task(label, total=1000 if known else None)
    figures = Text("")
    with Live(Group(bar, figures), console=con, transient=True, refresh_per_second=4):

        def tick() -> None:
            while not stop.wait(0.25):
                f = fraction_done(live, requests=requests, duration_s=duration_s, sessions=sessions)
                bar.update(task, completed=None if f is None else int(f * 1000))
                figures.plain = "  " + progress_line(live)

        t = threading.Thread(target=tick, name="servelab-progress", daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join(timeout=1)
