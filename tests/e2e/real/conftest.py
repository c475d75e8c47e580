"""Where the real engines are, for the `vllm` and `llamacpp` tests.

URLs come from the environment (SERVELAB_VLLM_URL, SERVELAB_LLAMACPP_URL) or from the env file that
scripts/engines/ci_engines.sh writes (.ci/engines.env, or SERVELAB_ENGINES_ENV). Without a server the tests
skip with the reason, locally; in CI (CI=true) they FAIL with it, unless SERVELAB_ALLOW_NO_VLLM=1 /
SERVELAB_ALLOW_NO_LLAMACPP=1 says that engine may be missing.
"""

from __future__ import annotations

import os
import shlex
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def engines_env() -> dict[str, str]:
    """KEY=VALUE lines of the engines env file (values shell-quoted), overridden by the environment."""
    path = Path(os.environ.get("SERVELAB_ENGINES_ENV", REPO / ".ci" / "engines.env"))
    out: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, value = line.split("=", 1)
            parts = shlex.split(value) if value else [""]
            out[key.strip()] = parts[0] if parts else ""
    out.update({k: v for k, v in os.environ.items() if k.startswith("SERVELAB_")})
    return out


@dataclass(frozen=True)
class Engine:
    kind: str  # "vllm" | "llamacpp"
    url: str  # OpenAI base URL, ending in /v1
    model: str
    env: dict[str, str]

    @property
    def root(self) -> str:
        return self.url.removesuffix("/").removesuffix("/v1")


def _healthy(root: str) -> str | None:
    try:
        with urllib.request.urlopen(root + "/health", timeout=5) as r:  # noqa: S310 - loopback test server
            return None if 200 <= r.status < 300 else f"/health answered HTTP {r.status}"
    except (urllib.error.URLError, OSError) as e:
        return f"{root}/health unreachable: {e}"


def require_engine(kind: str) -> Engine:
    env = engines_env()
    key = kind.upper()
    url = env.get(f"SERVELAB_{key}_URL")
    reason = None
    if not url:
        why = env.get(f"SERVELAB_{key}_UNAVAILABLE") or "no server: run scripts/engines/ci_engines.sh"
        reason = f"{kind} engine unavailable ({why}); SERVELAB_{key}_URL is not set"
    else:
        problem = _healthy(url.removesuffix("/").removesuffix("/v1"))
        if problem:
            reason = f"{kind} server at {url} is not healthy: {problem}"
    if reason is not None:
        if (
            os.environ.get("CI", "").lower() in ("1", "true", "yes")
            and env.get(f"SERVELAB_ALLOW_NO_{key}") != "1"
        ):
            pytest.fail(
                f"CI needs a real {kind} server: {reason}. Set SERVELAB_ALLOW_NO_{key}=1 to allow skipping.",
                pytrace=False,
            )
        pytest.skip(reason)
    assert url is not None
    return Engine(kind, url.rstrip("/"), env.get(f"SERVELAB_{key}_MODEL", ""), env)


@pytest.fixture(scope="module")
def vllm() -> Engine:
    return require_engine("vllm")


@pytest.fixture(scope="module")
def llamacpp() -> Engine:
    return require_engine("llamacpp")
