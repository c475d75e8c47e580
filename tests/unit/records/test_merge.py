"""Shard journals merged into one Parquet file: every row once, with its worker; a remote shard's times
shifted onto the coordinator's clock; a torn last line skipped; a dead shard's started jobs listed."""

from __future__ import annotations

import pyarrow.parquet as pq

from servelab.records.journal import Journal, journal_paths, shard_name
from servelab.records.merge import issued_indices, merge_journals, recorded_ids
from servelab.records.schema import OK, RequestRecord, SessionRecord


def test_shard_names_and_discovery(tmp_path):
    assert shard_name("requests.journal.jsonl", 0) == "requests.journal.jsonl"
    assert shard_name("requests.journal.jsonl", 12) == "requests.journal.w12.jsonl"
    for w in (2, 0, 10):
        Journal(tmp_path, w).close()
    (tmp_path / "requests.journal.jsonl.tmp").write_text("")
    assert [p.name for p in journal_paths(tmp_path, "requests.journal.jsonl")] == [
        "requests.journal.jsonl", "requests.journal.w2.jsonl", "requests.journal.w10.jsonl"]


def test_merge_keeps_every_row_with_its_worker_and_shifts_remote_times(tmp_path, monkeypatch):
    import servelab.records.merge as merge

    monkeypatch.setattr(merge, "BATCH_ROWS", 3)  # several batches per shard
    for w in range(2):
        with Journal(tmp_path, w) as j:
            for k in range(5):
                i = k * 2 + w
                r = RequestRecord(request_id=i, status=OK, intended_ns=1000 * i, sent_ns=1000 * i + 1,
                                  end_ns=1000 * i + 50, token_times_ns=[1000 * i + 10, 1000 * i + 20])
                r.worker = w
                j.write_request(r)
            j.write_session(SessionRecord(session_id=w, worker=w, status="ok", start_ns=5, end_ns=7))
    with open(tmp_path / shard_name("requests.journal.jsonl", 1), "ab") as f:
        f.write(b'{"request_id": 99, "sta')  # torn: the process died mid-write
    n_req, n_ses = merge_journals(tmp_path, {1: 1_000_000})
    assert (n_req, n_ses) == (10, 2)
    t = pq.read_table(tmp_path / "requests.parquet").to_pydict()
    assert sorted(t["request_id"]) == list(range(10))
    by_id = {i: k for k, i in enumerate(t["request_id"])}
    assert t["worker"][by_id[3]] == 1 and t["worker"][by_id[4]] == 0
    assert t["sent_ns"][by_id[4]] == 4001 and t["sent_ns"][by_id[3]] == 3001 + 1_000_000
    assert t["token_times_ns"][by_id[3]] == [3010 + 1_000_000, 3020 + 1_000_000]
    s = pq.read_table(tmp_path / "sessions.parquet").to_pydict()
    assert sorted(zip(s["worker"], s["start_ns"], strict=True)) == [(0, 5), (1, 5 + 1_000_000)]


def test_issued_and_recorded_ids_of_a_shard(tmp_path):
    with Journal(tmp_path, 3) as j:
        for i in (3, 7, 11):
            j.write_issued(i)
        j.write_request(RequestRecord(request_id=7, status=OK))
    with open(tmp_path / "issued.journal.w3.txt", "ab") as f:
        f.write(b"1")  # torn
    assert issued_indices(tmp_path, 3) == [3, 7, 11]
    assert recorded_ids(tmp_path, 3, "requests.journal.jsonl", "request_id") == {7}
    assert issued_indices(tmp_path, 0) == []


def test_a_dead_sharded_run_reads_back_from_every_shards_journal(tmp_path):
    from servelab.records.manifest import build_manifest
    from servelab.records.rundir import read_run, write_json

    write_json(
        tmp_path / "manifest.json", build_manifest(config={}, argv=[], target={}, seed=0, started_at="x")
    )
    for w in range(3):
        with Journal(tmp_path, w) as j:
            r = RequestRecord(request_id=w, status=OK)
            r.worker = w
            j.write_request(r)
    data = read_run(tmp_path)
    assert not data.complete
    assert sorted(data.requests.column("worker").to_pylist()) == [0, 1, 2]
