"""A worker process loads what its shard runs, not what only the coordinator needs: Parquet (pyarrow,
~0.1 s of CPU to import), the summary's analysis, the Prometheus parser. Every worker pays its imports
again (spawn: a fresh interpreter), so each one was a fixed CPU cost per worker per run."""

from __future__ import annotations

import multiprocessing.forkserver
import os

import pytest

from servelab.bench.run import Executor, plan_run
from servelab.bench.shard import ShardOutcome
from servelab.config import RunConfig, validate
from servelab.load.executors import run_processes
from tests.e2e.test_scale_out import _Server
from tests.e2e.worker_modules import drive_and_list_modules


@pytest.fixture(scope="module")
def server():
    s = _Server()
    yield s
    s.close()


def _failed(shard: int, error: str, exitcode: int | None) -> ShardOutcome:
    return ShardOutcome(shard=shard, error=error, exitcode=exitcode)


WORKLOADS = {
    "requests": ({"input_tokens": 24, "output_tokens": 8}, {"requests": 8}),
    "agent": ({"kind": "agent", "profile": "chat"}, {"sessions": 4}),
    "mix": (None, {"duration_s": 1}),
}


@pytest.mark.parametrize("kind", sorted(WORKLOADS))
def test_worker_processes_load_no_parquet_nor_prometheus_parser(server, tmp_path, kind):
    workload, limits = WORKLOADS[kind]
    run = {"workload": workload, "load": {"concurrency": 2}} if workload else {
        "mix": [{"workload": "chat", "concurrency": 2}, {"workload": "batch-summarize", "concurrency": 2}]}
    cfg = validate(RunConfig, {
        "target": {"url": server.url}, "seed": 1, "limits": limits, "telemetry": {"enabled": False},
        "out": str(tmp_path), **run})
    spec, _, _ = plan_run(cfg, executor=Executor(workers=2))
    outs = run_processes(drive_and_list_modules, spec, 2, failed=_failed)
    assert [o.error for o in outs] == [None, None]
    assert [o.outcome.issued > 0 for o in outs] == [True, True]  # each shard ran its share
    assert [o.facts["loaded"] for o in outs] == [[], []]


@pytest.mark.skipif("forkserver" not in __import__("multiprocessing").get_all_start_methods(),
                    reason="no fork server on this platform: workers are spawned")
def test_workers_fork_from_one_server_that_imported_the_shard_code_once(server, tmp_path, monkeypatch):
    # a fork server reads its preload list when it starts: start a fresh one for this drive function
    multiprocessing.forkserver._forkserver._stop()
    cfg = validate(RunConfig, {
        "target": {"url": server.url}, "workload": {"input_tokens": 24, "output_tokens": 8}, "seed": 1,
        "load": {"concurrency": 2}, "limits": {"requests": 8}, "telemetry": {"enabled": False},
        "out": str(tmp_path)})
    spec, _, _ = plan_run(cfg, executor=Executor(workers=2))
    run_processes(drive_and_list_modules, spec, 2, failed=_failed)  # the fork server is up now
    monkeypatch.setenv("SERVELAB_TEST_WORKER_ENV", "set after the fork server started")
    outs = run_processes(drive_and_list_modules, spec, 2, failed=_failed)
    assert [o.error for o in outs] == [None, None]
    pids = {o.facts["pid"] for o in outs}
    server_pid = {o.facts["imported_in"] for o in outs}
    # the drive's module (servelab.bench.drive with it) was imported once, in one other process, for both
    assert len(pids) == 2 and len(server_pid) == 1 and not (pids & server_pid)
    assert os.getpid() not in server_pid
    # each worker sees the coordinator's environment as it is at the start of the run
    assert [o.facts["env"] for o in outs] == ["set after the fork server started"] * 2


@pytest.mark.skipif("forkserver" not in __import__("multiprocessing").get_all_start_methods(),
                    reason="no fork server on this platform: workers are spawned")
def test_parallel_sweep_workers_fork_from_one_server_that_imported_the_point_code_once(tmp_path):
    from servelab.sweep.grid import expand
    from servelab.sweep.parallel import run_points
    from servelab.sweep.runner import SweepSpec, point_config
    from tests.e2e.sweep_worker_modules import point_and_pids

    multiprocessing.forkserver._forkserver._stop()  # a fresh fork server reads this pool's preload list
    base = {"target": {"url": "sim"}, "workload": {"input_tokens": 16, "output_tokens": 4},
            "limits": {"requests": 4}, "telemetry": {"enabled": False}}
    spec = SweepSpec(base=base, axes={"concurrency": [1, 2, 3, 4, 5]}, out=str(tmp_path), report=False,
                     parallel=2)
    work = [(i, p, point_config(base, p.params)) for i, p in enumerate(expand(spec.axes))]
    got: dict[int, dict] = {}
    run_points(work, point_and_pids, (tmp_path, spec), parallel=2, ray_address=None,
               on_done=got.__setitem__, out_of_budget=lambda: False)
    assert [got[i]["status"] for i in range(5)] == ["ok"] * 5
    pids, imported_in = {e["pid"] for e in got.values()}, {e["imported_in"] for e in got.values()}
    # five points on at most two worker processes, kept from point to point
    assert 1 <= len(pids) <= 2
    # the point's code (servelab.sweep.runner with it) was imported once, in one other process, for both
    assert len(imported_in) == 1 and not (pids & imported_in) and os.getpid() not in imported_in
