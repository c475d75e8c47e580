"""`servelab gateway-overhead` prints figures like every other table: names in words, three significant
figures ('2,409.0', '-28.14', '-0.0' before), the title on the left."""

from __future__ import annotations

from servelab.cli.gateway_cmd import _print


def _row(figure, unit, direct, via, over, lo, hi, pct, plo, phi):
    return {"figure": figure, "unit": unit, "direct": direct, "via": via, "overhead": over, "overhead_lo": lo,
            "overhead_hi": hi, "overhead_pct": pct, "pct_lo": plo, "pct_hi": phi,
            "verdict": "no measurable overhead"}


RESULT = {
    "targets": {"direct": "http://127.0.0.1:8000/v1", "via": "http://localhost:8000/v1"}, "confidence": 0.95,
    "rows": [_row("ttft p99", "ms", 69.91, 41.72, -28.14, -65.36, -3.72, -40.3, -61.3, -8.2),
             _row("e2e p50", "ms", 2409.04, 2374.43, -34.61, -54.19, -27.15, -1.43, -2.2, -1.1),
             _row("requests/s", "req/s", 6.4012, 6.4011, -0.0001, -0.03, 0.02, -0.001, -0.4, 0.4)],
    "failures": {"direct": {"failed": 0, "requests": 400}, "via": {"failed": 0, "requests": 400}},
    "order": ["prime", "direct-1", "via-1"], "output_lengths": {"identical": True},
}


def _cells(out: str, start: str) -> list[str]:
    line = next(ln for ln in out.splitlines() if ln.startswith("│ " + start))
    return [c.strip() for c in line.split("│")[1:-1]]


def test_gateway_table_names_and_figures(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    _print(RESULT)
    out = capsys.readouterr().out
    assert out.startswith("gateway overhead:")
    assert _cells(out, "time to first token p99") == [
        "time to first token p99 (ms)", "69.9", "41.7", "-28.1", "[-65.4, -3.72]", "-40.3", "[-61.3, -8.20]",
        "no measurable overhead"]
    assert _cells(out, "end-to-end latency p50")[1:5] == ["2,410", "2,370", "-34.6", "[-54.2, -27.1]"]
    assert _cells(out, "requests/s")[1:7] == ["6.40", "6.40", "-0.000100", "[-0.0300, 0.0200]", "-0.00100",
                                              "[-0.400, 0.400]"]
