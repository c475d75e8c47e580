"""The end of a run: a shard that died (killed, crashed) has what it had in flight recorded through the
shared record builders, with the same fields as any other cancelled record and a time on the run's clock."""

from __future__ import annotations

import orjson

from servelab.bench.finish import _record_dead_shard
from servelab.bench.shard import RunSpec, ShardOutcome
from servelab.config import RunConfig
from servelab.records.journal import Journal, read_journal
from servelab.records.schema import CANCELLED, OK, RequestRecord, SessionRecord, record_to_row
from servelab.transport.base import ModelRequest, ended_record


def _journal(tmp_path, name: str) -> list[dict]:
    return list(read_journal(tmp_path / name))


def test_a_dead_shards_in_flight_requests_are_cancelled_records_like_any_other(tmp_path):
    # Worker 1 started jobs 1, 3 and 5 and journaled 1 (sent at 2,000 ns, ended 9,000) and 3 (intended 9,000,
    # sent 9,100, ended 15,000) before it was killed: 5 was in flight. Last heard from: 15,000 ns, the
    # latest time in its journal (before: intended_ns 0, the clock's origin, which stretched the measured
    # window from the clock's start, 37,901 s in the e2e killed-worker run).
    spec = RunSpec(config=RunConfig.model_validate({"load": {"concurrency": 2}}), run_dir=tmp_path, workers=2)
    with Journal(tmp_path, 1) as j:
        for i in (1, 3, 5):
            j.write_issued(i)
        j.write_request(RequestRecord(request_id=1, worker=1, status=OK, intended_ns=2_000, sent_ns=2_000,
                                      end_ns=9_000))
        j.write_request(RequestRecord(request_id=3, worker=1, status=OK, intended_ns=9_000, sent_ns=9_100,
                                      end_ns=15_000))
    dead = ShardOutcome(shard=1, host="h1", exitcode=-9)
    assert _record_dead_shard(spec, dead, started_ns=1_000) == 1
    rows = _journal(tmp_path, "requests.journal.w1.jsonl")
    assert [r["request_id"] for r in rows] == [1, 3, 5]
    lost = rows[2]
    # a cancelled record as the executors journal it (transport.base.ended_record): the same columns
    other = orjson.loads(orjson.dumps(record_to_row(ended_record(ModelRequest(request_id=5), CANCELLED))))
    assert list(lost) == list(other)
    assert (lost["status"], lost["worker"], lost["warmup"]) == (CANCELLED, 1, False)
    assert lost["intended_ns"] == 15_000
    assert (lost["sent_ns"], lost["end_ns"], lost["first_token_ns"], lost["token_times_ns"]) == (
        None, None, None, [])
    # unknown, not made up (ModelRequest's default max_tokens would have said 128)
    assert lost["requested_output_tokens"] is None and lost["est_prompt_tokens"] is None
    assert lost["error"] == "worker 1 (h1) died with this in flight: exit -9"
    both = [k for k in other if other[k] is not None and lost[k] is not None]
    assert both and all(type(lost[k]) is type(other[k]) for k in both)


def test_a_dead_shard_that_journaled_nothing_takes_the_live_shards_start(tmp_path):
    # Worker 1 started job 1 and died before any record: its time is the live shards' start, 1,000 ns.
    spec = RunSpec(config=RunConfig.model_validate({"load": {"concurrency": 2}}), run_dir=tmp_path, workers=2)
    with Journal(tmp_path, 1) as j:
        j.write_issued(1)
    assert _record_dead_shard(spec, ShardOutcome(shard=1, host="h1", error="boom"), started_ns=1_000) == 1
    (lost,) = _journal(tmp_path, "requests.journal.w1.jsonl")
    assert (lost["request_id"], lost["intended_ns"], lost["status"]) == (1, 1_000, CANCELLED)
    assert lost["error"] == "worker 1 (h1) died with this in flight: boom"


def test_a_dead_shards_in_flight_sessions_start_when_it_was_last_heard_from(tmp_path):
    # An agent run: worker 1 started sessions 1 and 3 and journaled 1 (start 500, end 40,000): 3 is lost,
    # its start the latest journaled time, 40,000 ns (before: 0).
    cfg = RunConfig.model_validate({"workload": {"kind": "agent", "profile": "chat"}})
    spec = RunSpec(config=cfg, run_dir=tmp_path, workers=2)
    with Journal(tmp_path, 1) as j:
        for i in (1, 3):
            j.write_issued(i)
        j.write_session(SessionRecord(session_id=1, worker=1, status="ok", start_ns=500, end_ns=40_000))
    assert _record_dead_shard(spec, ShardOutcome(shard=1, host="h1", exitcode=-9), started_ns=100) == 1
    lost = _journal(tmp_path, "sessions.journal.w1.jsonl")[1]
    assert (lost["session_id"], lost["worker"], lost["status"], lost["start_ns"]) == (3, 1, CANCELLED, 40_000)
    assert lost["end_ns"] is None
