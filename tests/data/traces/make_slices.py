"""Rebuild the test slices from the full public traces (see README.md here). Run from the project root:

    python tests/data/traces/make_slices.py /work/shared/traces

Line-based files keep whole lines byte for byte; JSON session files keep a subset of the ``requests``
entries, each entry unchanged.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent


def head_lines(src: Path, dst: Path, n: int, extra: tuple[int, ...] = ()) -> None:
    lines = src.read_bytes().splitlines(keepends=True)
    keep = lines[:n] + [lines[i - 1] for i in extra]
    dst.write_bytes(b"".join(keep))


def session_slice(src: Path, dst: Path, entries: list[int]) -> None:
    data = json.loads(src.read_text())
    data["requests"] = [data["requests"][i] for i in entries]
    dst.write_text(json.dumps(data, separators=(",", ":")))


def main(root: Path) -> None:
    head_lines(root / "azure_llm_2023/AzureLLMInferenceTrace_conv.csv", HERE / "azure_conv_head.csv", 201)
    head_lines(root / "mooncake_fast25/synthetic_trace.jsonl", HERE / "mooncake_head.jsonl", 200)
    head_lines(root / "mt_bench/question.jsonl", HERE / "mt_bench_slice.jsonl", 10, extra=(21, 22))
    cc = root / "claude_code_sessions"
    session_slice(cc / "trace_0277.json", HERE / "claude_code/trace_0277.json", [0, 1, 4, 5, 6])
    session_slice(cc / "trace_0007.json", HERE / "claude_code/trace_0007.json", [0, 1, 2])


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/traces"))
