"""`servelab sim serve` serves the same default deployment as `run` and `sweep` (Llama-3.1-8B on one H100),
says so in --help, and still serves `sim` (the tiny synthetic model) when asked."""

from __future__ import annotations

from servelab.cli.main import main


def _served(monkeypatch, argv: list[str]) -> str:
    import servelab.sim.server as server

    seen: dict[str, str] = {}

    async def fake_serve(deployment: str, **_kw) -> None:
        seen["deployment"] = deployment

    monkeypatch.setattr(server, "serve", fake_serve)
    assert main(["sim", "serve", "--port", "0", *argv]) == 0
    return seen["deployment"]


def test_sim_serve_defaults_to_llama_8b_on_one_h100(monkeypatch):
    assert _served(monkeypatch, []) == "sim:llama-3.1-8b@1xh100"


def test_the_tiny_model_stays_selectable(monkeypatch):
    assert _served(monkeypatch, ["--deployment", "sim"]) == "sim"


def test_sim_serve_help_shows_the_default(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["sim", "serve", "-h"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "[default: sim:llama-3.1-8b@1xh100]" in text
    assert "sim (a tiny synthetic model, for tests)" in text
