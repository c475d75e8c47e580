"""How a run shard talks to its coordinator, whatever carries it (this process, a worker process, Ray).

The shard calls :meth:`ready` once set up, then :meth:`wait_start` (the shared start, as a wall-clock time
of its own host), then during the run polls :meth:`should_stop` and hands :meth:`report` a delta of its
live statistics (report-and-reset). The local control does nothing: the shard is the coordinator.
"""

from __future__ import annotations

from typing import Any


class ShardControl:
    """The in-process control: start at once, stop on this process's Ctrl-C, live statistics shared."""

    remote = False  # True: poll should_stop and report live deltas during the run
    handles_sigint = True  # the shard installs its own Ctrl-C handler (only in the coordinator's process)
    report_interval_s = 0.5

    def __init__(self, live: Any = None) -> None:
        self.live = live  # a LiveStats the shard updates directly (in-process only)

    def described(self, target_facts: dict[str, Any]) -> None:
        """Shard 0 described the target (when the coordinator did not): the manifest can say what it is."""

    def ready(self) -> None:
        """The shard is set up (target opened, work built) and waits for the start."""

    def wait_start(self) -> int | None:
        """Block until the coordinator says go; the shared start as this host's wall-clock ns, or None."""
        return None

    def should_stop(self) -> bool:
        return False

    def report(self, snapshot: dict[str, Any]) -> None:
        """A delta of the shard's live statistics since its last report."""
