"""The trace formats servelab reads, once: the name a user writes (``--format``, a replay config's
``workload.format``) and the keyword options each format's loader takes (``--option``,
``workload.options``).

In ``config`` because the replay config validates ``format`` against these names and ``config`` may import
no other servelab package; the loaders (``workload.traces``), the CLI and the docs read the names from
here. tests/unit/workload/traces/test_format_registry.py keeps the loader table, each loader's keyword
options and docs/traces.md's format table equal to this one.
"""

from __future__ import annotations

from typing import Literal, get_args

TraceFormat = Literal["azure", "mooncake", "claude-code", "mt-bench", "servelab", "jsonl"]

# The names as a user writes them, in the order help and errors list them.
FORMATS: tuple[str, ...] = get_args(TraceFormat)

# format -> the keyword options its loader takes (the loader's own defaults apply when one is not given)
LOADER_OPTIONS: dict[str, tuple[str, ...]] = {
    "azure": (),
    "mooncake": ("block_tokens",),
    "claude-code": ("stagger_s",),
    "mt-bench": ("output_tokens",),
    "servelab": ("include_warmup",),
    "jsonl": (),
}


def formats_text() -> str:
    """'azure, mooncake, ..., servelab or jsonl'."""
    return f"{', '.join(FORMATS[:-1])} or {FORMATS[-1]}"


def options_text() -> str:
    """'mooncake: block_tokens; claude-code: stagger_s; ...' (formats with options only)."""
    return "; ".join(f"{f}: {', '.join(o)}" for f, o in LOADER_OPTIONS.items() if o)
