"""The decision table and its advice on a hand-built sweep: DeepSeek-V3 on 1, 2 and 4 nodes (8, 16, 32
GPUs) at 16, 64 and 256 sessions, where 1 node collapses at 256. Expected values are worked by hand:

    window: duration 3600 s -> [900, 3600] s = 0.75 h; tasks/h = tasks ending inside it / 0.75
    $/task = 2.0 $/GPU-h x GPUs x 0.75 h / tasks in the window
             1 node : 12/300 = 0.04    12/600 = 0.02     12/150 = 0.08  (70 % success: collapsed)
             2 nodes: 24/290 = 0.0828  24/900 = 0.0267   24/1200 = 0.02
             4 nodes: 48/315 = 0.152   48/950 = 0.0505   48/1500 = 0.032
"""

import pytest

from servelab.analysis.decision import PointData, decision_table

TASKS = {"1 node": (300, 600, 150), "2 nodes": (290, 900, 1200), "4 nodes": (315, 950, 1500)}
P95 = {"1 node": (60, 90, 900), "2 nodes": (55, 70, 120), "4 nodes": (50, 40, 60)}
SUCCESS = {"1 node": (0.99, 0.98, 0.70), "2 nodes": (0.99, 0.99, 0.97), "4 nodes": (0.99, 0.99, 0.99)}
GPUS = {"1 node": 8, "2 nodes": 16, "4 nodes": 32}
LEVELS = (16, 64, 256)


def _point(t: str, i: int) -> PointData:
    n = TASKS[t][i]
    ends = [900 + 2700 * (k + 0.5) / n for k in range(n)] + [100.0, 7200.0]  # before the window, a straggler
    started = 1000
    ok = round(SUCCESS[t][i] * started)
    summary = {"sessions": {"started": started, "completed": ok, "accepted": ok, "cancelled": 0,
                            "timed_out": started - ok},
               "task_ms": {"p50": P95[t][i] * 500.0, "p95": P95[t][i] * 1000.0},
               "metrics": {"ttft_ms": {"p50": 100.0, "p95": 400.0}},
               "throughput": {"output_tokens_per_s": 1000.0 * (i + 1)}}
    return PointData(target=t, level=LEVELS[i], summary=summary, model="DeepSeek-V3", gpus=GPUS[t],
                     nodes=GPUS[t] // 8, window_s=3600.0, task_ends_s=ends, ready_s=60.0 * GPUS[t] / 8)


def _table(**kw):
    return decision_table([_point(t, i) for t in TASKS for i in range(3)], gpu_hour_usd=2.0, **kw)


def _row(table, target, level):
    return next(r for r in table["rows"] if r["target"] == target and r["level"] == level)


def test_rows_use_the_common_window_and_each_targets_gpu_count():
    t = _table()
    assert t["window_s"] == [900.0, 3600.0]
    r = _row(t, "4 nodes", 256)
    assert r["tasks_in_window"] == 1500 and r["tasks_per_hour"] == pytest.approx(2000)  # straggler excluded
    assert r["usd_per_task"] == pytest.approx(0.032)
    assert _row(t, "1 node", 64)["usd_per_task"] == pytest.approx(0.02)
    assert _row(t, "2 nodes", 256)["usd_per_task"] == pytest.approx(0.02)
    assert _row(t, "1 node", 256)["success_rate"] == pytest.approx(0.70)
    # scaling efficiency at the SAME level: 2 nodes at 64 = 1200 / (800 x 2) = 0.75
    assert _row(t, "2 nodes", 64)["scaling_efficiency"] == pytest.approx(0.75)


def test_collapse_and_advice_thresholds():
    t = _table()
    one = _row(t, "1 node", 256)
    assert one["collapsed"] and not one["healthy"]
    assert (
        "success 70% < 90%" in one["collapse_reason"] and "75% below its best 800" in one["collapse_reason"]
    )
    text = {a["kind"]: a["text"] for a in t["advice"]}
    assert "1 node up to ~64 sessions; 2 nodes beyond (256 sessions)" in text["choice"]
    assert (
        "1 node collapses from 256 sessions" in text["collapse"]
        and "300 of 1000 tasks timed out" in text["collapse"]
    )
    assert "4 nodes only when task p95 matters more than cost" in text["latency"]
    assert "at 256: 60 s vs 120 s for 2 nodes at $0.0320 vs $0.0200 per task" in text["latency"]
    cross = {(c["smaller"], c["larger"]): c for c in t["crossovers"]}
    assert (
        cross[("1 node", "2 nodes")]["on_throughput"] == 64 and cross[("1 node", "2 nodes")]["on_cost"] == 256
    )
    assert (
        cross[("2 nodes", "4 nodes")]["on_throughput"] == 16
        and cross[("2 nodes", "4 nodes")]["on_cost"] is None
    )
    assert "Time to ready" in text["ready"] and "4 nodes 240.0 s" in text["ready"]


def test_a_smaller_dense_model_option_is_covered():
    pts = [_point(t, i) for t in ("1 node", "2 nodes") for i in range(3)]
    for i in range(3):  # a 70B dense model on 8 GPUs: 700 tasks in the window at every level
        p = _point("1 node", i)
        p.target, p.model = "llama-70b", "Llama-3.1-70B"
        p.task_ends_s = [900 + 2700 * (k + 0.5) / 700 for k in range(700)]
        p.summary = {**p.summary, "sessions": {**p.summary["sessions"], "accepted": 990, "timed_out": 10}}
        pts.append(p)
    t = decision_table(pts, gpu_hour_usd=2.0)
    text = [a["text"] for a in t["advice"] if a["kind"] == "other_model"]
    # llama: 12/700 = 0.0171 $/task beats 1 node at 16 (0.04) and 64 (0.02); 2 nodes at 256 is 0.02
    assert text == ["The Llama-3.1-70B option (llama-70b, 8 GPUs) is the choice at 16, 64, 256 sessions."]
    within = [a["text"] for a in t["advice"] if a["kind"] == "choice_within_model"]
    assert within == [
        "Among DeepSeek-V3 topologies: Choice by lowest $ per successful task among healthy targets: "
        "1 node up to ~64 sessions; 2 nodes beyond (256 sessions)."
    ]


def test_few_tasks_in_the_window_are_flagged():
    pts = [_point(t, i) for t in ("1 node", "2 nodes") for i in range(3)]
    pts[0].task_ends_s = [1000.0 + k for k in range(9)]  # 1 node at 16: 9 tasks in the window
    t = decision_table(pts, gpu_hour_usd=2.0)
    assert _row(t, "1 node", 16)["low_sample"] and not _row(t, "1 node", 64)["low_sample"]
    (few,) = [a["text"] for a in t["advice"] if a["kind"] == "sample"]
    assert few.startswith("Few tasks ended inside the window at 1 node 16 (under 10)")


def test_a_win_at_one_level_only_is_not_a_crossover():
    pts = [_point(t, i) for t in ("1 node", "2 nodes") for i in range(3)]
    for p in pts:  # 2 nodes: 900 tasks at 64 beats 600, but 500 at 256 loses to 1 node's 600
        n = {("1 node", 256): 600, ("2 nodes", 256): 500}.get((p.target, p.level))
        if n:
            p.task_ends_s = [900 + 2700 * (k + 0.5) / n for k in range(n)]
            p.summary = {**p.summary, "sessions": {**p.summary["sessions"], "accepted": 990, "timed_out": 10}}
    t = decision_table(pts, gpu_hour_usd=2.0)
    (c,) = t["crossovers"]
    assert c["on_throughput"] is None and c["wins_throughput_at"] == [64]
    text = next(a["text"] for a in t["advice"] if a["kind"] == "crossover")
    assert "2 nodes beats 1 node on tasks per hour at 64 sessions only, not for good" in text


def test_advice_warns_when_targets_were_priced_by_different_backends():
    pts = [_point(t, i) for t in TASKS for i in range(3)]
    for p in pts:
        p.summary["simulator"] = {"backend": "silicon" if p.target == "1 node" else "roofline"}
    table = decision_table(pts, gpu_hour_usd=2.0)
    assert table["backends"] == {"1 node": "silicon", "2 nodes": "roofline", "4 nodes": "roofline"}
    warn = [a for a in table["advice"] if a["kind"] == "backend"]
    assert len(warn) == 1 and "Unfair comparison" in warn[0]["text"] and "1 node silicon" in warn[0]["text"]
    for p in pts:
        p.summary["simulator"] = {"backend": "roofline"}
    assert not [a for a in decision_table(pts, gpu_hour_usd=2.0)["advice"] if a["kind"] == "backend"]


def test_targets_differing_by_a_number_are_ordered_by_that_number():
    # A max-num-seqs sweep's targets end in numbers: 4, 16, 128 in that order, not 128, 16, 4 (text order).
    pts = [PointData(target=f"llama max_num_seqs={v}", level=64, summary={"throughput": {}}, model="m",
                     gpus=1, nodes=1, window_s=60.0, task_ends_s=[]) for v in (128, 16, 4)]
    t = decision_table(pts)
    assert [r["target"] for r in t["rows"]] == [f"llama max_num_seqs={v}" for v in (4, 16, 128)]
    assert [x["target"] for x in t["targets"]] == [f"llama max_num_seqs={v}" for v in (4, 16, 128)]


def test_no_scaling_efficiency_for_targets_on_the_same_gpus():
    # A max_num_seqs sweep: one model, 1 GPU each, at 16 users. Before: 4 -> 458 / (121 x 1/1) = 378%, a
    # "scaling" figure for targets that do not differ in GPUs. Now: none, and the terminal leaves the
    # column out.
    import io

    from rich.console import Console

    from servelab.report.sweep_table import render_decision

    tput = {"max_num_seqs=1": 121.0, "max_num_seqs=4": 458.0, "max_num_seqs=16": 1458.0}
    pts = [PointData(target=f"llama-3.1-8b@1xh100 {t}", level=16, model="Llama-3.1-8B", gpus=1, nodes=1,
                     summary={"throughput": {"output_tokens_per_s": v}, "metrics": {"ttft_ms": {"p50": 50.0}},
                              "requests": {"ok": 256, "sent": 256}})
           for t, v in tput.items()]
    t = decision_table(pts)
    assert [r["scaling_efficiency"] for r in t["rows"]] == [None, None, None]
    out = io.StringIO()
    render_decision(t, Console(file=out, width=200))
    assert "scaling" not in out.getvalue() and "1,460" in out.getvalue()  # 1,458 to 3 s.f.
    from servelab.report.sweep_table import decision_html

    html = decision_html({"decision": t})
    assert "scaling eff." not in html and "1,460" in html
    # With a 2-GPU target of the same model beside them, the column is back: 2,000 / (121 x 2) = 826%...
    pts.append(PointData(target="llama-3.1-8b@2xh100 max_num_seqs=1", level=16, model="Llama-3.1-8B",
                         gpus=2, nodes=1, summary={"throughput": {"output_tokens_per_s": 2000.0}}))
    two = _row(decision_table(pts), "llama-3.1-8b@2xh100 max_num_seqs=1", 16)
    assert two["scaling_efficiency"] == pytest.approx(2000 / 242)
