"""Secrets never reach disk or logs (issue 9): every credential-looking header, URL user:password and
`--set target.headers.api-key=K` in a sweep; the whole run directory and the captured output are searched."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.cli.main import main
from servelab.clock import WallClock
from servelab.records.manifest import is_secret_name, redact, redact_argv

SECRET = "sk-Zq8sEcReT"
SMALL = ["--requests", "4", "--concurrency", "1", "--input-tokens", "16", "--output-tokens", "4"]


@pytest.fixture(scope="module")
def sim_root() -> Iterator[str]:
    from servelab.sim.server import make_engine, start_server

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start():
        engine, deployment = make_engine("sim", WallClock(), seed=0)
        return await start_server(engine, deployment, host="127.0.0.1", port=0)

    srv = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield srv.base_url.removesuffix("/v1").removeprefix("http://")
    finally:
        asyncio.run_coroutine_threadsafe(srv.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def _grep(root: Path, needle: str) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if needle in p.name:
            hits.append(f"name: {p}")
        if p.is_file() and needle.encode() in p.read_bytes():
            hits.append(f"content: {p}")
    return hits


FORMS = {
    "api-key header": lambda host: ["--target", f"http://{host}/v1", "--header", f"api-key: {SECRET}"],
    "x-api-key header": lambda host: ["--target", f"http://{host}/v1", "--header", f"x-api-key: {SECRET}"],
    "authorization header": lambda host: [
        "--target",
        f"http://{host}/v1",
        f"--header=Authorization: Bearer {SECRET}",
    ],
    "auth token header": lambda host: [
        "--target",
        f"http://{host}/v1",
        "--header",
        f"X-Auth-Token: {SECRET}",
    ],
    "cookie header": lambda host: ["--target", f"http://{host}/v1", "--header", f"Cookie: session={SECRET}"],
    "url userinfo": lambda host: ["--target", f"http://user:{SECRET}@{host}/v1"],
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_run_writes_no_secret(form, sim_root, tmp_path, capsys):
    # The server shares this process (and a loaded machine): loop lag must not turn the run INVALID here.
    cfg = tmp_path / "lag.yaml"
    cfg.write_text("limits: {max_lag_p99_ms: 1000}\n")
    rc = main(["run", *FORMS[form](sim_root), *SMALL, "--config", str(cfg), "--out", str(tmp_path / "runs")])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert any(tmp_path.rglob("manifest.json"))
    assert _grep(tmp_path, SECRET) == []
    assert SECRET not in captured.out and SECRET not in captured.err


def test_sweep_set_header_writes_no_secret(tmp_path, capsys):
    rc = main(["sweep", "--target", "sim", "--set", f"target.headers.api-key={SECRET}", "--concurrency", "1",
               *SMALL[:2], *SMALL[4:], "--out", str(tmp_path), "--json", "--no-report"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert any(tmp_path.rglob("sweep.json"))
    assert _grep(tmp_path, SECRET) == []
    assert SECRET not in captured.out and SECRET not in captured.err


def test_the_secret_name_rule():
    for name in (
        "Authorization",
        "Proxy-Authorization",
        "api-key",
        "x-api-key",
        "X-Goog-Api-Key",
        "Cookie",
        "X-Auth-Token",
        "access_token",
        "hf_token",
        "client_secret",
        "password",
        "target.headers.api-key",
    ):
        assert is_secret_name(name), name
    for name in (
        "X-Team",
        "tokenizer",
        "max_tokens",
        "input_tokens",
        "api_key_env",
        "session_id",
        "key",
        "model",
    ):
        assert not is_secret_name(name), name
    assert redact({"url": "https://u:p@h/v1", "n": {"token": 5}, "session_id": 3}) == {
        "url": "https://***@h/v1", "n": {"token": 5}, "session_id": 3}
    assert redact_argv(
        ["--header", "api-key: K", "--set", "target.headers.x-api-key=K", "-H", "X-Team: a"]
    ) == ["--header", "api-key: ***", "--set", "target.headers.x-api-key=***", "-H", "X-Team: a"]
