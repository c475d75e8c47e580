"""Open the HTML report in headless Chromium: it renders, shows the verdict and the knee plot, logs no
console message, and fetches nothing. Needs Debian's `chromium` (CI: apt-get install -y chromium)."""

import asyncio
import contextlib
import html
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from servelab.report.html import write_sweep_report
from tests.unit.report.fake_runs import CAPACITY, write_grouped_sweep, write_sweep

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Locally a missing browser skips; in CI (CI=true, where .ci/run installs it) it fails.
pytestmark = pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                                reason="chromium is not installed (apt-get install -y chromium)")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]


def _chromium(tmp_path, name, *args):
    profile = tmp_path / f"profile-{name}"  # a fresh profile each time
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=90)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return write_sweep_report(write_sweep(tmp_path_factory.mktemp("sweep")))


def test_report_renders_in_chromium(tmp_path, report):
    url = report.resolve().as_uri()
    dom = _chromium(tmp_path, "dom", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert f"The knee is at concurrency {CAPACITY}" in dom.stdout
    assert 'id="knee"' in dom.stdout and 'src="data:image/png;base64,' in dom.stdout
    console = [ln for ln in dom.stderr.splitlines() if ":CONSOLE(" in ln]
    assert console == []

    shot = tmp_path / "shot.png"
    run = _chromium(tmp_path, "shot", "--window-size=1100,1400", f"--screenshot={shot}", url)
    assert run.returncode == 0, run.stderr[-2000:]
    assert [ln for ln in run.stderr.splitlines() if ":CONSOLE(" in ln] == []
    img = mpimg.imread(shot)
    assert img.shape[0] == 1400 and img.shape[1] == 1100
    assert img[..., :3].std() > 0.05  # not a blank page: text and the knee plot are drawn


def test_grouped_sweep_with_scaling_and_a_quality_drop_renders(tmp_path):
    acc_a = {"setup": "A", "summary": {"accuracy": {"value": 0.8, "lo": 0.7, "hi": 0.87}, "correct": 80,
                                       "answered": 100}}
    acc_b = {
        "setup": "B",
        "summary": {"accuracy": {"value": 0.6, "lo": 0.5, "hi": 0.69}, "correct": 60, "answered": 100},
        "vs_first_setup": {"flagged": True, "verdict": "quality drop", "diff": -0.2, "lo": -0.3, "hi": -0.1},
    }
    d = write_grouped_sweep(
        tmp_path / "sweep",
        {"n1": ({"target": "sim:a@1"}, 4, 1), "n2": ({"target": "sim:a@2"}, 8, 2)},
        levels=(1, 4, 16),
        accuracy={"n1": acc_a, "n2": acc_b},
    )
    dom = _chromium(tmp_path, "dom", "--dump-dom", write_sweep_report(d).resolve().as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "target=sim:a@1: the knee is at concurrency 4" in dom.stdout
    assert 'id="scaling"' in dom.stdout and "Scaling across node counts" in dom.stdout
    assert '<p class="alarm"><b>Quality warning: target=sim:a@2, concurrency=16 gains +' in dom.stdout
    assert [ln for ln in dom.stderr.splitlines() if ":CONSOLE(" in ln] == []


# -- the reports a user gets, opened as a reader would --------------------------------------------------
# Runs, an agent run, a sweep and a comparison, made with the CLI against the simulator (and one against a
# loopback server that answers every completion with HTTP 404), each opened in headless Chromium.

SHOTS = os.environ.get("SERVELAB_SCREENSHOTS")  # a directory to keep the screenshots in (default: tmp)
REPR = re.compile(r"\{'|': |\{\"|\bNone\b|<class |\[\{")


def _not_found_app():
    from aiohttp import web

    async def models(_req):
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def chat(_req):
        return web.json_response({"error": {"message": "no route for model m at /v1/chat/completions",
                                            "type": "NotFoundError", "code": 404}}, status=404)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


@contextlib.contextmanager
def _serve_in_thread(app):
    from tests.loopback import serve_app

    loop = asyncio.new_event_loop()
    ready, stop = threading.Event(), None
    box = {}

    async def main():
        nonlocal stop
        stop = asyncio.Event()
        async with serve_app(app) as url:
            box["url"] = url
            ready.set()
            await stop.wait()

    t = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    t.start()
    assert ready.wait(30)
    try:
        yield box["url"]
    finally:
        loop.call_soon_threadsafe(stop.set)
        t.join(30)
        loop.close()


def _new_dir(parent: Path, before: set) -> Path:
    return max((p for p in parent.iterdir() if p not in before), key=lambda p: p.stat().st_mtime)


def _cli(out: Path, *args: str) -> tuple[int, Path]:
    from servelab.cli.main import main

    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    code = main([*args, "--out", str(out)])
    return code, _new_dir(out, before)


@pytest.fixture(scope="module")
def reader_reports(tmp_path_factory):
    from servelab.cli.main import main

    base = tmp_path_factory.mktemp("reader")
    small = ["--target", "sim", "--requests", "48", "--input-tokens", "256", "--output-tokens", "64"]
    out = {}
    code, out["run"] = _cli(base / "runs", "run", *small, "--concurrency", "4", "--seed", "1")
    assert code == 0
    code, b = _cli(base / "runs", "run", *small, "--concurrency", "4", "--seed", "2", "--no-report")
    assert code == 0
    with _serve_in_thread(_not_found_app()) as url:
        code, out["404"] = _cli(
            base / "runs",
            "run",
            "--target",
            f"{url}/v1",
            "--model",
            "m",
            "--requests",
            "12",
            "--concurrency",
            "2",
            "--input-tokens",
            "16",
            "--output-tokens",
            "8",
        )
    assert code == 2  # nothing succeeded
    code, out["agent"] = _cli(base / "runs", "run", "--target", "sim", "--profile", "chat", "--sessions", "4",
                              "--max-sessions", "8")
    assert code in (0, 1)
    comparison = base / "comparison.html"
    assert main(["compare", str(out["run"]), str(b), "--report", str(comparison)]) == 0
    pages = {k: v / "report.html" for k, v in out.items()}
    pages["comparison"] = comparison
    return pages


@pytest.fixture(scope="module")
def sweep_report(tmp_path_factory):
    base = tmp_path_factory.mktemp("reader-sweep")
    code, d = _cli(base, "sweep", "--target", "sim", "--concurrency", "1,4,16", "--requests", "48",
                   "--input-tokens", "256", "--output-tokens", "64")
    assert code in (0, 1)
    return d / "report.html"


def _dom(tmp_path, page: Path) -> str:
    dom = _chromium(tmp_path, "dom", "--dump-dom", page.resolve().as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert [ln for ln in dom.stderr.splitlines() if ":CONSOLE(" in ln] == []
    return dom.stdout


def _shot(tmp_path, name: str, page: Path) -> Path:
    where = Path(SHOTS) if SHOTS else tmp_path
    where.mkdir(parents=True, exist_ok=True)
    shot = where / f"{name}.png"
    run = _chromium(tmp_path, f"shot-{name}", "--window-size=1100,1300", f"--screenshot={shot}",
                    page.resolve().as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    assert mpimg.imread(shot)[..., :3].std() > 0.05  # text and charts drawn, not a blank page
    return shot


def _headline(dom: str) -> str:
    m = re.search(r'<p class="headline" id="headline">(.*?)</p>', dom, re.S)
    assert m, "no headline"
    return html.unescape(m.group(1))


@pytest.mark.parametrize("name", ["run", "404", "agent", "sweep", "comparison"])
def test_each_report_opens_with_a_readable_headline_and_a_validity_banner(tmp_path, request, name):
    page = request.getfixturevalue("sweep_report") if name == "sweep" else request.getfixturevalue(
        "reader_reports")[name]
    dom = _dom(tmp_path, page)
    head = _headline(dom)
    assert not REPR.search(head), head  # words, not a Python dict
    assert re.search(r"\b(simulated|real endpoint)\b", head), head
    banner = re.search(r'<div class="banner (ok|bad)" id="validity"><b>(VALID|INVALID)</b>', dom)
    assert banner, "no validity banner"
    assert dom.index('id="headline"') < dom.index('id="validity"')
    _shot(tmp_path, name, page)


def test_a_run_where_every_request_got_404_names_the_status(tmp_path, reader_reports):
    dom = _dom(tmp_path, reader_reports["404"])
    assert '<div class="banner bad" id="validity"><b>INVALID</b>' in dom
    errors = dom[dom.index('id="errors"'):]
    errors = errors[:errors.index("<h2", 5)]
    assert "12 of 12 requests failed (100%)" in errors
    row = re.search(
        r"<tr><td[^>]*>HTTP error</td><td[^>]*>404</td><td[^>]*>(\d+)</td><td[^>]*>([^<]*)</td>", errors
    )
    assert row, errors[:3000]
    assert int(row.group(1)) >= 1 and "no route for model m" in html.unescape(row.group(2))
    assert dom.index('id="errors"') < dom.index('id="ttft"') if 'id="ttft"' in dom else True


def test_the_agent_report_leads_with_the_task_block(tmp_path, reader_reports):
    dom = _dom(tmp_path, reader_reports["agent"])
    block = re.search(r'<div class="tiles" id="task-block">(.*?)</div></div></div>', dom, re.S)
    assert block
    words = html.unescape(re.sub(r"<[^>]+>", " ", block.group(1)))
    for label in ("completed", "accepted", "task time p50", "task time p95", "tasks per hour",
                  "cost per successful task"):
        assert label in words
    assert re.search(r"\d+ of 8\s+completed", words)
    assert dom.index('id="task-block"') < dom.index("Key figures") < dom.index('id="errors"')


def test_the_sweep_report_shows_the_pareto_chart(tmp_path, sweep_report):
    dom = _dom(tmp_path, sweep_report)
    assert re.search(r'<img id="pareto" alt="Pareto chart[^"]*" src="data:image/png;base64,', dom)
    assert 'download="pareto.csv"' in dom and 'href="data:text/csv;base64,' in dom
    assert dom.index('id="validity"') < dom.index('id="knee"') < dom.index('id="pareto"')


def test_the_comparison_report_puts_the_comparison_first(tmp_path, reader_reports):
    dom = _dom(tmp_path, reader_reports["comparison"])
    assert dom.index('id="validity"') < dom.index('id="comparison"') < dom.index("Key figures")
    assert re.search(r'<img id="pareto" alt="Pareto chart', dom)  # the compared runs as points
