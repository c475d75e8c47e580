"""MT-bench questions (lm-sys/FastChat ``llm_judge/data/mt_bench/question.jsonl``; Apache-2.0).

One JSON object a line: ``question_id``, ``category``, ``turns`` (the user's messages, two per question),
sometimes ``reference`` (ignored). Each question becomes a session of ``len(turns)`` requests with the
real text as ``prompt``. The file has no timestamps and no output lengths: every request is at offset 0
(``Trace.timed`` is False, so the load decides when sessions start) and asks for ``output_tokens``
(FastChat's answer generation caps at 1024 new tokens).

``input_tokens`` counts the whitespace-separated words of the turn's own text - servelab's simulator
tokenizer counts one token per word; a real tokenizer gives about 1.3 tokens a word for English. It does
not include the conversation history, which the session adds at replay time.
"""

from __future__ import annotations

from pathlib import Path

from servelab.workload.traces.base import (
    Trace,
    TraceRequest,
    TraceSession,
    build_trace,
    fail,
    iter_json_lines,
)

DEFAULT_OUTPUT_TOKENS = 1024


def load_mt_bench(path: str | Path, *, output_tokens: int = DEFAULT_OUTPUT_TOKENS) -> Trace:
    path = Path(path)
    if output_tokens < 1:
        raise fail(path, None, f"output_tokens must be >= 1, got {output_tokens}")
    reqs: list[TraceRequest] = []
    info: dict[str, TraceSession] = {}
    for line, obj in iter_json_lines(path, "MT-bench question file"):
        qid = obj.get("question_id")
        turns = obj.get("turns")
        if qid is None or not isinstance(turns, list) or not turns:
            raise fail(
                path,
                line,
                'expected {"question_id": N, "category": "...", "turns": ["first message", "second '
                'message"]}',
            )
        sid = f"mt-bench/{qid}"
        if sid in info:
            raise fail(path, line, f"question_id {qid!r} appears twice")
        category = obj.get("category")
        info[sid] = TraceSession(session_id=sid, requests=[], label=str(category) if category else None)
        for turn, text in enumerate(turns):
            if not isinstance(text, str) or not text.strip():
                raise fail(path, line, f"turns[{turn}] must be a non-empty string, got {text!r}")
            reqs.append(
                TraceRequest(
                    t_offset_ns=0,
                    input_tokens=len(text.split()),
                    output_tokens=output_tokens,
                    session_id=sid,
                    turn=turn,
                    prompt=text,
                )
            )
    if not reqs:
        raise fail(path, None, "no questions: the file is empty")
    return build_trace(
        reqs, format="mt-bench", timed=False, source=str(path), session_info=info,
        metadata={"input_tokens": "words of the turn's own text (history excluded)",
                  "output_tokens": output_tokens},
    )
