"""Wire helpers: endpoint parsing, headers, request bodies, error text."""

from __future__ import annotations

import orjson
import pytest

from servelab.errors import TargetError
from servelab.transport._wire import (
    bearer_from_env,
    build_body,
    error_message,
    error_text,
    header_block,
    parse_endpoint,
    request_head,
    ssl_context,
)
from servelab.transport.base import ModelRequest


def test_endpoint_parts_and_paths():
    ep = parse_endpoint("http://127.0.0.1:8000/v1")
    assert (ep.host, ep.port, ep.base_path, ep.host_header) == ("127.0.0.1", 8000, "/v1", "127.0.0.1:8000")
    assert ep.path("/chat/completions") == "/v1/chat/completions"
    assert ep.root("/tokenize") == "/tokenize"
    gw = parse_endpoint("https://gw.example.com/team/v1")
    assert gw.port == 443 and gw.host_header == "gw.example.com" and gw.tls
    assert gw.root("/version") == "/team/version"
    v6 = parse_endpoint("http://[::1]:9000")
    assert v6.host == "::1" and v6.host_header == "[::1]:9000" and v6.base_path == ""


@pytest.mark.parametrize("url", ["ftp://x/v1", "http:///v1", "http://h:99999/v1", "http://h/v1?x=1"])
def test_bad_urls_raise_target_error(url):
    with pytest.raises(TargetError):
        parse_endpoint(url)


def test_ssl_context_only_for_https_and_verify_off():
    import ssl

    assert ssl_context(parse_endpoint("http://h/v1"), True) is None
    ctx = ssl_context(parse_endpoint("https://h/v1"), False)
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname


def test_bearer_from_env(monkeypatch):
    assert bearer_from_env(None) is None
    monkeypatch.setenv("K1", "abc")
    assert bearer_from_env("K1") == "abc"
    monkeypatch.delenv("K2", raising=False)
    with pytest.raises(TargetError, match="K2"):
        bearer_from_env("K2")


def test_header_block_overrides_and_refuses_framing_headers():
    ep = parse_endpoint("http://h:1/v1")
    block = header_block(ep, {"user-agent": "mine", "X-A": "1"}, "k", "text/event-stream").decode()
    assert "Host: h:1\r\n" in block and "Authorization: Bearer k\r\n" in block
    assert "user-agent: mine\r\n" in block and "servelab" not in block and "X-A: 1\r\n" in block
    with pytest.raises(TargetError, match="Content-Length"):
        header_block(ep, {"Content-Length": "3"}, None, "*/*")
    with pytest.raises(TargetError):
        header_block(ep, {"X-Bad": "a\r\nInjected: 1"}, None, "*/*")


def test_request_head():
    head = request_head("POST", "/v1/completions", b"Host: h\r\n", 12)
    assert head == (b"POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 12\r\n\r\n")
    assert (
        request_head("GET", "/v1/models", b"Host: h\r\n", None)
        == b"GET /v1/models HTTP/1.1\r\nHost: h\r\n\r\n"
    )


def test_chat_body_streamed_with_extras():
    req = ModelRequest(request_id=1, messages=[{"role": "user", "content": "q"}], max_tokens=5,
                       min_tokens=2, stop=["x"], extra_body={"seed": 3, "top_p": 0.5})
    body = orjson.loads(build_body(req, "m", True, {"top_p": 0.9, "top_k": 4}))
    assert body == {"model": "m", "messages": [{"role": "user", "content": "q"}], "max_tokens": 5,
                    "temperature": 0.0, "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": False},
                    "min_tokens": 2, "stop": ["x"], "top_p": 0.5, "top_k": 4, "seed": 3}


def test_completions_body_ignore_eos_not_streamed():
    req = ModelRequest(request_id=1, api="completions", prompt="p", max_tokens=7, ignore_eos=True,
                       min_tokens=1)
    body = orjson.loads(build_body(req, None, False, {}))
    assert body["prompt"] == "p" and "model" not in body and body["stream"] is False
    assert "stream_options" not in body and body["ignore_eos"] is True and body["min_tokens"] == 7


def test_chat_body_from_a_bare_prompt():
    body = orjson.loads(build_body(ModelRequest(request_id=1, prompt="hi"), "m", True, {}))
    assert body["messages"] == [{"role": "user", "content": "hi"}]


def test_error_text_truncates_and_decodes_leniently():
    assert error_text(b"  short \n") == "short"
    long = error_text(b"x" * 2000)
    assert len(long) == 500 and long.endswith("...")
    assert error_text(b"\xff ok") == "\ufffd ok"


def test_error_message_finds_the_message():
    assert error_message({"error": {"message": "too long", "code": 400}}) == "too long"
    assert error_message({"object": "error", "message": "bad"}) == "bad"
    assert error_message({"error": "plain"}) == "plain"
