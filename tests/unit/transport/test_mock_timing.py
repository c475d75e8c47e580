"""Timing invariants of the HTTP path's exchange, pinned with scripted streams on virtual time.

``MockTransport`` plays a scripted response into the same ``ModelExchange`` the HTTP transport feeds from
its sockets, at exact virtual instants, so every expected time below is worked out by hand from the
script (no recomputation from the record itself).
"""

from __future__ import annotations

import asyncio

import pytest

from servelab.clock import VirtualClock
from servelab.records.schema import DISCONNECTED, HTTP_ERROR, MALFORMED, OK, TIMEOUT
from servelab.transport import mock
from servelab.transport.base import ModelRequest
from servelab.transport.mock import MockTransport

MS = 1_000_000


def _send(reply: mock.Reply, *, stream: bool = True, start_s: float = 0.0, **kw):
    clock = VirtualClock()

    async def main():
        await clock.sleep(start_s)
        t = MockTransport(lambda req: reply, clock, **kw)
        try:
            return await t.send(ModelRequest(request_id=9, messages=[{"role": "user", "content": "hi"}],
                                             max_tokens=8, stream=stream, intended_ns=clock.now()))
        finally:
            await t.aclose()

    return clock.run(main)


def test_latency_minus_ttft_is_the_sum_of_the_scripted_gaps():
    # TTFT 50 ms, then gaps of 10, 20 and 15 ms: tokens at 50, 60, 80 and 95 ms after a send at t = 1 s.
    rec = _send(
        mock.chat_stream(["a", "b", "c", "d"], ttft_s=0.05, gap_s=[0, 0.01, 0.02, 0.015]), start_s=1.0
    )
    assert rec.status == OK, rec.error
    t0 = 1000 * MS
    assert rec.sent_ns == t0
    assert rec.token_times_ns == [t0 + 50 * MS, t0 + 60 * MS, t0 + 80 * MS, t0 + 95 * MS]
    ttft, latency = rec.first_token_ns - rec.sent_ns, rec.last_token_ns - rec.sent_ns
    assert ttft == 50 * MS and latency == 95 * MS
    assert latency - ttft == (10 + 20 + 15) * MS
    assert rec.first_byte_ns == t0  # the role chunk (no token) came with the headers
    assert rec.output_text == "abcd" and rec.est_completion_tokens == 4 and rec.finish_reason == "stop"


def test_a_trailing_usage_chunk_does_not_extend_latency():
    usage = mock.usage_block(11, 4, cached=3)
    rec = _send(
        mock.chat_stream(["a", "b", "c", "d"], ttft_s=0.02, gap_s=0.005, usage=usage, usage_delay_s=0.2)
    )
    assert rec.status == OK, rec.error
    assert rec.last_token_ns == (20 + 3 * 5) * MS  # the last token, not the usage chunk
    assert rec.end_ns == (35 + 200) * MS  # the usage chunk and [DONE] end the response 200 ms later
    assert (rec.usage_prompt_tokens, rec.usage_completion_tokens, rec.usage_cached_tokens) == (11, 4, 3)


def test_reasoning_before_content_sets_the_first_token_not_the_first_content():
    rec = _send(mock.chat_stream(["r0", "r1", "c0"], ttft_s=0.01, gap_s=0.004, reasoning=2))
    assert rec.first_reasoning_ns == rec.first_token_ns == 10 * MS
    assert rec.first_content_ns == 18 * MS and rec.output_text == "c0"


def test_a_non_streamed_answer_has_every_time_at_its_arrival():
    rec = _send(mock.chat_json("hello world", delay_s=0.3, usage=mock.usage_block(5, 2)), stream=False)
    assert rec.status == OK, rec.error
    assert rec.first_byte_ns == rec.first_token_ns == rec.last_token_ns == rec.end_ns == 300 * MS
    assert rec.est_completion_tokens == 2 and rec.output_text == "hello world"


@pytest.mark.parametrize(
    "reply, status, http_status, end_ms, words",
    [
        (mock.error(503, "overloaded", delay_s=0.04), HTTP_ERROR, 503, 40, "overloaded"),
        (mock.reset(delay_s=0.03), DISCONNECTED, None, 30, "before the response"),
        (
            mock.reset(mock.chat_stream(["a", "b"], ttft_s=0.01, gap_s=0.01, done=False, finish=None)),
            DISCONNECTED,
            200,
            20,
            "mid-response",
        ),
        (mock.sse([(0.01, b"{not json")]), MALFORMED, 200, 10, "unparseable"),
        (
            mock.sse([(0.01, {"error": {"message": "out of KV cache"}})]),
            HTTP_ERROR,
            200,
            10,
            "out of KV cache",
        ),
        (
            mock.chat_stream([], usage=mock.usage_block(3, 0), usage_delay_s=0.01),
            MALFORMED,
            200,
            10,
            "zero tokens",
        ),
        (mock.hang(), TIMEOUT, None, 250, "first-token timeout"),
    ],
)
def test_each_failure_is_a_record_with_its_status_and_time(reply, status, http_status, end_ms, words):
    rec = _send(reply, first_token_s=0.25)
    assert (rec.status, rec.http_status) == (status, http_status)
    assert words in rec.error
    assert rec.end_ns == end_ms * MS


def test_cancelling_a_send_records_cancelled_and_reraises():
    clock = VirtualClock()
    t = MockTransport(lambda req: mock.hang(), clock)
    seen = []

    async def main():
        task = asyncio.ensure_future(t.send(ModelRequest(request_id=1, prompt="x", api="completions")))
        await clock.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        seen.append(clock.now())

    clock.run(main)
    assert seen == [500 * MS] and t.in_flight == 0 and t.max_in_flight == 1
