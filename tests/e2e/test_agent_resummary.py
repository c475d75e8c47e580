"""An agent run's summary recomputed from its stored records (`servelab show`/`report` on a directory without
summary.json) has the same task figures as the summary written at the end: tasks completed, task time,
tasks/hour, time split and cost per task (before: none of them; `show` printed no sessions/tasks/cost)."""

from __future__ import annotations

import pytest

from servelab.cli.main import main
from tests.e2e.resummary import written_and_recomputed

TASK_KEYS = ("sessions", "task_ms", "tasks_per_hour", "tasks_per_hour_steady", "accepted_per_hour",
             "acceptance_rate", "time_split", "cost", "profile")


def test_recomputed_summary_of_an_agent_run_keeps_its_task_figures(tmp_path, capsys):
    written, again, run_dir = written_and_recomputed(
        ["run", "--target", "sim:llama-3.1-8b@1xh100", "--profile", "coding-agent", "--sessions", "4",
         "--duration", "900", "--gpu-hour-usd", "2"], tmp_path, capsys)
    for k in TASK_KEYS:
        assert again.get(k) == written[k], k
    done, hours = written["sessions"]["completed"], written["duration_s"] / 3600
    assert done > 0 and again["tasks_per_hour"] == pytest.approx(done / hours)
    # $/task: 2 $/GPU-hour x 1 GPU x the run's hours, over the accepted tasks (the run used no tools' money)
    assert again["cost"]["per_successful_task"] == pytest.approx(2 * hours / written["sessions"]["accepted"])
    assert main(["show", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert f"{done} completed" in out and "per successful task" in out
    # report.html too (before: an empty summary, no Tasks section)
    assert main(["report", str(run_dir)]) == 0
    html = (run_dir / "report.html").read_text()
    started = written["sessions"]["started"]
    assert f'<div class="v">{done} of {started}</div><div class="k">completed</div>' in html
