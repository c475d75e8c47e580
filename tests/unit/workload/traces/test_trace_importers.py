"""Each importer on the checked-in slices: counts, lengths, timestamps, sessions, and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from servelab.errors import TraceError
from servelab.records.schema import RequestRecord, record_to_row
from servelab.workload.traces import load_trace

DATA = Path(__file__).parents[3] / "data" / "traces"
CC = DATA / "claude_code"


# --- Azure -----------------------------------------------------------------------------------------------

def test_azure_rows_and_exact_offsets() -> None:
    tr = load_trace(DATA / "azure_conv_head.csv", "azure")
    assert len(tr) == 200 and tr.format == "azure" and tr.sessions == {}
    first, second, last = tr.requests[0], tr.requests[1], tr.requests[-1]
    assert (first.t_offset_ns, first.input_tokens, first.output_tokens) == (0, 374, 44)
    # 18:15:50.9951690 - 18:15:46.6805900, exact to the 100 ns the file carries
    assert (second.t_offset_ns, second.input_tokens, second.output_tokens) == (4_314_579_000, 396, 109)
    # last row 18:16:47.9441270
    assert (last.t_offset_ns, last.input_tokens, last.output_tokens) == (61_263_537_000, 1143, 409)


def test_azure_midnight_rollover_and_unsorted_rows(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-17 00:00:00.0000001,20,2\n"
        "2023-11-16 23:59:59.9999999,10,1\n"
    )
    tr = load_trace(f, "azure")
    assert [(r.t_offset_ns, r.input_tokens) for r in tr.requests] == [(0, 10), (200, 20)]


@pytest.mark.parametrize(
    ("body", "line", "needle"),
    [
        ("TIMESTAMP,ContextTokens\n", 1, "GeneratedTokens"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,1,2\n2023-11-16 1815,1,2\n", 3,
         "TIMESTAMP"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,-4,2\n", 2, "ContextTokens"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,4\n", 2, "columns"),
    ],
)
def test_azure_malformed_names_file_and_line(tmp_path: Path, body: str, line: int, needle: str) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(body)
    with pytest.raises(TraceError) as ei:
        load_trace(f, "azure")
    assert f"{f}:{line}" in str(ei.value) and needle in str(ei.value)


# --- Mooncake --------------------------------------------------------------------------------------------

def test_mooncake_rows() -> None:
    tr = load_trace(DATA / "mooncake_head.jsonl", "mooncake")
    assert len(tr) == 200 and tr.block_tokens == 512
    r0 = tr.requests[0]
    assert (r0.t_offset_ns, r0.input_tokens, r0.output_tokens) == (0, 40160, 6)
    assert r0.hash_ids == list(range(79)) and r0.block_tokens == 512
    lines = [json.loads(x) for x in (DATA / "mooncake_head.jsonl").read_text().splitlines()]
    by_time = sorted(lines, key=lambda o: o["timestamp"])
    for got, want in zip(tr.requests, by_time, strict=True):
        assert got.t_offset_ns == want["timestamp"] * 1_000_000
        assert (got.input_tokens, got.output_tokens, got.hash_ids) == (
            want["input_length"], want["output_length"], want["hash_ids"])
    assert tr.requests[-1].t_offset_ns == 58_501_000_000


@pytest.mark.parametrize(
    ("line2", "needle"),
    [
        ('{"timestamp": 5, "input_length": 10}', "output_length"),
        ('{"timestamp": 5, "input_length": 10.5, "output_length": 1}', "input_length"),
        ('{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [1, "x"]}', "hash_ids"),
        ('{"timestamp": 5, "input_length": 10, ', "invalid JSON"),
        ("[1, 2]", "JSON object"),
    ],
)
def test_mooncake_malformed(tmp_path: Path, line2: str, needle: str) -> None:
    f = tmp_path / "m.jsonl"
    f.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n\n' + line2 + "\n"
    )
    with pytest.raises(TraceError) as ei:
        load_trace(f, "mooncake")
    assert f"{f}:3" in str(ei.value) and needle in str(ei.value)


# --- Claude Code sessions --------------------------------------------------------------------------------

def test_claude_code_session_with_subagent() -> None:
    tr = load_trace(CC / "trace_0277.json", "claude-code")
    assert len(tr) == 8 and tr.block_tokens == 64
    assert set(tr.sessions) == {"trace_0277", "trace_0277/agent_001"}
    parent, sub = tr.sessions["trace_0277"], tr.sessions["trace_0277/agent_001"]
    assert [r.t_offset_ns for r in parent.requests] == [0, 228 * 10**9, 248 * 10**9, 265 * 10**9]
    assert [r.turn for r in parent.requests] == [0, 1, 2, 3]
    assert [r.think_time_s for r in parent.requests] == [0.0, 209.0, 8.0, 8.0]
    assert parent.requests[1].input_tokens == 32182 and parent.requests[1].output_tokens == 498
    assert parent.parent_session_id is None
    # the sub-agent: own session, linked, times absolute (79.224 s + its own offsets)
    assert sub.parent_session_id == "trace_0277" and sub.label == "Explore" and sub.spawn_after_turn == 0
    assert [r.t_offset_ns for r in sub.requests] == [79_224_000_000, 85_224_000_000, 92_224_000_000,
                                                     98_224_000_000]
    assert [r.stop for r in sub.requests] == ["tool_use", "tool_use", "tool_use", "end_turn"]
    assert [r.input_tokens for r in sub.requests] == [11651, 13539, 56442, 59971]
    assert all(r.parent_session_id == "trace_0277" and r.model == "claude-haiku-4-5-20251001"
               for r in sub.requests)
    assert sub.requests[3].api_time_s == 36.89
    # requests sorted by time across sessions
    offsets = [r.t_offset_ns for r in tr.requests]
    assert offsets == sorted(offsets)
    assert tr.metadata["sessions"]["trace_0277/agent_001"]["status"] == "completed"


def test_claude_code_hash_ids_distinct_across_files_equal_within() -> None:
    raw = {f.stem: json.loads(f.read_text()) for f in CC.glob("*.json")}
    tr = load_trace(CC, "claude-code")
    assert set(tr.sessions) == {"trace_0007", "trace_0277", "trace_0277/agent_001"}
    ids_0007 = {h for r in tr.sessions["trace_0007"].requests for h in r.hash_ids}
    ids_0277 = {h for sid in ("trace_0277", "trace_0277/agent_001") for r in tr.sessions[sid].requests
                for h in r.hash_ids}
    assert not ids_0007 & ids_0277  # both files use local ids 1, 2, 3...: renumbered apart
    # equality structure inside a file is kept: positions equal in the file are equal after loading
    src = [r["hash_ids"] for r in raw["trace_0007"]["requests"]]
    got = [r.hash_ids for r in tr.sessions["trace_0007"].requests]
    for a in range(3):
        for b in range(3):
            for i in range(min(len(src[a]), len(src[b]))):
                assert (src[a][i] == src[b][i]) == (got[a][i] == got[b][i])


def test_claude_code_glob_and_stagger() -> None:
    tr = load_trace(str(CC / "trace_0*.json"), "claude-code", stagger_s=100.0)
    assert tr.sessions["trace_0007"].start_ns == 0          # first file in name order
    assert tr.sessions["trace_0277"].start_ns == 100 * 10**9
    assert tr.sessions["trace_0277/agent_001"].start_ns == 179_224_000_000


def test_claude_code_malformed(tmp_path: Path) -> None:
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"id": "s", "block_size": 64, "requests": [
        {"t": 0.0, "in": 10, "out": 1}, {"t": 1.0, "out": 1}]}))
    with pytest.raises(TraceError, match=r"s\.json: requests\[1\]: missing field 'in'"):
        load_trace(f, "claude-code")
    f.write_text(json.dumps({"id": "s", "requests": [{"t": 0.0, "in": -1, "out": 1}]}))
    with pytest.raises(TraceError, match=r"requests\[0\]\.in"):
        load_trace(f, "claude-code")
    f.write_text("[]")
    with pytest.raises(TraceError, match="'requests' list"):
        load_trace(f, "claude-code")
    with pytest.raises(TraceError, match="no trace files"):
        load_trace(tmp_path / "empty*.json", "claude-code")


# --- MT-bench --------------------------------------------------------------------------------------------

def test_mt_bench_two_turn_sessions_with_real_text() -> None:
    lines = [json.loads(x) for x in (DATA / "mt_bench_slice.jsonl").read_text().splitlines()]
    tr = load_trace(DATA / "mt_bench_slice.jsonl", "mt-bench")
    assert len(tr) == 24 and len(tr.sessions) == 12 and tr.timed is False
    s = tr.sessions["mt-bench/81"]
    assert s.label == "writing"
    assert [r.prompt for r in s.requests] == lines[0]["turns"]
    assert [r.input_tokens for r in s.requests] == [len(t.split()) for t in lines[0]["turns"]]
    assert s.requests[0].input_tokens == 18 and s.requests[1].turn == 1
    assert all(r.output_tokens == 1024 and r.t_offset_ns == 0 for r in tr.requests)
    assert (
        load_trace(DATA / "mt_bench_slice.jsonl", "mt_bench", output_tokens=64).requests[0].output_tokens
        == 64
    )


def test_mt_bench_malformed(tmp_path: Path) -> None:
    f = tmp_path / "q.jsonl"
    f.write_text('{"question_id": 1, "turns": ["hi"]}\n{"question_id": 2, "turns": []}\n')
    with pytest.raises(TraceError, match=r"q\.jsonl:2"):
        load_trace(f, "mt-bench")


# --- servelab requests.parquet ---------------------------------------------------------------------------

def _write_run(tmp_path: Path) -> Path:
    recs = [
        RequestRecord(0, session_id=3, turn=0, intended_ns=5_000, status="ok", usage_prompt_tokens=100,
                      usage_completion_tokens=20, requested_output_tokens=64, finish_reason="stop"),
        RequestRecord(1, session_id=3, turn=1, intended_ns=9_000, status="timeout", est_prompt_tokens=150,
                      est_completion_tokens=3, requested_output_tokens=64),
        RequestRecord(2, session_id=3, turn=1, attempt=1, intended_ns=12_000, status="ok",
                      usage_prompt_tokens=150, usage_completion_tokens=64),
        RequestRecord(3, session_id=-1, intended_ns=1_000, warmup=True, status="ok", usage_prompt_tokens=7,
                      usage_completion_tokens=1),
        RequestRecord(4, session_id=-1, intended_ns=7_000, status="ok", usage_prompt_tokens=50,
                      est_prompt_tokens=48, est_completion_tokens=30),
    ]
    run = tmp_path / "run"
    run.mkdir()
    pq.write_table(pa.Table.from_pylist([record_to_row(r) for r in recs]), run / "requests.parquet")
    return run


def test_servelab_parquet_replays_first_attempts(tmp_path: Path) -> None:
    run = _write_run(tmp_path)
    tr = load_trace(run, "servelab")
    got = [(r.t_offset_ns, r.input_tokens, r.output_tokens, r.session_id, r.turn) for r in tr.requests]
    assert got == [(0, 100, 20, "3", 0), (2_000, 50, 30, None, 0), (4_000, 150, 64, "3", 1)]
    assert tr.metadata["dropped_warmup"] == 1 and tr.requests[0].stop == "stop"
    with_warmup = load_trace(run / "requests.parquet", "servelab", include_warmup=True)
    assert len(with_warmup) == 4 and with_warmup.requests[0].input_tokens == 7


def test_servelab_parquet_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path, "servelab")
    bad = tmp_path / "requests.parquet"
    pq.write_table(pa.table({"intended_ns": [1, 2]}), bad)
    with pytest.raises(TraceError, match="prompt_tokens"):
        load_trace(bad, "servelab")
    (tmp_path / "x.parquet").write_text("not parquet")
    with pytest.raises(TraceError, match="Parquet"):
        load_trace(tmp_path / "x.parquet", "servelab")


# --- documented JSONL ------------------------------------------------------------------------------------

def test_jsonl_format(tmp_path: Path) -> None:
    f = tmp_path / "mine.jsonl"
    f.write_text(
        '{"t": 100.5, "input_tokens": 812, "output_tokens": 96}\n'
        '{"t": 100.0, "input_tokens": 1400, "output_tokens": 40, "session_id": "u7", "hash_ids": [3, 9], '
        '"block_tokens": 512}\n'
        '{"t": 102.25, "input_tokens": 30, "output_tokens": 5, "session_id": "u7", "prompt": "hello there", '
        '"think_time_s": 1.5}\n'
    )
    tr = load_trace(f, "jsonl")
    assert [r.t_offset_ns for r in tr.requests] == [0, 500_000_000, 2_250_000_000]
    assert [r.input_tokens for r in tr.requests] == [1400, 812, 30]
    u7 = tr.sessions["u7"].requests
    assert [r.turn for r in u7] == [0, 1] and u7[0].hash_ids == [3, 9] and u7[0].block_tokens == 512
    assert u7[1].prompt == "hello there" and u7[1].think_time_s == 1.5
    assert tr.block_tokens == 512


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ('{"t": 1, "input_token": 5, "output_tokens": 1}', "unknown field(s) input_token"),
        ('{"t": 1, "output_tokens": 1}', "missing field(s) input_tokens"),
        ('{"t": 1, "input_tokens": 5, "output_tokens": 1, "hash_ids": [1]}', "block_tokens"),
        ('{"t": "soon", "input_tokens": 5, "output_tokens": 1}', "'t'"),
    ],
)
def test_jsonl_malformed(tmp_path: Path, line: str, needle: str) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text('{"t": 0, "input_tokens": 5, "output_tokens": 1}\n' + line + "\n")
    with pytest.raises(TraceError) as ei:
        load_trace(f, "jsonl")
    assert f"{f}:2" in str(ei.value) and needle in str(ei.value)


def test_load_trace_rejects_unknown_format_and_option() -> None:
    with pytest.raises(TraceError, match="unknown trace format 'sharegpt'.*azure"):
        load_trace(DATA / "azure_conv_head.csv", "sharegpt")
    with pytest.raises(TraceError, match="does not take option"):
        load_trace(DATA / "azure_conv_head.csv", "azure", stagger_s=1.0)
