"""Start a server for a sweep point from a command template, wait until healthy, stop it by its group."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from servelab.errors import ConfigError, TargetError


class _Vars(dict):
    def __missing__(self, key: str) -> str:
        raise ConfigError(
            f"server command template names {{{key}}}, which no sweep parameter or setting gives",
            hint="add it with --set KEY=V1,V2 or --server-var KEY=VALUE",
        )


def render_command(template: str, values: dict[str, Any]) -> list[str]:
    flat = {k.rsplit(".", 1)[-1]: v for k, v in values.items()}
    flat.update(values)
    text = template.format_map(_Vars({k: _arg(v) for k, v in flat.items()}))
    return shlex.split(text)


def _arg(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class ServerProcess:
    """A server started in its own process group, its output kept in ``log_path``."""

    def __init__(self, argv: list[str], log_path: Path, health_url: str, startup_timeout_s: float = 600.0,
                 env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.log_path = log_path
        self.health_url = health_url
        self.startup_timeout_s = startup_timeout_s
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(self.env or {})},
            )
        except FileNotFoundError:
            raise TargetError(f"cannot start server: {self.argv[0]!r} not found",
                              hint="check the --server-cmd template") from None
        finally:
            log.close()
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise TargetError(f"server exited with code {self.proc.returncode} before becoming healthy; "
                                  f"see {self.log_path}")
            if _healthy(self.health_url):
                return
            time.sleep(0.5)
        self.stop()
        raise TargetError(f"server not healthy at {self.health_url} after {self.startup_timeout_s:.0f} s; "
                          f"see {self.log_path}")

    def stop(self, grace_s: float = 15.0) -> None:
        p = self.proc
        if p is None or p.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=5)

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - a user-given local health URL
            return 200 <= r.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False
