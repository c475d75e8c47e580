"""The decision advice names load levels the way people read them: 'up to level ~16', 'beyond (levels
32-64)', not 'up to ~16 level' (the README's max_num_seqs sweep printed that); agent sweeps keep their
sessions: 'up to ~16 sessions'."""

from __future__ import annotations

from servelab.analysis.decision import PointData, decision_table


def _pts(agent: bool) -> list[PointData]:
    # max_num_seqs=16 gives the most throughput up to 16 users, max_num_seqs=64 beyond (the README sweep)
    tput = {("max_num_seqs=16", 4): 451.0, ("max_num_seqs=16", 16): 1461.0, ("max_num_seqs=16", 64): 1473.0,
            ("max_num_seqs=64", 4): 450.0, ("max_num_seqs=64", 16): 1460.0, ("max_num_seqs=64", 64): 3242.0}
    out = []
    for (t, lv), v in tput.items():
        s = {"throughput": {"output_tokens_per_s": v}, "metrics": {"ttft_ms": {"p50": 50.0}},
             "requests": {"ok": 256, "sent": 256}}
        n = int(v // 10)  # tasks, all inside the common window (150-600 s)
        kw = {"window_s": 600.0, "task_ends_s": [160.0 + i * 400 / n for i in range(n)]} if agent else {}
        if agent:
            s["sessions"] = {"started": n, "completed": n, "accepted": n}
        out.append(PointData(target=f"llama-3.1-8b@1xh100 {t}", level=lv, model="Llama-3.1-8B", gpus=1,
                             nodes=1, summary=s, **kw))
    return out


def _choice(agent: bool) -> str:
    return next(a["text"] for a in decision_table(_pts(agent))["advice"] if a["kind"] == "choice")


def test_levels_read_as_level_16_not_16_level():
    text = _choice(agent=False)
    assert "max_num_seqs=16 up to level ~16" in text and "max_num_seqs=64 beyond (level 64)" in text
    assert " level;" not in text and " level)" not in text


def test_agent_sweeps_keep_counting_sessions():
    text = _choice(agent=True)
    assert "up to ~16 sessions" in text and "beyond (64 sessions)" in text
