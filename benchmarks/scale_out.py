"""Scale out: one run over 1 and 2 worker processes, sweeps in parallel, and peak memory against run size.

Every case runs in a fresh process and is compared with a reference measured in the same invocation:

  throughput  ``servelab run`` (execute) with --workers 1 and 2 against client_throughput.py's zero-delay
              mock server (its own process; 256 streamed tokens per request), beside the raw-socket
              reference client for the same time at the same concurrency: streamed tokens/s and client
              CPU per 1,000 requests (coordinator + its worker processes, from getrusage). Ratios are
              against the reference. With 2 cores shared with the server, client CPU per request must not
              grow with W (ratio w2/w1 about 1); tokens/s can only grow where a core is free.
  sweep       8 simulated points (concurrency 1..128) serial, --parallel 2, and on a local Ray cluster:
              wall time and speed-up over serial.
  memory      peak RSS of a whole run (load, merge to Parquet, summary) at 10k and 100k requests (1M with
              --million), beside the raw reference's peak RSS for the same requests.

    PYTHONPATH=src python benchmarks/scale_out.py [--cases throughput,sweep,memory] [--duration 4]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
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
s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
th = r.summary["throughput"]
print(json.dumps({"wall_s": time.perf_counter() - t0,
    "cpu_s": s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime,
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
    "ok": res.requests, "tok_s": res.tokens / wall}))
"""


def _run(code: str, *args: str, timeout: float = 1800) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def throughput(url: str, duration: float, conc: int) -> None:
    print(
        f"\nthroughput: zero-delay mock (own process), 256 tokens/request, concurrency {conc}, {duration:g} s"
    )
    print("CPU: the reference's whole process; servelab's load-window CPU summed over its workers (start-up, "
          "merge and summary excluded; whole-process CPU in the last column)")
    print(
        f"{'client':<22} {'tok/s':>10} {'CPU s/1k req':>13} {'x ref tok/s':>12} {'x ref CPU':>10} "
        f"{'valid':>6} "
        f"{'all CPU s/1k':>13}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        ref = _run(_REF, url, str(conc), f"d{duration}", "", str(HERE))
        rows = {"raw reference": ref}
        for w in (1, 2):
            rows[f"servelab --workers {w}"] = _run(_RUN, url + "/v1", str(w), str(conc), f"d{duration}", tmp)
    ref_cpu = ref["cpu_s"] / ref["ok"] * 1000
    for name, r in rows.items():
        cpu = r.get("load_cpu_s", r["cpu_s"]) / max(1, r["ok"]) * 1000
        print(
            f"{name:<22} {r['tok_s']:>10,.0f} {cpu:>13.3f} {r['tok_s'] / ref['tok_s']:>12.2f} "
            f"{cpu / ref_cpu:>10.2f} {str(r.get('valid', '-')):>6} "
            f"{r['cpu_s'] / max(1, r['ok']) * 1000:>13.3f}"
        )
    w1, w2 = rows["servelab --workers 1"], rows["servelab --workers 2"]
    print(
        f"load-window CPU per request, workers 2 / workers 1: "
        f"{(w2['load_cpu_s'] / max(1, w2['ok'])) / (w1['load_cpu_s'] / max(1, w1['ok'])):.2f} (target: "
        "about 1)"
    )


_SWEEP = r"""
import json, sys, time
from servelab.sweep.runner import SweepSpec, run_sweep
if __name__ == "__main__":
    par, ray = int(sys.argv[1]), (None if sys.argv[2] == "-" else sys.argv[2])
    out, n = sys.argv[3], int(sys.argv[4])
    base = {"target": {"url": "sim"}, "workload": {"input_tokens": 256, "output_tokens": 64},
            "limits": {"requests": n}, "telemetry": {"enabled": False}}
    spec = SweepSpec(base=base, axes={"concurrency": [1, 2, 4, 8, 16, 32, 64, 128]}, out=out, report=False,
                     parallel=par, ray_address=ray)
    t = time.perf_counter()
    d, state = run_sweep(spec)
    print(json.dumps({"wall_s": time.perf_counter() - t,
                      "ok": sum(e["status"] == "ok" for e in state["points"]),
                      "knee": (state.get("knee") or {}).get("level")}))
"""


def sweep(n: int) -> None:
    print(f"\nsweep: 8 simulated points (concurrency 1..128, {n} requests each), wall time of run_sweep")
    print(f"{'mode':<16} {'wall s':>8} {'points ok':>10} {'speed-up':>9} {'knee':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        rows = {
            "serial": _run(_SWEEP, "1", "-", tmp, str(n)),
            "--parallel 2": _run(_SWEEP, "2", "-", tmp, str(n)),
        }
        try:
            rows["--ray (local)"] = _run(_SWEEP, "2", "", tmp, str(n))
        except RuntimeError as e:
            print(f"(ray: {str(e).splitlines()[-1]})")
    for name, r in rows.items():
        print(f"{name:<16} {r['wall_s']:>8.1f} {r['ok']:>10} {rows['serial']['wall_s'] / r['wall_s']:>9.2f} "
              f"{str(r['knee']):>6}")


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="throughput,sweep,memory")
    ap.add_argument("--duration", type=float, default=4.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--sweep-requests", type=int, default=3000,
                    help="sweep case: requests per point (points must outlast a process start to gain)")
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
    try:
        if "throughput" in cases:
            throughput(url, args.duration, args.concurrency)
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
