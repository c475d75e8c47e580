"""The sweep's terminal tables: three significant figures like every other table (the points table gave one
or two decimals: '2,259.5', '15.86'), and the decision table's title speaks of tasks/h only when the table
has a tasks/h column."""

from __future__ import annotations

from rich.console import Console

from servelab.report.sweep_table import render_decision, render_sweep


def _text(fn, arg) -> str:
    con = Console(width=160, record=True)
    fn(arg, con)
    return con.export_text()


def test_sweep_points_have_three_significant_figures():
    s = {"throughput": {"requests_per_s": 15.8634, "output_tokens_per_s": 3242.4,
                        "goodput_requests_per_s": 15.8634},
         "metrics": {"ttft_ms": {"p50": 73.81, "p99": 1358.12}, "itl_ms": {"p50": 12.2449},
                     "e2e_ms": {"p95": 16565.5}},
         "errors": {"rate": 0.0}}
    text = _text(render_sweep, {"points": [{"params": {"concurrency": 64}, "status": "ok", "summary": s}]})
    line = next(ln for ln in text.splitlines() if "concurrency=64" in ln)
    cells = [c.strip() for c in line.split("│")[1:-1]]
    assert cells == ["concurrency=64", "ok", "15.9", "3,240", "73.8", "1,360", "12.2", "16,600", "15.9", "0%"]


def _row(**kw):
    return {"target": "llama-3.1-8b@1xh100", "gpus": 1, "level": 16, "output_tokens_per_s": 1461.0,
            "ttft_p50_ms": 47.0, "ttft_p95_ms": 208.0, "timeouts": 0, "success_rate": 1.0, "healthy": True,
            **kw}


def test_the_decision_title_mentions_tasks_only_with_a_tasks_column():
    plain = {"goal": {"throughput": "output_tokens_per_s", "cost": "usd_per_task"}, "window_s": [4.0, 16.0],
             "rows": [_row()]}
    title = _text(render_decision, plain).splitlines()[0]
    assert "tasks/h" not in title and title.strip() == "decision table"
    agents = {**plain, "goal": {"throughput": "tasks_per_hour", "cost": "usd_per_task"},
              "rows": [_row(tasks_per_hour=52.0)]}
    assert "tasks/h over the common window 4-16 s of every run" in _text(render_decision, agents)


def test_the_report_scaling_rows_have_three_significant_figures(tmp_path):
    # the per-level scaling rows gave one decimal ('1,472.6') where the peak rows above them give three
    # significant figures
    import re

    from servelab.report.html import write_sweep_report
    from tests.unit.report.fake_runs import write_grouped_sweep

    d = write_grouped_sweep(tmp_path / "s", {"n1": ({"target": "sim:a@1"}, 4, 1),
                                             "n2": ({"target": "sim:a@2"}, 8, 2)})
    page = write_sweep_report(d).read_text()
    scaling = page[page.index("Scaling efficiency across node counts"):]
    scaling = scaling[:scaling.index("<h2", 10)]
    rows = re.findall(r"<tr><td class=\"l\">\d</td><td class=\"\">[\d.]+</td><td class=\"\">([^<]*)</td>"
                      r"<td class=\"\">([^<]*)</td><td class=\"\">[^<]*%</td></tr>", scaling)
    assert len(rows) >= 5
    for cells in rows:
        for cell in cells:
            digits = re.sub(r"[^0-9]", "", cell).lstrip("0")
            digits = digits if "." in cell else digits.rstrip("0")
            assert len(digits) <= 3, cell


def test_the_verdict_of_a_grouped_sweep_leaves_each_knee_reason_to_the_table(tmp_path):
    # the first screen of the README's max_num_seqs sweep: each group's detector reasons ('Kneedle on log2
    # load; throughput elasticity 0.81 into it...') filled the verdict box, and the knee table under the plot
    # repeats them in its reason column
    from servelab.report.html import load_sweep
    from servelab.report.html_sweep import sweep_verdict
    from tests.unit.report.fake_runs import write_grouped_sweep

    groups = {"a": ({"max_num_seqs": 4}, 4, 1), "b": ({"max_num_seqs": 8}, 8, 1)}
    d = write_grouped_sweep(tmp_path / "s", groups)
    state = load_sweep(d).state
    reasons = [k["knee"]["reason"] for k in state["knees"] if (k.get("knee") or {}).get("reason")]
    assert reasons
    text = sweep_verdict(state)
    assert not any(r in text for r in reasons), text
    assert "the knee is at concurrency 4" in text and "points measured." in text and "point(s)" not in text


def test_advice_lines_do_not_repeat_their_kind():
    d = {"goal": {"throughput": "output_tokens_per_s", "cost": "usd_per_task"}, "rows": [_row()],
         "advice": [{"kind": "choice",
                     "text": "Choice by highest output tokens per s among healthy targets: x."},
                    {"kind": "collapse", "text": "x collapses from level 64: y."}]}
    lines = [ln.rstrip() for ln in _text(render_decision, d).splitlines() if ln.startswith("advice")]
    assert lines == ["advice: Choice by highest output tokens per s among healthy targets: x.",
                     "advice (collapse): x collapses from level 64: y."]


def _two_gpu_sweep():
    # figures of a two-target sim sweep (llama-3.1-8b on 1 and 2 H100s, concurrency 32, 2 $/GPU-hour)
    row = _row(level=32.0, output_tokens_per_s=3173.24, ttft_p50_ms=160.93, ttft_p95_ms=186.4,
               usd_per_request=2.2412e-05, usd_per_1m_output_tokens=0.17508, scaling_efficiency=0.54673,
               success_rate=0.98765)
    return {"goal": {"throughput": "output_tokens_per_s", "cost": "usd_per_request"}, "rows": [row]}


def test_decision_table_cells_have_three_significant_figures_like_the_sweep_table():
    # before: '3,173', '161', '186', '98.8%', '0.0000' ($ to 4 decimals), '55%' beside the sweep table's
    # '3,170', '161'; now words.sig / words.pct: 3,173.24 -> 3,170; 0.98765 -> 98.8%; 0.54673 -> 54.7%;
    # the cost as $/1M output tokens, 0.17508 -> 0.175 (the $/request, 0.0000224, is in decision.csv)
    line = next(ln for ln in _text(render_decision, _two_gpu_sweep()).splitlines() if "@1xh100" in ln)
    cells = [c.strip() for c in line.split("│")[1:-1]]
    assert cells == ["llama-3.1-8b@1xh100", "1", "32", "3,170", "161", "186", "0", "98.8%", "0.175",
                     "54.7%"]


def test_decision_csv_keeps_full_precision():
    from servelab.report.sweep_table import decision_csv

    lines = decision_csv(_two_gpu_sweep()).splitlines()
    # $/task empty (no tasks), then $/request and $/1M out tok
    assert lines[1] == ("llama-3.1-8b@1xh100,1,32.0,3173.24,,,,160.93,186.4,0,0.98765,,2.2412e-05,0.17508,"
                        "0.54673,")
