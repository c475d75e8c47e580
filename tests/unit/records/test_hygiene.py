"""The crash journals are removed once the Parquet files hold every row, and kept otherwise."""

from __future__ import annotations

import pyarrow.parquet as pq

from servelab.records.hygiene import retire_journals
from servelab.records.journal import Journal
from servelab.records.merge import merge_journals
from servelab.records.schema import OK, RequestRecord, SessionRecord


def _journals(tmp_path, shards=2, per_shard=4, sessions=True):
    for w in range(shards):
        with Journal(tmp_path, w) as j:
            for k in range(per_shard):
                j.write_issued(k * shards + w)
                r = RequestRecord(
                    request_id=k * shards + w, status=OK, intended_ns=k, sent_ns=k, end_ns=k + 5
                )
                r.worker = w
                j.write_request(r)
            if sessions:
                j.write_session(SessionRecord(session_id=w, worker=w, status="ok", start_ns=1, end_ns=9))
    return sorted(p.name for p in tmp_path.iterdir() if "journal" in p.name)


def test_journals_go_once_the_parquet_holds_every_row(tmp_path):
    names = _journals(tmp_path)
    assert len(names) == 6  # requests, sessions and issued, for shards 0 and 1
    n_req, n_ses = merge_journals(tmp_path)
    gone = retire_journals(tmp_path, n_req, n_ses)
    assert sorted(p.name for p in gone) == names
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.parquet", "sessions.parquet"]
    assert pq.read_table(tmp_path / "requests.parquet").num_rows == 8  # the rows are still there


def test_a_short_or_missing_parquet_keeps_the_journals(tmp_path):
    names = _journals(tmp_path)
    assert retire_journals(tmp_path, 8, 2) == []  # nothing merged yet
    n_req, n_ses = merge_journals(tmp_path)
    assert retire_journals(tmp_path, n_req + 1, n_ses) == []  # fewer rows than journaled
    assert retire_journals(tmp_path, n_req, n_ses + 1) == []
    (tmp_path / "requests.parquet").write_bytes(b"not parquet")
    assert retire_journals(tmp_path, n_req, n_ses) == []
    assert sorted(p.name for p in tmp_path.iterdir() if "journal" in p.name) == names
