"""select (window, sample, cap) and retime (speed, target rate) on hand-built traces."""

from __future__ import annotations

import pytest

from servelab.errors import ConfigError, TraceError
from servelab.workload.traces import TraceRequest, TraceSession, build_trace, retime, select, trace_stats

S = 1_000_000_000


def _flat(times_s: list[float]) -> object:
    return build_trace(
        [TraceRequest(round(t * S), 100 + i, 10) for i, t in enumerate(times_s)], format="jsonl"
    )


def _sessions() -> object:
    reqs = [
        TraceRequest(1 * S, 10, 1, session_id="a", turn=0),
        TraceRequest(5 * S, 11, 1, session_id="a", turn=1, think_time_s=2.0),
        TraceRequest(3 * S, 20, 1, session_id="a/sub", turn=0, parent_session_id="a"),
        TraceRequest(4 * S, 30, 1, session_id="b", turn=0),
        TraceRequest(9 * S, 40, 1),
    ]
    info = {"a/sub": TraceSession("a/sub", [], parent_session_id="a", label="Explore", spawn_after_turn=0)}
    return build_trace(reqs, format="jsonl", session_info=info)


def test_window_rebases_offsets() -> None:
    tr = _flat([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    w = select(tr, start_s=2, duration_s=3)
    assert [r.t_offset_ns for r in w.requests] == [0, 1 * S, 2 * S]
    assert [r.input_tokens for r in w.requests] == [102, 103, 104]
    assert [r.t_offset_ns for r in select(tr, duration_s=2).requests] == [0, 1 * S]  # no start: no shift
    assert tr.requests[2].t_offset_ns == 2 * S  # input untouched


def test_window_keeps_sessions_whole_with_subagents() -> None:
    tr = _sessions()
    # only session a starts in [0, 2): its later turn and sub-agent stay
    w = select(tr, start_s=0, duration_s=2)
    assert sorted(r.session_id for r in w.requests) == ["a", "a", "a/sub"]
    assert w.sessions["a/sub"].label == "Explore" and w.sessions["a/sub"].parent_session_id == "a"
    w2 = select(tr, start_s=2, duration_s=10)
    assert [r.session_id for r in w2.requests] == ["b", None]
    assert [r.t_offset_ns for r in w2.requests] == [2 * S, 7 * S]


def test_sample_is_seeded_and_keeps_times() -> None:
    tr = _flat([float(i) for i in range(20)])
    a = select(tr, sample=0.25, seed=1)
    assert len(a) == 5
    assert [r.t_offset_ns for r in a.requests] == [
        r.t_offset_ns for r in select(tr, sample=0.25, seed=1).requests
    ]
    assert all(r.t_offset_ns == (r.input_tokens - 100) * S for r in a.requests)  # times not moved
    seeds = {tuple(r.input_tokens for r in select(tr, sample=0.25, seed=s).requests) for s in range(5)}
    assert len(seeds) > 1
    assert len(select(_sessions(), sample=0.5, seed=0).sessions) in (0, 1, 2, 3)  # sessions whole
    for seed in range(6):
        kept = select(_sessions(), sample=0.5, seed=seed)
        if "a" in kept.sessions:
            assert len(kept.sessions["a"].requests) == 2 and "a/sub" in kept.sessions


def test_max_requests_takes_whole_units_in_time_order() -> None:
    assert [r.input_tokens for r in select(_flat([0, 1, 2, 3]), max_requests=2).requests] == [100, 101]
    tr = _sessions()
    assert [r.session_id for r in select(tr, max_requests=3).requests] == ["a", "a/sub", "a"]
    assert len(select(tr, max_requests=1)) == 3  # the first unit is kept even when larger than the cap


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [({"sample": 0}, ConfigError), ({"sample": 1.5}, ConfigError), ({"start_s": -1}, ConfigError),
     ({"duration_s": 0}, ConfigError), ({"max_requests": 0}, ConfigError),
     ({"start_s": 100}, TraceError)],
)
def test_select_bad_arguments(kwargs: dict, exc: type) -> None:
    with pytest.raises(exc):
        select(_flat([0, 1, 2]), **kwargs)


def test_untimed_trace_cannot_be_windowed_or_retimed() -> None:
    tr = build_trace([TraceRequest(0, 5, 5, session_id="q", prompt="hi")], format="mt-bench", timed=False)
    with pytest.raises(TraceError, match="no timestamps"):
        select(tr, start_s=0)
    with pytest.raises(TraceError, match="no timestamps"):
        retime(tr, speed=2)
    assert len(select(tr, sample=1.0)) == 1


def test_retime_speed_scales_offsets_and_think_times() -> None:
    tr = _sessions()
    fast = retime(tr, speed=2)
    assert [r.t_offset_ns for r in fast.requests] == [S // 2, 3 * S // 2, 2 * S, 5 * S // 2, 9 * S // 2]
    assert fast.sessions["a"].requests[1].think_time_s == 1.0
    keep_think = retime(tr, speed=2, scale_think=False)
    assert keep_think.sessions["a"].requests[1].think_time_s == 2.0
    slow = retime(tr, speed=0.5)
    assert slow.requests[-1].t_offset_ns == 18 * S


def test_retime_to_rate_keeps_shape() -> None:
    tr = _flat([0, 1, 3, 6])  # 3 gaps over 6 s: 0.5 req/s
    before = trace_stats(tr)
    assert before["rate_rps"] == pytest.approx(0.5)
    out = retime(tr, rate=1.0)
    assert [r.t_offset_ns for r in out.requests] == [0, S // 2, 3 * S // 2, 3 * S]
    after = trace_stats(out)
    assert after["rate_rps"] == pytest.approx(1.0)
    assert after["interarrival_cv"] == pytest.approx(before["interarrival_cv"])
    assert out.metadata["retime"]["speed"] == pytest.approx(2.0)


@pytest.mark.parametrize("kwargs", [{}, {"speed": 2, "rate": 1}, {"speed": 0}, {"speed": -1}, {"rate": 0}])
def test_retime_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        retime(_flat([0, 1]), **kwargs)


def test_retime_rate_needs_a_span() -> None:
    with pytest.raises(TraceError, match="undefined"):
        retime(_flat([3, 3]), rate=1)
