from rich.console import Console

from servelab.analysis.live import LiveStats
from servelab.analysis.summary import build_summary
from servelab.config import RunConfig
from servelab.records.schema import RequestRecord
from servelab.report.terminal import fmt, progress_line, render_summary

MS = 1_000_000


def _records():
    out = []
    for i in range(10):
        sent = i * 100 * MS
        tt = [sent + (20 + i) * MS, sent + (25 + i) * MS]
        out.append(
            RequestRecord(
                request_id=i,
                status="ok",
                intended_ns=sent,
                sent_ns=sent,
                first_token_ns=tt[0],
                first_content_ns=tt[0],
                last_token_ns=tt[1],
                end_ns=tt[1] + MS,
                token_times_ns=tt,
                usage_prompt_tokens=100,
                usage_completion_tokens=2,
                est_completion_tokens=2,
            )
        )
    out.append(RequestRecord(request_id=10, status="http_error", http_status=429, intended_ns=0, sent_ns=0,
                             end_ns=MS, error="[bold]rate limited[/bold]"))
    return out


def _render(summary, **kw):
    console = Console(record=True, width=200, color_system=None)
    render_summary(summary, console, **kw)
    return console.export_text()


def test_render_contains_the_figures():
    cfg = RunConfig.model_validate(
        {
            "slo": {"ttft_ms": 25},
            "percentiles": [50, 99.9],
            "load": {"concurrency": 1},
            "validity": {"max_error_rate": 0.2},
        }
    )
    s = build_summary(_records(), cfg, started_ns=0, ended_ns=2000 * MS)
    text = _render(s, title="my run")
    assert "my run" in text
    ttft = s["metrics"]["ttft_ms"]
    # TTFT of 20..29 ms: mean 24.5, p50 24.5, p99.9 ~29, max 29, n 10.
    row = next(line for line in text.splitlines() if line.lstrip("│ ").startswith("TTFT "))
    for v in (ttft["mean"], ttft["p50"], ttft["p99.9"], ttft["max"]):
        assert fmt(v) in row
    assert "p99.9" in text
    assert f"{fmt(s['throughput']['requests_per_s'])} req/s" in text
    assert "source: usage" in text
    assert "HTTP error 1" in text and "HTTP 429: 1" in text and "http_error" not in text
    assert "[bold]rate limited[/bold]" in text  # user text is printed, not interpreted as markup
    assert "ttft_ms <= 25" in text and "FAIL" in text
    assert "goodput" in text and "6 requests" in text  # TTFT 20..25 ms meet the 25 ms SLO
    assert "valid: yes" in text and "INVALID" not in text


def test_render_invalid_run_shows_reasons():
    s = build_summary(_records(), RunConfig(), started_ns=0, ended_ns=MS, extra={"loop_saturated": True})
    text = _render(s)
    assert "INVALID: client event loop saturated" in text


def test_render_empty_summary_does_not_crash():
    s = build_summary([], RunConfig(), started_ns=0, ended_ns=0)
    text = _render(s)
    assert "TTFT" in text and "no successful measured requests" in text


def test_fmt():
    assert fmt(None) == "-" and fmt(12345.6) == "12,346" and fmt(1.23456) == "1.23" and fmt(7) == "7"
    assert fmt(0.0) == "0"


def test_progress_line():
    s = LiveStats()
    for r in _records():
        s.update(r)
    line = progress_line(s)
    assert line.startswith("11 done | 1 errors")
    assert "p50 TTFT 24" in line  # nearest rank of 20..29 ms is 24
    assert "req/s" in line


def test_agent_runs_show_tasks_time_split_and_cost():
    from rich.console import Console

    from servelab.report.terminal import render_summary

    summary = {"requests": {"sent": 4, "ok": 4, "failed": {}, "cancelled": 0}, "metrics": {},
               "sessions": {"started": 3, "completed": 2, "accepted": 2, "failed": 1, "timed_out": 0,
                            "retries": 5, "tool_failures": 1},
               "tasks_per_hour": 720.0, "task_ms": {"p50": 4000.0, "p95": 9000.0, "p99": 9900.0, "n": 2},
               "time_split": {"model": 0.25, "tool": 0.7, "waiting": 0.05},
               "cost": {"per_successful_task": 0.125, "per_million_output_tokens": 3.5, "model": 0.2,
                        "tool": 0.05, "orchestration": 0.0, "failure": 0.0}}
    con = Console(record=True, width=200)
    render_summary(summary, con)
    text = con.export_text()
    assert "3 started, 2 completed, 2 accepted, 1 failed" in text
    assert "720 per hour" in text and "tool 70.0%" in text
    assert "$0.125 per successful task" in text
