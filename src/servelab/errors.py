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
