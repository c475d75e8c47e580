"""`servelab compare` prints figures for people: names in words, a unit column, three significant figures,
no 'at level None'."""

from __future__ import annotations

from rich.console import Console

from servelab.cli.compare_cmd import figures_table


def _text(block) -> str:
    con = Console(width=160, record=True)
    con.print(figures_table(block))
    return con.export_text()


def test_figures_are_named_in_words_with_units_and_three_significant_figures():
    rows = [{"figure": "ttft_ms p95", "unit": "ms", "a": 208.4567, "b": 12296.2, "diff": -0.0081249,
             "lo": -148.6, "hi": 0.8362, "verdict": "worse"},
            {"figure": "output tokens/s", "unit": "tok/s", "a": 1461.2, "b": None, "diff": None, "lo": None,
             "hi": None, "verdict": "too few samples"}]
    text = _text({"a": "run-a", "b": "run-b", "level": None, "rows": rows})
    assert "run-b (B) vs run-a (A)" in text and "None" not in text and "level" not in text
    assert "time to first token p95" in text and "ttft_ms" not in text
    line = next(ln for ln in text.splitlines() if "time to first token p95" in ln)
    for cell in ("ms", "208", "12,300", "-0.00812", "-149 to 0.836", "worse"):
        assert cell in line, cell
    assert "e+" not in text
    line = next(ln for ln in text.splitlines() if "output tokens/s" in ln)
    assert "1,460" in line and "too few samples" in line


def test_a_sweep_level_is_named():
    text = _text({"a": "a", "b": "b", "level": 16, "rows": []})
    assert "b (B) vs a (A) at level 16" in text


FAILURE_RATE = {"figure": "failure rate", "unit": "fraction", "a": 0.0125, "b": 0.05, "diff": 0.0375,
                "lo": 0.01, "hi": 0.06, "verdict": "worse"}


def test_the_failure_rate_is_a_percentage_not_a_bare_fraction():
    line = next(ln for ln in _text({"a": "a", "b": "b", "level": 16, "rows": [FAILURE_RATE]}).splitlines()
                if "failure rate" in ln)
    assert "fraction" not in line
    for cell in ("%", "1.25", "5", "3.75", "1 to 6"):
        assert f" {cell} " in line, cell


def test_the_comparison_report_shows_the_failure_rate_in_percent(tmp_path):
    import re

    from servelab.report.html_advice import comparison_section
    from servelab.report.html_page import Page

    page = Page(tmp_path / "c.html")
    comparison_section(page, {"names": ["a", "b"], "figures": [FAILURE_RATE], "diff": []})
    row = re.search(r"<tr><td[^>]*>failure rate.*?</tr>", "".join(page.parts))
    assert row
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0))
    assert cells == ["failure rate (%)", "1.25", "5", "+3.75", "+1 to +6", "worse"]
