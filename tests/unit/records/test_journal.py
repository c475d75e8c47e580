"""The crash journal: what a dead process leaves is read back, a torn last line costs that line only."""

from __future__ import annotations

import orjson

from servelab.records.journal import REQUESTS_JOURNAL, SESSIONS_JOURNAL, Journal, read_journal
from servelab.records.rundir import read_run
from servelab.records.schema import OK, TIMEOUT, RequestRecord, SessionRecord


def _rec(i: int, status: str = OK) -> RequestRecord:
    return RequestRecord(
        request_id=i,
        status=status,
        sent_ns=10 * i,
        end_ns=10 * i + 5,
        usage_prompt_tokens=7,
        usage_completion_tokens=3,
        token_times_ns=[10 * i + 2, 10 * i + 4],
    )


def _dead_run(tmp_path, torn: bytes) -> None:
    """A run directory as a process killed mid-write leaves it: manifest, journals, a torn last line."""
    (tmp_path / "manifest.json").write_bytes(orjson.dumps({"schema_version": 1, "kind": "run", "config": {}}))
    j = Journal(tmp_path)
    for i in range(3):
        j.write_request(_rec(i, TIMEOUT if i == 1 else OK))
    j.write_session(SessionRecord(session_id=0, status="ok", requests=3))
    j.close()
    with open(tmp_path / REQUESTS_JOURNAL, "ab") as f:
        f.write(torn)


def test_each_record_is_on_disk_the_moment_it_is_written(tmp_path):
    j = Journal(tmp_path)
    j.write_request(_rec(0))
    # Not closed, not flushed by hand: the line is already in the file (unbuffered writes).
    assert [r["request_id"] for r in read_journal(tmp_path / REQUESTS_JOURNAL)] == [0]
    j.close()


def test_a_torn_last_line_costs_that_line_only(tmp_path):
    whole = orjson.dumps({"request_id": 3, "status": "ok"})
    _dead_run(tmp_path, whole[: len(whole) // 2])  # died mid-write: half a line, no newline
    rows = list(read_journal(tmp_path / REQUESTS_JOURNAL))
    assert [r["request_id"] for r in rows] == [0, 1, 2]
    assert [r["status"] for r in rows] == ["ok", "timeout", "ok"]
    assert rows[2]["token_times_ns"] == [22, 24] and rows[2]["usage_completion_tokens"] == 3


def test_a_dead_run_reads_back_from_its_journals(tmp_path):
    _dead_run(tmp_path, b'{"request_id": 3, "sta')
    run = read_run(tmp_path)
    assert run.complete is False and run.summary == {}
    assert run.requests.num_rows == 3
    assert run.requests.column("request_id").to_pylist() == [0, 1, 2]
    assert run.requests.column("status").to_pylist() == ["ok", "timeout", "ok"]
    assert run.requests.column("end_ns").to_pylist() == [5, 15, 25]
    assert run.sessions is not None and run.sessions.num_rows == 1
    assert (tmp_path / SESSIONS_JOURNAL).exists() and not (tmp_path / "requests.parquet").exists()


def test_statuses_are_str_enums_that_travel_as_plain_strings(tmp_path):
    from servelab.records.schema import STATUSES, SessionStatus, Status

    assert [str(s) for s in STATUSES] == ["ok", "http_error", "timeout", "disconnected", "malformed",
                                          "client_error", "cancelled"]
    assert Status.TIMEOUT == "timeout" and Status("timeout") is Status.TIMEOUT
    assert [str(s) for s in SessionStatus] == ["ok", "failed", "timed_out", "cancelled"]
    j = Journal(tmp_path)
    j.write_request(_rec(0, Status.MALFORMED))
    j.close()
    assert next(read_journal(tmp_path / REQUESTS_JOURNAL))["status"] == "malformed"
