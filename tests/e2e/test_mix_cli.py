"""`servelab run --mix` from the command line (issue 10, item 6): bad input exits 2 with a message and writes
nothing; tenants' headers and keys reach an HTTP server (the simulator served on 127.0.0.1) per class, and
the key is in no file of the run directory nor in the output."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from aiohttp import web

from servelab.cli.main import main
from servelab.clock import WallClock

SECRET = "sk-MiXtEnAnT42"
TINY = """\
name: tiny
description: One short question, one short answer (a test profile).
session:
  name: tiny
  system_tokens: 8
  user_tokens: 16
  steps:
    - {kind: model, name: answer, output_tokens: 4}
"""


@pytest.mark.parametrize("mix, says", [
    ("chat", "--mix class 'chat' is not NAME:USERS or NAME@RATE"),
    ("chat:0", "users must be at least 1"),
    ("chat:4,chat:2", "class 'chat' appears twice in mix"),
    ("nosuch:4", "unknown profile 'nosuch'"),
])
def test_bad_mix_exits_2_with_a_message_and_no_run_dir(mix, says, tmp_path, capsys):
    rc = main(["run", "--mix", mix, "--out", str(tmp_path / "runs"), "--no-report"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert says in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_mix_with_a_load_flag_exits_2(tmp_path, capsys):
    rc = main(["run", "--mix", "chat:2", "--concurrency", "4", "--out", str(tmp_path / "runs")])
    assert rc == 2 and "each class sets its own load" in capsys.readouterr().err


@pytest.fixture()
def header_server() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """The tiny simulator over HTTP on 127.0.0.1; yields (base URL, headers of every completion request)."""
    from servelab.sim.server import build_app, make_engine

    seen: list[dict[str, str]] = []
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> tuple[web.AppRunner, int]:
        engine, deployment = make_engine("sim", WallClock(), seed=0)
        app = build_app(engine, deployment)

        async def note(request: web.Request, _response: web.StreamResponse) -> None:
            if request.path.endswith("/chat/completions"):
                seen.append({k.lower(): v for k, v in request.headers.items()})

        app.on_response_prepare.append(note)
        runner = web.AppRunner(app, shutdown_timeout=1.0, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    runner, port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield f"http://127.0.0.1:{port}/v1", seen
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def _files_holding(root: Path, needle: str) -> list[str]:
    return [
        str(p)
        for p in root.rglob("*")
        if needle in p.name or (p.is_file() and needle.encode() in p.read_bytes())
    ]


def test_tenant_headers_and_keys_reach_the_server_per_class_and_never_disk(header_server, tmp_path, capsys,
                                                                         monkeypatch):
    url, seen = header_server
    monkeypatch.setenv("SERVELAB_TEST_TENANT_KEY", SECRET)
    (tmp_path / "tiny.yaml").write_text(TINY)
    profile = str(tmp_path / "tiny.yaml")
    (tmp_path / "mix.yaml").write_text(
        json.dumps(
            {
                "mix": [
                    {
                        "workload": profile,
                        "name": "interactive",
                        "concurrency": 2,
                        "sessions": 4,
                        "tenant": "team-a",
                        "api_key_env": "SERVELAB_TEST_TENANT_KEY",
                        "headers": {"X-Tenant": "team-a"},
                    },
                    {
                        "workload": profile,
                        "name": "bulk",
                        "concurrency": 2,
                        "sessions": 6,
                        "tenant": "bulk",
                        "headers": {"X-Tenant": "bulk"},
                    },
                ],
                "limits": {"max_lag_p99_ms": 1000},  # the server shares this process and a loaded machine
            }
        )
    )
    out = tmp_path / "runs"
    rc = main(["run", "--target", url, "--config", str(tmp_path / "mix.yaml"), "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    by_tenant: dict[str, set[str | None]] = {}
    for h in seen:
        by_tenant.setdefault(h.get("x-tenant", "?"), set()).add(h.get("authorization"))
    assert by_tenant == {"team-a": {f"Bearer {SECRET}"}, "bulk": {None}}
    # 4 interactive sessions alone (the baseline), then 4 + 6 in the mix: one request each
    assert (
        sum(h.get("x-tenant") == "team-a" for h in seen) == 8
        and sum(h.get("x-tenant") == "bulk" for h in seen) == 6
    )
    run_dir = next(p.parent for p in out.glob("*/summary.json"))
    req = pq.read_table(run_dir / "requests.parquet").to_pylist()
    assert (
        sorted((r["mix_class"], r["tenant"]) for r in req)
        == [("bulk", "bulk")] * 6 + [("interactive", "team-a")] * 4
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {k: v["requests"]["ok"] for k, v in summary["classes"].items()} == {"interactive": 4, "bulk": 6}
    assert summary["interference"]["class"] == "interactive"
    assert "workload classes" in cap.out and "interference: interactive alone vs with bulk" in cap.out
    assert _files_holding(tmp_path / "runs", SECRET) == []
    assert SECRET not in cap.out and SECRET not in cap.err
    report = (run_dir / "report.html").read_text()
    assert 'id="classes"' in report and "interactive TTFT p95" in report
