"""The decision table's cost column says what it holds: a plain sweep (no tasks) was headed '$/task' over
dollars per request; now it shows $/1M output tokens (the CSV keeps $/request too), and '$/task' is an agent
sweep's, per successful task."""

from __future__ import annotations

from rich.console import Console

from servelab.analysis.decision import PointData, decision_table
from servelab.report.sweep_table import decision_csv, decision_html, render_decision


def _plain():
    # one H100 at 10 req/s and 2,000 output tokens/s, 2 $/GPU-hour:
    # $/request = 2 / 3600 / 10 = 0.0000556; $/1M out tok = 2 / 3600 / 2,000 x 1e6 = 0.278
    s = {"throughput": {"requests_per_s": 10.0, "output_tokens_per_s": 2000.0},
         "metrics": {"ttft_ms": {"p50": 40.0, "p95": 50.0}}, "requests": {"ok": 96}}
    return decision_table([PointData(target="llama-3.1-8b@1xh100", level=8, model="m", gpus=1, nodes=1,
                                     summary=s)], gpu_hour_usd=2.0)


def _agent():
    # 30 tasks end inside the window 150-600 s on 2 GPUs: $/task = 2 x 2 x 0.125 h / 30 = 0.0167
    s = {"throughput": {"requests_per_s": 10.0, "output_tokens_per_s": 2000.0},
         "sessions": {"started": 30, "completed": 30, "accepted": 30}}
    p = PointData(target="a@2xh100", level=8, model="m", gpus=2, nodes=1, summary=s, window_s=600.0,
                  task_ends_s=[200.0 + 10 * i for i in range(30)])
    return decision_table([p], gpu_hour_usd=2.0)


def _terminal(d) -> tuple[str, list[str]]:
    con = Console(width=160, record=True)
    render_decision(d, con)
    lines = con.export_text().splitlines()
    head = " ".join(ln for ln in lines[:6] if "┃" in ln)
    row = next(ln for ln in lines if "@" in ln and "│" in ln)
    return head, [c.strip() for c in row.split("│")[1:-1]]


def test_a_plain_sweep_is_priced_per_request_and_per_million_output_tokens():
    d = _plain()
    r = d["rows"][0]
    assert abs(r["usd_per_request"] - 2.0 / 3600 / 10) < 1e-15  # the key is kept
    assert abs(r["usd_per_1m_output_tokens"] - 2.0 / 3600 / 2000 * 1e6) < 1e-12
    head, cells = _terminal(d)
    assert "$/task" not in head and "$/1M" in head and "out tok" in head, head
    assert cells[-2:] == ["100%", "0.278"], cells  # success, $/1M out tok (no scaling: one GPU count)
    lines = decision_csv(d).splitlines()
    csv_head, row = lines[0].split(","), lines[1].split(",")
    cost = {h: row[i] for i, h in enumerate(csv_head) if h.startswith("$/")}
    assert cost["$/task"] == "" and float(cost["$/request"]) == r["usd_per_request"]
    assert float(cost["$/1M out tok"]) == r["usd_per_1m_output_tokens"]
    page = decision_html({"decision": d})
    assert "$/task" not in page and "$/1M out tok" in page and "0.278" in page


def test_an_agent_sweep_is_priced_per_task():
    d = _agent()
    assert abs(d["rows"][0]["usd_per_task"] - 2.0 * 2 * 0.125 / 30) < 1e-12
    head, cells = _terminal(d)
    assert "$/task" in head and "$/1M" not in head, head
    assert "0.0167" in cells, cells
    page = decision_html({"decision": d})
    assert "$/task" in page and "$/1M out tok" not in page
