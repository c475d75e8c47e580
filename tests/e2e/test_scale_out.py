"""One run across worker processes and a real local Ray cluster, against the simulator's HTTP server over
loopback: counts add up across shards, the merged figures equal a one-process run of the same seed (the
same prompts and lengths by global index), and a killed worker's in-flight requests are recorded as
cancelled while the run still finishes."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time

import pyarrow.parquet as pq
import pytest

from servelab.bench.run import Executor, execute
from servelab.config import RunConfig, validate
from servelab.sim.server import make_engine, start_server


class _Server:
    """The simulator's HTTP front on a thread of this process (shards are other processes)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def up():
            from servelab.clock import WallClock

            engine, deployment = make_engine("sim", WallClock(use_uvloop=False), seed=0)
            return await start_server(engine, deployment, host="127.0.0.1", port=0)

        self.srv = asyncio.run_coroutine_threadsafe(up(), self.loop).result(20)
        self.url = self.srv.base_url

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.srv.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture(scope="module")
def server():
    s = _Server()
    yield s
    s.close()


def _cfg(url: str, out, **limits) -> RunConfig:
    return validate(RunConfig, {
        "target": {"url": url}, "workload": {"input_tokens": 24, "output_tokens": 8}, "seed": 7,
        "load": {"concurrency": 4}, "limits": {"requests": 24, **limits}, "telemetry": {"enabled": False},
        "out": str(out)})


def _rows(result) -> dict:
    return pq.read_table(result.run_dir / "requests.parquet").to_pydict()


def _same_work(one, two) -> None:
    a, b = one.summary, two.summary
    assert b["requests"]["sent"] == b["requests"]["ok"] == a["requests"]["ok"] == 24
    # prompts and lengths are drawn by global index: the shards sent exactly the one-process run's work
    assert (
        b["tokens"]["input"] == a["tokens"]["input"]
        and b["tokens"]["output"] == a["tokens"]["output"] == 24 * 8
    )
    ra, rb = _rows(one), _rows(two)
    assert sorted(rb["request_id"]) == sorted(ra["request_id"]) == list(range(24))
    assert set(rb["worker"]) == {0, 1} and set(ra["worker"]) == {0}
    by_worker = {
        w: sorted(i for i, x in zip(rb["request_id"], rb["worker"], strict=True) if x == w) for w in (0, 1)
    }
    assert by_worker == {0: list(range(0, 24, 2)), 1: list(range(1, 24, 2))}
    # latencies are same-host differences: both runs see the same idle server, within noise
    assert 0.2 < b["metrics"]["e2e_ms"]["p50"] / a["metrics"]["e2e_ms"]["p50"] < 5


def test_two_worker_processes_do_the_one_process_work(server, tmp_path):
    one = execute(_cfg(server.url, tmp_path / "one"), report=False)
    two = execute(_cfg(server.url, tmp_path / "two"), report=False, executor=Executor(workers=2))
    _same_work(one, two)
    ex = two.run_dir.joinpath("manifest.json").read_text()
    assert '"kind": "processes"' in ex and two.summary["workers"][1]["issued"] == 12


def _kill_when_started(run_root, name: str, stop: threading.Event) -> None:
    """Poll for shard 1's process and its first records, then SIGKILL it mid-run."""
    while not stop.is_set():
        procs = [p for p in multiprocessing.active_children() if p.name == name]
        dirs = list(run_root.glob("*/requests.journal.w1.jsonl")) if run_root.exists() else []
        if procs and dirs and dirs[0].read_bytes().count(b"\n") >= 2:
            os.kill(procs[0].pid, signal.SIGKILL)
            return
        time.sleep(0.01)


def test_a_killed_worker_is_recorded_and_the_run_finishes(server, tmp_path):
    cfg = validate(RunConfig, {
        "target": {"url": server.url}, "workload": {"input_tokens": 24, "output_tokens": 32}, "seed": 3,
        "load": {"concurrency": 4}, "limits": {"requests": 80}, "telemetry": {"enabled": False},
        "out": str(tmp_path)})
    stop = threading.Event()
    killer = threading.Thread(
        target=_kill_when_started, args=(tmp_path, "servelab-shard-1", stop), daemon=True
    )
    killer.start()
    try:
        result = execute(cfg, report=False, executor=Executor(workers=2))
    finally:
        stop.set()
    r = result.summary["requests"]
    assert r["sent"] == r["ok"] + sum(r["failed"].values()) + r["cancelled"]
    rows = _rows(result)
    dead = [e for e, w in zip(rows["error"], rows["worker"], strict=True) if w == 1 and e and "worker 1" in e]
    assert r["cancelled"] == len(dead) >= 1  # what worker 1 had in flight when it was killed
    # ... at a time on the run's clock (when worker 1 was last heard from), not 0: that stretched the
    # measured window to the monotonic clock's age (37,901 s, 0.0011 req/s) before
    first = min(t for t in rows["sent_ns"] if t is not None)
    last = max(t for t in rows["end_ns"] if t is not None)
    lost = [t for t, e in zip(rows["intended_ns"], rows["error"], strict=True) if e and "worker 1" in e]
    assert all(first <= t <= last for t in lost)
    # closed loop: the window runs from the first send to the last end
    assert result.summary["throughput"]["duration_s"] == pytest.approx((last - first) / 1e9)
    assert sum(1 for w in rows["worker"] if w == 0) == 40  # the other shard finished its share
    assert not result.summary["valid"]
    assert any("worker 1" in x and "failed" in x for x in result.summary["invalid_reasons"])


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def test_ray_shards_on_a_local_cluster_do_the_one_process_work(server, tmp_path, ray_cluster):
    one = execute(_cfg(server.url, tmp_path / "one"), report=False)
    two = execute(
        _cfg(server.url, tmp_path / "two"), report=False, executor=Executor(workers=2, ray_address="")
    )
    _same_work(one, two)
    import json

    shards = json.loads(two.run_dir.joinpath("manifest.json").read_text())["executor"]["shards"]
    assert [s["worker"] for s in shards] == [0, 1]
    assert all(s["clock_rtt_ns"] is not None and s["clock_rtt_ns"] > 0 for s in shards)
    # one host: the offset is within the measurement's error bound (half the round trip), plus scheduling
    # noise
    assert all(abs(s["clock_offset_ns"]) <= s["clock_rtt_ns"] + 5_000_000 for s in shards)


def _sweep(tmp_path, **kw):
    from servelab.sweep.runner import SweepSpec, run_sweep

    base = {"target": {"url": "sim"}, "workload": {"input_tokens": 32, "output_tokens": 16},
            "limits": {"requests": 40}, "telemetry": {"enabled": False}}
    spec = SweepSpec(base=base, axes={"concurrency": [1, 2, 4, 8]}, out=str(tmp_path), report=False, **kw)
    return run_sweep(spec)


def _figures(state) -> list:
    return [(e["key"], e["status"], e["summary"]["throughput"]["output_tokens_per_s"],
             e["summary"]["metrics"]["ttft_ms"]["p50"]) for e in state["points"]]


def test_parallel_sweep_equals_the_serial_one_and_resumes(tmp_path):
    import json

    _, serial = _sweep(tmp_path / "serial")
    sweep_dir, par = _sweep(tmp_path / "par", parallel=2)
    # simulated points run on virtual time: the same figures whichever process ran them
    assert _figures(par) == _figures(serial) and all(e["status"] == "ok" for e in par["points"])
    # a point lost mid-sweep is run again on resume, the others are kept
    path = sweep_dir / "sweep.json"
    state = json.loads(path.read_text())
    state["points"][2].update(status="pending", summary=None)
    path.write_text(json.dumps(state))
    mtimes = {
        p.name: (sweep_dir / p.name / "summary.json").stat().st_mtime_ns
        for p in sweep_dir.iterdir()
        if p.is_dir()
    }
    _, resumed = _sweep(tmp_path / "par", parallel=2, resume_dir=sweep_dir)
    assert _figures(resumed) == _figures(serial)
    rerun = [k for k, t in mtimes.items() if (sweep_dir / k / "summary.json").stat().st_mtime_ns != t]
    assert rerun == [serial["points"][2]["key"]]


def test_ray_sweep_equals_the_serial_one(tmp_path, ray_cluster):
    _, serial = _sweep(tmp_path / "serial")
    _, on_ray = _sweep(tmp_path / "ray", parallel=2, ray_address="")
    assert _figures(on_ray) == _figures(serial)


def test_ctrl_c_at_the_coordinator_stops_every_worker_and_keeps_the_merged_result(server, tmp_path):
    import json
    import subprocess
    import sys

    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servelab.cli.main",
            "run",
            "--target",
            server.url,
            "--concurrency",
            "4",
            "--duration",
            "120",
            "--output-tokens",
            "64",
            "--workers",
            "2",
            "--out",
            str(tmp_path),
            "--no-report",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # poll: both workers have journaled requests, so both are running
        journals = [
            list(tmp_path.glob(f"*/{n}")) for n in ("requests.journal.jsonl", "requests.journal.w1.jsonl")
        ]
        if all(j and j[0].read_bytes().count(b"\n") >= 2 for j in journals):
            break
        time.sleep(0.05)
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=90)
    assert run.returncode == 130, err.decode()[-2000:]
    s = json.loads(out)
    r = s["requests"]
    assert r["cancelled"] == 4 and r["ok"] >= 4  # one in flight per user, two users per worker
    assert r["sent"] == r["ok"] + sum(r["failed"].values()) + r["cancelled"]
    assert [w["worker"] for w in s["workers"]] == [0, 1]
    rows = pq.read_table(next(tmp_path.iterdir()) / "requests.parquet").to_pydict()
    assert {w for w, st in zip(rows["worker"], rows["status"], strict=True) if st == "cancelled"} == {0, 1}
