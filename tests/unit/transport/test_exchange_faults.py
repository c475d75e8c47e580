"""ModelExchange against faulty servers (issue 9): raw HTTP bytes in, one record out, socket fate checked.

Each test names the fault; the expected status, error text and whether the socket may be reused are
worked out by hand from the bytes fed.
"""

from __future__ import annotations

import asyncio
import gzip

import orjson
import pytest

from servelab.clock import VirtualClock
from servelab.records.schema import RequestRecord
from servelab.transport._exchange import ModelExchange
from servelab.transport._plain import PlainExchange
from servelab.transport.sse import SSEParser

MS = 1_000_000


class _NoInbox:
    def flush(self) -> None:
        pass


class _FakePool:
    inbox = _NoInbox()


class FakeConn:
    """Stands in for a pooled connection: records how the exchange released or closed it."""

    pool = _FakePool()

    def __init__(self) -> None:
        self.exchange = None
        self.released: list[bool] = []
        self.closed = False

    def done(self, keep_alive: bool) -> None:
        self.exchange = None
        self.released.append(keep_alive)

    def close(self) -> None:
        self.closed = True


def _chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


def _tok(text: str, finish: str | None = None, usage: object = None) -> bytes:
    obj: dict = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + orjson.dumps(obj) + b"\n\n"


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
DONE = b"data: [DONE]\n\n"


def _usage(**kw: object) -> bytes:
    return b"data: " + orjson.dumps({"choices": [], "usage": kw}) + b"\n\n"


def _json_response(obj: object, extra_head: bytes = b"", close: bool = False) -> bytes:
    body = orjson.dumps(obj)
    if close:
        return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n%s\r\n%s" % (
            extra_head, body)
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        len(body), extra_head, body)


def _drive(pieces: list[bytes], *, stream: bool = True, lose: bool = False, idle_s: float = 60.0,
           max_bytes: int = 1 << 26, gaps: list[float] | None = None) -> tuple[RequestRecord, FakeConn]:
    """Feed pieces at 1 ms steps of virtual time (or after ``gaps``); optionally lose the socket after."""
    clock = VirtualClock()

    async def main() -> tuple[RequestRecord, FakeConn]:
        conn = FakeConn()
        rec = RequestRecord(request_id=1)
        ex = ModelExchange(rec, clock.now, conn, stream, 600.0, idle_s, max_bytes)  # type: ignore[arg-type]
        conn.exchange = ex
        rec.sent_ns = clock.now()
        ex.arm(30.0)
        for i, piece in enumerate(pieces):
            await clock.sleep(gaps[i] if gaps else 0.001)
            ex.data(piece, clock.now())
        if lose:
            await clock.sleep(0.001)
            conn.exchange = None  # as Conn.connection_lost does
            ex.lost(ConnectionResetError("reset"))
        await asyncio.wait_for(ex.fut, 1000)
        return rec, conn

    return clock.run(main)


# -- usage and field types -------------------------------------------------------------------------------

@pytest.mark.parametrize("usage, why", [
    ({"prompt_tokens": "10", "completion_tokens": 1}, "usage.prompt_tokens is '10' (str)"),
    ({"prompt_tokens": 3, "completion_tokens": True}, "usage.completion_tokens is True (bool)"),
    ({"prompt_tokens": 3, "completion_tokens": 2.5}, "usage.completion_tokens is 2.5 (float)"),
    ({"prompt_tokens": 2**63, "completion_tokens": 1}, "usage.prompt_tokens is 9223372036854775808 (int)"),
    ({"prompt_tokens": -1, "completion_tokens": 1}, "usage.prompt_tokens is -1 (int)"),
    ({"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": "2"}},
     "usage.prompt_tokens_details.cached_tokens is '2' (str)"),
    ([1, 2], "usage is [1, 2]; expected an object"),
    ("lots", "usage is 'lots'; expected an object"),
])
def test_usage_of_the_wrong_type_makes_the_record_malformed_and_is_never_stored(usage, why):
    rec, conn = _drive(
        [
            SSE_HEAD,
            _chunked(
                _tok("a"),
                _tok("b", "stop"),
                _usage() if False else b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n",
                DONE,
            ),
        ]
    )
    assert rec.status == "malformed" and rec.error.startswith(why), rec.error
    for v in (rec.usage_prompt_tokens, rec.usage_completion_tokens, rec.usage_cached_tokens):
        assert v is None or (v.__class__ is int and 0 <= v < 2**63)
    assert rec.est_completion_tokens == 2 and conn.released == [True]  # the framing itself was clean


def test_integral_float_usage_is_taken_as_an_int():
    rec, _ = _drive(
        [SSE_HEAD, _chunked(_tok("a", "stop"), _usage(prompt_tokens=10.0, completion_tokens=1), DONE)]
    )
    assert rec.status == "ok" and rec.usage_prompt_tokens == 10 and rec.usage_prompt_tokens.__class__ is int


def test_usage_in_a_content_chunk_of_the_wrong_type_does_not_break_parsing():
    rec, _ = _drive([SSE_HEAD, _chunked(_tok("a", usage=[3]), _tok("b", "stop"), DONE)])
    assert rec.status == "malformed" and "usage is [3]" in rec.error and rec.output_text == "ab"


def test_finish_reason_that_is_not_a_string_is_malformed():
    rec, _ = _drive([SSE_HEAD, _chunked(_tok("a", finish={"x": 1}), DONE)])  # type: ignore[arg-type]
    assert (
        rec.status == "malformed" and "finish_reason is {'x': 1}" in rec.error and rec.finish_reason is None
    )


def test_non_dict_usage_in_a_close_delimited_json_body_is_a_record_not_an_exception():
    raw = _json_response({"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "usage": [7]},
                         close=True)
    rec, conn = _drive([raw], stream=False, lose=True)
    assert rec.status == "malformed" and "usage is [7]" in rec.error
    assert rec.output_text == "hi"


# -- connection reuse ----------------------------------------------------------------------------------

def test_bytes_after_the_response_in_the_same_read_close_the_socket_and_keep_the_status():
    ok = _json_response({"choices": [{"message": {"content": "one"}, "finish_reason": "stop"}]})
    dup = b"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n"
    rec, conn = _drive([ok + dup], stream=False)
    assert rec.status == "ok" and rec.http_status == 200  # the second message never overwrites it
    assert conn.released == [False]


def test_a_duplicated_response_is_never_handed_on():
    sse = SSE_HEAD + _chunked(_tok("a", "stop"), DONE)
    rec, conn = _drive([sse + sse])
    assert rec.status == "ok" and rec.output_text == "a" and conn.released == [False]


def test_bytes_after_the_response_in_a_later_read_close_the_socket():
    ok = _json_response({"choices": [{"message": {"content": "one"}, "finish_reason": "stop"}]})
    rec, conn = _drive([ok, b"HTTP/1.1 200 OK\r\n"], stream=False)
    assert rec.status == "ok" and conn.released == [True] and conn.closed


def test_content_length_shorter_than_the_body_discards_the_socket():
    body = b'{"choices":[{"message":{"content":"hello"},"finish_reason":"stop"}]}'
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n" + body
    rec, conn = _drive([raw], stream=False)
    assert rec.status == "malformed" and "unparseable JSON body" in rec.error
    assert conn.released == [False]


def test_a_close_delimited_answer_is_never_reused():
    raw = _json_response({"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}, close=True)
    rec, conn = _drive([raw], stream=False, lose=True)
    assert rec.status == "ok" and conn.released == []  # the socket is gone, nothing handed back


@pytest.mark.parametrize("interim", [
    b"HTTP/1.1 100 Continue\r\n\r\n",
    b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\n\r\n",
])
def test_interim_1xx_responses_are_skipped(interim):
    rec, conn = _drive([interim, SSE_HEAD + _chunked(_tok("a"), _tok("b", "stop"), DONE)])
    assert rec.status == "ok" and rec.http_status == 200 and rec.output_text == "ab"
    assert rec.first_byte_ns == 1 * MS  # the interim response was the first byte
    assert conn.released == [True]


def test_interim_response_in_the_same_read_as_an_error():
    body = b'{"error":{"message":"no such model"}}'
    raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    rec, _ = _drive([raw], stream=False)
    assert rec.status == "http_error" and rec.http_status == 404 and "no such model" in rec.error


def test_plain_exchange_skips_1xx_and_closes_on_extra_bytes():
    async def main() -> tuple[PlainExchange, FakeConn]:
        conn = FakeConn()
        ex = PlainExchange(conn)  # type: ignore[arg-type]
        conn.exchange = ex
        ex.data(
            b"HTTP/1.1 103 Early Hints\r\nLink: <x>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}junk"
        )
        await ex.fut
        return ex, conn

    ex, conn = VirtualClock().run(main)
    assert ex.status == 200 and ex.body == b"{}" and conn.released == [False]


# -- size cap and idle timeout ---------------------------------------------------------------------------

def test_an_endless_stream_stops_at_the_byte_cap():
    pieces = [SSE_HEAD] + [b"%x\r\n%s\r\n" % (len(_tok("x" * 50)), _tok("x" * 50)) * 20 for _ in range(1000)]
    rec, conn = _drive(pieces, max_bytes=100_000)
    assert rec.status == "malformed" and "larger than the cap of 100000 bytes" in rec.error
    per_read = len(pieces[1])
    assert 100_000 < int(rec.error.rsplit("after ", 1)[1].split()[0]) <= 100_000 + per_read
    assert conn.released == [False] and rec.est_completion_tokens <= 100_000 // 60


def test_a_stream_that_stalls_after_its_first_token_ends_at_the_idle_timeout():
    # token at 1 ms, token at 2 s, then silence: the idle timeout (5 s) fires at 7 s, not at the total (600 s)
    body = b"%x\r\n%s\r\n" % (len(_tok("a")), _tok("a"))
    clock = VirtualClock()

    async def main() -> tuple[RequestRecord, FakeConn]:
        conn = FakeConn()
        rec = RequestRecord(request_id=1, sent_ns=0)
        ex = ModelExchange(rec, clock.now, conn, True, 600.0, 5.0)  # type: ignore[arg-type]
        conn.exchange = ex
        ex.arm(30.0)
        await clock.sleep(0.001)
        ex.data(SSE_HEAD + body, clock.now())
        await clock.sleep(1.999)
        ex.data(body, clock.now())
        await ex.fut
        return rec, conn

    rec, conn = clock.run(main)
    assert rec.status == "timeout" and "idle timeout" in rec.error and "after 2 token(s)" in rec.error
    assert rec.end_ns == 7_000 * MS and rec.last_token_ns == 2_000 * MS and conn.released == [False]


def test_steady_tokens_slower_than_nothing_but_faster_than_idle_are_not_cut():
    body = b"%x\r\n%s\r\n" % (len(_tok("a")), _tok("a"))
    end = b"%x\r\n%s\r\n0\r\n\r\n" % (len(_tok("b", "stop")), _tok("b", "stop"))
    rec, _ = _drive([SSE_HEAD + body] + [body] * 5 + [end], idle_s=5.0, gaps=[0.001] + [4.0] * 6)
    assert rec.status == "ok" and rec.est_completion_tokens == 7  # 24 s in all, never 5 s quiet


# -- bodies that are not an answer ----------------------------------------------------------------------

def test_html_error_page_with_200_is_malformed_with_its_first_bytes():
    page = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s" % (len(page), page)
    rec, _ = _drive([raw])
    assert rec.status == "malformed" and "text/html" in rec.error and "502 Bad Gateway" in rec.error


def test_unrequested_gzip_body_is_malformed_with_its_first_bytes_in_hex():
    gz = gzip.compress(_tok("a", "stop") + DONE)
    raw = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(gz), gz))
    rec, _ = _drive([raw])
    assert rec.status == "malformed" and "Content-Encoding gzip" in rec.error and "1f 8b" in rec.error


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
])
def test_empty_200_is_malformed(head):
    rec, _ = _drive([head])
    assert rec.status == "malformed" and "empty body" in rec.error


def test_plain_text_200_is_malformed_with_the_text():
    raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\r\nhello world"
    rec, _ = _drive([raw])
    assert rec.status == "malformed" and "'hello world'" in rec.error


# -- SSE details ----------------------------------------------------------------------------------------

def test_content_after_done_is_not_counted():
    rec, _ = _drive([SSE_HEAD + _chunked(_tok("a"), _tok("b", "stop"), DONE, _tok("late"), _tok("later"))])
    assert rec.status == "ok" and rec.output_text == "ab" and rec.est_completion_tokens == 2
    assert rec.end_ns == rec.last_token_ns == 1 * MS


def test_content_after_done_in_later_reads_is_not_counted():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    rec, _ = _drive([head, _tok("a", "stop") + DONE, _tok("late")], lose=True)
    assert rec.status == "ok" and rec.output_text == "a" and rec.end_ns == rec.last_token_ns == 2 * MS


def test_unterminated_done_at_close_concludes():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 500\r\n\r\n"
    rec, conn = _drive([head, _tok("a", "stop") + b"data: [DONE]"], lose=True)
    assert rec.status == "ok" and rec.output_text == "a"


def test_bom_before_the_first_event_is_skipped():
    rec, _ = _drive([SSE_HEAD, _chunked(b"\xef\xbb\xbf" + _tok("a"), _tok("b", "stop"), DONE)])
    assert rec.status == "ok" and rec.output_text == "ab"


def test_bom_split_across_reads_is_skipped_by_the_parser():
    for cut in range(4):
        p = SSEParser()
        stream = b"\xef\xbb\xbfdata: x\n\n"
        evs = p.feed(stream[:cut]) + p.feed(stream[cut:])
        assert [e.data for e in evs] == [b"x"], cut
    # mid-stream: kept
    assert [e.data for e in SSEParser().feed(b"data: \xef\xbb\xbfx\n\n")] == [b"\xef\xbb\xbfx"]


def test_server_error_text_loses_terminal_escapes_and_control_characters():
    body = b'{"error":{"message":"\\u001b[31mboom\\u001b[0m\\r\\nline2\\u0007 \\u001b]0;pwned\\u0007end"}}'
    raw = b"HTTP/1.1 500 Internal\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    rec, _ = _drive([raw])
    assert rec.status == "http_error" and "\x1b" not in rec.error and "\x07" not in rec.error
    assert "boom" in rec.error and "pwned" not in rec.error and "line2" in rec.error
    raw = b"HTTP/1.1 502 Bad\r\nContent-Length: 12\r\n\r\n\x1b[2Jcleared!"
    rec, _ = _drive([raw])
    assert rec.error == "HTTP 502: cleared!"
