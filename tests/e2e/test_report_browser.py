"""Open the HTML report in headless Chromium: it renders, shows the verdict and the knee plot, logs no
console message, and fetches nothing. Needs Debian's `chromium` (CI: apt-get install -y chromium)."""

import os
import shutil
import subprocess

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
    acc_b = {"setup": "B", "summary": {"accuracy": {"value": 0.6, "lo": 0.5, "hi": 0.69}, "correct": 60,
                                       "answered": 100},
             "vs_first_setup": {"flagged": True, "verdict": "quality drop", "diff": -0.2, "lo": -0.3, "hi": -0.1}}
    d = write_grouped_sweep(tmp_path / "sweep", {"n1": ({"target": "sim:a@1"}, 4, 1), "n2": ({"target": "sim:a@2"}, 8, 2)},
                            levels=(1, 4, 16), accuracy={"n1": acc_a, "n2": acc_b})
    dom = _chromium(tmp_path, "dom", "--dump-dom", write_sweep_report(d).resolve().as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "target=sim:a@1: the knee is at concurrency 4" in dom.stdout
    assert 'id="scaling"' in dom.stdout and "Scaling across node counts" in dom.stdout
    assert '<p class="alarm"><b>Quality warning: target=sim:a@2, concurrency=16 gains +' in dom.stdout
    assert [ln for ln in dom.stderr.splitlines() if ":CONSOLE(" in ln] == []
