"""A run directory survives bad rows (issue 9): writing Parquet never fails on one, reading never crashes."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from servelab.records.journal import REQUESTS_JOURNAL, Journal
from servelab.records.rundir import (
    REQUEST_SCHEMA,
    conform,
    read_run,
    rows_to_table,
    write_json,
    write_parquet_from_journal,
)
from servelab.records.schema import RequestRecord, record_to_row


def _good(i: int) -> dict:
    return record_to_row(RequestRecord(request_id=i, status="ok", sent_ns=10, end_ns=20, token_times_ns=[15],
                                       usage_prompt_tokens=3, usage_completion_tokens=1))


def _bad_rows() -> list[dict]:
    rows = [_good(0)]
    r = _good(1)
    r["usage_prompt_tokens"] = "10"  # a string count from the server
    rows.append(r)
    r = _good(2)
    r["usage_cached_tokens"] = 2**64  # beyond int64
    rows.append(r)
    r = _good(3)
    r["status"], r["error"], r["usage_completion_tokens"] = "timeout", "too slow", [1]
    rows.append(r)
    r = _good(4)
    r["finish_reason"] = {"why": "stop"}
    r["token_times_ns"] = [1, "x"]
    rows.append(r)
    r = _good(5)
    r["usage_prompt_tokens"] = 7.0  # integral: kept
    rows.append(r)
    return rows


def test_rows_with_values_of_the_wrong_type_become_nulls_and_malformed():
    t = rows_to_table(_bad_rows() + [[1, 2], "junk"], REQUEST_SCHEMA)  # type: ignore[list-item]
    assert t.num_rows == 6 and t.schema.equals(REQUEST_SCHEMA)
    rows = t.to_pylist()
    assert [r["status"] for r in rows] == ["ok", "malformed", "malformed", "timeout", "malformed", "ok"]
    assert rows[1]["usage_prompt_tokens"] is None and "usage_prompt_tokens='10'" in rows[1]["error"]
    assert (
        rows[2]["usage_cached_tokens"] is None
        and "usage_cached_tokens=18446744073709551616" in rows[2]["error"]
    )
    assert rows[3]["error"].startswith("too slow; invalid field(s)")  # the failure stays, the reason is added
    assert rows[4]["finish_reason"] is None and rows[4]["token_times_ns"] is None
    assert rows[5]["usage_prompt_tokens"] == 7 and rows[0]["usage_prompt_tokens"] == 3


def test_parquet_is_written_from_a_journal_with_bad_rows_and_the_run_reads_back(tmp_path):
    with Journal(tmp_path) as j:
        j.write_request(RequestRecord(request_id=0, status="ok", sent_ns=1, end_ns=2))
    with open(tmp_path / REQUESTS_JOURNAL, "ab") as f:
        for r in _bad_rows():
            f.write(json.dumps(r).encode() + b"\n")  # json: orjson refuses 2**64
        f.write(b"42\n")  # a line that is JSON but not a record
    write_json(tmp_path / "manifest.json", {"schema_version": 1, "kind": "run"})
    partial = read_run(tmp_path)  # before the Parquet file exists: from the journal
    assert partial.requests.num_rows == 7 and not partial.complete
    write_parquet_from_journal(tmp_path)
    run = read_run(tmp_path)
    assert run.requests.num_rows == 7
    statuses = run.requests.column("status").to_pylist()
    assert statuses.count("malformed") == 3 and statuses.count("ok") == 3 and statuses.count("timeout") == 1


def test_the_journal_keeps_a_record_orjson_refuses(tmp_path):
    with Journal(tmp_path) as j:
        j.write_request(RequestRecord(request_id=0, status="ok", usage_prompt_tokens=2**64))
    write_parquet_from_journal(tmp_path)
    row = pq.read_table(tmp_path / "requests.parquet").to_pylist()[0]
    assert row["status"] == "malformed" and row["usage_prompt_tokens"] is None


def test_an_older_or_foreign_parquet_file_is_conformed_to_the_schema(tmp_path):
    old = pa.table({"request_id": [1, 2], "status": ["ok", "timeout"], "usage_prompt_tokens": ["5", "x"]})
    pq.write_table(old, tmp_path / "requests.parquet")
    write_json(tmp_path / "manifest.json", {"schema_version": 1, "kind": "run"})
    run = read_run(tmp_path)
    assert set(REQUEST_SCHEMA.names) <= set(run.requests.column_names)
    assert run.requests.column("usage_prompt_tokens").to_pylist() == [None, None]
    assert run.requests.column("conn_retries").to_pylist() == [None, None]
    assert conform(rows_to_table([_good(0)], REQUEST_SCHEMA), REQUEST_SCHEMA).num_rows == 1


def test_servelab_show_reads_a_run_whose_journal_holds_bad_rows(tmp_path, capsys):
    from servelab.cli.main import main

    with open(tmp_path / REQUESTS_JOURNAL, "wb") as f:
        for r in _bad_rows():
            f.write(json.dumps(r).encode() + b"\n")
    write_json(tmp_path / "manifest.json", {"schema_version": 1, "kind": "run", "config": {}})
    code = main(["show", str(tmp_path)])
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "Traceback" not in out.out
    assert code in (0, 1), out  # shown (valid or not), never a crash
