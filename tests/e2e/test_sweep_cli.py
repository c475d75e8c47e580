"""Sweeps against the in-process simulator: the knee, resume after SIGKILL or Ctrl-C, compare and check."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from servelab.cli.main import main

TARGET = "sim:llama-3.1-8b@1xh100"
LOAD = ["--input-tokens", "256", "--output-tokens", "128", "--ignore-eos"]


def _sweep(tmp_path, capsys, *args):
    assert (
        main(["sweep", "--target", TARGET, "--out", str(tmp_path), "--json", "--no-report", *LOAD, *args])
        == 0
    )
    return json.loads(capsys.readouterr().out)


def test_knee_at_max_num_seqs(tmp_path, capsys):
    state = _sweep(tmp_path, capsys, "--set", "max_num_seqs=16", "--concurrency", "1,4,16,64,256",
                   "--requests", "600")
    assert [p["status"] for p in state["points"]] == ["ok"] * 5
    knee = state["knee"]
    assert knee["level"] in (4, 16, 64), knee  # 16 +- one grid level
    assert knee["level"] == 16


def test_no_knee_within_the_grid_is_n_or_beyond(tmp_path, capsys):
    state = _sweep(tmp_path, capsys, "--set", "max_num_seqs=256", "--concurrency", "1,2,4,8",
                   "--requests", "64")
    knee = state["knee"]
    assert knee["level"] is None and knee.get("beyond") is True and knee["low"] == 8


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path, capsys):
    # A model too large for one GPU fails at the point that asks for it; the other point runs.
    state = _sweep(tmp_path, capsys, "--set", "target=sim:llama-3.1-70b@1xh100,sim:llama-3.1-8b@1xh100",
                   "--concurrency", "2", "--requests", "8")
    assert sorted(p["status"] for p in state["points"]) == ["failed", "ok"]
    failed = next(p for p in state["points"] if p["status"] == "failed")
    assert "70" in failed["error"]


def _sweep_proc(out: Path, resume: Path | None = None) -> subprocess.Popen:
    args = [sys.executable, "-m", "servelab.cli.main", "sweep", "--target", TARGET, "--out", str(out),
            "--no-report", "--concurrency", "1,2,4,8", "--requests", "400", *LOAD]
    if resume is not None:
        args += ["--resume", str(resume)]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def test_resume_after_sigkill_skips_finished_points(tmp_path):
    proc = _sweep_proc(tmp_path)
    deadline = time.monotonic() + 120
    sweep_dir = None
    try:
        while time.monotonic() < deadline:
            dirs = [d for d in tmp_path.iterdir() if (d / "sweep.json").exists()]
            if dirs:
                sweep_dir = dirs[0]
                st = json.loads((sweep_dir / "sweep.json").read_text())
                if sum(p["status"] == "ok" for p in st["points"]) >= 2:
                    break
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        proc.stderr.close()
    assert sweep_dir is not None
    before = json.loads((sweep_dir / "sweep.json").read_text())
    done = {p["key"]: p for p in before["points"] if p["status"] == "ok"}
    # Killed within one 20 ms poll of the second point finishing; each point sends 400 requests (well over
    # 20 ms each), so the last two cannot both have finished: never a skip, an assertion.
    assert 2 <= len(done) < len(before["points"]), [p["status"] for p in before["points"]]
    started = {k: json.loads((sweep_dir / k / "manifest.json").read_text())["started_at"] for k in done}
    resumed = _sweep_proc(tmp_path, resume=sweep_dir)
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err.decode()
    after = json.loads((sweep_dir / "sweep.json").read_text())
    assert [p["status"] for p in after["points"]] == ["ok"] * 4
    for k, t in started.items():  # finished points were not rerun
        assert json.loads((sweep_dir / k / "manifest.json").read_text())["started_at"] == t
    for p in after["points"]:  # counts add up in every point, including the one killed mid-run
        r = p["summary"]["requests"]
        assert r["sent"] == r["ok"] + sum(r["failed"].values()) + r["cancelled"] == 400


def test_ctrl_c_at_a_parallel_sweep_ends_it_as_a_serial_one(tmp_path, capsys):
    """SIGINT to the process group (a terminal's Ctrl-C) of a --parallel 2 sweep: exit 130, the finished
    points kept, the running ones marked interrupted, sweep.json's final fields written (the same keys as
    a serial sweep's), the table and the --resume hint printed; --resume then runs the rest."""
    serial = _sweep(tmp_path / "serial", capsys, "--concurrency", "1", "--requests", "8")
    args = [sys.executable, "-m", "servelab.cli.main", "sweep", "--target", TARGET, "--out",
            str(tmp_path / "par"), "--no-report", "--concurrency", "1,2,4,8", "--requests", "400",
            "--parallel", "2", *LOAD]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    sweep_dir = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and sweep_dir is None:
            for f in (tmp_path / "par").glob("*/sweep.json"):
                with contextlib.suppress(ValueError):  # caught mid-write
                    if any(e["status"] == "ok" for e in json.loads(f.read_text())["points"]):
                        sweep_dir = f.parent
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert sweep_dir is not None
    assert proc.returncode == 130, err.decode()
    state = json.loads((sweep_dir / "sweep.json").read_text())
    assert sorted(state) == sorted(serial)  # knee, decision, ended_at, complete, interrupted...
    assert state["interrupted"] is True and state["complete"] is False and state["ended_at"]
    statuses = [e["status"] for e in state["points"]]
    # Cut within one 20 ms poll of the first point finishing: the other three (400 requests each) cannot
    # all have finished, and none failed.
    assert "ok" in statuses and set(statuses) <= {"ok", "interrupted", "pending"}, statuses
    assert statuses.count("ok") < 4, statuses
    table = out.decode()
    assert all(f"concurrency={c}" in table for c in (1, 2, 4, 8)), table
    assert all(status in table for status in statuses), table
    assert f"rerun with --resume {sweep_dir}" in err.decode(), err.decode()
    ok = {e["key"] for e in state["points"] if e["status"] == "ok"}
    started = {k: json.loads((sweep_dir / k / "manifest.json").read_text())["started_at"] for k in ok}
    resumed = subprocess.run([*args, "--resume", str(sweep_dir)], capture_output=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr.decode()
    after = json.loads((sweep_dir / "sweep.json").read_text())
    assert [e["status"] for e in after["points"]] == ["ok"] * 4
    assert after["complete"] is True and after["interrupted"] is False
    for k, t in started.items():  # finished points were not rerun
        assert json.loads((sweep_dir / k / "manifest.json").read_text())["started_at"] == t


def _run(tmp_path, capsys, target):
    assert main(["run", "--target", target, "--out", str(tmp_path), "--concurrency", "8", "--requests", "64",
                 "--no-report", *LOAD]) == 0
    err = capsys.readouterr().err
    return next(x for x in err.splitlines() if x.startswith("run written to ")).split(" to ", 1)[1]


def test_compare_refuses_two_differing_dimensions(tmp_path, capsys):
    a = _run(tmp_path, capsys, TARGET)
    b = _run(tmp_path, capsys, "sim:llama-3.1-70b@8xh100,tp=8,dtype=fp8")
    assert main(["compare", a, b]) == 2
    err = capsys.readouterr().err
    assert "differ in" in err
    c = _run(tmp_path, capsys, TARGET + ",max_num_seqs=4")
    assert main(["compare", a, c, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    rows = {r["figure"]: r for r in res["figures"][0]["rows"]}
    # 8 users on 4 sequence slots: half of them queue for a whole request, so TTFT p50 is worse by far.
    ttft = rows["ttft_ms p50"]
    assert ttft["verdict"] == "worse" and ttft["rel"] > 1.0, ttft
    assert rows["output tokens/s"]["verdict"] == "worse", rows["output tokens/s"]
    assert rows["failure rate"]["verdict"] == "within noise"
