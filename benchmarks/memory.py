"""Peak memory of a servelab run against its size (issue 12 item 4), with the raw-socket reference beside it.

Two cases, each size in a fresh process; RSS is sampled every 5 ms by a thread and attributed to the phase
running (load, journals -> Parquet merge, summary, evidence, report, rest), and the process's peak RSS
(``ru_maxrss``) is the figure:

  run     a whole ``execute(cfg)`` (report.html written; ``--no-report``: not) of N streamed requests
          (256 tokens, concurrency 64, --workers 1) against client_throughput.py's zero-delay mock server
          in its own process, then the raw-socket reference client for the same N requests against the
          same server.
  finish  the end of a run alone at sizes a shared 2-core box cannot drive in time: N requests of 256
          token times are written to a run directory's journal by a generator process (exactly what
          ``RecordSink`` writes), then a fresh process merges the journal to Parquet and summarises it as
          ``finish_run`` does (``merge_journals``, ``summarize_batches(iter_tables(...))``,
          ``run_evidence``). The load window is not in it (its memory is flat: see ``run``).
  agent   a whole ``execute(cfg)`` of agent sessions against the in-process simulator (plain ``sim``):
          N / 10 sessions of 10 short turns (a model request of 4 output tokens, then a 10 ms tool), 64
          concurrent sessions; the agent part of the summary is its own phase ("work").
  replay  a whole ``execute(cfg)`` replaying a synthetic azure trace of N requests (10 ms apart, 64 context
          and 32 generated tokens) at speed 1 against the in-process simulator of llama-3.1-8b on one H100
          (plain ``sim`` serves ~23 requests/s: the backlog is cancelled); the replay section is the
          "work" phase.

    PYTHONPATH=src python benchmarks/memory.py [--run 10000,100000] [--finish 1000000] [--finish-mode open]
        [--agent 10000,50000] [--replay 10000,50000]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Phase attribution: wrap the functions finish_run calls (by their names in servelab.bench.finish).
_SAMPLER = r"""
import os, resource, threading, time
_page = os.sysconf("SC_PAGE_SIZE")
_phase = ["start"]
_peaks = {}
def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _page / 2**20
def _sample():
    while True:
        r = _rss()
        p = _phase[0]
        if r > _peaks.get(p, (0, 0))[1]:
            _peaks[p] = (_peaks.get(p, (r, 0))[0], r)
        time.sleep(0.005)
def _enter(name):
    _phase[0] = name
    r = _rss()
    _peaks.setdefault(name, (r, r))
threading.Thread(target=_sample, daemon=True).start()
def _wrap(mod, attr, name):
    f = getattr(mod, attr)
    def g(*a, **k):
        _enter(name)
        try:
            return f(*a, **k)
        finally:
            _enter("rest")
    setattr(mod, attr, g)
def _result(**kw):
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    kw.update(peak_mb=max(s.ru_maxrss, c.ru_maxrss) / 1024,
              phases={k: [round(v[0]), round(v[1])] for k, v in _peaks.items()})
    print(json.dumps(kw))
"""

_RUN = _SAMPLER + r"""
import json, sys
t0 = time.perf_counter()
_enter("import")
import servelab.bench.finish as fin
from servelab.bench.run import Executor, execute
from servelab.config import RunConfig, validate
for attr, name in (("merge_journals", "merge"), ("summarize_batches", "summary"),
                   ("run_evidence", "evidence"), ("_write_report", "report")):
    _wrap(fin, attr, name)
url, n, conc, out, report = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
cfg = validate(RunConfig, {"target": {"url": url, "model": "bench-model"}, "load": {"concurrency": conc},
    "workload": {"input_tokens": 64, "output_tokens": 256}, "limits": {"requests": n},
    "telemetry": {"enabled": False}, "out": out})
_enter("load")
r = execute(cfg, report=report, executor=Executor(workers=1))
_result(wall_s=time.perf_counter() - t0, ok=r.summary["requests"]["ok"],
        itl_n=r.summary["metrics"]["itl_ms"]["n"], itl_p50=r.summary["metrics"]["itl_ms"]["p50"])
"""

_REF = r"""
import asyncio, json, resource, sys, time
sys.path.insert(0, sys.argv[4])
import client_throughput as ct, uvloop
url, conc, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
res = ct.Result()
t0 = time.perf_counter()
async def go():
    task = asyncio.get_running_loop().create_task(ct._run_reference(url + "/v1", conc, 36000, True, res))
    while res.requests < n:
        await asyncio.sleep(0.01)
    task.cancel()
try:
    uvloop.run(go())
except BaseException:
    pass
s = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": time.perf_counter() - t0, "peak_mb": s.ru_maxrss / 1024, "ok": res.requests}))
"""

# Agent sessions or a trace replay against the in-process simulator: execute(cfg), phases as _RUN's.
_SIM = _SAMPLER + r"""
import json, sys
from pathlib import Path
t0 = time.perf_counter()
_enter("import")
import servelab.bench.finish as fin
import servelab.bench.replay as rep
import servelab.bench.sessions as ses
from servelab.bench.run import Executor, execute
from servelab.config import RunConfig, validate
for mod, attr, name in ((fin, "merge_journals", "merge"), (fin, "summarize_batches", "summary"),
                        (ses, "sessions_summary", "work"), (rep, "trace_replay_summary", "work"),
                        (fin, "run_evidence", "evidence"), (fin, "_write_report", "report")):
    _wrap(mod, attr, name)
kind, n, out, report = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
base = {"target": {"url": "sim"}, "telemetry": {"enabled": False}, "out": out}
if kind == "agent":
    sess = {"name": "short", "system_tokens": 16, "user_tokens": 16, "steps": [{"kind": "repeat", "count": 10,
            "steps": [{"kind": "model", "output_tokens": 4, "user_tokens": 8},
                      {"kind": "tool", "duration_s": 0.01, "result_tokens": 8}]}]}
    cfg = validate(RunConfig, {**base, "load": {"concurrency": 64}, "limits": {"sessions": n // 10},
                               "workload": {"kind": "agent", "session": sess}})
else:
    trace = Path(out) / "trace.csv"
    with open(trace, "w") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for t in range(0, 10 * n, 10):  # 100 requests/s
            f.write(f"2023-11-16 {18 + t // 3600000}:{t // 60000 % 60:02d}:{t // 1000 % 60:02d}."
                    f"{t % 1000:03d}0000,64,32\n")
    cfg = validate(RunConfig, {**base, "target": {"url": "sim:llama-3.1-8b@1xh100"},
                               "workload": {"kind": "replay", "path": str(trace), "format": "azure",
                                            "speed": 1.0}})
_enter("load")
r = execute(cfg, report=report, executor=Executor(workers=1))
work = r.summary["sessions"]["completed"] if kind == "agent" else r.summary["replay"]["requests"]
_result(wall_s=time.perf_counter() - t0, ok=r.summary["requests"]["ok"], work=work)
"""

# Journal N synthetic requests of 256 token times (a generator process: its memory is not measured).
_GEN = r"""
import random, sys
from pathlib import Path
from servelab.records.journal import Journal
from servelab.records.schema import RequestRecord
d, n = Path(sys.argv[1]), int(sys.argv[2])
rng = random.Random(1)
t = 10**12
with Journal(d, 0) as j:
    for i in range(n):
        sent = t + i * 500_000
        tt = [sent + 5_000_000 + rng.randrange(1000)]
        for _ in range(255):
            tt.append(tt[-1] + 30_000 + rng.randrange(20_000))
        j.write_request(RequestRecord(request_id=i, status="ok", intended_ns=sent, sent_ns=sent,
            first_token_ns=tt[0], first_content_ns=tt[0], last_token_ns=tt[-1], end_ns=tt[-1] + 100_000,
            token_times_ns=tt, usage_prompt_tokens=64, usage_completion_tokens=256, est_prompt_tokens=64,
            est_completion_tokens=256))
"""

_FINISH = _SAMPLER + r"""
import json, sys
from pathlib import Path
t0 = time.perf_counter()
_enter("import")
from servelab.analysis.columns import TABLE_COLUMNS
from servelab.analysis.evidence import run_evidence
from servelab.analysis.summary import summarize_batches
from servelab.config import RunConfig, validate
from servelab.records.merge import merge_journals
from servelab.records.stream import arrow_pool_restored, iter_tables, use_system_arrow_pool
d, mode = Path(sys.argv[1]), sys.argv[2]
cfg = validate(RunConfig, {"target": {"url": "http://127.0.0.1:1/v1", "model": "m"},
               "load": {"concurrency": 64}, "telemetry": {"enabled": False}})
with arrow_pool_restored():  # as finish_run does: the merge on Arrow's default pool, the rest on malloc
    _enter("merge")
    n_req, _ = merge_journals(d)
    use_system_arrow_pool()
    _enter("summary")
    rp = d / "requests.parquet"
    s = summarize_batches(iter_tables(rp, TABLE_COLUMNS), cfg, started_ns=0, ended_ns=1, mode=mode)
    _enter("evidence")
    run_evidence(iter_tables(rp, ("status", "warmup", "srv_queue_ns", "srv_preempted_ns")), s, {})
    _enter("rest")
m = s["metrics"]["itl_ms"]
_result(wall_s=time.perf_counter() - t0, ok=s["requests"]["ok"], itl_n=m["n"], itl_p50=m["p50"],
        sketched=m["n"] > 262144)
"""


def _py(code: str, *args: str, timeout: float = 7200) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}


def _phases(r: dict) -> str:
    return "  ".join(f"{k} {a}->{b}" for k, (a, b) in r["phases"].items() if k not in ("start",))


def run_case(sizes: list[int], conc: int, report: bool = True) -> None:
    spec = importlib.util.spec_from_file_location("client_throughput", HERE / "client_throughput.py")
    ct = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["client_throughput"] = ct
    spec.loader.exec_module(ct)  # type: ignore[union-attr]
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    server = ctx.Process(target=ct._serve, args=(q,), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{q.get(timeout=30)}"
    print(f"\nrun: whole execute(report={report}), 256 streamed tokens/request, concurrency {conc}, "
          "zero-delay mock (own process)")
    print(f"{'requests':>9} {'servelab MB':>12} {'raw ref MB':>11} {'x ref':>6} {'wall s':>8} "
          f"{'ref wall s':>10}  phases (RSS MB at entry -> peak)")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n in sizes:
                s = _py(_RUN, url + "/v1", str(n), str(conc), tmp, "1" if report else "0")
                r = _py(_REF, url, str(conc), str(n), str(HERE))
                ratio = s["peak_mb"] / r["peak_mb"]
                print(f"{n:>9,} {s['peak_mb']:>12.0f} {r['peak_mb']:>11.0f} {ratio:>6.2f} "
                      f"{s['wall_s']:>8.1f} {r['wall_s']:>10.1f}  {_phases(s)}", flush=True)
    finally:
        server.terminate()
        server.join(timeout=10)


def finish_case(sizes: list[int], mode: str) -> None:
    print("\nfinish: journal -> Parquet merge + streamed summary + evidence of N synthetic 256-token "
          f"requests ({mode} loop)")
    print(f"{'requests':>9} {'peak MB':>8} {'wall s':>7} {'itl n':>12} {'sketched':>9}  "
          "phases (RSS MB at entry -> peak)")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            _py(_GEN, tmp, str(n))
            s = _py(_FINISH, tmp, mode)
            print(f"{n:>9,} {s['peak_mb']:>8.0f} {s['wall_s']:>7.1f} {s['itl_n']:>12,} "
                  f"{str(s['sketched']):>9}  {_phases(s)}", flush=True)


def sim_case(kind: str, sizes: list[int], report: bool) -> None:
    what = ("agent sessions of 10 short turns, 64 concurrent" if kind == "agent"
            else "replay of a synthetic azure trace, 100 req/s, speed 1")
    print(f"\n{kind}: whole execute(report={report}) against the in-process simulator, {what}")
    print(f"{'requests':>9} {'peak MB':>8} {'wall s':>7} {'ok':>8} {'work':>7}  "
          "phases (RSS MB at entry -> peak)")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            s = _py(_SIM, kind, str(n), tmp, "1" if report else "0")
            print(f"{n:>9,} {s['peak_mb']:>8.0f} {s['wall_s']:>7.1f} {s['ok']:>8,} {s['work']:>7,}  "
                  f"{_phases(s)}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", default="10000,100000", help="whole-run sizes (requests); '' for none")
    ap.add_argument("--finish", default="", help="end-of-run-only sizes, e.g. 1000000")
    ap.add_argument("--finish-mode", default="closed", choices=("closed", "open"),
                    help="summarise the finish case as a closed or an open loop (open also keeps each "
                    "request's intended send and end time for the offered-vs-achieved check)")
    ap.add_argument("--agent", default="", help="agent-session run sizes (requests), e.g. 10000,50000")
    ap.add_argument("--replay", default="", help="trace-replay run sizes (requests), e.g. 10000,50000")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--no-report", action="store_true", help="run without writing report.html")
    args = ap.parse_args()
    if args.finish:
        finish_case([int(x) for x in args.finish.split(",")], args.finish_mode)
    for kind in ("agent", "replay"):
        if getattr(args, kind):
            sim_case(kind, [int(x) for x in getattr(args, kind).split(",")], not args.no_report)
    if args.run:
        run_case([int(x) for x in args.run.split(",")], args.concurrency, not args.no_report)


if __name__ == "__main__":
    main()
