"""Sane bounds on what a user can ask for: past these a run overflows 64-bit time or token counts, never
finishes, or exhausts the machine. Listed in docs/exit-codes.md; a value outside is a config error (exit
2)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

MAX_TOKENS = 10_000_000  # tokens of one prompt or one output (the longest served contexts are ~10M)
MAX_CONCURRENCY = 100_000  # concurrent users of one client process
MIN_RATE = 1e-3  # requests (or sessions) per second: one every ~17 minutes
MAX_RATE = 1e6
MAX_COUNT = 100_000_000  # requests or sessions of one run
MAX_DURATION_S = 30 * 86_400.0  # a run, a window, a schedule: 30 days
MAX_TIMEOUT_S = 86_400.0
MIN_SPEED, MAX_SPEED = 1e-3, 1e6  # trace replay speed-up
MIN_BURSTINESS, MAX_BURSTINESS = 1e-3, 1e3  # gamma shape

_TOKEN_PARAMS = ("value", "low", "high", "mean", "median", "min", "max")


MAX_REPEAT = 10_000  # an agent step block repeated more often than this is a typo (and a plan of billions)


def check_token_distribution(d: Any) -> Any:
    """A token-length distribution whose parameters stay within :data:`MAX_TOKENS`."""
    return check_distribution_max(d, MAX_TOKENS, "tokens", "(no model serves that)")


def check_distribution_max(d: Any, limit: float, unit: str, why: str = "") -> Any:
    """A distribution none of whose parameters (value, high, median, max...) exceeds ``limit``."""
    for name in _TOKEN_PARAMS:
        v = getattr(d, name, None)
        if isinstance(v, int | float) and v > limit:
            raise ValueError(f"{name} {v:g} {unit} is more than {limit:,} {unit} {why}".rstrip())
    values = getattr(d, "values", None)
    if isinstance(values, list) and values and max(values) > limit:
        raise ValueError(f"a value of {max(values):g} {unit} is more than {limit:,} {unit}")
    return d


def check_http_url(url: str) -> str:
    """An http(s) URL that parses, names a host and a usable port (not 0), with no whitespace or controls."""
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise ValueError(f"{url!r} contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise ValueError(
            f"{url!r} is not a valid URL ({e}); expected e.g. http://127.0.0.1:8000/v1"
        ) from None
    if not parts.hostname:
        raise ValueError(f"{url!r} names no host; expected e.g. http://127.0.0.1:8000/v1")
    if port == 0:
        raise ValueError(f"{url!r} has port 0, which no server listens on; expected e.g. http://127.0.0.1:8000/v1")
    return url


def check_header(name: str, value: str) -> None:
    """An HTTP header a client can send: a token name, a latin-1 value with no CR, LF or other controls."""
    if not name or any(c in name for c in " \t\r\n:") or not name.isascii() or not name.isprintable():
        raise ValueError(f"header name {name!r} is not a valid HTTP header name")
    bad = [c for c in value if (ord(c) < 32 and c != "\t") or ord(c) == 127]
    if bad:
        raise ValueError(f"header {name!r}: the value contains control character(s) {''.join(bad)!r} "
                         "(a trailing CR or newline from a copied key?)")
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise ValueError(f"header {name!r}: the value has characters outside latin-1, which HTTP headers "
                         "cannot carry") from None


def move_userinfo(data: Any) -> Any:
    """``http://user:pass@host/v1`` -> the URL without ``user:pass@`` and an ``Authorization: Basic`` header
    (what HTTP clients do with URL credentials), so the secret lives only in a header, which is redacted
    wherever a config is written or printed, and never in the URL, which is printed everywhere."""
    if not isinstance(data, dict) or not isinstance(data.get("url"), str) or "@" not in data["url"]:
        return data
    import base64
    from urllib.parse import unquote

    try:
        parts = urlsplit(data["url"])
    except ValueError:
        return data  # the URL check reports it
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return data
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    out = dict(data)
    out["url"] = parts._replace(netloc=hostport).geturl()
    headers = dict(out.get("headers") or {})
    if not any(str(k).lower() == "authorization" for k in headers):
        token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    out["headers"] = headers
    return out
