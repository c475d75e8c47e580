"""The in-process simulator and the simulator's HTTP front give the same record for the same request.

Every failure kind the simulated engine or its front can produce (a rejected body, a context overflow,
a KV cache too small before or after the first token; streamed and whole) is sent twice: through
``SimTransport`` on virtual time, and through ``HttpTransport`` to ``servelab sim serve``'s app over
loopback on the wall clock. Times differ (virtual vs wall); everything else in the record must not.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from servelab.clock import VirtualClock, WallClock
from servelab.config.models import TargetConfig
from servelab.records.schema import HTTP_ERROR, RequestRecord
from servelab.sim.engine import Engine
from servelab.sim.server import start_server
from servelab.sim.target import parse_sim_target
from servelab.transport.base import ModelRequest
from servelab.transport.http import HttpTransport
from servelab.transport.sim import SimTransport


def _deployment():
    d = parse_sim_target("sim")
    # A KV cache of 4 blocks x 16 tokens: a long answer is preempted and finally rejected mid-stream.
    return replace(d, memory=replace(d.memory, kv_blocks=4))


def _msg(n_words: int, role: str = "user") -> list[dict]:
    return [{"role": role, "content": " ".join(["w"] * n_words)}]


def _prompt(n_words: int) -> dict:
    # The completions API: the in-process transport gives the engine the bare text of a chat request,
    # the HTTP front adds its chat template's role tags (2 tokens here), so KV-sized cases use plain prompts.
    return {"api": "completions", "prompt": " ".join(["w"] * n_words)}


# name -> (request fields, expected status, expected http status, error text that must appear)
KINDS = {
    "context_overflow": (
        dict(messages=_msg(10), max_tokens=200_000),
        HTTP_ERROR,
        400,
        "maximum context length",
    ),
    "context_overflow_whole": (
        dict(messages=_msg(10), max_tokens=200_000, stream=False),
        HTTP_ERROR,
        400,
        "maximum context length",
    ),
    "max_tokens_zero": (
        dict(messages=_msg(3), max_tokens=0),
        HTTP_ERROR,
        400,
        "'max_tokens' must be at least 1",
    ),
    "min_over_max": (dict(messages=_msg(3), max_tokens=2, min_tokens=9), HTTP_ERROR, 400, "'min_tokens' (9)"),
    "bad_role": (dict(messages=_msg(3, role="robot"), max_tokens=2), HTTP_ERROR, 400, "messages[0].role"),
    "bad_temperature": (
        dict(messages=_msg(3), max_tokens=2, temperature=5.0),
        HTTP_ERROR,
        400,
        "temperature",
    ),
    "kv_full_mid_stream": (
        dict(**_prompt(20), max_tokens=100, ignore_eos=True),
        HTTP_ERROR,
        200,
        "error in stream: request needs 65 tokens of KV cache but the cache holds 64",
    ),
    "kv_full_before_first_token": (
        dict(**_prompt(80), max_tokens=10, ignore_eos=True),
        HTTP_ERROR,
        200,
        "error in stream: request needs 80 tokens of KV cache",
    ),
    "kv_full_whole": (
        dict(**_prompt(20), max_tokens=100, ignore_eos=True, stream=False),
        HTTP_ERROR,
        500,
        "HTTP 500: ",
    ),
    "context_overflow_completions": (
        dict(**_prompt(10), max_tokens=200_000),
        HTTP_ERROR,
        400,
        "However, you requested 200010 tokens (10 in the prompt",
    ),
}

FIELDS = ("request_id", "status", "http_status", "error", "finish_reason",
          "usage_prompt_tokens", "usage_completion_tokens", "usage_cached_tokens", "output_text",
          "requested_output_tokens")


def _requests() -> list[ModelRequest]:
    return [ModelRequest(request_id=i, **kw) for i, (kw, *_) in enumerate(KINDS.values())]


def _shape(r: RequestRecord) -> dict:
    out = {f: getattr(r, f) for f in FIELDS}
    # Over the wall clock the front writes every token produced since it last woke as one chunk, so the
    # number of token-carrying chunks depends on timing; the tokens themselves (one word each) do not.
    out["tokens"] = len(r.output_text.split())
    out["chunks_set"] = bool(r.token_times_ns)
    out["times_set"] = tuple(getattr(r, f) is not None for f in ("sent_ns", "first_byte_ns", "first_token_ns",
                                                                  "last_token_ns", "end_ns"))
    return out


def _in_process() -> list[RequestRecord]:
    clock = VirtualClock()

    async def main():
        t = SimTransport(_deployment(), clock, seed=0)
        try:
            return [await t.send(r) for r in _requests()]
        finally:
            await t.aclose()

    return clock.run(main)


def _over_http() -> list[RequestRecord]:
    clock = WallClock(use_uvloop=False)

    async def main():
        d = _deployment()
        async with await start_server(Engine(d, clock, seed=0), d, host="127.0.0.1", port=0) as srv:
            t = HttpTransport(TargetConfig(url=srv.base_url), clock, concurrency=1)
            try:
                return [await t.send(r) for r in _requests()]
            finally:
                await t.aclose()

    return clock.run(main)


@pytest.fixture(scope="module")
def both() -> tuple[list[RequestRecord], list[RequestRecord]]:
    return _in_process(), _over_http()


@pytest.mark.parametrize("kind", list(KINDS))
def test_same_record_in_process_and_over_http(both, kind):
    i = list(KINDS).index(kind)
    sim, http = both[0][i], both[1][i]
    _, status, http_status, text = KINDS[kind]
    assert (sim.status, sim.http_status) == (status, http_status), sim.error
    if text is not None:
        assert text in sim.error
    assert _shape(sim) == _shape(http)


def test_mid_stream_failure_keeps_the_tokens_it_streamed(both):
    sim = both[0][list(KINDS).index("kv_full_mid_stream")]
    # A 20-token prompt; the cache holds 64 tokens: 65 - 20 = 45 tokens were produced (and streamed) before
    # the request could no longer be placed.
    assert len(sim.token_times_ns) == sim.est_completion_tokens == 45
    assert (
        sim.first_token_ns
        == sim.token_times_ns[0]
        < sim.token_times_ns[-1]
        == sim.last_token_ns
        <= sim.end_ns
    )
    assert len(sim.output_text.split()) == 45
    assert sim.usage_completion_tokens is None and sim.finish_reason is None
