"""Scale out: one run over 1 and 2 worker processes, sweeps in parallel, and peak memory against run size.

Every case runs in a fresh process and is compared with a reference measured in the same invocation:

  throughput  ``servelab run`` (execute) with --workers 1 and 2 against client_throughput.py's zero-delay
              mock server (its own process, pinned to the last core; the clients on the others), beside
              the raw-socket reference client as 1 and 2 processes for the same time at the same total
              concurrency: streamed tokens/s, client CPU per 1,000 requests in the load window (the
              per-request cost; servelab's shards measure it) and for the whole execute (coordinator + its
              worker processes and their fork server, getrusage: adds the fixed start-up, printed apart in
              ms), voluntary context switches per request (event-loop wake-ups). With two cores, one the
              server's, client CPU per request in the load window must not grow with W (w2/w1 about 1);
              the reference's own 2-process/1-process ratio shows what the setup alone does.
  sweep       8 simulated points (concurrency 1..128) serial, --parallel 2, and on a local Ray cluster:
              wall time, CPU seconds (the sweep process and its workers) and speed-up over serial, beside
              the speed-up this box gives two pure-Python processes over one right now, measured in the
              same invocation (on a box shared with other sessions it can be near 1: the kernel's
              autogroup scheduler gives a session one share of the CPU, however many processes it runs).
  memory      peak RSS of a whole run (load, merge to Parquet, summary) at 10k and 100k requests (1M with
              --million), beside the raw reference's peak RSS for the same requests.

    PYTHONPATH=src python benchmarks/scale_out.py [--cases throughput,sweep,memory] [--duration 4]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _mock():
    spec = importlib.util.spec_from_file_location("client_throughput", HERE / "client_throughput.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["client_throughput"] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


# A whole servelab run in a fresh interpreter: prints wall, CPU (self + children) and peak RSS as JSON.
_RUN = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from servelab.bench.run import Executor, execute
from servelab.config import RunConfig, validate
url, workers, conc, limit, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
lim = {"duration_s": float(limit[1:])} if limit.startswith("d") else {"requests": int(limit)}
cfg = validate(RunConfig, {"target": {"url": url, "model": "bench-model"}, "load": {"concurrency": conc},
    "workload": {"input_tokens": 64, "output_tokens": 256}, "limits": lim, "telemetry": {"enabled": False},
    "out": out})
r = execute(cfg, report=False, executor=Executor(workers=workers))
import multiprocessing.forkserver as fs
if getattr(fs._forkserver, "_forkserver_pid", None):  # reap the fork server: its CPU and its workers' count
    fs._forkserver._stop()
s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
th = r.summary["throughput"]
print(json.dumps({"wall_s": time.perf_counter() - t0,
    "cpu_s": s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime, "cpu_self_s": s.ru_utime + s.ru_stime,
    "cpu_children_s": c.ru_utime + c.ru_stime, "wakeups": s.ru_nvcsw + c.ru_nvcsw,
    "peak_mb": max(s.ru_maxrss, c.ru_maxrss) / 1024, "ok": r.summary["requests"]["ok"],
    "sent": r.summary["requests"]["sent"], "tok_s": th["output_tokens_per_s"], "load_s": th["duration_s"],
    "valid": r.summary["valid"], "load_cpu_s": sum(x.load_cpu_s or 0 for x in r.shards)}))
"""

# The raw-socket reference for the same number of requests (or time), with its CPU and peak RSS.
_REF = r"""
import asyncio, json, resource, sys, time
sys.path.insert(0, sys.argv[5])
import client_throughput as ct, uvloop
url, conc, limit = sys.argv[1], int(sys.argv[2]), sys.argv[3]
res = ct.Result()
t0 = time.perf_counter()
if limit.startswith("d"):
    uvloop.run(ct._run_reference(url + "/v1", conc, float(limit[1:]), True, res))
else:
    n = int(limit); per = -(-n // conc)
    async def go():
        # the reference runs by time: give it time enough and stop at n requests
        loop = asyncio.get_running_loop()
        task = loop.create_task(ct._run_reference(url + "/v1", conc, 3600, True, res))
        while res.requests < n:
            await asyncio.sleep(0.01)
        task.cancel()
    try:
        uvloop.run(go())
    except BaseException:
        pass
s = resource.getrusage(resource.RUSAGE_SELF)
wall = time.perf_counter() - t0
print(json.dumps({"wall_s": wall, "cpu_s": s.ru_utime + s.ru_stime, "peak_mb": s.ru_maxrss / 1024,
    "ok": res.requests, "tok_s": res.tokens / wall, "wakeups": s.ru_nvcsw}))
"""


def _start(code: str, *args: str, cores: set[int] | None = None) -> subprocess.Popen:
    """``code`` in a fresh interpreter; on ``cores`` only (its worker processes inherit them)."""
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=pin)


def _result(proc: subprocess.Popen, timeout: float = 1800) -> dict:
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(err[-2000:])
    return json.loads(out.strip().splitlines()[-1])


# A fresh interpreter that imports what a shard imports, and exits: what every spawned worker paid, and
# what the fork server that the workers are now forked from pays once per run.
_SPAWN = r"""
import importlib, json, multiprocessing as mp, resource, sys
if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    for _ in range(int(sys.argv[1])):
        p = ctx.Process(target=importlib.import_module, args=("servelab.bench.drive",))
        p.start()
        p.join()
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"cpu_s": (c.ru_utime + c.ru_stime) / int(sys.argv[1])}))
"""


def _run(code: str, *args: str, timeout: float = 1800, cores: set[int] | None = None) -> dict:
    return _result(_start(code, *args, cores=cores), timeout)


def _reference(url: str, conc: int, duration: float, procs: int, cores: set[int] | None) -> dict:
    """The raw reference as ``procs`` processes side by side (the users split as servelab splits them)."""
    share = [conc // procs + (i < conc % procs) for i in range(procs)]
    rs = [_result(p) for p in [_start(_REF, url, str(n), f"d{duration}", "", str(HERE), cores=cores)
                               for n in share]]
    out = {k: sum(r[k] for r in rs) for k in ("cpu_s", "ok", "tok_s", "wakeups")}
    out["load_cpu_s"] = out["cpu_s"]  # a reference process is all load window
    return out


def _per_k(cpu_s: float, ok: int) -> float:
    return cpu_s / max(1, ok) * 1000


def throughput(url: str, duration: float, conc: int, cores: set[int] | None) -> None:
    where = f"clients on cores {sorted(cores)}" if cores else "nothing pinned"
    where += f"; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    print(f"\nthroughput: zero-delay mock (own process; {where}), 256 tokens/request, concurrency {conc}, "
          f"{duration:g} s")
    print("load CPU: in the load window (servelab: summed over its shards' load_cpu_s; a reference "
          "process is all load window);\nwhole CPU: the whole execute (getrusage self + children: "
          "interpreter, imports, plan, worker start-up, merge, summary)")
    print(f"{'client':<24} {'tok/s':>9} {'x ref':>6} {'load CPU s/1k':>14} {'x ref':>6} "
          f"{'whole CPU s/1k':>15} {'wakeups/req':>12} {'valid':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        spawn_ms = _run(_SPAWN, "3", cores=cores)["cpu_s"] * 1000
        rows = {f"raw reference x{w}": _reference(url, conc, duration, w, cores) for w in (1, 2)}
        for w in (1, 2):
            rows[f"servelab --workers {w}"] = _run(_RUN, url + "/v1", str(w), str(conc), f"d{duration}", tmp,
                                                   cores=cores)
    ref = rows["raw reference x1"]
    ref_load = _per_k(ref["cpu_s"], ref["ok"])
    for name, r in rows.items():
        load = _per_k(r["load_cpu_s"], r["ok"])
        print(f"{name:<24} {r['tok_s']:>9,.0f} {r['tok_s'] / ref['tok_s']:>6.2f} {load:>14.3f} "
              f"{load / ref_load:>6.2f} {_per_k(r['cpu_s'], r['ok']):>15.3f} "
              f"{r['wakeups'] / max(1, r['ok']):>12.1f} {str(r.get('valid', '-')):>6}")
    _throughput_verdict(rows, spawn_ms)


def _throughput_verdict(rows: dict[str, dict], spawn_ms: float) -> None:
    w1, w2 = rows["servelab --workers 1"], rows["servelab --workers 2"]
    r1, r2 = rows["raw reference x1"], rows["raw reference x2"]

    def ratio(key: str, a: dict, b: dict) -> float:
        return _per_k(b[key], b["ok"]) / _per_k(a[key], a["ok"])

    load, whole, ref = ratio("load_cpu_s", w1, w2), ratio("cpu_s", w1, w2), ratio("cpu_s", r1, r2)
    print(f"CPU per request, workers 2 / workers 1: load window {load:.2f}, whole execute {whole:.2f}; "
          f"raw reference, 2 processes / 1: {ref:.2f}")
    # Outside the load window: fixed costs, paid once per run (coordinator) or once per worker process.
    coord1 = w1["cpu_s"] - w1["load_cpu_s"]
    per_worker = (w2["cpu_children_s"] - w2["load_cpu_s"]) / 2
    print(f"fixed CPU outside the load window: --workers 1 {coord1 * 1000:.0f} ms (imports, plan, merge, "
          f"summary); --workers 2: coordinator {w2['cpu_self_s'] * 1000:.0f} ms + {per_worker * 1000:.0f} ms "
          "per worker process (its start-up, setup and exit, with the fork server's one start-up shared "
          f"out); one fresh interpreter importing a shard's code alone: {spawn_ms:.0f} ms")
    verdict = "ok" if load <= 1.1 or load <= ref * 1.1 else "GROWS"
    print(f"verdict: {verdict}: judged on load-window CPU per request, the per-request cost: w2/w1 "
          f"{load:.2f}, {load / ref:.2f}x the raw reference's own 2/1 growth in this run (target: w2/w1 at "
          "most 1.10, or at most 1.10x the reference's growth where the setup makes every client grow). The "
          "fixed start-up per worker process above is left out of it: a longer run amortises it (the "
          "whole-execute ratio carries it)")


_SWEEP = r"""
import json, multiprocessing.forkserver, os, resource, sys, time
from servelab.sweep.runner import SweepSpec, run_sweep
if __name__ == "__main__":
    par, ray = int(sys.argv[1]), (None if sys.argv[2] == "-" else sys.argv[2])
    out, n = sys.argv[3], int(sys.argv[4])
    start_s = None
    if ray is not None:  # the local cluster's start, timed apart (run_sweep uses a running cluster)
        import ray as _ray
        t = time.perf_counter()
        _ray.init(address=ray or None, include_dashboard=False, log_to_driver=False, configure_logging=False)
        start_s = time.perf_counter() - t
    base = {"target": {"url": "sim"}, "workload": {"input_tokens": 256, "output_tokens": 64},
            "limits": {"requests": n}, "telemetry": {"enabled": False}}
    spec = SweepSpec(base=base, axes={"concurrency": [1, 2, 4, 8, 16, 32, 64, 128]}, out=out, report=False,
                     parallel=par, ray_address=ray)
    t = time.perf_counter()
    d, state = run_sweep(spec)
    wall = time.perf_counter() - t
    multiprocessing.forkserver._forkserver._stop()  # reap the fork server: its workers' CPU counts below
    cpu = None
    if ray is None:
        s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
    print(json.dumps({"wall_s": wall, "start_s": start_s, "cpu_s": cpu, "load": os.getloadavg()[0],
                      "ok": sum(e["status"] == "ok" for e in state["points"]),
                      "figures": [(e["key"], e["status"], (e["summary"] or {}).get("throughput"))
                                  for e in state["points"]],
                      "knee": state.get("knee"), "knee_reason": state.get("knee_reason")}))
"""

# The CPU this session can use in parallel right now: the same pure-Python work in one process, then in two
# at once (this process's session, like the sweep's workers). 2 on an idle 2-core box.
_AVAIL = r"""
import json, multiprocessing as mp, time
def burn(_=None):
    x = 0
    for i in range(8_000_000):
        x += i * i % 7
    return x
if __name__ == "__main__":
    ctx = mp.get_context("fork")
    t = time.perf_counter(); burn(); t1 = time.perf_counter() - t
    ps = [ctx.Process(target=burn) for _ in range(2)]
    t = time.perf_counter()
    for p in ps: p.start()
    for p in ps: p.join()
    t2 = time.perf_counter() - t
    print(json.dumps({"speedup": 2 * t1 / t2}))
"""


def _knee(r: dict) -> str:
    """The knee's level, or where it lies when the sweep found none inside its grid (the sweep's knee is a
    dict whose ``level`` is None then: ``beyond`` with ``low`` the last level, or no bend at all)."""
    k = r.get("knee") or {}
    if k.get("level") is not None:
        return f"{k['level']:g}"
    if k.get("beyond") and k.get("low") is not None:
        return f">={k['low']:g}"
    return "none"


def sweep(n: int) -> None:
    print(f"\nsweep: 8 simulated points (concurrency 1..128, {n} requests each), wall time of run_sweep")
    avail: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        rows = {"serial": _run(_SWEEP, "1", "-", tmp, str(n))}
        avail.append(_run(_AVAIL)["speedup"])
        rows["--parallel 2"] = _run(_SWEEP, "2", "-", tmp, str(n))
        try:
            rows["--ray (local)"] = _run(_SWEEP, "2", "", tmp, str(n))
        except RuntimeError as e:
            print(f"(ray: {str(e).splitlines()[-1]})")
        avail.append(_run(_AVAIL)["speedup"])
    print(f"{'mode':<16} {'wall s':>8} {'CPU s':>7} {'load':>5} {'points ok':>10} {'speed-up':>9} "
          f"{'same figures':>13} {'knee':>6}")
    ref = rows["serial"]
    for name, r in rows.items():
        cpu = "-" if r["cpu_s"] is None else f"{r['cpu_s']:.1f}"
        same = "yes" if r["figures"] == ref["figures"] else "NO"
        print(f"{name:<16} {r['wall_s']:>8.1f} {cpu:>7} {r['load']:>5.1f} {r['ok']:>10} "
              f"{ref['wall_s'] / r['wall_s']:>9.2f} {same:>13} {_knee(r):>6}")
    ray = rows.get("--ray (local)")
    if ray is not None:
        print(f"--ray wall leaves out the local cluster's start: {ray['start_s']:.1f} s (with it: speed-up "
              f"{ref['wall_s'] / (ray['wall_s'] + ray['start_s']):.2f})")
    print(f"speed-up available to 2 processes of this session (pure Python, 2 vs 1 process), before and "
          f"after the parallel rows: {avail[0]:.2f}, {avail[1]:.2f}; --parallel 2 reached "
          f"{ref['wall_s'] / rows['--parallel 2']['wall_s']:.2f}")
    print("CPU s: the sweep's process and its workers (not Ray's); load: 1-minute load average at its end")
    for reason in dict.fromkeys(r["knee_reason"] for r in rows.values() if r.get("knee_reason")):
        print(f"knee: {reason}")


def memory(url: str, sizes: list[int], conc: int) -> None:
    print(
        "\nmemory: peak RSS of a whole run (load + Parquet merge + summary), 256 tokens/request, "
        f"concurrency {conc}"
    )
    print(
        f"{'requests':>9} {'servelab MB':>12} {'raw ref MB':>11} {'x ref':>6} {'wall s':>8} "
        f"{'ref wall s':>10}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            s = _run(_RUN, url + "/v1", "1", str(conc), str(n), tmp, timeout=3600)
            r = _run(_REF, url, str(conc), str(n), "", str(HERE), timeout=3600)
            print(f"{n:>9,} {s['peak_mb']:>12.0f} {r['peak_mb']:>11.0f} {s['peak_mb'] / r['peak_mb']:>6.2f} "
                  f"{s['wall_s']:>8.1f} {r['wall_s']:>10.1f}")


def _pin(server_pid: int) -> set[int] | None:
    """The mock server on the last core of this process's set, the clients on the rest (None: one core)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    os.sched_setaffinity(server_pid, {cores[-1]})
    return set(cores[:-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="throughput,sweep,memory")
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--sweep-requests", type=int, default=3000,
                    help="sweep case: requests per point (points must outlast a process start to gain)")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="throughput case: leave the server and clients unpinned (default: the server on the "
                         "last core, every client process on the others)")
    ap.add_argument("--sizes", default="10000,100000", help="memory case: request counts")
    ap.add_argument("--million", action="store_true", help="memory case: add 1,000,000 requests (long)")
    args = ap.parse_args()
    cases = set(args.cases.split(","))
    ct = _mock()
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    server = ctx.Process(target=ct._serve, args=(q,), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{q.get(timeout=30)}"
    clients = _pin(server.pid) if args.pin else None
    try:
        if "throughput" in cases:
            throughput(url, args.duration, args.concurrency, clients)
        if "sweep" in cases:
            sweep(args.sweep_requests)
        if "memory" in cases:
            sizes = [int(x) for x in args.sizes.split(",")] + ([1_000_000] if args.million else [])
            memory(url, sizes, args.concurrency)
    finally:
        server.terminate()
        server.join(timeout=10)
    time.sleep(0)


if __name__ == "__main__":
    main()
