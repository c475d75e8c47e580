"""The one exception tree of servelab.

Every error a user can cause derives from :class:`ServelabError`. The CLI prints ``str(err)`` (never a
traceback) and exits with ``err.exit_code``: 2 for bad input, 1 for a failed check.

Messages say what went wrong, where, what was expected, what was given, and how to fix it.
"""

from __future__ import annotations


class ServelabError(Exception):
    """Base of every servelab error."""

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message if hint is None else f"{message}\n  fix: {hint}")


class ConfigError(ServelabError):
    """A configuration file, flag or value is invalid (exit 2)."""


class TargetError(ServelabError):
    """The target cannot be reached or described (bad URL, unknown simulator model or hardware)."""


class DeploymentError(TargetError):
    """A simulated deployment is impossible (the model does not fit, parallel sizes do not divide)."""


class TraceError(ServelabError):
    """A trace file cannot be read or has the wrong format."""


class RunDirError(ServelabError):
    """A run or sweep directory is missing, incomplete or of an unknown schema version."""


class ComparisonError(ServelabError):
    """Two runs cannot be compared fairly."""


class CheckFailed(ServelabError):
    """A check (an SLO, a regression gate) failed: exit 1."""

    exit_code = 1


class SimulationDeadlock(ServelabError):
    """Virtual time cannot advance: every task waits on something nothing will ever resolve.

    Raised by :meth:`servelab.clock.VirtualClock.run` instead of waiting forever (SimPy's ``EmptySchedule``
    plays the same part). ``pending`` names the tasks still waiting, with where each one waits.
    """

    def __init__(self, pending: list[str], at_ns: int) -> None:
        self.pending = pending
        self.at_ns = at_ns
        listed = "; ".join(pending) if pending else "none"
        super().__init__(
            f"simulation deadlock at virtual t={at_ns / 1e9:.9f} s: no task can run, no timer is set and "
            f"nothing outside the loop can wake it. Pending tasks: {listed}",
            hint="a task awaits a future or event that nothing sets (a missing set()/set_result, or a "
            "wait on a queue nobody fills); the innermost frame of each pending task shows where",
        )


class Interrupted(ServelabError):
    """The user interrupted (Ctrl-C): what was measured is kept and summarised; exit 130."""

    exit_code = 130
