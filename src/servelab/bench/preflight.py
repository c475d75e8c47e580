"""Pre-flight: checks that fail a run before a single request is sent (exit 2, with what to do instead).

* the output directory can be written (before a run directory is made);
* the API key (``$target.api_key_env``) can be sent: latin-1, no stray CR or newline;
* an HTTP target's URL names an API path (``http://host:8000`` -> "did you mean http://host:8000/v1?");
* the model asked for is one the server serves (the served ones are named);
* the longest prompt plus output fits the served ``max_model_len`` (or the simulated deployment's), unless
  ``target.allow_over_context`` asks to send them anyway (the server's answer is then what is measured);
* a start that fails leaves no run directory behind (:func:`discard_failed_start`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from servelab.config.bounds import check_header
from servelab.config.distributions import Empirical, Exponential, Fixed, LogNormal, Normal, Uniform
from servelab.config.models import RunConfig, WorkloadConfig
from servelab.errors import ConfigError, RunDirError, TargetError
from servelab.records.journal import REQUESTS_JOURNAL, SESSIONS_JOURNAL


def check_out_dir(out: str | Path) -> None:
    """The directory runs are written under exists (or can be made) and accepts files."""
    base = Path(out)
    try:
        base.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=base, prefix=".servelab-write-check-"):
            pass
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise RunDirError(f"cannot write run directories under {str(base)!r}: {why}",
                          hint="pass a writable directory to --out (or fix its permissions)") from None


def check_target_url(url: str) -> None:
    """An HTTP base URL must carry the API path: the server's routes live under /v1."""
    if url == "sim" or url.startswith("sim:"):
        return
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        raise TargetError(f"target URL {url!r} has no API path: requests would go to /chat/completions on "
                          "the server's root, which OpenAI-compatible servers do not serve",
                          hint=f"did you mean {url.rstrip('/')}/v1?")


def check_api_key(var: str | None) -> None:
    """The key in ``$var`` can go into an Authorization header: latin-1, no CR/LF (never printed)."""
    key = os.environ.get(var) if var else None
    if not key:
        return  # missing: the transport says so, naming the variable
    try:
        check_header("Authorization", "Bearer " + key)
    except ValueError as e:
        why = str(e).split(": ", 1)[-1]
        raise ConfigError(f"the API key in ${var} cannot be sent: {why}",
                          hint=f"re-export {var} without the stray characters") from None


def before_start(cfg: RunConfig, *, new_run_dir: bool) -> None:
    """Checks that need no server (run before any run directory is made)."""
    check_target_url(cfg.target.url)
    check_api_key(cfg.target.api_key_env)
    if new_run_dir:
        check_out_dir(cfg.out)


def check_served(cfg: RunConfig, facts: dict[str, Any]) -> None:
    """The model asked for (or, with no --model, any model) is among those the server lists."""
    if cfg.target.is_sim:
        return
    served = [str(m) for m in facts.get("models") or []]
    wanted = cfg.target.model
    listing_error = facts.get("models_error")
    if wanted is None and not served:
        why = f" ({listing_error})" if listing_error else " (it lists none)"
        raise TargetError(
            f"no --model given and {cfg.target.url}/models does not say which model it serves{why}",
            hint="pass --model NAME (the name the server serves the model under)",
        )
    if wanted is not None and served and wanted not in served:
        raise TargetError(f"model {wanted!r} is not served by {cfg.target.url}; it serves: "
                          + ", ".join(repr(m) for m in served[:20]) + ("..." if len(served) > 20 else ""),
                          hint="pass --model with one of the served names")


def context_limit(cfg: RunConfig, facts: dict[str, Any]) -> int | None:
    """The served model's context window in tokens, when the target says."""
    if cfg.target.is_sim:
        mml = (facts.get("deployment") or {}).get("max_model_len")
        return int(mml) if isinstance(mml, int) and mml > 0 else None
    lens = facts.get("max_model_len") or {}
    model = cfg.target.model or next(iter(facts.get("models") or []), None)
    v = lens.get(model) if isinstance(lens, dict) else None
    return v if isinstance(v, int) and v > 0 else None


def dist_max(d: Any) -> float | None:
    """The largest value a length distribution can give (None: unbounded)."""
    if isinstance(d, Fixed):
        return d.value
    if isinstance(d, Uniform):
        return d.high
    if isinstance(d, Empirical):
        return max(d.values)
    if isinstance(d, Normal | LogNormal | Exponential):
        return d.max
    return None


def longest_request(cfg: RunConfig) -> tuple[int, int] | None:
    """(prompt tokens, output tokens) of the longest single-turn request the workload can make."""
    w = cfg.workload
    if not isinstance(w, WorkloadConfig):  # kind: requests
        return None
    prompt, output = dist_max(w.input_tokens), dist_max(w.output_tokens)
    if prompt is None or output is None:
        return None
    prefix = w.shared_prefix.tokens if w.shared_prefix is not None else 0
    return int(prompt) + prefix, int(output)


def check_context(cfg: RunConfig, facts: dict[str, Any]) -> None:
    limit = context_limit(cfg, facts)
    longest = longest_request(cfg)
    if limit is None or longest is None or getattr(cfg.target, "allow_over_context", False):
        return
    prompt, output = longest
    if prompt + output > limit:
        raise ConfigError(
            f"requests of up to {prompt} prompt + {output} output = {prompt + output} tokens do not "
            f"fit the served context of {limit} tokens (max_model_len): the server would refuse them",
            hint="lower --input-tokens/--output-tokens, or pass --allow-over-context to send them "
            "anyway and measure the refusals",
        )


def preflight(cfg: RunConfig, facts: dict[str, Any]) -> None:
    """Every check that needs the target's facts (call after ``probe.describe()``)."""
    check_served(cfg, facts)
    check_context(cfg, facts)


def discard_failed_start(run_dir: Path) -> bool:
    """Remove ``run_dir`` when no request or session was journaled in it; True when it was removed."""
    journals = {run_dir / REQUESTS_JOURNAL, run_dir / SESSIONS_JOURNAL, *run_dir.glob("*journal*")}
    if any(p.is_file() and p.stat().st_size > 0 for p in journals):
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    return not os.path.exists(run_dir)
