"""`servelab accuracy` against the simulator: no advice about max_tokens for text that cannot be judged, and
the table's title sits left like every other table."""

from __future__ import annotations

from servelab.cli.accuracy_cmd import _print


def _report(measurable: bool) -> dict:
    target = {"index": 0, "url": "http://127.0.0.1:8000/v1", "model": "Llama-3.1-8B", "correct": 0,
              "answered": 195, "failed": 5, "wrong_at_length_limit": 101,
              "accuracy": {"value": 0.0, "lo": 0.0, "hi": 0.02}}
    if not measurable:
        target.update(measurable=False, note="not measurable (simulated text)")
    return {"dataset": {"items": 200, "source": "generated"}, "targets": [target], "agreement": [],
            "quality": []}


def test_simulated_text_gets_no_max_tokens_note(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "140")
    _print(_report(measurable=False))
    out = capsys.readouterr().out
    assert "not measurable (simulated text)" in out and "max_tokens" not in out
    assert out.startswith("accuracy on 200 items")  # left, not centred over the table
    _print(_report(measurable=True))
    assert "101 wrong answer(s) hit max_tokens" in capsys.readouterr().out
