"""Cutting a run into shards: every global index goes to exactly one shard, concurrency splits evenly,
warm-up and limits follow the global indices, outcomes merge, live statistics travel and merge."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from servelab.analysis.live import LiveStats
from servelab.bench.shard import effective_workers, global_job, merge_outcomes, shard_plan, split_concurrency
from servelab.load.runner import RunOutcome, RunPlan
from servelab.load.session import RequestIds
from servelab.records.schema import CANCELLED, OK, RequestRecord


def test_open_loop_shards_take_every_wth_send_of_one_schedule():
    offsets = [0, 10, 20, 30, 40, 50, 60]
    plan = RunPlan(offsets_ns=offsets, max_jobs=7, warmup_jobs=3)
    parts = [shard_plan(plan, w, 3) for w in range(3)]
    assert [list(p.offsets_ns) for p in parts] == [[0, 30, 60], [10, 40], [20, 50]]
    assert [p.max_jobs for p in parts] == [3, 2, 2]
    # global warm-up indices 0, 1, 2: each shard's first job
    assert [p.warmup_jobs for p in parts] == [1, 1, 1]
    assert shard_plan(plan, 0, 1) is plan


def test_closed_loop_splits_concurrency_and_the_request_limit():
    assert split_concurrency(10, 4) == [3, 3, 2, 2]
    assert sum(split_concurrency(7, 3)) == 7
    plan = RunPlan(concurrency=10, max_jobs=101, warmup_jobs=5)
    parts = [shard_plan(plan, w, 4) for w in range(4)]
    assert [p.concurrency for p in parts] == [3, 3, 2, 2]
    assert [p.max_jobs for p in parts] == [26, 25, 25, 25]  # 101 = 26 + 25 * 3
    assert [p.warmup_jobs for p in parts] == [2, 1, 1, 1]  # indices 0..4: shard 0 has 0 and 4


def test_no_more_shards_than_users_or_jobs():
    assert effective_workers(RunPlan(concurrency=3), 8) == 3
    assert effective_workers(RunPlan(offsets_ns=[0, 1], max_jobs=2), 8) == 2
    assert effective_workers(RunPlan(concurrency=64, max_jobs=1000), 4) == 4


def test_global_job_maps_local_indices_and_notes_each_start():
    seen: list[int] = []
    noted: list[int] = []

    async def job(index: int, intended_ns: int, warmup: bool) -> None:
        seen.append(index)

    class J:
        def write_issued(self, i: int) -> None:
            noted.append(i)

    run = global_job(job, 2, 3, J())  # type: ignore[arg-type]

    async def main() -> None:
        for k in range(4):
            await run(k, 0, False)

    asyncio.run(main())
    assert seen == noted == [2, 5, 8, 11]


def test_request_ids_are_unique_across_shards():
    ids = [RequestIds(w, 3) for w in range(3)]
    got = [i.next() for _ in range(5) for i in ids]
    assert sorted(got) == list(range(15))


def test_merged_outcome_spans_all_shards_and_sums_counts():
    a = RunOutcome(started_ns=100, ended_ns=900, issued=5, completed=5, loop_lag_ms=[1.0, 2.0])
    b = RunOutcome(started_ns=90, ended_ns=950, issued=4, completed=3, cancelled_in_flight=1,
                   stopped_by="interrupt", loop_lag_ms=[30.0])
    m = merge_outcomes([a, b])
    assert (m.started_ns, m.ended_ns, m.issued, m.completed, m.cancelled_in_flight) == (90, 950, 9, 8, 1)
    assert m.stopped_by == "interrupt" and sorted(m.loop_lag_ms) == [1.0, 2.0, 30.0]


def _rec(i: int, status: str, ttft_ms: float) -> RequestRecord:
    return RequestRecord(request_id=i, status=status, sent_ns=1_000_000_000, end_ns=2_000_000_000 + i,
                         first_token_ns=1_000_000_000 + int(ttft_ms * 1e6), usage_completion_tokens=10)


def test_live_snapshots_are_json_and_merge_to_the_single_process_figures():
    recs = [_rec(i, OK, 5.0 + i) for i in range(20)] + [_rec(20, CANCELLED, 0.0), _rec(21, "timeout", 0.0)]
    whole = LiveStats()
    for r in recs:
        whole.update(r)
    # two workers, each reporting twice (report-and-reset), merged at the coordinator from JSON
    workers = [LiveStats(), LiveStats()]
    merged = LiveStats()
    for half in (0, 1):
        for i, r in enumerate(recs):
            if i % 2 == half:
                workers[half].update(r)
            if i == 10:
                merged.merge(LiveStats.from_snapshot(orjson.loads(orjson.dumps(workers[half].take()))))
    for w in workers:
        merged.merge(LiveStats.from_snapshot(orjson.loads(orjson.dumps(w.take()))))
    assert (merged.done, merged.ok, merged.errors, merged.cancelled) == (22, 20, 1, 1)
    assert merged.output_tokens == whole.output_tokens == 200
    assert merged.ttft_p50_ms() == pytest.approx(whole.ttft_p50_ms())
    assert merged.first_start_ns == whole.first_start_ns and merged.last_end_ns == whole.last_end_ns
