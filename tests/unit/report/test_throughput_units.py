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


def test_the_measured_window_has_its_unit_in_the_unit_column(tmp_path):
    page = Page(tmp_path / "r.html")
    key_figures(page, {"metrics": {}, "throughput": {"requests_per_s": 7.2139, "output_tokens_per_s": 1461.4,
                                                      "duration_s": 27.7281}})
    rows = _rows("".join(page.parts))
    assert rows == [["requests", "7.21", "req/s"], ["output tokens", "1,460", "tokens/s"],
                    ["measured window", "27.7", "s"]]
