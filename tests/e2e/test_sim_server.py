"""The simulator's HTTP front over loopback: OpenAI protocol conformance, metrics, and injected faults
becoming records with the right status through the benchmark's own HTTP client."""

from __future__ import annotations

import asyncio
import re

import aiohttp
import orjson
import pytest

from servelab.clock import WallClock
from servelab.config.models import TargetConfig, TimeoutsConfig
from servelab.records.schema import DISCONNECTED, HTTP_ERROR, MALFORMED, OK, TIMEOUT
from servelab.sim.faults import FaultConfig
from servelab.sim.server import SIM_SERVER, RunningServer, make_engine, start_server
from servelab.transport.base import ModelRequest
from servelab.transport.http import HttpTransport, probe_options
from servelab.transport.probe import HttpProbe

SPEC = "sim"  # sim-tiny on one H100: simulates fast
TEST_TIMEOUT_S = 30


@pytest.fixture
async def serve():
    started: list[RunningServer] = []

    async def _start(faults: FaultConfig | None = None, spec: str = SPEC) -> RunningServer:
        engine, deployment = make_engine(spec, WallClock(), seed=0)
        srv = await start_server(engine, deployment, host="127.0.0.1", port=0, faults=faults)
        started.append(srv)
        return srv

    yield _start
    for srv in started:
        await asyncio.wait_for(srv.close(), 10)


@pytest.fixture
async def http():
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TEST_TIMEOUT_S)) as s:
        yield s


def _root(srv: RunningServer) -> str:
    return f"http://127.0.0.1:{srv.port}"


async def _sse(resp: aiohttp.ClientResponse) -> list[bytes]:
    """The data fields of an SSE body, in order."""
    raw = await resp.read()
    events = [e for e in raw.split(b"\n\n") if e]
    assert all(e.startswith(b"data: ") for e in events), events[:3]
    return [e[len(b"data: "):] for e in events]


def _chat(content: str, **kw) -> dict:
    return {"messages": [{"role": "user", "content": content}], **kw}


# ------------------------------------------------------------------------------ protocol conformance


async def test_models_health_version(serve, http):
    srv = await serve()
    async with http.get(srv.base_url + "/models") as r:
        assert r.status == 200
        body = await r.json()
    assert body["object"] == "list"
    (card,) = body["data"]
    assert card["id"] == "sim-tiny" and card["object"] == "model" and card["max_model_len"] > 0
    async with http.get(_root(srv) + "/health") as r:
        assert r.status == 200
    async with http.get(_root(srv) + "/version") as r:
        assert (await r.json())["version"]


async def test_chat_stream_chunks_and_final_usage(serve, http):
    srv = await serve()
    body = _chat("tell me a story " * 10, max_tokens=12, ignore_eos=True, stream=True,
                 stream_options={"include_usage": True})
    async with http.post(srv.base_url + "/chat/completions", json=body) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        data = await _sse(r)
    assert data[-1] == b"[DONE]"
    chunks = [orjson.loads(d) for d in data[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "sim-tiny" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    finish = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    usage_chunk = chunks[-1]
    assert len(finish) == 1 and finish[0]["choices"][0]["finish_reason"] == "length"
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 12
    u = usage_chunk["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert u["prompt_tokens_details"]["cached_tokens"] >= 0
    # Every chunk before the last carries "usage": null (include_usage), one word per token.
    assert all(c["usage"] is None for c in chunks[:-1])
    text = "".join(c["choices"][0]["delta"]["content"] for c in content)
    assert len(text.split()) == 12
    assert chunks.index(finish[0]) > chunks.index(content[-1])


async def test_prompt_tokens_match_tokenize_of_the_same_messages(serve, http):
    srv = await serve()
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one two three four"}]
    async with http.post(_root(srv) + "/tokenize", json={"model": "sim-tiny", "messages": msgs}) as r:
        tok = await r.json()
    async with http.post(srv.base_url + "/chat/completions", json={"messages": msgs, "max_tokens": 3}) as r:
        body = await r.json()
    assert body["usage"]["prompt_tokens"] == tok["count"] == len(tok["tokens"])


async def test_non_stream_chat_and_completions(serve, http):
    srv = await serve()
    async with http.post(srv.base_url + "/chat/completions",
                         json=_chat("hello there", max_tokens=5, ignore_eos=True)) as r:
        assert r.status == 200
        chat = await r.json()
    assert chat["object"] == "chat.completion"
    msg = chat["choices"][0]["message"]
    assert msg["role"] == "assistant" and len(msg["content"].split()) == 5
    assert chat["choices"][0]["finish_reason"] == "length"
    assert chat["usage"]["completion_tokens"] == 5
    async with http.post(srv.base_url + "/completions",
                         json={"prompt": "a b c d", "max_tokens": 4, "ignore_eos": True}) as r:
        comp = await r.json()
    assert comp["object"] == "text_completion"
    assert len(comp["choices"][0]["text"].split()) == 4
    assert comp["usage"]["prompt_tokens"] == 4 and comp["usage"]["completion_tokens"] == 4


async def test_completions_stream_with_max_completion_tokens(serve, http):
    srv = await serve()
    body = {"prompt": "x y z", "max_completion_tokens": 7, "ignore_eos": True, "stream": True}
    async with http.post(srv.base_url + "/completions", json=body) as r:
        data = await _sse(r)
    assert data[-1] == b"[DONE]"
    chunks = [orjson.loads(d) for d in data[:-1]]
    assert all("usage" not in c for c in chunks)  # no include_usage: no usage field at all
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert len(text.split()) == 7
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("stream", [True, False])
async def test_ignore_eos_gives_exactly_max_tokens(serve, http, stream):
    srv = await serve()
    for n in (1, 40, 150):
        body = _chat("go", max_tokens=n, ignore_eos=True, stream=stream,
                     **({"stream_options": {"include_usage": True}} if stream else {}))
        async with http.post(srv.base_url + "/chat/completions", json=body) as r:
            if stream:
                u = orjson.loads((await _sse(r))[-2])["usage"]
            else:
                u = (await r.json())["usage"]
        assert u["completion_tokens"] == n


async def test_min_tokens_is_honoured(serve, http):
    srv = await serve()
    for seed in range(5):
        async with http.post(srv.base_url + "/chat/completions",
                             json=_chat(f"q{seed}", max_tokens=400, min_tokens=300, seed=seed)) as r:
            body = await r.json()
        assert 300 <= body["usage"]["completion_tokens"] <= 400


async def test_repeated_prompt_reports_cached_tokens(serve, http):
    srv = await serve()
    prompt = " ".join(f"w{i}" for i in range(600))
    usages = []
    for _ in range(2):
        body = _chat(prompt, max_tokens=2, stream=True, stream_options={"include_usage": True})
        async with http.post(srv.base_url + "/chat/completions", json=body) as r:
            usages.append(orjson.loads((await _sse(r))[-2])["usage"])
    first, second = usages
    assert first["prompt_tokens"] == second["prompt_tokens"] > 600
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert first["prompt_tokens"] - 32 <= cached < first["prompt_tokens"]


async def test_next_turn_hits_the_cached_answer(serve, http):
    """The answer sent back as an assistant message reuses the KV blocks the engine cached for it."""
    srv = await serve()
    user = " ".join(f"u{i}" for i in range(100))
    async with http.post(srv.base_url + "/chat/completions",
                         json=_chat(user, max_tokens=64, ignore_eos=True)) as r:
        first = await r.json()
    answer = first["choices"][0]["message"]["content"]
    msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": answer},
            {"role": "user", "content": "and then?"}]
    async with http.post(srv.base_url + "/chat/completions", json={"messages": msgs, "max_tokens": 2}) as r:
        second = await r.json()
    p1 = first["usage"]["prompt_tokens"]
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert p1 + 64 - 32 <= cached <= p1 + 64  # all but the partial last block(s) of the answer


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("spanning", [False, True])
async def test_stop_string_cuts_the_text(serve, http, stream, spanning):
    from servelab.sim.api import SimRequest
    from servelab.sim.tokenizer import filler_text

    srv = await serve()
    engine = srv.app[SIM_SERVER].engine
    body = _chat("stop test", max_tokens=30, ignore_eos=True)
    async with http.post(srv.base_url + "/chat/completions", json=body) as r:
        full = (await r.json())["choices"][0]["message"]["content"]
    # The text is the engine's filler for the request id (1 here, as in process): predictable, so the next one
    # is too.
    assert full == filler_text(30, engine.output_seed(SimRequest(rid=1, prompt_ids=[], max_tokens=30)))
    text = filler_text(30, engine.output_seed(SimRequest(rid=2, prompt_ids=[], max_tokens=30)))
    words = text.split()
    k = 7
    # A whole word, or the end of word k-1, the space and the start of word k (across two tokens).
    stop = words[k] if not spanning else words[k - 1][-2:] + " " + words[k][:2]
    at = text.index(stop)
    req = {**body, "stop": [stop, "never-occurs-in-filler"], "stream": stream}
    if stream:
        req["stream_options"] = {"include_usage": True}
    async with http.post(srv.base_url + "/chat/completions", json=req) as r:
        if stream:
            chunks = [orjson.loads(d) for d in (await _sse(r))[:-1]]
            content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
            reason = next(c["choices"][0]["finish_reason"] for c in chunks
                          if c["choices"] and c["choices"][0]["finish_reason"])
            u = chunks[-1]["usage"]
        else:
            cut = await r.json()
            content, reason = cut["choices"][0]["message"]["content"], cut["choices"][0]["finish_reason"]
            u = cut["usage"]
    assert content == text[:at]
    assert reason == "stop"
    assert u["completion_tokens"] == len(text[: at + 1].split())  # up to the token where the stop begins
    metrics = await _scrape(http, srv)
    assert metrics['vllm:request_success_total{finished_reason="stop"}'] == 1


@pytest.mark.parametrize(
    "body, status, param",
    [
        ({}, 400, "messages"),
        ({"messages": []}, 400, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role"),
        (_chat("x", max_tokens=0), 400, "max_tokens"),
        (_chat("x", max_tokens="ten"), 400, "max_tokens"),
        (_chat("x", max_tokens=10_000_000), 400, "max_tokens"),
        (_chat("x", n=2), 400, "n"),
        (_chat("x", max_tokens=5, min_tokens=6), 400, "min_tokens"),
        (_chat("x", stream=False, stream_options={"include_usage": True}), 400, "stream_options"),
        (_chat("x", stop=[1]), 400, "stop"),
        (_chat("x", model="gpt-9"), 404, "model"),
    ],
)
async def test_bad_requests_get_openai_error_json(serve, http, body, status, param):
    srv = await serve()
    async with http.post(srv.base_url + "/chat/completions", json=body) as r:
        assert r.status == status
        err = (await r.json())["error"]
    assert err["code"] == status and err["param"] == param and err["message"] and err["type"]


async def test_invalid_json_body_is_400(serve, http):
    srv = await serve()
    async with http.post(srv.base_url + "/completions", data=b"{not json",
                         headers={"Content-Type": "application/json"}) as r:
        assert r.status == 400
        assert "JSON" in (await r.json())["error"]["message"]


async def test_tokenize_vllm_and_llamacpp_styles_and_detokenize(serve, http):
    srv = await serve()
    async with http.post(
        _root(srv) + "/tokenize", json={"model": "sim-tiny", "prompt": "alpha beta gamma"}
    ) as r:
        v = await r.json()
    assert v["count"] == 3 and len(v["tokens"]) == 3 and v["max_model_len"] > 0
    async with http.post(_root(srv) + "/tokenize", json={"content": "alpha beta gamma"}) as r:
        ll = await r.json()
    assert ll == {"tokens": v["tokens"]}
    async with http.post(_root(srv) + "/detokenize", json={"tokens": v["tokens"]}) as r:
        d = await r.json()
    assert d["prompt"] == "alpha beta gamma" == d["content"]
    async with http.post(_root(srv) + "/tokenize", json={"prompt": 5}) as r:
        assert r.status == 400


# ------------------------------------------------------------------------------ metrics

_LINE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{[^}]*\})? (?P<value>\S+)$')


async def _scrape(http: aiohttp.ClientSession, srv: RunningServer) -> dict[str, float]:
    """{name or name{labels}: value}; model_name/engine labels dropped for brevity."""
    async with http.get(_root(srv) + "/metrics") as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        text = await r.text()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = _LINE.match(line)
        assert m, line
        labels = re.sub(r',?(model_name|engine)="[^"]*"', "", m["labels"] or "").replace("{,", "{")
        out[m["name"] + ("" if labels in ("", "{}") else labels)] = float(m["value"])
    return out


VLLM_NAMES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
              "vllm:gpu_cache_usage_perc", "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total",
              "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
              "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
              "vllm:time_per_output_token_seconds_count", "vllm:request_queue_time_seconds_count",
              "vllm:e2e_request_latency_seconds_count")


async def test_metrics_names_and_values_change_under_load(serve, http):
    srv = await serve()
    before = await _scrape(http, srv)
    for name in VLLM_NAMES:
        assert name in before, name
    assert any(k.startswith("servelab_sim_step_seconds_total") for k in before)
    n, out_tokens = 6, 20

    async def one(i: int) -> dict:
        body = _chat(f"load {i} " * 50, max_tokens=out_tokens, ignore_eos=True)
        async with http.post(srv.base_url + "/chat/completions", json=body) as r:
            return (await r.json())["usage"]

    usages = await asyncio.gather(*(one(i) for i in range(n)))
    after = await _scrape(http, srv)
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == n * out_tokens
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == pytest.approx(
        sum(u["prompt_tokens"] for u in usages), abs=sum(u["prompt_tokens_details"]["cached_tokens"]
                                                         for u in usages) + 1)
    assert after['vllm:request_success_total{finished_reason="length"}'] == n
    assert after["vllm:time_to_first_token_seconds_count"] == n
    assert after["vllm:e2e_request_latency_seconds_count"] == n
    assert after["vllm:inter_token_latency_seconds_count"] == n * (out_tokens - 1)
    assert after["vllm:prefix_cache_queries_total"] > before["vllm:prefix_cache_queries_total"]
    assert after["vllm:num_requests_running"] == 0


async def test_running_gauge_and_client_disconnect_aborts(serve, http):
    srv = await serve()
    n = 4
    streams = []
    for i in range(n):
        body = _chat(f"long {i}", max_tokens=20_000, ignore_eos=True, stream=True)
        r = await http.post(srv.base_url + "/chat/completions", json=body)
        await r.content.readuntil(b"\n\n")  # the first chunk: the request is running
        streams.append(r)
    during = await _scrape(http, srv)
    assert during["vllm:num_requests_running"] + during["vllm:num_requests_waiting"] == n
    assert during["vllm:num_requests_running"] >= 1
    for r in streams:
        r.close()  # the client goes away mid-stream
    for _ in range(200):
        now = await _scrape(http, srv)
        if now["vllm:num_requests_running"] + now["vllm:num_requests_waiting"] == 0:
            break
        await asyncio.sleep(0.02)
    assert now["vllm:num_requests_running"] + now["vllm:num_requests_waiting"] == 0
    assert now['vllm:request_success_total{finished_reason="abort"}'] == n
    # The server still answers.
    async with http.post(srv.base_url + "/chat/completions", json=_chat("after", max_tokens=2)) as r:
        assert r.status == 200


# ------------------------------------------------------------------------------ faults -> record statuses


def _transport(srv: RunningServer, first_token_s: float = 5.0, total_s: float = 20.0) -> HttpTransport:
    target = TargetConfig(url=srv.base_url, timeouts=TimeoutsConfig(connect_s=5, first_token_s=first_token_s,
                                                                    total_s=total_s))
    return HttpTransport(target, WallClock(), concurrency=2)


def _req(i: int = 1, stream: bool = True, max_tokens: int = 8) -> ModelRequest:
    return ModelRequest(request_id=i, messages=[{"role": "user", "content": "fault test"}],
                        max_tokens=max_tokens, ignore_eos=True, stream=stream)


async def test_clean_server_gives_ok_records_with_usage(serve):
    srv = await serve()
    t = _transport(srv)
    try:
        for stream in (True, False):
            rec = await t.send(_req(stream=stream))
            assert rec.status == OK, rec.error
            assert rec.http_status == 200 and rec.usage_completion_tokens == 8
            assert rec.finish_reason == "length"
            assert rec.sent_ns <= rec.first_token_ns <= rec.end_ns
        probe = HttpProbe(probe_options(t.target), t.clock)
        try:
            assert (await probe.count_tokens("one two three")) == 3
            assert (await probe.describe())["engine"] == "servelab-sim"  # the same name as in process
        finally:
            await probe.aclose()
    finally:
        await t.aclose()


@pytest.mark.parametrize(
    "faults, stream, status, http_status",
    [
        (FaultConfig(error_rate=1.0, error_status=(500,)), True, HTTP_ERROR, 500),
        (FaultConfig(error_rate=1.0, error_status=(429,)), False, HTTP_ERROR, 429),
        (FaultConfig(error_rate=1.0, error_status=(503,)), True, HTTP_ERROR, 503),
        (FaultConfig(reset_rate=1.0, reset_after_chunks=0), True, DISCONNECTED, None),
        (FaultConfig(reset_rate=1.0, reset_after_chunks=0), False, DISCONNECTED, None),
        (FaultConfig(reset_rate=1.0, reset_after_chunks=3), True, DISCONNECTED, 200),
        (FaultConfig(malformed_rate=1.0, malformed_after_chunks=2), True, MALFORMED, 200),
        (FaultConfig(malformed_rate=1.0), False, MALFORMED, 200),
        (FaultConfig(truncate_rate=1.0, truncate_after_chunks=3), True, DISCONNECTED, 200),
        (FaultConfig(truncate_rate=1.0), False, DISCONNECTED, 200),
    ],
    ids=["500", "429-whole", "503", "reset-before", "reset-before-whole", "reset-mid", "malformed",
         "malformed-whole", "truncate", "truncate-whole"],
)
async def test_injected_fault_becomes_a_record_with_its_status(serve, faults, stream, status, http_status):
    srv = await serve(faults)
    t = _transport(srv)
    try:
        rec = await asyncio.wait_for(t.send(_req(stream=stream)), TEST_TIMEOUT_S)
    finally:
        await t.aclose()
    assert rec.status == status, (rec.status, rec.error)
    assert rec.error
    if http_status is not None:
        assert rec.http_status == http_status
    assert rec.end_ns is not None


async def test_stall_beyond_first_token_timeout_is_a_timeout(serve):
    srv = await serve(FaultConfig(stall_rate=1.0, stall_after_chunks=0, stall_s=5.0))
    t = _transport(srv, first_token_s=0.3)
    try:
        rec = await asyncio.wait_for(t.send(_req()), TEST_TIMEOUT_S)
    finally:
        await t.aclose()
    assert rec.status == TIMEOUT, (rec.status, rec.error)
    assert rec.first_token_ns is None


async def test_short_stall_and_slow_first_byte_still_ok(serve):
    # An 8B model paces decode steps at several ms, so the answer arrives in many chunks.
    srv = await serve(FaultConfig(stall_rate=1.0, stall_after_chunks=1, stall_s=0.2, slow_first_byte_s=0.1),
                      spec="sim:llama-3.1-8b@1xh100")
    t = _transport(srv)
    try:
        rec = await asyncio.wait_for(t.send(_req(max_tokens=24)), TEST_TIMEOUT_S)
    finally:
        await t.aclose()
    assert rec.status == OK, rec.error
    assert rec.usage_completion_tokens == 24
    assert len(rec.token_times_ns) >= 2
    assert rec.first_byte_ns - rec.sent_ns >= 100_000_000  # the held-back headers
    gaps = [b - a for a, b in zip(rec.token_times_ns, rec.token_times_ns[1:], strict=False)]
    assert max(gaps) >= 200_000_000  # the stall shows between two chunks


async def test_fault_decisions_follow_the_seed(serve):
    cfg = FaultConfig(seed=11, error_rate=0.5, error_status=(500,))
    srv = await serve(cfg)
    t = _transport(srv)
    try:
        recs = [await t.send(_req(i, stream=False, max_tokens=2)) for i in range(16)]
    finally:
        await t.aclose()
    expected = [HTTP_ERROR if cfg.plan(i).kind == "error" else OK for i in range(16)]
    assert [r.status for r in recs] == expected
    assert OK in expected and HTTP_ERROR in expected


# ------------------------------------------------------------------------------ the command line


def test_cli_rejects_bad_fault_flags_with_exit_2(capsys):
    from servelab.cli.main import main

    assert main(["sim", "serve", "--error-rate", "1.5", "--port", "0"]) == 2
    assert "error_rate" in capsys.readouterr().err
    assert main(["sim", "serve", "--reset-rate", "0.7", "--truncate-rate", "0.7", "--port", "0"]) == 2


async def test_cli_serves_until_terminated(tmp_path):
    import os
    import signal
    import sys

    faults = tmp_path / "faults.yaml"
    faults.write_text("error_rate: 1.0\nerror_status: [429]\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "servelab.cli.main", "sim", "serve", "--port", "0", "--faults", str(faults),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), TEST_TIMEOUT_S)
        m = re.search(rb"at (http://127\.0\.0\.1:\d+/v1)", line)
        assert m, line
        base = m[1].decode()
        async with aiohttp.ClientSession() as s:
            async with s.get(base + "/models") as r:
                assert r.status == 200
            async with s.post(base + "/chat/completions", json=_chat("hi", max_tokens=2)) as r:
                assert r.status == 429  # the fault file was read
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()
