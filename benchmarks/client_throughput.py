"""How much client CPU does servelab's HTTP transport spend per streamed token, against references?

A zero-delay OpenAI-style streaming server runs in its own process (raw uvloop + httptools; chunked
SSE: 256 token chunks, a usage chunk, [DONE]; one write per token and a yield between tokens, so streams
interleave as in a batching engine). Each client then runs alone in a fresh process, and that process's
CPU time (time.process_time) is what is charged to it:

  (a) servelab  - servelab.transport.http.HttpTransport (full parsing, timing, records)
  (b) reference - a minimal raw-socket uvloop client that only counts "data: " lines and stamps reads (in
                  the long-context and whole-run cases it also keeps every token's arrival time, 8 bytes
                  each in an array('q') per request, held to the end: what any measuring client must keep;
                  the whole-run case also runs it keeping them as lists of Python ints, as the issue's
                  reference did, and prints the import floor: a fresh interpreter importing what
                  `servelab run` imports)
  (c) aiohttp   - a plain aiohttp client (line iteration + orjson per event + a timestamp per token)
  (d) vllm      - `vllm bench serve`, when vllm is importable

Cases: streaming at concurrency 64 and 256; streamed /v1/completions (``"text"`` chunks) against streamed
chat, both servelab, concurrency 64 (``--cases completions``; ratio target ~1); non-streamed (CPU per request,
target <= 0.5 ms); TTFT accuracy (the server waits 50 ms before the first token; p99 of |measured TTFT - 50
ms| at concurrency 256, target <= 2 ms). The headline ratio is servelab's tokens per client CPU second over
the reference's (target >= 0.6).

    PYTHONPATH=src python benchmarks/client_throughput.py [--duration 5] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import multiprocessing as mp
import statistics
import time
from array import array
from collections.abc import Callable

import httptools
import orjson
import uvloop

TOKENS = 256
TTFT_DELAY_S = 0.050
TTFT_TOKENS = 16
MODEL = "bench-model"
PROMPT = [{"role": "user", "content": "Write a story about a benchmark. " * 8}]


# ---------------------------------------------------------------------------------------------- server


def _hchunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _sse(obj: dict) -> bytes:
    return _hchunk(b"data: " + orjson.dumps(obj) + b"\n\n")


def _token_chunk(i: int, last: bool) -> bytes:
    return _sse({"id": "chatcmpl-0123456789abcdef", "object": "chat.completion.chunk", "created": 1718000000,
                 "model": MODEL, "choices": [{"index": 0, "delta": {"content": f" tok{i}"}, "logprobs": None,
                                              "finish_reason": "length" if last else None}]})


def _text_chunk(i: int, last: bool) -> bytes:
    return _sse({"id": "cmpl-0123456789abcdef", "object": "text_completion", "created": 1718000000,
                 "model": MODEL, "choices": [{"index": 0, "text": f" tok{i}", "logprobs": None,
                                              "finish_reason": "length" if last else None}]})


_STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                b"Server: bench\r\n\r\n")


def _tail(n: int) -> bytes:
    usage = {"id": "chatcmpl-0123456789abcdef", "object": "chat.completion.chunk", "created": 1718000000,
             "model": MODEL, "choices": [],
             "usage": {"prompt_tokens": 64, "completion_tokens": n, "total_tokens": 64 + n}}
    return _sse(usage) + _hchunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def _json_response() -> bytes:
    body = orjson.dumps({
        "id": "chatcmpl-0123456789abcdef", "object": "chat.completion", "created": 1718000000, "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "word " * TOKENS},
                     "logprobs": None, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 64, "completion_tokens": TOKENS, "total_tokens": 64 + TOKENS}})
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nServer: bench\r\n\r\n"
        % len(body)
    ) + body


class _ServerProto(asyncio.Protocol):
    chunks = [_token_chunk(i, i == TOKENS - 1) for i in range(TOKENS)]
    ttft_chunks = [_token_chunk(i, i == TTFT_TOKENS - 1) for i in range(TTFT_TOKENS)]
    text_chunks = [_text_chunk(i, i == TOKENS - 1) for i in range(TOKENS)]
    tail, ttft_tail, json_body = _tail(TOKENS), _tail(TTFT_TOKENS), _json_response()

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        self.t = transport
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.t.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_message_complete(self) -> None:
        url, self.url = self.url, b""
        if url.startswith(b"/json"):
            self.t.write(self.json_body)
        elif url.startswith(b"/ttft"):
            asyncio.get_running_loop().create_task(
                self._stream(self.ttft_chunks, self.ttft_tail, TTFT_DELAY_S, stamp=True)
            )
        elif url.endswith(b"/v1/completions"):
            asyncio.get_running_loop().create_task(self._stream(self.text_chunks, self.tail, 0.0))
        else:
            asyncio.get_running_loop().create_task(self._stream(self.chunks, self.tail, 0.0))

    async def _stream(self, chunks: list[bytes], tail: bytes, delay: float, stamp: bool = False) -> None:
        t = self.t
        t.write(_STREAM_HEAD)
        if delay:
            await asyncio.sleep(delay)
        if stamp:  # the first token's text is the server's CLOCK_MONOTONIC at write time, in ns
            t.write(_sse({"choices": [{"index": 0, "delta": {"content": str(time.monotonic_ns())},
                                       "finish_reason": None}]}))
            chunks = chunks[1:]
        for c in chunks:
            if t.is_closing():
                return
            t.write(c)
            await asyncio.sleep(0)
        t.write(tail)


def _serve(port_q: mp.Queue) -> None:
    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_ServerProto, "127.0.0.1", 0, backlog=1024)
        port_q.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    uvloop.run(serve())


# ---------------------------------------------------------------------------------------------- clients


class Result:
    def __init__(self) -> None:
        self.requests = 0
        self.failed = 0
        self.tokens = 0
        self.ttfts_ns: list[int] = []
        self.lags_ns: list[int] = []  # client first-token stamp minus the server's write time (ttft case)
        self.token_times: list[array | list[int]] = []  # per request, when the reference keeps token times
        self.wall_s = 0.0
        self.cpu_s = 0.0


async def _workers(n: int, duration: float, one: Callable) -> None:
    deadline = time.perf_counter() + duration

    async def worker() -> None:
        while time.perf_counter() < deadline:
            await one()

    await asyncio.gather(*(worker() for _ in range(n)))


async def _run_servelab(
    url: str, n: int, duration: float, stream: bool, res: Result, api: str = "chat"
) -> None:
    from servelab.clock import WallClock
    from servelab.config.models import TargetConfig
    from servelab.transport.base import ModelRequest
    from servelab.transport.http import HttpTransport

    t = HttpTransport(TargetConfig(url=url, model=MODEL), WallClock(), concurrency=n)
    ids = iter(range(1 << 60))

    async def one() -> None:
        if api == "chat":
            req = ModelRequest(request_id=next(ids), messages=PROMPT, max_tokens=TOKENS, stream=stream)
        else:
            req = ModelRequest(request_id=next(ids), api="completions", prompt=PROMPT[0]["content"],
                               max_tokens=TOKENS, stream=stream)
        rec = await t.send(req)
        res.requests += 1
        if rec.status != "ok":
            res.failed += 1
            return
        res.tokens += rec.est_completion_tokens
        if rec.first_token_ns is not None and rec.sent_ns is not None:
            res.ttfts_ns.append(rec.first_token_ns - rec.sent_ns)
            head = rec.output_text.split(" ", 1)[0]
            if head.isdigit():
                res.lags_ns.append(rec.first_token_ns - int(head))

    await _workers(n, duration, one)
    await t.aclose()


class _RefProto(asyncio.Protocol):
    """Counts "data: " lines; a response ends at the chunked terminator after [DONE]."""

    def __init__(self) -> None:
        self.fut: asyncio.Future | None = None
        self.tail = b""
        self.count = 0
        self.first_ns = 0
        self.length = -1
        self.got = 0
        self.stamp = 0
        self.times: array | list[int] | None = None  # token arrival times (ns), when the caller keeps them

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        self.t = transport

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        buf = self.tail + data
        if self.length >= 0 or b"Content-Length: " in buf[:300]:  # non-streamed: count bytes
            if self.length < 0:
                head, _, body = buf.partition(b"\r\n\r\n")
                self.length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                self.got = len(body)
            else:
                self.got += len(data)
            if self.got >= self.length:
                self.first_ns, self.length, self.tail = now, -1, b""
                self.fut.set_result(1)  # type: ignore[union-attr]
            return
        k = buf.count(b"data: ")
        if k and not self.first_ns:
            self.first_ns = now
            i = buf.find(b'"content":"')
            digits = buf[i + 11 : buf.find(b'"', i + 11)] if i >= 0 else b""
            self.stamp = int(digits) if digits.isdigit() else 0
        self.count += k
        if self.times is not None and k:
            self.times.extend((now,) * k)
        if buf.endswith(b"0\r\n\r\n") and b"[DONE]" in buf:
            tokens, self.count, self.tail = self.count - 2, 0, b""
            if self.times is not None:
                del self.times[tokens:]  # the usage chunk and [DONE] are not tokens
            self.fut.set_result(tokens)  # type: ignore[union-attr]
        else:
            self.tail = buf[-8:]

    def connection_lost(self, exc) -> None:  # type: ignore[no-untyped-def]
        if self.fut is not None and not self.fut.done():
            self.fut.set_exception(ConnectionError("lost"))


async def _run_reference(url: str, n: int, duration: float, stream: bool, res: Result,
                         prompt: list[dict] | None = None, keep_times: bool = False,
                         times_as_ints: bool = False) -> None:
    """``keep_times``: keep every token's arrival time to the end, 8 bytes each in an ``array('q')`` per
    request, or (``times_as_ints``) as a list of Python ints, as a plain Python client would (an int object
    of 32 bytes plus an 8-byte list slot; tokens stamped by the same read share one int, as servelab's)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    body = orjson.dumps({"model": MODEL, "messages": prompt or PROMPT, "max_tokens": TOKENS,
                         "stream": stream})
    req = (b"POST %s/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (parts.path.encode(), parts.netloc.encode(), len(body), body))
    loop = asyncio.get_running_loop()

    async def worker() -> None:
        _, proto = await loop.create_connection(_RefProto, parts.hostname, parts.port)
        deadline = time.perf_counter() + duration
        while time.perf_counter() < deadline:
            proto.fut = loop.create_future()
            proto.first_ns = 0
            if keep_times:
                proto.times = [] if times_as_ints else array("q")
            sent = time.monotonic_ns()
            proto.t.write(req)
            tokens = await proto.fut
            if keep_times:
                res.token_times.append(proto.times)  # type: ignore[arg-type]
            res.requests += 1
            res.tokens += tokens
            res.ttfts_ns.append(proto.first_ns - sent)
            if proto.stamp:
                res.lags_ns.append(proto.first_ns - proto.stamp)
        proto.t.close()

    await asyncio.gather(*(worker() for _ in range(n)))


async def _run_aiohttp(url: str, n: int, duration: float, stream: bool, res: Result) -> None:
    import aiohttp

    body = {"model": MODEL, "messages": PROMPT, "max_tokens": TOKENS, "stream": stream}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=n)) as session:

        async def one() -> None:
            sent = time.monotonic_ns()
            first = 0
            tokens = 0
            async with session.post(f"{url}/chat/completions", data=orjson.dumps(body),
                                    headers={"Content-Type": "application/json"}) as resp:
                if not stream:
                    obj = orjson.loads(await resp.read())
                    tokens = obj["usage"]["completion_tokens"]
                    first = time.monotonic_ns()
                else:
                    async for line in resp.content:
                        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                            continue
                        obj = orjson.loads(line[6:])
                        if obj["choices"] and obj["choices"][0]["delta"].get("content"):
                            now = time.monotonic_ns()
                            first = first or now
                            tokens += 1
            res.requests += 1
            res.tokens += tokens
            res.ttfts_ns.append(first - sent)

        await _workers(n, duration, one)


async def _run_servelab_completions(url: str, n: int, duration: float, stream: bool, res: Result) -> None:
    await _run_servelab(url, n, duration, stream, res, api="completions")


CLIENTS = {"servelab": _run_servelab, "reference": _run_reference, "aiohttp": _run_aiohttp}
EXTRA_CLIENTS = {"servelab-completions": _run_servelab_completions}


def _client_proc(name: str, url: str, n: int, duration: float, stream: bool, q: mp.Queue) -> None:
    import servelab.transport.http  # noqa: F401  (every client pays the same import, then the same freeze)

    # Move everything imported so far out of the collector's sight, as a benchmark client should: the
    # servelab process holds pydantic & co, and full collections over them showed as 50-150 ms stalls.
    gc.collect()
    gc.freeze()
    res = Result()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    uvloop.run({**CLIENTS, **EXTRA_CLIENTS}[name](url, n, duration, stream, res))
    res.cpu_s, res.wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    q.put(res.__dict__)


def run_client(ctx, name: str, url: str, n: int, duration: float, stream: bool) -> dict:
    q = ctx.Queue()
    p = ctx.Process(target=_client_proc, args=(name, url, n, duration, stream, q))
    p.start()
    out = q.get(timeout=duration + 120)
    p.join(timeout=30)
    return out


# ---------------------------------------------------------------------------------------------- report


def _p(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per client run")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per case (medians reported)")
    ap.add_argument("--quick", action="store_true", help="2 s runs, 1 round, concurrency 64 only")
    ap.add_argument("--cases", default="stream,completions,json,ttft,long,whole",
                    help="comma-separated subset of stream,completions,json,ttft,long,whole")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="long/whole cases: scale the request count and prompt size down (e.g. 0.3 on a "
                         "busy shared box); figures are ratios to the raw reference of the same size")
    args = ap.parse_args()
    duration = 2.0 if args.quick else args.duration
    rounds = 1 if args.quick else args.rounds
    concurrencies = [64] if args.quick else [64, 256]
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    server = ctx.Process(target=_serve, args=(q,), daemon=True)
    server.start()
    port = q.get(timeout=30)
    base = f"http://127.0.0.1:{port}"
    try:
        _report(ctx, base, duration, rounds, concurrencies, set(args.cases.split(",")))
        cases = set(args.cases.split(","))
        if "long" in cases:
            _long_context(base, duration, args.scale, rounds)
        if "whole" in cases:
            _whole_run(base, args.scale, rounds)
    finally:
        server.terminate()
        server.join(timeout=10)


def _rounds(ctx, names: list[str], url: str, n: int, duration: float, stream: bool, rounds: int) -> dict:
    """Run each client ``rounds`` times, interleaved (a, b, c, a, b, c...), so that load from other
    processes on the machine hits every client alike; keep each client's median run by CPU/token."""
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            runs[name].append(run_client(ctx, name, url, n, duration, stream))
    out = {}
    for name, rs in runs.items():
        rs.sort(key=lambda r: r["cpu_s"] / max(1, r["requests"]))
        out[name] = rs[len(rs) // 2]
    return out


def _report(ctx, base: str, duration: float, rounds: int, concurrencies: list[int], cases: set[str]) -> None:
    if "stream" in cases:
        _streaming(ctx, base, duration, rounds, concurrencies)
    if "completions" in cases:
        _completions(ctx, base, duration, rounds)
    if "json" in cases:
        _non_streamed(ctx, base, duration, rounds)
    if "ttft" in cases:
        _ttft(ctx, base, duration, concurrencies[-1])


def _streaming(ctx, base: str, duration: float, rounds: int, concurrencies: list[int]) -> None:
    print(f"streaming: {TOKENS} tokens/request, zero-delay server in a separate process, "
          f"{duration:g} s per run, median of {rounds} interleaved round(s)")
    hdr = (
        f"{'client':<10} {'conc':>5} {'req/s':>8} {'tok/s':>10} {'CPU ms/req':>11} {'tok/CPU-s':>11} "
        f"{'fail':>5}"
    )
    print(hdr)
    print("-" * len(hdr))
    names = list(CLIENTS)
    per_core: dict[tuple[str, int], float] = {}
    for n in concurrencies:
        for name, r in _rounds(ctx, names, f"{base}/stream/v1", n, duration, True, rounds).items():
            per_core[(name, n)] = r["tokens"] / r["cpu_s"]
            print(f"{name:<10} {n:>5} {r['requests'] / r['wall_s']:>8.1f} {r['tokens'] / r['wall_s']:>10.0f} "
                  f"{1e3 * r['cpu_s'] / max(1, r['requests']):>11.3f} {per_core[(name, n)]:>11.0f} "
                  f"{r['failed']:>5}")
    vllm = (
        "installed (run `vllm bench serve` by hand)" if importlib.util.find_spec("vllm") else "not installed"
    )
    print(f"{'vllm':<10}  {vllm}")
    for n in concurrencies:
        ratio = per_core[("servelab", n)] / per_core[("reference", n)]
        print(f"ratio servelab/reference tokens per client CPU-second @ {n}: {ratio:.2f}  (target >= 0.6)")


def _completions(ctx, base: str, duration: float, rounds: int) -> None:
    print(f"\nstreamed completions vs chat (servelab): {TOKENS} tokens/request, concurrency 64")
    per_core = {}
    for name, r in _rounds(ctx, ["servelab", "servelab-completions"], f"{base}/stream/v1", 64, duration, True,
                           rounds).items():
        per_core[name] = r["tokens"] / r["cpu_s"]
        print(f"{name:<21} {r['tokens'] / r['wall_s']:>10.0f} tok/s  {per_core[name]:>9.0f} tok/CPU-s  "
              f"{1e3 * r['cpu_s'] / max(1, r['requests']):.3f} CPU ms/req  fail {r['failed']}")
    print(f"ratio completions/chat tokens per client CPU-second: "
          f"{per_core['servelab-completions'] / per_core['servelab']:.2f}  (target ~1: same fast path)")


def _non_streamed(ctx, base: str, duration: float, rounds: int) -> None:
    names = list(CLIENTS)
    print(f"\nnon-streamed: {TOKENS}-token JSON bodies, concurrency 64")
    for name, r in _rounds(ctx, names, f"{base}/json/v1", 64, duration, False, rounds).items():
        print(f"{name:<10} {r['requests'] / r['wall_s']:>8.1f} req/s  "
              f"{1e3 * r['cpu_s'] / max(1, r['requests']):.3f} client CPU ms/request  fail {r['failed']}"
              + ("  (target <= 0.5 ms)" if name == "servelab" else ""))


def _ttft(ctx, base: str, duration: float, n: int) -> None:
    print(f"\nTTFT accuracy: server waits {TTFT_DELAY_S * 1e3:g} ms before the first token, concurrency {n}, "
          f"{TTFT_TOKENS} tokens/request")
    print("  err = |measured TTFT - 50 ms| (includes the server's own scheduling lateness);")
    print("  lag = client's first-token stamp - server's write time of that token (same CLOCK_MONOTONIC)")
    for name, r in _rounds(ctx, ["servelab", "reference"], f"{base}/ttft/v1", n, duration, True, 1).items():
        err_ms = [abs(t - TTFT_DELAY_S * 1e9) / 1e6 for t in r["ttfts_ns"]]
        lag_ms = [t / 1e6 for t in r["lags_ns"]]
        print(f"{name:<10} err p50 {statistics.median(err_ms):.2f} ms  p99 {_p(err_ms, 0.99):.2f} ms   "
              f"lag p50 {statistics.median(lag_ms):.2f} ms  p99 {_p(lag_ms, 0.99):.2f} ms  (n={len(err_ms)})"
              + ("  (target err p99 <= 2 ms)" if name == "servelab" else ""))


# ------------------------------------------------------------------ long context and the whole run

# One servelab run (execute, no report) in a fresh interpreter: load-window requests/s and CPU as JSON.
_LONG = r"""
import json, resource, sys, time
from servelab.bench.run import execute
from servelab.config import RunConfig, validate
url, conc, dur, tokens, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
cfg = validate(RunConfig, {"target": {"url": url, "model": "bench-model"}, "load": {"concurrency": conc},
    "workload": {"input_tokens": tokens, "output_tokens": 256}, "limits": {"duration_s": dur},
    "telemetry": {"enabled": False}, "out": out})
r = execute(cfg, report=False)
th = r.summary["throughput"]
import asyncio
from servelab.workload.requests import make_synthesizer, planner
async def first_prompt():  # the size of the bodies sent, for a reference body of the same size
    return (await planner(cfg, await make_synthesizer(cfg))).plan(0).text()
print(json.dumps({"requests": r.summary["requests"]["ok"], "load_s": th["duration_s"],
                  "load_cpu_s": sum(x.load_cpu_s or 0 for x in r.shards),
                  "prompt_chars": len(asyncio.run(first_prompt()))}))
"""

# The raw reference for the long-context case: one prebuilt body of the same size, sent over and over.
_LONG_REF = r"""
import json, sys, time
sys.path.insert(0, sys.argv[5])
import client_throughput as ct, uvloop
url, conc, dur, chars = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
words = ("the quick brown fox jumps over a lazy dog " * (chars // 40 + 1))[:chars]
res = ct.Result()
c0, t0 = time.process_time(), time.perf_counter()
uvloop.run(ct._run_reference(url, conc, dur, True, res, prompt=[{"role": "user", "content": words}],
                             keep_times=True))
print(json.dumps({"requests": res.requests, "load_s": time.perf_counter() - t0,
                  "load_cpu_s": time.process_time() - c0, "failed": res.failed}))
"""

# The raw reference for the whole-run case: a fresh interpreter that sends n requests and exits.
_WHOLE_REF = r"""
import asyncio, json, sys, time
sys.path.insert(0, sys.argv[4])
import client_throughput as ct, uvloop
url, conc, n, as_ints = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[5] == "ints"
res = ct.Result()
async def go():
    task = asyncio.get_running_loop().create_task(ct._run_reference(url, conc, 3600, True, res,
                                                                    keep_times=True, times_as_ints=as_ints))
    while res.requests < n:
        await asyncio.sleep(0.005)
    task.cancel()
try:
    uvloop.run(go())
except BaseException:
    pass
print(json.dumps({"requests": res.requests, "kept_times": sum(map(len, res.token_times))}))
"""


def _py(code: str, *args: str, timeout: float = 900) -> dict:
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _peak_of(cmd: list[str], timeout: float = 1800) -> tuple[float, float]:
    """(wall s, peak RSS MB) of ``cmd`` run under /usr/bin/time-like accounting (os.wait4)."""
    import os
    import subprocess

    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # 1: the run is INVALID (a check failed), still a whole run
        raise RuntimeError(f"exit {code}: {err[-2000:]}")
    return wall, ru.ru_maxrss / 1024


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _median_run(runs: list[dict], key: Callable[[dict], float]) -> dict:
    return sorted(runs, key=key)[len(runs) // 2]


def _long_context(base: str, duration: float, scale: float, rounds: int) -> None:
    import tempfile

    tokens = max(1000, int(50_000 * scale))
    conc = 32
    print(f"\nlong context: {tokens:,}-token prompts (chat), concurrency {conc}, {duration:g} s, "
          "256 streamed tokens back;\nservelab = a whole `execute` run (prompts built by the workload), "
          "reference = one prebuilt body of the same size, keeping token times;\n"
          f"median of {rounds} interleaved round(s)")
    here = str(__file__.rsplit("/", 1)[0])
    ss, rs = [], []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            ss.append(_py(_LONG, f"{base}/stream/v1", str(conc), str(duration), str(tokens), tmp))
        chars = ss[-1]["prompt_chars"]  # the synthesized prose: ~4.7 bytes per estimated token
        rs.append(_py(_LONG_REF, f"{base}/stream/v1", str(conc), str(duration), str(chars), here))
    s = _median_run(ss, lambda x: x["requests"] / x["load_s"])
    r = _median_run(rs, lambda x: x["requests"] / x["load_s"])
    print(f"prompt: {s['prompt_chars']:,} characters")
    rows = {"servelab": s, "raw reference": r}
    print(f"{'client':<14} {'req/s':>8} {'CPU ms/req':>11}")
    for name, x in rows.items():
        cpu_ms = 1e3 * x['load_cpu_s'] / max(1, x['requests'])
        print(f"{name:<14} {x['requests'] / x['load_s']:>8.1f} {cpu_ms:>11.3f}")
    # The verdict is the median of each round's ratio: a pair run back to back shares the box's load.
    rounds_ratio = sorted((a["requests"] / a["load_s"]) / (b["requests"] / b["load_s"])
                          for a, b in zip(ss, rs, strict=True))
    ratio = rounds_ratio[len(rounds_ratio) // 2]
    print(f"per-round ratios: {', '.join(f'{x:.2f}' for x in rounds_ratio)}")
    print(f"ratio servelab/raw req/s (long context): {ratio:.2f}  target >= 0.9: {_verdict(ratio >= 0.9)}")


def _load_window_s(out: str) -> float:
    """The load window of the one run written under ``out`` (its summary's throughput duration)."""
    import json
    from pathlib import Path

    summary = next(Path(out).glob("*/summary.json"), None)
    if summary is None:
        return float("nan")
    return float(json.loads(summary.read_text())["throughput"]["duration_s"])


# What `servelab run` imports: a small run in a fresh interpreter, then the modules it loaded.
_RUN_MODULES = r"""
import json, sys
from servelab.cli.main import main
try:
    main(sys.argv[2:])
except SystemExit:
    pass
with open(sys.argv[1], "w") as f:
    json.dump(sorted(m for m in sys.modules if m not in ("__main__", "__mp_main__")), f)
print("{}")
"""

# The floor: a fresh interpreter that only imports those modules (peak RSS after them, nothing run).
_IMPORT_ONLY = r"""
import importlib, json, resource, sys
for m in json.load(open(sys.argv[1])):
    try:
        importlib.import_module(m)
    except Exception:
        pass
print(json.dumps({"peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _run_args(base: str, conc: int, n: int, out: str) -> list[str]:
    return ["run", "--target", f"{base}/stream/v1", "--model", MODEL, "--concurrency", str(conc),
            "--requests", str(n), "--input-tokens", "64", "--output-tokens", "256", "--out", out, "--json"]


def _import_floor_mb(base: str, conc: int) -> float:
    """Peak RSS of a fresh interpreter that imports what a (small) `servelab run` imported."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        mods = os.path.join(tmp, "modules.json")
        _py(_RUN_MODULES, mods, *_run_args(base, conc, 100, tmp))
        return float(_py(_IMPORT_ONLY, mods)["peak_mb"])


def _whole_run(base: str, scale: float, rounds: int) -> None:
    import shutil
    import sys
    import tempfile

    n = max(500, int(10_000 * scale))
    conc = 64
    exe = shutil.which("servelab") or ""
    print(f"\nwhole run: {n:,} requests x 256 streamed tokens, concurrency {conc}; wall time of the whole "
          "process (`servelab run ... --json`: import, load, Parquet, summary, report.html - the report is "
          "on, as by default)\nagainst raw reference processes sending the same requests and keeping every "
          "token's arrival time: in an array('q') (8 B/token, the strict reference) and as lists of Python "
          f"ints (as the issue's reference did); peak RSS of each; median of {rounds} interleaved round(s)")
    here = str(__file__.rsplit("/", 1)[0])
    ss, rs, ls = [], [], []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [exe] if exe else [sys.executable, "-m", "servelab.cli.main"]
            wall, mb = _peak_of([*cmd, *_run_args(base, conc, n, tmp)])
            ss.append((wall, mb, _load_window_s(tmp)))
        ref = [sys.executable, "-c", _WHOLE_REF, f"{base}/stream/v1", str(conc), str(n), here]
        rs.append(_peak_of([*ref, "array"]))
        ls.append(_peak_of([*ref, "ints"]))
    floor = _import_floor_mb(base, conc)
    s_wall, s_mb, load_s = sorted(ss)[len(ss) // 2]
    r_wall, r_mb = sorted(rs)[len(rs) // 2]
    l_wall, l_mb = sorted(ls)[len(ls) // 2]
    print(f"{'client':<24} {'wall s':>8} {'req/s':>8} {'peak MB':>8}")
    print(f"{'servelab':<24} {s_wall:>8.2f} {n / s_wall:>8.0f} {s_mb:>8.0f}   (load window {load_s:.2f} s, "
          f"the rest {s_wall - load_s:.2f} s)")
    print(f"{'raw, array(q) times':<24} {r_wall:>8.2f} {n / r_wall:>8.0f} {r_mb:>8.0f}   (8 B/token)")
    print(f"{'raw, Python int times':<24} {l_wall:>8.2f} {n / l_wall:>8.0f} {l_mb:>8.0f}   "
          "(int objects in lists)")
    print(f"{'servelab imports only':<24} {'':>8} {'':>8} {floor:>8.0f}   (a fresh interpreter importing "
          "what `servelab run` imports, nothing run)")
    # The verdicts are the medians of each round's ratios: a pair run back to back shares the box's load.
    walls = sorted(b[0] / a[0] for a, b in zip(ss, rs, strict=True))
    mems = sorted(a[1] / b[1] for a, b in zip(ss, rs, strict=True))
    mems_i = sorted(a[1] / b[1] for a, b in zip(ss, ls, strict=True))
    ratio, mem, mem_i = walls[len(walls) // 2], mems[len(mems) // 2], mems_i[len(mems_i) // 2]
    print(f"per-round ratios: rate {', '.join(f'{x:.2f}' for x in walls)}; memory vs array(q) "
          f"{', '.join(f'{x:.2f}' for x in mems)}; vs int lists {', '.join(f'{x:.2f}' for x in mems_i)}")
    print(f"ratio servelab/raw whole-run rate: {ratio:.2f}  target >= 0.75: {_verdict(ratio >= 0.75)}")
    print(f"peak memory servelab/raw (array('q') times, the strict reference): {mem:.2f}x  target <= 2x: "
          f"{_verdict(mem <= 2.0)}")
    print(f"peak memory servelab/raw (Python int times): {mem_i:.2f}x  target <= 2x: "
          f"{_verdict(mem_i <= 2.0)}")
    print(f"servelab's import floor / raw (array('q')): {floor / r_mb:.2f}x; / raw (int lists): "
          f"{floor / l_mb:.2f}x")


if __name__ == "__main__":
    main()
