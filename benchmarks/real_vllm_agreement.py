"""servelab's counts beside a real vLLM's own counters, at concurrency 1, 4, 16 and 32.

For each level: scrape vLLM's /metrics, run servelab (bench.run.execute) with lognormal prompt and output
lengths, wait until vLLM's request counter settles, scrape again. The reference, measured in the same run,
is what vLLM says it did over that interval: deltas of vllm:request_success_total,
vllm:prompt_tokens_total and vllm:generation_tokens_total. servelab must agree within 1% (exit 1 if not).

    bash scripts/engines/ci_engines.sh        # or any vLLM; URL from SERVELAB_VLLM_URL / .ci/engines.env
    PYTHONPATH=src python benchmarks/real_vllm_agreement.py [--url http://127.0.0.1:8092/v1] [--levels
    1,4,16,32]
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from servelab.bench.run import execute
from servelab.config import RunConfig, validate

COUNTERS = ("vllm:request_success_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total")
TOLERANCE = 0.01


def env_file_value(key: str) -> str | None:
    path = Path(
        os.environ.get("SERVELAB_ENGINES_ENV", Path(__file__).resolve().parents[1] / ".ci/engines.env")
    )
    if os.environ.get(key):
        return os.environ[key]
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.startswith(key + "="):
                return shlex.split(line.split("=", 1)[1])[0]
    return None


def scrape(root: str) -> dict[str, float]:
    """Sum of each counter over its label sets (e.g. every finished_reason)."""
    with urllib.request.urlopen(root + "/metrics", timeout=10) as r:  # noqa: S310 - the user's own server
        text = r.read().decode()
    out = dict.fromkeys(COUNTERS, 0.0)
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in out:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out


def settled(
    root: str, expect_requests: float, before: dict[str, float], limit_s: float = 10.0
) -> dict[str, float]:
    """Scrape until vLLM has counted every request (its counters update just after the last byte)."""
    deadline = time.monotonic() + limit_s
    while True:
        now = scrape(root)
        done = now["vllm:request_success_total"] - before["vllm:request_success_total"]
        if done >= expect_requests or time.monotonic() > deadline:
            return now
        time.sleep(0.2)


def level_config(
    url: str, model: str | None, concurrency: int, requests: int, out: Path, seed: int
) -> RunConfig:
    return validate(
        RunConfig,
        {
            "target": {"url": url, "model": model},
            "load": {"concurrency": concurrency},
            "limits": {"requests": requests},
            "workload": {
                "input_tokens": {"kind": "lognormal", "median": 200, "sigma": 0.6, "min": 16, "max": 1200},
                "output_tokens": {"kind": "lognormal", "median": 48, "sigma": 0.6, "min": 4, "max": 256},
                "ignore_eos": True,
            },
            "telemetry": {"enabled": False},  # the reference is scraped here, outside servelab
            "out": str(out),
            "seed": seed,
        },
        source="benchmark",
    )


def rel(mine: float, theirs: float) -> float:
    return (mine - theirs) / theirs if theirs else float("inf")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=env_file_value("SERVELAB_VLLM_URL"), help="vLLM base URL ending in /v1")
    ap.add_argument("--model", default=env_file_value("SERVELAB_VLLM_MODEL"))
    ap.add_argument("--levels", default="1,4,16,32")
    ap.add_argument("--requests-per-user", type=int, default=6)
    a = ap.parse_args(argv)
    if not a.url:
        print(
            "no vLLM URL: pass --url, set SERVELAB_VLLM_URL, or run scripts/engines/ci_engines.sh",
            file=sys.stderr,
        )
        return 2
    root = a.url.rstrip("/").removesuffix("/v1")
    rows = []
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for i, c in enumerate(int(x) for x in a.levels.split(",")):
            n = max(16, c * a.requests_per_user)
            before = scrape(root)
            t0 = time.monotonic()
            res = execute(level_config(a.url, a.model, c, n, Path(tmp), seed=1000 + i), report=False)
            wall = time.monotonic() - t0
            s = res.summary
            after = settled(root, s["requests"]["ok"], before)
            d = {k: after[k] - before[k] for k in COUNTERS}
            mine = (s["requests"]["ok"], s["tokens"]["input"], s["tokens"]["output"])
            diffs = [rel(m, d[k]) for m, k in zip(mine, COUNTERS, strict=True)]
            worst = max(worst, *(abs(x) for x in diffs))
            rows.append(
                (c, n, *mine, *(d[k] for k in COUNTERS), *diffs, wall, s["throughput"]["output_tokens_per_s"])
            )
    head = (f"{'conc':>4} {'sent':>5} | {'requests':>15} {'diff':>7} | {'prompt tokens':>17} {'diff':>7} | "
            f"{'generation tokens':>17} {'diff':>7} | {'wall s':>6} {'out tok/s':>9}")
    print(f"servelab vs vLLM's own counters at {a.url} (servelab/vLLM)")
    print(head)
    print("-" * len(head))
    for c, n, rq, pt, gt, srq, spt, sgt, drq, dpt, dgt, wall, tps in rows:
        print(f"{c:>4} {n:>5} | {rq:>7}/{srq:<7.0f} {drq:>+7.2%} | {pt:>8}/{spt:<8.0f} {dpt:>+7.2%} | "
              f"{gt:>8}/{sgt:<8.0f} {dgt:>+7.2%} | {wall:>6.1f} {tps:>9.0f}")
    ok = worst <= TOLERANCE
    print(f"worst relative difference {worst:.3%} (tolerance {TOLERANCE:.0%}): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
