"""Trace importers, window/sample/retime, statistics and replay prompts.

``load_trace(path, format)`` reads any supported format into one normalized :class:`Trace`; see
docs/traces.md for the formats.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from servelab.config.trace_formats import FORMATS, LOADER_OPTIONS
from servelab.errors import TraceError
from servelab.workload.traces.azure import load_azure
from servelab.workload.traces.base import NS_PER_S, Trace, TraceRequest, TraceSession, build_trace
from servelab.workload.traces.claude_code import load_claude_code
from servelab.workload.traces.jsonl import load_jsonl
from servelab.workload.traces.mooncake import load_mooncake
from servelab.workload.traces.mtbench import load_mt_bench
from servelab.workload.traces.prompts import block_text, request_prompt
from servelab.workload.traces.servelab_parquet import load_servelab
from servelab.workload.traces.stats import (
    KSResult,
    interarrival_gaps,
    ks_interarrival,
    prefix_reuse,
    stats_rows,
    trace_stats,
)
from servelab.workload.traces.transform import mean_rate, retime, select

# format (config.trace_formats.FORMATS, the one list of names) -> its loader
_LOADERS = {
    "azure": load_azure,
    "mooncake": load_mooncake,
    "claude-code": load_claude_code,
    "mt-bench": load_mt_bench,
    "servelab": load_servelab,
    "jsonl": load_jsonl,
}


def load_trace(path: str | Path, format: str, **options: Any) -> Trace:
    """Load ``path`` (a file; for claude-code also a directory or glob; for servelab a run directory).

    ``format`` is one of ``FORMATS`` (config.trace_formats). ``options`` go to the format's loader, which
    takes the keywords ``LOADER_OPTIONS[format]``.
    """
    loader = _LOADERS.get(format.strip().lower().replace("_", "-"))
    if loader is None:
        raise TraceError(
            f"unknown trace format {format!r}; expected one of {', '.join(FORMATS)}",
            hint="name the format of the file, e.g. --format mooncake",
        )
    accepted = [p for p in inspect.signature(loader).parameters if p != "path"]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise TraceError(
            f"trace format {format!r} does not take option(s) {', '.join(unknown)}; "
            f"it takes {', '.join(accepted) or 'no options'}"
        )
    try:
        return loader(path, **options)
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})",
                         hint="convert the trace to UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None


__all__ = [
    "FORMATS",
    "LOADER_OPTIONS",
    "NS_PER_S",
    "KSResult",
    "Trace",
    "TraceRequest",
    "TraceSession",
    "block_text",
    "build_trace",
    "interarrival_gaps",
    "ks_interarrival",
    "load_trace",
    "mean_rate",
    "prefix_reuse",
    "request_prompt",
    "retime",
    "select",
    "stats_rows",
    "trace_stats",
]
