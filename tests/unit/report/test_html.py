import re

import pytest

from servelab.analysis.compare import compare_figures, manifest_diff
from servelab.errors import RunDirError
from servelab.records.rundir import read_run
from servelab.report.html import load_sweep, run_verdict, write_report, write_run_report, write_sweep_report
from tests.unit.report.fake_runs import CAPACITY, EVIL, write_run, write_sweep


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    return write_sweep(tmp_path_factory.mktemp("sweep"))


def _no_active_content(page: str) -> None:
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched from a network


def test_run_report_is_self_contained_and_escaped(tmp_path):
    d = write_run(tmp_path / "run", 2)
    out = write_run_report(d)
    page = out.read_text()
    assert out == d / "report.html"
    assert 'id="verdict"' in page and "requests succeeded" in page
    assert EVIL not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    _no_active_content(page)
    for name in ("ttft", "itl", "sessions", "telemetry", "attribution"):
        assert f'id="{name}"' in page
        assert (d / f"report-{name}.png").stat().st_size > 1000
    assert page.count("data:image/png;base64,") == 5
    assert "Full configuration" in page and "ttft_ms" in page


def test_run_verdict_words_and_invalid_runs():
    summary = {"requests": {"sent": 10, "ok": 8, "failed": {"timeout": 2}}, "throughput": {"output_tokens_per_s": 12.5},
               "metrics": {"ttft_ms": {"p50": 40.0, "p99": 90.0}, "e2e_ms": {"p50": 400.0, "p99": 900.0}},
               "valid": False, "invalid_reasons": ["schedule lag p99 40 ms > 10 ms"]}
    words, valid = run_verdict(summary, {"config": {"load": {"rate": 4.0}}, "target": {"model": "m"}})
    assert not valid
    assert "at 4 requests/s: 8 of 10 requests succeeded, 2 failed." in words
    assert "median 40.0 ms, p99 90.0 ms" in words and "not valid: schedule lag" in words


def test_sweep_report_knee_and_size(sweep_dir):
    out = write_sweep_report(sweep_dir)
    page = out.read_text()
    assert f"The knee is at concurrency {CAPACITY}" in page
    assert 'id="knee"' in page and (sweep_dir / "report-knee.png").exists()
    assert out.stat().st_size < 2_000_000
    _no_active_content(page)
    # the distributions come from the knee point's run
    assert f"distributions at concurrency {CAPACITY}" in page
    assert "SLO: the SLO holds up to" in page


def test_sweep_without_knee_and_failed_points(tmp_path, sweep_dir):
    sw = load_sweep(sweep_dir)
    sw.state["knee"] = {"level": None, "low": 16.0, "high": None, "beyond": True, "reason": "still rising"}
    sw.state["points"][-1] = {**sw.state["points"][-1], "status": "failed", "summary": None,
                              "error": "server <exited> 137"}
    page = write_report(sw, tmp_path / "r.html").read_text()
    assert "No knee within the grid" in page and "16 or beyond" in page
    assert "server &lt;exited&gt; 137" in page and "1 failed" in page


def test_comparison_table(tmp_path, sweep_dir):
    a, b = read_run(sweep_dir / "p001-concurrency=2"), read_run(sweep_dir / "p003-concurrency=8")
    comp = {"names": ["c=2", "c=8"], "diff": manifest_diff([a.manifest, b.manifest]),
            "figures": compare_figures(a.requests, b.requests, resamples=200)}
    page = write_report(a, tmp_path / "c.html", comparison=comp).read_text()
    assert "<h2>Comparison</h2>" in page and "concurrency levels" in page
    assert re.search(r"ttft_ms p50</td>.*?worse</td>", page)


def test_missing_directories_raise(tmp_path):
    with pytest.raises(RunDirError):
        write_sweep_report(tmp_path)
    with pytest.raises(RunDirError):
        write_run_report(tmp_path / "nope")
