"""The sweep's decision table in the terminal: at 140 columns (a pipe) no cell is cut to an ellipsis, and
columns with nothing measured are left out (the CSV keeps every column)."""

from __future__ import annotations

from rich.console import Console

from servelab.report.sweep_table import DECISION_HEAD, decision_csv, render_decision

TARGET = "deepseek-v3@16xh200,dtype=fp8,ep=16,dp_attention=true"


def _row(target, level, agent):
    r = {"target": target, "gpus": 8, "level": level, "output_tokens_per_s": 123456.0, "ttft_p50_ms": 1234.0,
         "ttft_p95_ms": 98765.0, "timeouts": 12, "success_rate": 0.987, "scaling_efficiency": 1.55,
         "healthy": False}
    if agent:
        r.update(tasks_per_hour=4321.0, task_p50_s=456.7, task_p95_s=1234.5, usd_per_task=0.1234)
    return r


def _decision(agent):
    return {"goal": {"throughput": "tasks_per_hour" if agent else "output_tokens_per_s",
                     "cost": "usd_per_task"},
            "rows": [_row(TARGET, lv, agent) for lv in (8, 256)]}


def _text(decision):
    con = Console(width=140, record=True)
    render_decision(decision, con)
    return con.export_text()


def test_no_cell_is_cut_short_at_140_columns():
    for agent in (True, False):
        text = _text(_decision(agent))
        assert "…" not in text, text
        assert "98,800" in text and "98.7%" in text and "unhealthy" in text  # 98,765 ms to 3 s.f.


def test_a_plain_sweep_row_as_servelab_show_printed_it_is_whole():
    # the row that came out as '100.…' and 'sca…' before (a sweep of one H100 target)
    d = _decision(agent=False)
    for r in d["rows"]:
        r.update(target="llama-3.1-8b@1xh100 max_num_seqs=16", success_rate=1.0, scaling_efficiency=1.0,
                 healthy=True, output_tokens_per_s=1461.0, ttft_p50_ms=47.0, ttft_p95_ms=208.0, timeouts=0)
    text = _text(d)
    assert "…" not in text and "100%" in text and "scaling" in text and "timeouts" in text


def test_empty_columns_are_left_out_in_the_terminal_but_kept_in_the_csv():
    text = _text(_decision(agent=False))
    head = next(ln for ln in text.splitlines() if "target" in ln)
    assert "tasks/h" not in head and "$/task" not in head and "GPUs" in head
    assert "tasks/h" in _text(_decision(agent=True))
    assert decision_csv(_decision(agent=False)).splitlines()[0].split(",") == DECISION_HEAD
