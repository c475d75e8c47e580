"""aiohttp (10 MB of RSS) is loaded only when a run fetches a /metrics page over HTTP, not by importing the
run: a run with telemetry off or against the simulator never holds it."""

import subprocess
import sys


def test_importing_a_run_does_not_load_aiohttp():
    code = ("import sys, servelab.bench.run, servelab.bench.finish, servelab.telemetry.sources; "
            "print('aiohttp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_http_metrics_fetches_with_aiohttp_when_first_called():
    import asyncio

    from servelab.telemetry.sources import HttpMetrics

    m = HttpMetrics("http://127.0.0.1:9/metrics", timeout_s=0.5)  # nothing listens on the discard port

    async def go() -> str:
        try:
            return await m()
        except Exception as e:  # noqa: BLE001 - the connection error is the point: aiohttp was used
            return type(e).__module__
        finally:
            await m.aclose()

    assert asyncio.run(go()).startswith("aiohttp")


def test_aiohttp_is_loaded_when_the_source_is_made_not_on_the_loop_at_the_first_fetch():
    # The first fetch runs on the event loop during the load: importing aiohttp there (~0.1 s) was timer
    # lag that made real-engine runs INVALID. Making the source (before the load starts) loads it.
    code = ("import sys; from servelab.telemetry.sources import HttpMetrics; "
            "HttpMetrics('http://127.0.0.1:9/metrics'); print('aiohttp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
