"""Pre-flight (issue 9): a run that cannot measure anything useful fails before its first request, exit 2,
with a message that says what to do, and leaves no run directory behind. Against the simulator's HTTP
server over loopback, and the in-process simulator."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.cli.main import main
from servelab.clock import WallClock

SMALL = [
    "--requests",
    "4",
    "--concurrency",
    "1",
    "--input-tokens",
    "32",
    "--output-tokens",
    "8",
    "--no-report",
]


@pytest.fixture(scope="module")
def sim_root() -> Iterator[tuple[str, str]]:
    """The simulator's HTTP front on a free loopback port: (root URL, served model name)."""
    from servelab.sim.server import make_engine, start_server

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start():
        engine, deployment = make_engine("sim", WallClock(), seed=0)
        return await start_server(engine, deployment, host="127.0.0.1", port=0)

    srv = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        import json
        import urllib.request

        with urllib.request.urlopen(srv.base_url + "/models", timeout=5) as r:
            model = json.loads(r.read())["data"][0]["id"]
        yield srv.base_url.removesuffix("/v1"), model
    finally:
        asyncio.run_coroutine_threadsafe(srv.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def _nothing_left(out: Path) -> bool:
    return not out.exists() or not any(out.iterdir())


def test_target_without_v1_suggests_it(sim_root, tmp_path, capsys):
    root, _ = sim_root
    out = tmp_path / "runs"
    assert main(["run", "--target", root, "--out", str(out), *SMALL]) == 2
    err = capsys.readouterr().err
    assert f"did you mean {root}/v1?" in err and "Traceback" not in err
    assert _nothing_left(out)


def test_model_not_served_names_the_served_models(sim_root, tmp_path, capsys):
    root, model = sim_root
    out = tmp_path / "runs"
    assert main(["run", "--target", root + "/v1", "--model", "no-such-model", "--out", str(out), *SMALL]) == 2
    err = capsys.readouterr().err
    assert "model 'no-such-model' is not served" in err and f"it serves: '{model}'" in err
    assert _nothing_left(out)


def test_served_model_runs(sim_root, tmp_path, capsys):
    root, model = sim_root
    cfg = tmp_path / "lag.yaml"  # the server shares this process: loop lag must not make it INVALID here
    cfg.write_text("limits: {max_lag_p99_ms: 1000}\n")
    assert (
        main(
            [
                "run",
                "--target",
                root + "/v1",
                "--model",
                model,
                "--config",
                str(cfg),
                "--out",
                str(tmp_path),
                *SMALL,
            ]
        )
        == 0
    )


def test_prompt_plus_output_over_the_context_is_refused_with_the_numbers(tmp_path, capsys):
    target = "sim:llama-3.1-8b@1xh100,max_model_len=2048"
    args = ["run", "--target", target, "--requests", "4", "--concurrency", "1", "--input-tokens", "2000",
            "--output-tokens", "100", "--no-report"]
    out = tmp_path / "runs"
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "2000 prompt + 100 output = 2100 tokens do not fit the served context of 2048 tokens" in err
    assert "--allow-over-context" in err
    assert _nothing_left(out)
    # Asked to send them anyway: the server refuses every one, the run is written and nothing succeeded (2).
    assert main([*args, "--out", str(out), "--allow-over-context", "--json"]) == 2
    captured = capsys.readouterr()
    assert "nothing trustworthy measured" in captured.err and '"ok": 0' in captured.out
    assert len(list(out.iterdir())) == 1


def test_an_unwritable_output_directory_is_a_message_not_a_traceback(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert main(["run", "--out", str(blocker / "runs"), *SMALL]) == 2
    err = capsys.readouterr().err
    assert "cannot write run directories under" in err and "--out" in err and "Traceback" not in err
