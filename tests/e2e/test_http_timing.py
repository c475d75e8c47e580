"""HttpTransport against a scripted streaming server on 127.0.0.1 (aiohttp, random port, same process).

The server writes each chunk at a scripted instant and notes when it wrote it (time.monotonic_ns, the
same clock WallClock reads), so the client's timestamps are checked against what really happened.
A request carries its script in ``extra_body["script"]`` (merged into the JSON body by the transport).
"""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from aiohttp import web

from servelab.clock import WallClock
from servelab.config.models import TargetConfig, TimeoutsConfig
from servelab.transport.base import ModelRequest
from servelab.transport.http import HttpTransport, probe_options
from servelab.transport.probe import HttpProbe
from tests.loopback import serve_app

MS = 1_000_000


def _chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None,
           text: str | None = None) -> bytes:
    if text is not None:
        choice = {"index": 0, "text": text, "finish_reason": finish}
    else:
        choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    obj: dict = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
                 "choices": [] if usage is not None and delta is None and text is None else [choice]}
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class ScriptedServer:
    """The server side: routes and a log of (label, monotonic ns) for every write."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, int]] = []
        self.bodies: list[dict] = []
        self.headers: list[dict] = []

    async def _emit(self, resp: web.StreamResponse, label: str, data: bytes) -> None:
        self.writes.append((label, time.monotonic_ns()))  # before the write: the client cannot see it earlier
        await resp.write(data)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        s = body.get("script", {})
        kind = s.get("kind", "normal")
        if kind == "status500":
            return web.Response(status=500, text='{"error": {"message": "engine exploded"}}')
        if not body.get("stream"):
            await asyncio.sleep(s.get("ttft", 0.0))
            return web.json_response({
                "id": "c1", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello world"},
                             "finish_reason": "length"}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9},
            })
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_chunk({"role": "assistant", "content": ""}))  # role chunk: not a token
        if kind == "stall":
            await asyncio.sleep(5.0)  # far beyond the first-token timeout; cancelled on disconnect
        await asyncio.sleep(s.get("ttft", 0.0))
        n = s.get("tokens", 3)
        gaps = s.get("gaps", [0.0] * n)
        reasoning = s.get("reasoning", 0)
        for i in range(n):
            if i:
                await asyncio.sleep(gaps[i])
            if kind == "usage_only":
                break
            if kind == "error_event" and i == 1:
                await self._emit(
                    resp, "error", b'data: {"error": {"message": "out of KV cache", "code": 500}}\n\n'
                )
                await resp.write_eof()
                return resp
            if kind == "garbage" and i == 1:
                await self._emit(resp, "garbage", b"data: {not json\n\n")
                await resp.write_eof()
                return resp
            if kind == "reset" and i == 2:
                request.transport.abort()
                return resp
            delta = {"reasoning_content": f"r{i}"} if i < reasoning else {"content": f"t{i}"}
            finish = "length" if i == n - 1 and kind != "no_finish" else None
            await self._emit(resp, f"tok{i}", _chunk(delta, finish))
        if kind == "no_finish":  # stream closes cleanly but never says it finished
            await resp.write_eof()
            return resp
        await asyncio.sleep(s.get("usage_delay", 0.0))
        await self._emit(resp, "usage", _chunk(usage={"prompt_tokens": 11, "completion_tokens": n,
                                                      "total_tokens": 11 + n,
                                                      "prompt_tokens_details": {"cached_tokens": 4}}))
        if kind != "no_done":
            await self._emit(resp, "done", b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(3):
            await resp.write(_chunk(text=f"w{i}", finish="stop" if i == 2 else None))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": "scripted-model", "object": "model", "owned_by": "vllm", "max_model_len": 4096}]},
            headers={"Server": "uvicorn"})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "0.9.9"})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        if "content" in body:  # llama.cpp form
            return web.json_response({"tokens": list(range(len(body["content"].split())))})
        return web.json_response({"error": "expected content"}, status=400)


@pytest.fixture
async def server():
    s = ScriptedServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", s.chat)
    app.router.add_post("/v1/completions", s.completions)
    app.router.add_get("/v1/models", s.models)
    app.router.add_get("/version", s.version)
    app.router.add_post("/tokenize", s.tokenize)
    async with serve_app(app) as root:
        s.url = f"{root}/v1"  # type: ignore[attr-defined]
        yield s


def _transport(server, **kw) -> HttpTransport:
    target = TargetConfig(url=server.url, model=kw.pop("model", "m"), **kw)
    return HttpTransport(target, WallClock(use_uvloop=False), concurrency=4)


def _req(script: dict | None = None, rid: int = 1, **kw) -> ModelRequest:
    return ModelRequest(request_id=rid, messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                        extra_body={"script": script or {}}, **kw)


async def test_ttft_matches_the_scripted_first_token(server):
    t = _transport(server)
    try:
        rec = await t.send(_req({"ttft": 0.05, "tokens": 3}))
    finally:
        await t.aclose()
    assert rec.status == "ok", rec.error
    ttft = rec.first_token_ns - rec.sent_ns
    written = dict(server.writes)["tok0"]
    assert ttft >= 50 * MS  # the server slept 50 ms after reading the request
    # Stamped on arrival: never before the server wrote it. (How close after is a property of the exchange,
    # pinned exactly on virtual time in tests/unit/transport/test_mock_timing.py, not of a busy loopback.)
    assert written <= rec.first_token_ns
    assert rec.first_byte_ns <= rec.first_token_ns  # the role chunk came first


async def test_token_times_follow_the_server_writes_and_usage_does_not_extend_latency(server):
    # Exact timing invariants (latency - TTFT = the scripted gaps) are pinned on virtual time in
    # tests/unit/transport/test_mock_timing.py; over a real socket each token is checked against the write.
    t = _transport(server)
    try:
        rec = await t.send(_req({"tokens": 4, "gaps": [0, 0.01, 0.02, 0.015], "usage_delay": 0.2}))
    finally:
        await t.aclose()
    assert rec.status == "ok", rec.error
    times = rec.token_times_ns
    written = dict(server.writes)
    assert len(times) == 4 and times[0] == rec.first_token_ns and times[-1] == rec.last_token_ns
    # Each token is stamped after its write and before the next write: server and client share one event
    # loop and the server sleeps >= 10 ms between tokens, so this is an order of events, not a race.
    for i, t_i in enumerate(times):
        assert written[f"tok{i}"] <= t_i
        assert i == 3 or t_i < written[f"tok{i + 1}"]
    # The usage chunk came 200 ms after the last token: latency-to-last-token ignores it, end does not.
    assert rec.last_token_ns < written["usage"] <= rec.end_ns
    assert rec.end_ns - rec.last_token_ns >= 200 * MS
    assert rec.usage_prompt_tokens == 11 and rec.usage_completion_tokens == 4 and rec.usage_cached_tokens == 4
    assert rec.est_completion_tokens == 4 and rec.finish_reason == "length"
    assert rec.output_text == "t0t1t2t3"


async def test_token_counts_come_from_usage_not_chunks(server):
    t = _transport(server)
    try:
        rec = await t.send(_req({"tokens": 3}))
    finally:
        await t.aclose()
    assert rec.usage_completion_tokens == 3 and rec.completion_tokens == 3
    assert rec.requested_output_tokens == 8 and rec.request_id == 1


async def test_usage_only_stream_is_a_failure(server):
    t = _transport(server)
    try:
        rec = await t.send(_req({"kind": "usage_only", "tokens": 3}))
    finally:
        await t.aclose()
    assert rec.status == "malformed" and "zero tokens" in rec.error
    assert rec.first_token_ns is None and rec.est_completion_tokens == 0


async def test_error_event_mid_stream_is_a_failure_despite_http_200(server):
    t = _transport(server)
    try:
        rec = await t.send(_req({"kind": "error_event", "tokens": 3}))
        garbage = await t.send(_req({"kind": "garbage", "tokens": 3}, rid=2))
    finally:
        await t.aclose()
    assert rec.http_status == 200 and rec.status == "http_error" and "out of KV cache" in rec.error
    assert rec.est_completion_tokens == 1
    assert garbage.status == "malformed" and "unparseable" in garbage.error


async def test_reasoning_comes_before_content(server):
    t = _transport(server)
    try:
        rec = await t.send(_req({"tokens": 4, "reasoning": 2, "gaps": [0, 0.005, 0.005, 0.005]}))
    finally:
        await t.aclose()
    assert rec.status == "ok", rec.error
    assert rec.first_token_ns == rec.first_reasoning_ns < rec.first_content_ns
    assert rec.first_content_ns == rec.token_times_ns[2]
    assert rec.output_text == "t2t3"


async def test_http_500_is_http_error_with_body(server):
    t = _transport(server)
    try:
        rec = await t.send(_req({"kind": "status500"}))
        after = await t.send(_req({"tokens": 2}, rid=2))  # the connection stays usable
    finally:
        await t.aclose()
    assert rec.status == "http_error" and rec.http_status == 500 and "engine exploded" in rec.error
    assert after.status == "ok"
    assert t.connections_opened == 1


async def test_reset_mid_stream_is_disconnected(server):
    t = _transport(server)
    try:
        rec = await t.send(_req({"kind": "reset", "tokens": 5}))
    finally:
        await t.aclose()
    assert rec.status == "disconnected" and "mid-response" in rec.error
    assert rec.est_completion_tokens == 2


async def test_clean_end_without_finish_reason_is_disconnected_but_without_done_is_ok(server):
    t = _transport(server)
    try:
        cut = await t.send(_req({"kind": "no_finish", "tokens": 2}))
        no_done = await t.send(_req({"kind": "no_done", "tokens": 2}, rid=2))
    finally:
        await t.aclose()
    assert cut.status == "disconnected" and "finish_reason" in cut.error
    assert no_done.status == "ok" and no_done.usage_completion_tokens == 2


async def test_stall_beyond_first_token_timeout_is_timeout(server):
    t = _transport(server, timeouts=TimeoutsConfig(first_token_s=0.1, total_s=5))
    try:
        rec = await t.send(_req({"kind": "stall"}))
        fresh = await t.send(_req({"tokens": 1}, rid=2))  # the stalled socket was closed, not reused
    finally:
        await t.aclose()
    assert rec.status == "timeout" and "first-token" in rec.error
    assert 100 * MS <= rec.end_ns - rec.sent_ns < 1000 * MS
    assert fresh.status == "ok"


async def test_non_streamed_request(server):
    t = _transport(server)
    try:
        rec = await t.send(_req({"ttft": 0.02}, stream=False))
    finally:
        await t.aclose()
    assert rec.status == "ok", rec.error
    assert rec.first_token_ns == rec.last_token_ns == rec.end_ns
    assert rec.first_token_ns - rec.sent_ns >= 20 * MS
    assert rec.output_text == "hello world" and rec.est_completion_tokens == 2
    assert server.bodies[-1]["stream"] is False and "stream_options" not in server.bodies[-1]


async def test_completions_api_and_request_body(server, monkeypatch):
    monkeypatch.setenv("SCRIPTED_KEY", "sk-secret")
    t = _transport(server, api_key_env="SCRIPTED_KEY", headers={"X-Tenant": "a"},
                   extra_body={"top_p": 0.9})
    try:
        rec = await t.send(ModelRequest(request_id=5, api="completions", prompt="one two", max_tokens=3,
                                        ignore_eos=True, stop=["\n"]))
        chat = await t.send(_req({"tokens": 1}, rid=6))
        probe = HttpProbe(probe_options(t.target), t.clock)
        facts = await probe.describe()
        await probe.aclose()
    finally:
        await t.aclose()
    assert rec.status == "ok" and rec.output_text == "w0w1w2" and rec.finish_reason == "stop"
    body = server.bodies[0]
    assert body["prompt"] == "one two" and body["model"] == "m" and body["ignore_eos"] is True
    assert body["min_tokens"] == 3 and body["stop"] == ["\n"] and body["top_p"] == 0.9
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": False}
    assert chat.status == "ok"
    assert server.headers[0]["Authorization"] == "Bearer sk-secret" and server.headers[0]["X-Tenant"] == "a"
    assert "sk-secret" not in repr(facts) and "sk-secret" not in repr(rec)


async def test_describe_tokenize_and_model_resolution(server):
    t = _transport(server, model=None)
    probe = HttpProbe(probe_options(t.target), t.clock)
    try:
        facts = await probe.describe()
        n = await probe.count_tokens("a b c d")
        again = await probe.count_tokens("a b")
        rec = await t.send(_req({"tokens": 1}))  # the transport asks its probe for the model
    finally:
        await probe.aclose()
        await t.aclose()
    assert facts["engine"] == "vllm" and facts["version"] == "0.9.9"
    assert facts["models"] == ["scripted-model"] and facts["server_header"] == "uvicorn"
    assert facts["max_model_len"] == {"scripted-model": 4096}
    assert n == 4 and again == 2 and probe._tokenize_style == "llamacpp"
    assert rec.status == "ok" and server.bodies[-1]["model"] == "scripted-model"


async def test_concurrent_requests_reuse_a_pool_of_connections(server):
    t = _transport(server)
    try:
        for _ in range(3):
            recs = await asyncio.gather(*(t.send(_req({"tokens": 2}, rid=i)) for i in range(4)))
            assert [r.status for r in recs] == ["ok"] * 4
    finally:
        await t.aclose()
    assert t.connections_opened == 4


async def test_connect_refused_is_a_record_not_an_exception():
    target = TargetConfig(url="http://127.0.0.1:9/v1", model="m")
    t = HttpTransport(target, WallClock(use_uvloop=False), concurrency=1)
    try:
        rec = await t.send(_req())
    finally:
        await t.aclose()
    assert rec.status == "disconnected" and "connect" in rec.error and rec.sent_ns is None


async def test_cancelled_send_closes_its_connection_and_reraises(server):
    t = _transport(server)
    try:
        task = asyncio.create_task(t.send(_req({"kind": "stall"})))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after = await t.send(_req({"tokens": 1}, rid=2))
    finally:
        await t.aclose()
    assert after.status == "ok" and t.connections_opened == 2  # the cancelled socket was not reused


async def test_tls_with_and_without_verification(tmp_path):
    import ssl
    import subprocess

    key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    s = ScriptedServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", s.chat)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"https://127.0.0.1:{port}/v1"
    try:
        recs = []
        for verify in (False, True):
            t = HttpTransport(TargetConfig(url=url, model="m", verify_tls=verify), WallClock(False), 1)
            try:
                recs.append(await t.send(_req({"tokens": 2})))
            finally:
                await t.aclose()
    finally:
        await runner.cleanup()
    assert recs[0].status == "ok" and recs[0].output_text == "t0t1"
    assert recs[1].status == "disconnected" and "certificate" in recs[1].error.lower()
