"""Trace replay on virtual time against a scripted transport: schedule, prompts, sessions, sub-agents,
cancellation and the replay summary."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from servelab.bench.plan import plan_for
from servelab.bench.replay import replay_work, trace_replay_summary
from servelab.clock import NS_PER_S, VirtualClock
from servelab.config.models import ReplayWorkloadConfig, RunConfig
from servelab.errors import ConfigError
from servelab.load.runner import Runner
from servelab.records.schema import CANCELLED, OK, RequestRecord
from servelab.transport import mock
from servelab.transport.base import ModelRequest
from servelab.transport.mock import MockTransport
from servelab.workload.traces import load_trace
from servelab.workload.traces.units import prepare_trace, replay_units

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"
LATENCY_S = 0.5


class Sink:
    def __init__(self) -> None:
        self.requests: list[RequestRecord] = []
        self.sessions: list = []

    def request(self, r: RequestRecord) -> None:
        self.requests.append(r)

    def session(self, s) -> None:
        self.sessions.append(s)


def scripted(clock: VirtualClock, hang: bool = False) -> MockTransport:
    """The in-library twin: every request takes LATENCY_S (or hangs) and streams max_tokens words; the server
    counts one token per prompt word."""

    def handler(req: ModelRequest) -> mock.Reply:
        if hang:
            return mock.hang()
        usage = mock.usage_block(len(req.text().split()), req.max_tokens, cached=0)
        tokens = ["answer"] + [" answer"] * (req.max_tokens - 1)
        return mock.chat_stream(tokens, ttft_s=LATENCY_S, usage=usage)

    return MockTransport(handler, clock, tokens=lambda text: len(text.split()))


def _cfg(path: Path | str, fmt: str, **w) -> RunConfig:
    return RunConfig.model_validate({"workload": {"kind": "replay", "path": str(path), "format": fmt, **w},
                                     "telemetry": {"enabled": False}})


def _replay(cfg: RunConfig, *, hang: bool = False, stop_after_s: float | None = None):
    clock = VirtualClock()
    sink = Sink()
    state: dict = {}

    async def main():
        tr = scripted(clock, hang=hang)
        work = await replay_work(cfg, tr, clock, sink)
        runner = Runner(clock, plan_for(cfg, work.count_hint, work.offsets_ns, work.extra_drain_s))
        if stop_after_s is not None:
            clock_task = asyncio.ensure_future(clock.sleep(stop_after_s))
            clock_task.add_done_callback(lambda _: runner.request_stop())
        outcome = await runner.run(work.job)
        state.update(work=work, outcome=outcome, transport=tr)
        return work.summarize(sink, outcome)

    summary = clock.run(main)
    return summary, sink, state


def _jsonl(tmp_path: Path, rows: list[dict]) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    return p


def test_timed_trace_sends_each_request_at_its_scaled_offset(tmp_path):
    rows = [{"t": 10.0 + t, "input_tokens": n, "output_tokens": o}
            for t, n, o in ((0.0, 5, 3), (1.0, 7, 0), (3.0, 4, 9), (3.5, 6, 2))]
    summary, sink, state = _replay(_cfg(_jsonl(tmp_path, rows), "jsonl", speed=2))
    calls = state["transport"].calls
    assert [t for t, _ in calls] == [0, NS_PER_S // 2, 3 * NS_PER_S // 2, 7 * NS_PER_S // 4]
    assert [r.intended_ns for _, r in calls] == [t for t, _ in calls]
    assert [len(r.text().split()) for _, r in calls] == [5, 7, 4, 6]
    # the trace's output length, forced; a recorded 0 still asks for one token
    assert [(r.max_tokens, r.min_tokens, r.ignore_eos) for _, r in calls] == [
        (3, 3, True), (1, 1, True), (9, 9, True), (2, 2, True)]
    rep = summary["replay"]
    assert rep["requests"] == rep["trace_requests"] == 4
    assert rep["trace_rate"] == pytest.approx(3 / 1.75) and rep["achieved_rate"] == pytest.approx(3 / 1.75)
    assert rep["lag_ms_p99"] == 0 and rep["ks"]["statistic"] == 0
    assert state["outcome"].stopped_by == "schedule" and len(sink.requests) == 4


def test_rate_compresses_time_and_ignore_eos_can_be_off(tmp_path):
    rows = [{"t": t, "input_tokens": 3, "output_tokens": 4} for t in (0.0, 2.0, 3.0, 8.0)]
    summary, _, state = _replay(_cfg(_jsonl(tmp_path, rows), "jsonl", rate=3.0, ignore_eos=False))
    calls = state["transport"].calls
    assert [t for t, _ in calls] == [0, 2 * NS_PER_S // 8, 3 * NS_PER_S // 8, NS_PER_S]  # span 8 s -> 1 s
    assert all(r.min_tokens is None and not r.ignore_eos for _, r in calls)
    assert summary["replay"]["achieved_rate"] == pytest.approx(3.0)


def test_equal_hash_ids_give_identical_prompt_blocks(tmp_path):
    rows = [{"t": 0.0, "input_tokens": 8, "output_tokens": 1, "hash_ids": [1, 2], "block_tokens": 4},
            {"t": 1.0, "input_tokens": 10, "output_tokens": 1, "hash_ids": [1, 3, 4], "block_tokens": 4},
            {"t": 2.0, "input_tokens": 8, "output_tokens": 1, "hash_ids": [1, 2], "block_tokens": 4}]
    _, _, state = _replay(_cfg(_jsonl(tmp_path, rows), "jsonl"))
    words = [r.text().split() for _, r in state["transport"].calls]
    assert [len(w) for w in words] == [8, 10, 8]
    assert words[0] == words[2]  # same ids: the whole prompt repeats
    assert words[1][:4] == words[0][:4] and words[1][4:8] != words[0][4:8]  # shared first block only


def test_window_sample_and_untimed_speed_errors(tmp_path):
    rows = [{"t": float(t), "input_tokens": 2, "output_tokens": 1} for t in range(10)]
    w = ReplayWorkloadConfig(path=str(_jsonl(tmp_path, rows)), format="jsonl", start_s=3, duration_s=4)
    tr = prepare_trace(w)
    assert [r.t_offset_ns for r in tr.requests] == [0, NS_PER_S, 2 * NS_PER_S, 3 * NS_PER_S]
    with pytest.raises(ConfigError, match="no timestamps"):
        prepare_trace(
            ReplayWorkloadConfig(path=str(DATA / "mt_bench_slice.jsonl"), format="mt-bench", speed=2)
        )
    with pytest.raises(ValueError, match="either speed or rate"):
        ReplayWorkloadConfig(path="x", format="azure", speed=2, rate=3)


def test_session_turns_follow_think_times_after_each_answer(tmp_path):
    rows = [{"t": 0.0, "input_tokens": 3, "output_tokens": 2, "session_id": "a"},
            {"t": 5.0, "input_tokens": 6, "output_tokens": 2, "session_id": "a", "think_time_s": 2.0},
            {"t": 0.25, "input_tokens": 4, "output_tokens": 2, "session_id": "b"},
            {"t": 9.0, "input_tokens": 8, "output_tokens": 2, "session_id": "b"}]  # no think time: its offset
    summary, sink, state = _replay(_cfg(_jsonl(tmp_path, rows), "jsonl"))
    sent = {(r.session_id, r.turn): t for t, r in state["transport"].calls}
    half = NS_PER_S // 2
    assert sent == {(0, 0): 0, (0, 1): half + 2 * NS_PER_S, (1, 0): NS_PER_S // 4, (1, 1): 9 * NS_PER_S}
    assert sorted((s.session_id, s.status, s.turns) for s in sink.sessions) == [(0, "ok", 2), (1, "ok", 2)]
    assert summary["replay"]["requests"] == 4


def test_claude_code_subagent_starts_after_its_spawning_turn_as_in_the_trace():
    path = DATA / "claude_code" / "trace_0277.json"
    tr = load_trace(path, "claude-code")
    parent = tr.sessions["trace_0277"]
    (sub,) = [s for s in tr.sessions.values() if s.parent_session_id == "trace_0277"]
    assert sub.spawn_after_turn == 0
    _, sink, state = _replay(_cfg(path, "claude-code"))
    calls = state["transport"].calls
    lat = round(LATENCY_S * NS_PER_S)
    p0 = parent.requests[0]
    sub_at = lat + sub.start_ns - p0.t_offset_ns - round(p0.api_time_s * NS_PER_S)
    sub_sends = [t for t, r in calls if r.session_id == 1]
    assert sub_sends[0] == sub_at
    # its later turns: each its think time after the answer before
    gaps = [b - a - lat for a, b in zip(sub_sends, sub_sends[1:], strict=False)]
    assert gaps == [round(r.think_time_s * NS_PER_S) for r in sub.requests[1:]]
    # the parent goes on beside it; the job (and the run) ends only when both have
    parent_sends = [t for t, r in calls if r.session_id == 0]
    assert parent_sends[1] == lat + round(parent.requests[1].think_time_s * NS_PER_S)
    assert len(calls) == len(tr) and state["outcome"].cancelled_in_flight == 0
    assert {s.profile for s in sink.sessions} == {"replay:claude-code", "Explore"}
    # prompts grow as in the trace: each turn's input length, words for tokens
    assert [len(r.text().split()) for _, r in calls if r.session_id == 0] == [
        r.input_tokens for r in parent.requests
    ]


def test_mt_bench_conversation_grows_with_earlier_turns_and_answers():
    cfg = _cfg(
        DATA / "mt_bench_slice.jsonl", "mt-bench", rate=1.0, max_requests=2, options={"output_tokens": 5}
    )
    _, _, state = _replay(cfg)
    (t0, first), (t1, second) = state["transport"].calls
    q = load_trace(DATA / "mt_bench_slice.jsonl", "mt-bench").requests
    assert [m["role"] for m in second.messages] == ["user", "assistant", "user"]
    assert second.messages[0]["content"] == first.messages[0]["content"]
    assert second.messages[1]["content"] == " ".join(["answer"] * 5)
    assert t1 - t0 == round(LATENCY_S * NS_PER_S)  # untimed: no think time recorded, so right after
    assert second.est_prompt_tokens == sum(len(m["content"].split()) for m in second.messages)
    assert {first.messages[0]["content"], second.messages[2]["content"]} <= {r.prompt for r in q}


def test_untimed_trace_without_rate_runs_closed_loop(tmp_path):
    cfg = RunConfig.model_validate({"workload": {"kind": "replay", "path": str(DATA / "mt_bench_slice.jsonl"),
                                                 "format": "mt-bench", "max_requests": 4},
                                    "load": {"concurrency": 1}})
    summary, sink, state = _replay(cfg)
    assert state["work"].offsets_ns is None
    sends = [t for t, _ in state["transport"].calls]
    lat = round(LATENCY_S * NS_PER_S)
    assert sends == [0, lat, 2 * lat, 3 * lat]  # one user: each turn after the one before
    assert summary["replay"]["trace_rate"] is None and summary["replay"]["ks"] is None


def test_interrupt_records_cancelled_requests_and_sessions(tmp_path):
    rows = [{"t": 0.0, "input_tokens": 3, "output_tokens": 2, "session_id": "a"},
            {"t": 1.0, "input_tokens": 3, "output_tokens": 2}]
    _, sink, state = _replay(_cfg(_jsonl(tmp_path, rows), "jsonl"), hang=True, stop_after_s=5.0)
    assert sorted(r.status for r in sink.requests) == [CANCELLED, CANCELLED]
    assert [s.status for s in sink.sessions] == [CANCELLED]
    assert state["outcome"].stopped_by == "interrupt"


def test_replay_units_group_sub_agents_and_rebase():
    tr = load_trace(DATA / "claude_code", "claude-code", stagger_s=100.0)
    units = replay_units(tr)
    assert len(units) == 2 and [u.start_ns for u in units] == [0, 100 * NS_PER_S]
    assert sum(len(u.offsets_ns) for u in units) == len(tr)
    assert units[1].session is not None and units[1].session.session_id == "trace_0277"


def test_replay_summary_measures_lag_rate_and_cached_fraction():
    tr = load_trace(DATA / "mooncake_head.jsonl", "mooncake")
    units = replay_units(tr)[:3]
    recs = [
        RequestRecord(
            request_id=i,
            status=OK,
            intended_ns=o,
            sent_ns=o + lag,
            usage_prompt_tokens=100,
            usage_cached_tokens=c,
        )
        for i, (o, lag, c) in enumerate(
            zip((0, NS_PER_S, 3 * NS_PER_S), (0, 2_000_000, 0), (0, 50, 10), strict=True)
        )
    ]
    rep = trace_replay_summary(tr, units, recs, speed=1.0)
    assert rep["trace_requests"] == 3 and rep["requests"] == 3
    assert rep["achieved_rate"] == pytest.approx(2 / 3.0)
    assert 1.9 < rep["lag_ms_p99"] <= 2.0  # p99 of (0, 0, 2) ms, linear interpolation
    assert rep["cached_fraction"] == pytest.approx(0.2)
    assert rep["trace_prefix_reuse"] == pytest.approx(0.061875, abs=1e-5)


def test_plan_for_prefers_the_work_schedule_and_adds_the_drain():
    cfg = RunConfig.model_validate({"load": {"rate": 5.0}, "limits": {"drain_timeout_s": 10}})
    plan = plan_for(cfg, 3, [0, 7, 9], extra_drain_s=30.0)
    assert list(plan.offsets_ns) == [0, 7, 9] and plan.drain_timeout_s == 40.0
    assert _cfg("x", "azure").limits.requests is None  # a replay ends with its trace, not at 200


def test_the_progress_bar_of_a_replay_knows_its_end():
    # a replay has no request limit: it ends with its trace, so the bar's percent and time left come from
    # the trace's request count (200 in the mooncake slice; 50 with max_requests 50)
    from servelab.bench.run import progress_extent

    assert progress_extent(_cfg(DATA / "mooncake_head.jsonl", "mooncake")) == (200, None, None, "replay")
    head50 = _cfg(DATA / "mooncake_head.jsonl", "mooncake", max_requests=50)
    assert progress_extent(head50) == (50, None, None, "replay")
    plain = RunConfig.model_validate({"telemetry": {"enabled": False}})
    assert progress_extent(plain) == (200, None, None, "run")
    # an agent run ends after its sessions (--sessions 16 --max-sessions 16: 16 of them)
    agent = RunConfig.model_validate({"workload": {"kind": "agent", "profile": "coding-agent"},
                                      "load": {"concurrency": 16}, "limits": {"sessions": 16}})
    assert progress_extent(agent) == (None, 16, None, "agent run")


def test_prompts_are_built_ahead_of_their_send_time_so_building_them_adds_no_lag(tmp_path, monkeypatch):
    """A prompt block costs 10 ms of (scripted, virtual) CPU time to build: a 128k-token prompt's blocks cost
    ~35 ms for real when new. Built between the due time and the send, that cost was every request's
    schedule lag (35 ms on the first turn of a Claude Code replay over HTTP, INVALID at a 10 ms limit).
    Built ahead (the first unit before the run, the next unit once the one before it has sent, a session's
    next turn during its think time) the lag is 0 and each prompt is built once, with the same text."""
    from servelab.workload.traces import prompts

    clock_box: list[VirtualClock] = []
    real = prompts.block_text
    built: list[int] = []

    def costly(h: int, b: int, seed: int = 0) -> str:
        built.append(h)
        if clock_box:
            clock_box[0]._advance(10 * NS_PER_S // 1000)
        return real.__wrapped__(h, b, seed)

    monkeypatch.setattr(prompts, "block_text", costly)
    rows = [{"t": 0.0, "input_tokens": 9, "output_tokens": 2, "session_id": "a", "hash_ids": [1, 2],
             "block_tokens": 4},
            {"t": 5.0, "input_tokens": 13, "output_tokens": 2, "session_id": "a", "think_time_s": 2.0,
             "hash_ids": [1, 2, 3], "block_tokens": 4},
            {"t": 3.0, "input_tokens": 8, "output_tokens": 2, "session_id": "b", "hash_ids": [7, 8],
             "block_tokens": 4},
            {"t": 4.0, "input_tokens": 4, "output_tokens": 2, "hash_ids": [9], "block_tokens": 4}]
    cfg = _cfg(_jsonl(tmp_path, rows), "jsonl")
    clock = VirtualClock()
    clock_box.append(clock)
    sink = Sink()

    async def main():
        tr = scripted(clock)
        work = await replay_work(cfg, tr, clock, sink)
        runner = Runner(clock, plan_for(cfg, work.count_hint, work.offsets_ns, work.extra_drain_s))
        outcome = await runner.run(work.job)
        return tr, work.summarize(sink, outcome)

    tr, summary = clock.run(main)
    assert len(tr.calls) == 4
    assert [sent - r.intended_ns for sent, r in tr.calls] == [0, 0, 0, 0]
    assert summary["replay"]["lag_ms_p99"] == 0
    # hand-worked: session a turn 0 at 0, its turn 1 2 s after its answer (0.5 s), b at 3 s, the request at 4
    assert sorted(r.intended_ns - tr.calls[0][1].intended_ns for _, r in tr.calls) == [
        0, 5 * NS_PER_S // 2, 3 * NS_PER_S, 4 * NS_PER_S]
    assert sorted(built) == [1, 1, 2, 2, 3, 7, 8, 9]  # once per block of each prompt, nothing built twice
    # the text is the one request_prompt gives (blocks, then filler keyed by the request id)
    monkeypatch.setattr(prompts, "block_text", real)
    trace = prepare_trace(cfg.workload, cfg.seed)
    by_len = {r.input_tokens: r for r in trace.requests}
    for _, r in tr.calls:
        want = prompts.request_prompt(by_len[r.est_prompt_tokens], seed=cfg.seed, tail_key=r.request_id)
        assert r.text() == want
