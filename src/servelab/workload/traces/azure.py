"""Azure LLM inference traces (Patel et al., "Splitwise", ISCA 2024; CC-BY-4.0).

CSV with a header ``TIMESTAMP,ContextTokens,GeneratedTokens``. ``TIMESTAMP`` is a wall-clock string with
up to 9 fractional digits (the published files have 7: ``2023-11-16 18:15:46.6805900``); it is parsed
exactly to integer nanoseconds and turned into offsets from the earliest request. Every row is an
independent request (no sessions, no prefix hashes).
"""

from __future__ import annotations

import csv
from datetime import date
from pathlib import Path

from servelab.workload.traces.base import NS_PER_S, Trace, TraceRequest, build_trace, fail

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _parse_timestamp(text: str, days: dict[str, int], path: Path, line: int) -> int:
    """``YYYY-MM-DD HH:MM:SS[.fffffff]`` (or ``T`` separator) -> integer ns since 0001-01-01."""
    text = text.strip()
    try:
        day_part, time_part = text.replace("T", " ", 1).split(" ", 1)
        ordinal = days.get(day_part)
        if ordinal is None:
            y, mo, d = day_part.split("-")
            ordinal = date(int(y), int(mo), int(d)).toordinal()
            days[day_part] = ordinal
        hms, _, frac = time_part.partition(".")
        h, mi, s = hms.split(":")
        hh, mm, ss = int(h), int(mi), int(s)
        if (
            not (0 <= hh < 24 and 0 <= mm < 60 and 0 <= ss < 61)
            or len(frac) > 9
            or (frac and not frac.isdigit())
        ):
            raise ValueError
        frac_ns = int(frac.ljust(9, "0")) if frac else 0
    except ValueError:
        raise fail(
            path, line, f"TIMESTAMP must look like 'YYYY-MM-DD HH:MM:SS.fffffff', got {text!r}"
        ) from None
    return ((ordinal * 86400 + hh * 3600 + mm * 60 + ss) * NS_PER_S) + frac_ns


def _int_cell(text: str, path: Path, line: int, column: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise fail(path, line, f"column {column} must be an integer >= 0, got {text!r}") from None
    if v < 0:
        raise fail(path, line, f"column {column} must be an integer >= 0, got {v}")
    return v


def load_azure(path: str | Path) -> Trace:
    path = Path(path)
    try:
        fh = path.open(newline="", encoding="utf-8")
    except OSError as e:
        raise fail(path, None, f"cannot open the Azure trace: {e.strerror}") from None
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise fail(path, 1, "empty file; expected a CSV header " + ",".join(COLUMNS))
        header = [h.strip().lstrip("\ufeff") for h in header]
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise fail(
                path,
                1,
                f"CSV header lacks column(s) {', '.join(missing)}; expected {','.join(COLUMNS)}, "
                f"got {','.join(header)}",
                hint="pass the Azure LLM inference trace (AzureLLMInferenceTrace_*.csv) or choose another "
                "format",
            )
        i_ts, i_in, i_out = (header.index(c) for c in COLUMNS)
        width = max(i_ts, i_in, i_out) + 1
        days: dict[str, int] = {}
        stamps: list[int] = []
        lengths: list[tuple[int, int]] = []
        for line, row in enumerate(reader, start=2):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) < width:
                raise fail(path, line, f"expected {len(header)} columns ({','.join(header)}), got {len(row)}")
            stamps.append(_parse_timestamp(row[i_ts], days, path, line))
            lengths.append(
                (_int_cell(row[i_in], path, line, "ContextTokens"),
                 _int_cell(row[i_out], path, line, "GeneratedTokens"))
            )
    if not stamps:
        raise fail(path, None, "no requests: the CSV has a header but no rows")
    t0 = min(stamps)
    reqs = [
        TraceRequest(t_offset_ns=ts - t0, input_tokens=n_in, output_tokens=n_out)
        for ts, (n_in, n_out) in zip(stamps, lengths, strict=True)
    ]
    return build_trace(reqs, format="azure", source=str(path), metadata={"start_ns_since_epoch0001": t0})
