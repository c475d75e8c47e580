"""trace_stats on hand-built traces, prefix reuse against a brute-force check, the KS helper."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.workload.traces import (
    TraceRequest,
    build_trace,
    interarrival_gaps,
    ks_interarrival,
    load_trace,
    prefix_reuse,
    trace_stats,
)
from servelab.workload.traces.stats import stats_rows

S = 1_000_000_000
DATA = Path(__file__).parents[3] / "data" / "traces"
SHARED = Path(__file__).parents[5] / "shared" / "traces"


def test_stats_on_hand_built_trace() -> None:
    reqs = [TraceRequest(t * S, n_in, n_out) for t, n_in, n_out in
            [(0, 100, 10), (1, 200, 20), (2, 300, 30), (4, 400, 40)]]
    st = trace_stats(build_trace(reqs, format="jsonl"))
    assert st["requests"] == 4 and st["sessions"] == 0 and st["duration_s"] == 4.0
    assert st["rate_rps"] == pytest.approx(0.75)  # 3 gaps in 4 s
    # gaps 1, 1, 2: mean 4/3, population std sqrt(2)/3 -> CV 1/(2 sqrt 2)
    assert st["interarrival_cv"] == pytest.approx(0.3535534, rel=1e-6)
    assert st["input_tokens"] == {"mean": 250.0, "p50": 250.0, "p90": 370.0, "p99": 397.0, "max": 400.0,
                                  "total": 1000.0}
    assert st["output_tokens"]["p50"] == 25.0
    assert st["prefix_reuse"] is None and st["think_time_s"] is None
    labels = dict(stats_rows(st))
    assert labels["rate"] == "0.75 req/s" and labels["requests"] == "4"


def test_prefix_reuse_is_chained_and_counts_partial_blocks() -> None:
    b = 4
    reqs = [
        TraceRequest(0, 12, 1, hash_ids=[1, 2, 3], block_tokens=b),   # all new
        # 1,2 reused (8 tokens); 9 new (2 tokens)
        TraceRequest(1, 10, 1, hash_ids=[1, 2, 9], block_tokens=b),
        # 2 after 7: a different prefix, not reused
        TraceRequest(2, 8, 1, hash_ids=[7, 2], block_tokens=b),
        TraceRequest(3, 6, 1, hash_ids=[1, 2, 9], block_tokens=b),    # 4 + last block cut to 2 tokens: 6
        TraceRequest(4, 5, 1),                                        # no hashes: counts in the denominator
    ]
    got = prefix_reuse(build_trace(reqs, format="jsonl"))
    assert got == {"reusable_tokens": 14.0, "hashed_tokens": 36.0, "input_tokens": 41.0,
                   "fraction": pytest.approx(14 / 41)}


def test_prefix_reuse_session_scope() -> None:
    reqs = [
        TraceRequest(0, 8, 1, session_id="a", hash_ids=[1, 2], block_tokens=4),
        TraceRequest(1, 8, 1, session_id="b", hash_ids=[1, 2], block_tokens=4),
        TraceRequest(2, 8, 1, session_id="a/s", parent_session_id="a", hash_ids=[1, 5], block_tokens=4),
    ]
    tr = build_trace(reqs, format="jsonl")
    assert prefix_reuse(tr)["reusable_tokens"] == 12.0          # b reuses both blocks, a/s one
    assert prefix_reuse(tr, scope="session")["reusable_tokens"] == 4.0  # only a/s (rooted at a) reuses


def _brute_force_reuse(reqs: list[TraceRequest], block: int) -> tuple[int, int]:
    """Longest common hash-id prefix with any earlier request, by direct comparison."""
    reusable = total = 0
    for k, r in enumerate(reqs):
        total += r.input_tokens
        best = 0
        for q in reqs[:k]:
            n = 0
            while n < min(len(q.hash_ids), len(r.hash_ids)) and q.hash_ids[n] == r.hash_ids[n]:
                n += 1
            best = max(best, n)
        reusable += sum(min(block, max(0, r.input_tokens - i * block)) for i in range(best))
    return reusable, total


def test_mooncake_slice_reuse_matches_brute_force() -> None:
    tr = load_trace(DATA / "mooncake_head.jsonl", "mooncake")
    reusable, total = _brute_force_reuse(tr.requests, 512)
    got = prefix_reuse(tr)
    assert got["reusable_tokens"] == reusable and got["input_tokens"] == total
    assert 0.05 < got["fraction"] < 0.1  # the first minute reuses little: the cache is still cold
    assert trace_stats(tr)["prefix_reuse"] == pytest.approx(reusable / total)


def test_claude_code_slice_stats() -> None:
    tr = load_trace(DATA / "claude_code", "claude-code")
    st = trace_stats(tr)
    assert st["sessions"] == 2 and st["subagent_sessions"] == 1 and st["requests"] == 11
    assert st["stop_reasons"] == {"tool_use": 10, "end_turn": 1}
    assert st["prefix_reuse_within_session"] == pytest.approx(st["prefix_reuse"])  # ids distinct per file
    assert st["prefix_reuse"] > 0.6
    # think time of turns after the first: parent 209, 8, 8; sub-agent 4, 5, 3; trace_0007 12, 10
    assert st["think_time_s"]["p50"] == pytest.approx(8.0)


@pytest.mark.skipif(not SHARED.is_dir(), reason="the full public traces are not beside the project")
def test_full_traces_match_their_readme() -> None:
    az = trace_stats(load_trace(SHARED / "azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "azure"))
    assert az["requests"] == 19366
    assert az["rate_rps"] == pytest.approx(5.5, abs=0.05) and az["interarrival_cv"] == pytest.approx(
        1.09, abs=0.01
    )
    assert az["input_tokens"]["p50"] == 1020 and az["output_tokens"]["p99"] == pytest.approx(601, abs=1)
    mc = trace_stats(load_trace(SHARED / "mooncake_fast25/synthetic_trace.jsonl", "mooncake"))
    assert mc["requests"] == 3993 and mc["prefix_reuse"] == pytest.approx(0.65, abs=0.01)
    assert mc["interarrival_cv"] == pytest.approx(1.01, abs=0.01)


def test_ks_interarrival() -> None:
    rng = np.random.default_rng(0)
    a = rng.exponential(1.0, 2000)
    same = ks_interarrival(a, a)
    assert same.statistic == 0.0 and same.pvalue == 1.0 and same.n_a == 2000
    assert ks_interarrival(a, a * 3).pvalue < 1e-6
    assert ks_interarrival(a, a * 4, normalize=True).statistic == pytest.approx(0.0, abs=1e-12)
    disjoint = ks_interarrival([1.0, 2.0], [5.0, 6.0, 7.0])
    assert disjoint.statistic == 1.0
    other = ks_interarrival(rng.exponential(1.0, 2000), a)
    assert other.statistic < 0.06 and other.pvalue > 0.001
    with pytest.raises(ValueError):
        ks_interarrival([], [1.0])


def test_interarrival_gaps_sorts() -> None:
    assert interarrival_gaps([3 * S, 0, S]).tolist() == [1.0, 2.0]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.lists(st.integers(0, 3), max_size=6), st.integers(0, 30)), min_size=1, max_size=12)
)
def test_prefix_reuse_equals_brute_force_property(rows: list[tuple[list[int], int]]) -> None:
    reqs = [TraceRequest(i, n, 1, hash_ids=ids, block_tokens=4) for i, (ids, n) in enumerate(rows)]
    reusable, total = _brute_force_reuse(reqs, 4)
    got = prefix_reuse(build_trace(reqs, format="jsonl"))
    assert got["reusable_tokens"] == reusable and got["input_tokens"] == total
