"""The report's throughput table: every row has its unit in the unit column (the CSV export too),
figures to three significant figures."""

from __future__ import annotations

import re

from servelab.report.html_page import Page
from servelab.report.html_run import key_figures


def _rows(html: str) -> list[list[str]]:
    table = html[html.index("<th class=\"l\">throughput</th>"):]
    table = table[: table.index("</table>")]
    return [re.findall(r"<td[^>]*>(.*?)</td>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", table)]


def _table(tmp_path, throughput, goodput=None):
    page = Page(tmp_path / "r.html")
    key_figures(page, {"metrics": {}, "throughput": throughput, **({"goodput": goodput} if goodput else {})})
    return _rows("".join(page.parts))


def test_the_measured_window_has_its_unit_in_the_unit_column(tmp_path):
    rows = _table(tmp_path, {"requests_per_s": 7.2139, "output_tokens_per_s": 1461.4, "duration_s": 27.7281})
    assert rows == [["requests", "7.21", "req/s"], ["output tokens", "1,460", "tokens/s"],
                    ["measured window", "27.7", "s"]]
    # in the unit that reads best: an agent run's 1,035 s, a failed run's 3.12 ms
    assert _table(tmp_path, {"duration_s": 1035.2})[-1] == ["measured window", "17.3", "min"]
    assert _table(tmp_path, {"duration_s": 0.003124})[-1] == ["measured window", "3.12", "ms"]


def test_goodput_without_an_slo_does_not_claim_one(tmp_path):
    tp = {"goodput_requests_per_s": 7.2139}
    assert _table(tmp_path, tp, {"requests": 200, "fraction": 1.0, "slo": {}}) == [
        ["goodput (no SLO set: every ok request)", "7.21", "req/s"]]
    assert _table(tmp_path, tp, {"requests": 200, "fraction": 1.0, "slo": {"ttft_ms": 500}}) == [
        ["goodput (requests meeting the SLO)", "7.21", "req/s"]]
