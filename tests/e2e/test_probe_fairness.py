"""Engine facts reach the manifest and make `compare`/`check` refuse unfair HTTP pairs.

Two loopback servers imitate SGLang (its /get_server_info) with different max_running_requests and dtype:
before the probe every fairness dimension of an HTTP target was "not recorded" and the pair compared with
exit 0. The CLI runs in the test's thread, the servers on a loop in a background thread.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path

import pytest
from aiohttp import web

from servelab.cli.main import main
from tests.engine_fronts import sglang_app, vllm_app


class Background:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro, timeout: float = 15.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"  # type: ignore[union-attr]


@pytest.fixture
def serve():
    bg, runners = Background(), []

    def start(app: web.Application) -> str:
        runner, url = bg.call(_serve(app))
        runners.append(runner)
        return url

    yield start
    for r in runners:
        bg.call(r.cleanup())
    bg.close()


def _run(url: str, out: Path, capsys) -> str:
    code = main(["run", "--target", url, "--out", str(out), "--concurrency", "2", "--requests", "12",
                 "--input-tokens", "16", "--output-tokens", "4", "--no-report"])
    err = capsys.readouterr().err
    assert code == 0, err
    m = re.search(r"run written to (\S+)", err)
    assert m, err
    return m.group(1)


def test_endpoints_differing_in_batch_size_and_dtype_are_unfair(serve, tmp_path, capsys):
    a = _run(serve(sglang_app(max_running_requests=256, dtype="bfloat16")), tmp_path / "a", capsys)
    b = _run(serve(sglang_app(max_running_requests=64, dtype="float16")), tmp_path / "b", capsys)
    target = json.loads((Path(b) / "manifest.json").read_text())["target"]
    assert target["engine"] == "sglang" and target["version"] == "0.4.10"
    assert target["server_info"]["max_running_requests"] == 64 and target["server_info"]["dtype"] == "float16"
    assert main(["compare", a, b]) == 2
    err = capsys.readouterr().err
    assert "2 dimensions" in err and "batch policy" in err and "quantization / dtype" in err, err
    assert main(["check", a, b]) == 2
    assert "batch policy" in capsys.readouterr().err
    assert main(["compare", a, b, "--force", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    by = {r["dimension"]: r for r in result["diff"]}
    assert by["batch_policy"]["status"] == "differs" and by["quantization"]["status"] == "differs"
    assert by["parallelism"]["status"] == "same" and by["engine"]["status"] == "same"
    assert result["unfair"]


def test_one_engine_setting_differing_is_the_comparison(serve, tmp_path, capsys):
    a = _run(serve(vllm_app(cache_dtype="auto")), tmp_path / "a", capsys)
    b = _run(serve(vllm_app(cache_dtype="fp8")), tmp_path / "b", capsys)
    assert main(["compare", a, b, "--json"]) == 0
    by = {r["dimension"]: r for r in json.loads(capsys.readouterr().out)["diff"]}
    assert by["quantization"]["values"] == ["auto", "fp8"] and by["quantization"]["status"] == "differs"
    assert by["context_limit"]["status"] == "same" and by["prefix_caching"]["status"] == "same"
