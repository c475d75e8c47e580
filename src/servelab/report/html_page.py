"""Building blocks of the HTML report: escaping, number formatting, tables, and the page with inline PNGs.

Every text that came from a server or a user passes through :func:`esc` (or :func:`table`, which escapes
every cell). The page has inline CSS and base64 PNGs only: no script, nothing fetched.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1000px;
padding:16px 24px;color:#1d1d1f;background:#fff}
h1{font-size:22px;margin:8px 0}\
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.verdict{background:#f0f6ff;border-left:5px solid #2a6fdb;padding:10px 14px;font-size:15px}
.verdict.bad{background:#fff3f0;border-left-color:#d62728}
.verdict p{margin:4px 0}
.verdict .alarm{background:#fde2dd;border:1px solid #d62728;border-radius:3px;padding:6px 10px;color:#8b1a10}
.warn{color:#a33}.muted{color:#666;font-size:12px}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f6f6f6}
td.l,th.l{text-align:left}
tr.flagged td{background:#fde2dd}
img{max-width:100%;height:auto;display:block;margin:6px 0}
pre{background:#f7f7f7;padding:8px;overflow:auto;font-size:12px;max-height:480px}
.tag{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px;background:#eee}
.tag.recommended,.tag.required,.tag.better{background:#d9f2d9}.tag.worse,.tag.not-possible{background:#f8d7d2}
.headline{font-size:16px;margin:6px 0 10px}
.banner{padding:8px 14px;margin:8px 0;border-radius:3px;font-size:14px}
.banner.ok{background:#e3f4e3;border-left:5px solid #2ca02c}\
.banner.bad{background:#fde2dd;border-left:5px solid #d62728}
.tiles{display:flex;flex-wrap:wrap;gap:8px;margin:8px 0}
.tile{border:1px solid #ddd;border-radius:4px;padding:6px 12px;min-width:120px}
.tile .v{font-size:20px;font-weight:600}.tile .k{font-size:12px;color:#666}
a.csv{font-size:11px;color:#2a6fdb;margin:0 0 10px;display:inline-block}
.toosmall{color:#666;font-style:italic}
"""


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def num(v: Any, fmt: str = "{:,.1f}") -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    return fmt.format(v)


def pct(v: Any) -> str:
    return num(v, "{:.0%}")


def get(d: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(d, Mapping):
            return None
        d = d.get(p)
    return d


def csv_link(head: Sequence[str], rows: Sequence[Sequence[Any]], name: str = "table") -> str:
    """A download link carrying the table as CSV in a data: URI (the page stays one offline file)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([str(h) for h in head])
    for r in rows:
        w.writerow(["" if c is None else str(c) for c in r])
    data = base64.b64encode(buf.getvalue().encode("utf-8")).decode("ascii")
    fname = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "table"
    return f'<a class="csv" download="{esc(fname)}.csv" href="data:text/csv;base64,{data}">download CSV</a>'


def table(
    head: Sequence[str],
    rows: Sequence[Sequence[Any]],
    left: int = 1,
    row_classes: Sequence[str] | None = None,
    left_last: bool = False,
    csv_name: str | None = None,
) -> str:
    """An HTML table, every cell escaped; the first ``left`` columns (and the last, with ``left_last``:
    words rather than figures) are left-aligned; ``row_classes`` gives each row a CSS class ("" for none).
    A CSV download link follows the table (named ``csv_name``, else after the first heading)."""
    n = len(head)
    al = ['"l"' if i < left or (left_last and i == n - 1) else '""' for i in range(n)]
    th = "".join(f"<th class={al[i]}>{esc(h)}</th>" for i, h in enumerate(head))
    body = []
    for j, r in enumerate(rows):
        cls = f' class="{esc(row_classes[j])}"' if row_classes and row_classes[j] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td class={al[i]}>{esc(c)}</td>"
                                            for i, c in enumerate(r)) + "</tr>")
    link = csv_link(head, rows, csv_name or (str(head[0]) if head else "table"))
    return f"<table><tr>{th}</tr>{''.join(body)}</table>{link}"


class Page:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.parts: list[str] = []
        self.images: list[Path] = []

    def add(self, s: str) -> None:
        self.parts.append(s)

    def h2(self, title: str) -> None:
        self.add(f"<h2>{esc(title)}</h2>")

    def image(self, name: str, alt: str, draw: Any) -> None:
        """Draw a PNG beside the report (``draw(path)``) and inline it."""
        path = self.out.parent / f"{self.out.stem}-{name}.png"
        draw(path)
        self.images.append(path)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        self.add(f'<img id="{esc(name)}" alt="{esc(alt)}" src="data:image/png;base64,{data}">')

    def footer(self) -> None:
        """Say where the chart files are: every chart is inline, and also written beside the page as PNG."""
        if self.images:
            names = ", ".join(p.name for p in self.images)
            self.add(
                f'<p class="muted" id="files">Charts are embedded in this page; copies as PNG files beside '
                f"it in {esc(str(self.out.parent))}: {esc(names)}. Each table has a CSV download link.</p>"
            )

    def render(self, title: str) -> str:
        return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
                f'<meta name="viewport" content="width=device-width, initial-scale=1">'
                f"<style>{CSS}</style></head><body>{''.join(self.parts)}</body></html>")
