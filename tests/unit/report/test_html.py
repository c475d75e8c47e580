import re

import pytest

from servelab.analysis.compare import compare_figures, manifest_diff
from servelab.errors import RunDirError
from servelab.records.rundir import read_run
from servelab.report.html import load_sweep, run_verdict, write_report, write_run_report, write_sweep_report
from servelab.report.plots import counts_labels
from tests.unit.report.fake_runs import CAPACITY, EVIL, write_grouped_sweep, write_run, write_sweep


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
    assert 'id="headline"' in page and "requests succeeded" in page and 'id="validity"' in page
    assert EVIL not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    _no_active_content(page)
    names = ("ttft", "itl", "timeline", "sessions", "telemetry", "attribution")
    # 24 requests make 6 time bins: said in words, not drawn as a ramp
    assert "client metrics over time: too few samples to draw (6;" in page
    for name in names:
        assert f'id="{name}"' in page
        assert (d / f"report-{name}.png").stat().st_size > 1000
    assert page.count("data:image/png;base64,") == len(names)
    assert "Full configuration" in page and "ttft_ms" in page
    # reading order: headline, validity, the answer, errors, then the evidence
    order = [
        page.index(x) for x in ('id="headline"', 'id="validity"', "Key figures", 'id="errors"', 'id="ttft"')
    ]
    assert order == sorted(order)


def test_run_verdict_words_and_invalid_runs():
    summary = {
        "requests": {"sent": 10, "ok": 8, "failed": {"timeout": 2}},
        "throughput": {"output_tokens_per_s": 12.5},
        "metrics": {"ttft_ms": {"p50": 40.0, "p99": 90.0}, "e2e_ms": {"p50": 400.0, "p99": 900.0}},
        "valid": False,
        "invalid_reasons": ["schedule lag p99 40 ms > 10 ms"],
    }
    words, valid = run_verdict(summary, {"config": {"load": {"rate": 4.0}}, "target": {"model": "m"}})
    assert not valid
    assert "m (real endpoint), open loop, 4 requests/s (poisson)" in words
    assert "8 of 10 requests succeeded (2 failed); 12.5 output tokens/s" in words
    assert "time to first token p50 40 ms, p99 90 ms; end-to-end p50 400 ms." in words
    assert "{" not in words and "'" not in words  # no Python repr


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
    assert '<h2 id="comparison">Comparison</h2>' in page and "concurrency levels" in page
    assert re.search(r"time to first token p50 \(ms\)</td>.*?worse</td>", page)
    assert page.index('id="comparison"') < page.index("Key figures")  # the comparison comes first


def test_missing_directories_raise(tmp_path):
    with pytest.raises(RunDirError):
        write_sweep_report(tmp_path)
    with pytest.raises(RunDirError):
        write_run_report(tmp_path / "nope")


# -- groups, scaling and accuracy (sweeps written the way `servelab sweep` writes sweep.json) -------------

ACC_A = {
    "setup": "A",
    "summary": {"accuracy": {"value": 0.8, "lo": 0.71, "hi": 0.87}, "correct": 80, "answered": 100},
}
ACC_B = {
    "setup": "B",
    "summary": {"accuracy": {"value": 0.6, "lo": 0.5, "hi": 0.69}, "correct": 60, "answered": 100},
    "vs_first_setup": {"flagged": True, "verdict": "quality drop", "diff": -0.2, "lo": -0.3, "hi": -0.1},
}


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    """max_num_seqs=4 saturates at 4, max_num_seqs=8 at 8 (both one node); the second loses accuracy."""
    return write_grouped_sweep(tmp_path_factory.mktemp("grouped"),
                               {"s4": ({"max_num_seqs": 4}, 4, 1), "s8": ({"max_num_seqs": 8}, 8, 1)},
                               accuracy={"s4": ACC_A, "s8": ACC_B})


def _verdict(page: str) -> str:
    return re.search(r'<div class="verdict[^"]*" id="verdict">(.*?)</div>', page, re.S).group(1)


def test_every_group_gets_its_knee_in_words_plot_and_table(grouped):
    page = write_sweep_report(grouped).read_text()
    verdict = _verdict(page)
    assert "2 groups of points, one knee each." in verdict
    assert "max_num_seqs=4: the knee is at concurrency 4 (between 2 and 8)" in verdict
    assert "max_num_seqs=8: the knee is at concurrency 8 (between 4 and 16)" in verdict
    assert "at concurrency 16 (max_num_seqs=8)" in verdict  # the overall peak names its group
    assert page.count('id="knee"') == 1 and (grouped / "report-knee.png").stat().st_size > 1000
    knee_rows = re.findall(
        r'<tr><td class="l">max_num_seqs=(\d)</td><td class="">(\d+)</td><td class="">([^<]*)<', page
    )
    assert knee_rows == [("4", "4", "2 to 8"), ("8", "8", "4 to 16")]
    assert "Scaling efficiency" not in page  # both groups ran on one node
    assert "distributions at concurrency 4 (max_num_seqs=4)" in page
    _no_active_content(page)


def test_flagged_quality_drop_with_a_throughput_gain_is_a_highlighted_warning(grouped):
    page = write_sweep_report(grouped).read_text()
    assert '<div class="verdict bad" id="verdict">' in page
    alarms = re.findall(r'<p class="alarm"><b>(.*?)</b></p>', page)
    assert len(alarms) == 5  # one per max_num_seqs=8 point
    c8 = next(a for a in alarms if "max_num_seqs=8, concurrency=8 " in a)
    assert "gains +" in c8 and "over the first serving setup at concurrency 8" in c8
    assert "accuracy 60% (-20.0 points [-30.0, -10.0], quality drop against the first setup)" in c8
    assert "bought with quality" in c8
    # at concurrency 2 the synthetic max_num_seqs=8 point is no faster: no gain is claimed
    c2 = next(
        a for a in alarms if "max_num_seqs=8, concurrency=2:" in a or "max_num_seqs=8, concurrency=2 " in a
    )
    assert "no throughput gain" in c2 and "gains +" not in c2
    # the per-point table: an accuracy column, flagged rows highlighted
    assert "<th class=\"\">accuracy [95% CI]</th>" in page
    assert "80% [71%, 87%] n=100" in page and "first setup" in page
    assert page.count('<tr class="flagged">') == 5
    assert "DROP: -20.0 points [-30.0, -10.0], quality drop" in page


def test_no_warning_without_a_flag(tmp_path):
    ok_b = {
        **ACC_B,
        "vs_first_setup": {**ACC_B["vs_first_setup"], "flagged": False, "verdict": "within noise"},
    }
    d = write_grouped_sweep(
        tmp_path / "s",
        {"s4": ({"max_num_seqs": 4}, 4, 1), "s8": ({"max_num_seqs": 8}, 8, 1)},
        levels=(1, 4, 16),
        accuracy={"s4": ACC_A, "s8": ok_b},
    )
    page = write_sweep_report(d).read_text()
    assert '<div class="verdict" id="verdict">' in page and 'class="alarm"' not in page
    assert '<tr class="flagged">' not in page and "-20.0 points [-30.0, -10.0], within noise" in page


def test_scaling_chart_table_and_sentence(tmp_path):
    # 1 node saturates at 4, 2 nodes at 8 (near-linear peak), 4 nodes also at 8 (half of linear)
    d = write_grouped_sweep(
        tmp_path / "s",
        {
            "n1": ({"target": "sim:a@1"}, 4, 1),
            "n2": ({"target": "sim:a@2"}, 8, 2),
            "n4": ({"target": "sim:a@4"}, 8, 4),
        },
    )
    sc = load_sweep(d).state["scaling"]
    eff = {p["nodes"]: p["efficiency"] for p in sc["peaks"]}
    assert eff[1] == 1.0 and eff[2] > 0.8 and eff[4] < 0.6 and sc["bend"]["nodes"] == 2
    page = write_sweep_report(d).read_text()
    assert 'id="scaling"' in page and (d / "report-scaling.png").stat().st_size > 1000
    verdict = _verdict(page)
    assert "Scaling across node counts: scaling holds to 2 nodes" in verdict
    assert f"4 nodes reach {eff[4]:.0%} of linear" in verdict
    peak_rows = re.findall(r'<tr><td class="l">(\d)</td><td class="">16</td>.*?<td class="">(\d+%)</td>'
                           r'<td class="">(bend)?</td></tr>', page)
    assert peak_rows == [("1", "100%", ""), ("2", f"{eff[2]:.0%}", "bend"), ("4", f"{eff[4]:.0%}", "")]
    scaling = page[page.index("Scaling efficiency across node counts"):]
    scaling = scaling[:scaling.index("<h2", 10)]
    assert scaling.count("<td class=\"l\">4</td>") == 1 + 5  # its peak row, one efficiency row per level
    assert page.index("Scaling efficiency across node counts") > page.index('id="knee"')


def test_tick_labels_show_each_groups_sample_count():
    groups = [
        {"levels": [1.0, 4.0], "counts": [30, 30]},
        {"levels": [1.0, 4.0, 16.0], "counts": [30, 29, 12]},
    ]
    assert counts_labels(groups, [1.0, 4.0, 16.0]) == ["1\nn=30", "4\nn=30/29", "16\nn=-/12"]


def test_knee_table_peak_throughput_has_three_significant_figures(grouped):
    page = write_sweep_report(grouped).read_text()
    rows = re.findall(r'<tr><td class="l">max_num_seqs=\d</td>((?:<td class="">[^<]*</td>){5})', page)
    assert len(rows) == 2
    for cells in rows:
        peak = re.findall(r'<td class="">([^<]*)</td>', cells)[3]
        digits = re.sub(r"[^0-9]", "", peak).lstrip("0")
        if "." not in peak:
            digits = digits.rstrip("0")
        assert peak != "-" and len(digits) <= 3, peak
