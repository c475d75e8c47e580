"""`servelab accuracy` end to end against a scripted OpenAI-style answer server on 127.0.0.1.

The server knows the right answer to every generated item (the test builds the same set) and serves two
"models" under two URL prefixes: ``/good/v1`` answers every item right, ``/lossy/v1`` answers every fourth
item wrong (its answer plus one). The CLI must report 100% and ~75% with intervals, agreement on the
items where both answered the same, and flag the lossy target's quality drop.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path

import pytest
from aiohttp import web

from servelab.accuracy.dataset import generate_items
from servelab.cli.main import main

N = 40
SEED = 5


class AnswerServer:
    def __init__(self, items) -> None:
        self.index = {it.prompt: (i, it.expected, it.matcher) for i, it in enumerate(items)}
        self.bodies: list[dict] = []

    def _answer(self, lossy: bool, prompt: str) -> str:
        i, expected, matcher = self.index[prompt]
        if matcher == "regex":  # a generated name item: the pattern holds the name as its group
            name = re.search(r"\(([a-z]+)\)", expected).group(1)
            return name + "x" if lossy and i % 4 == 0 else f"The name is {name.capitalize()}."
        if lossy and i % 4 == 0:
            return str(int(expected) + 1)
        return f"The answer is {expected}."

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        lossy = request.match_info["which"] == "lossy"
        text = self._answer(lossy, body["messages"][-1]["content"])
        return web.json_response(
            {
                "id": "x",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
            }
        )

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": f"{request.match_info['which']}-model",
                                                              "object": "model"}]})


@pytest.fixture
def answer_server():
    server = AnswerServer(generate_items(N, SEED))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def up():
        app = web.Application()
        app.router.add_post("/{which}/v1/chat/completions", server.chat)
        app.router.add_get("/{which}/v1/models", server.models)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]

    runner, port = asyncio.run_coroutine_threadsafe(up(), loop).result(10)
    yield server, f"http://127.0.0.1:{port}"
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_two_targets_accuracy_agreement_and_drop(answer_server, tmp_path: Path, capsys):
    server, root = answer_server
    rc = main(["accuracy", "--target", f"{root}/good/v1", "--target", f"{root}/lossy/v1", "--n", str(N),
               "--seed", str(SEED), "--concurrency", "4", "--out", str(tmp_path), "--json", "--fail-on-drop"])
    out = capsys.readouterr()
    assert rc == 1, out.err  # the lossy target's drop is flagged, and --fail-on-drop makes that exit 1
    report = json.loads(out.out)
    good, lossy = report["targets"]
    assert good["model"] == "good-model" and lossy["model"] == "lossy-model"
    assert (good["correct"], good["answered"], good["failed"]) == (N, N, 0)
    assert (
        good["accuracy"]["value"] == 1.0 and good["accuracy"]["hi"] == 1.0 and good["accuracy"]["lo"] > 0.85
    )
    assert lossy["correct"] == N - N // 4
    assert lossy["accuracy"]["lo"] < 0.75 < lossy["accuracy"]["hi"]
    (pair,) = report["agreement"]
    assert pair["paired"] == N and pair["answer"]["k"] == N - N // 4
    assert sorted(pair["differing_ids"]) == sorted(it.id for i, it in enumerate(generate_items(N, SEED))
                                                   if i % 4 == 0)
    (q,) = report["quality"]
    assert q["flagged"] and q["diff"] == pytest.approx(-0.25) and q["hi"] < 0
    assert all(b["temperature"] == 0.0 and b["stream"] is False for b in server.bodies)
    assert len(server.bodies) == 2 * N
    run_dir = next(tmp_path.iterdir())
    saved = json.loads((run_dir / "accuracy.json").read_text())
    assert saved["targets"] == report["targets"] and saved["dataset"]["seed"] == SEED
    rows = [json.loads(line) for line in (run_dir / "items.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * N
    assert {r["target"] for r in rows} == {0, 1}
    assert all(r["prompt"] and r["response"] for r in rows)


def test_one_target_table_and_user_dataset(answer_server, tmp_path: Path, capsys):
    _, root = answer_server
    items = generate_items(N, SEED)[:6]
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"prompt": it.prompt, "expected": it.expected, "matcher": it.matcher,
                                        "id": it.id}) + "\n" for it in items))
    rc = main(
        ["accuracy", "--target", f"{root}/lossy/v1", "--dataset", str(data), "--out", str(tmp_path / "r")]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "accuracy on 6 items" in out.out and "4 / 6" in out.out  # items 0 and 4 are answered wrong
    assert "accuracy run written to" in out.err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--target", "ftp://x"], "neither an http(s) URL"),
        (["--target", "sim", "--matcher", "fuzzy"], "unknown matcher"),
        (["--target", "sim", "--dataset", "/nonexistent/set.jsonl"], "does not exist"),
        (
            ["--target", "sim", "--target", "sim", "--model", "a", "--model", "b", "--model", "c"],
            "3 --model values",
        ),
        (["--target", "sim", "--max-drop", "1.5"], "--max-drop must be a fraction"),
        (["--target", "http://127.0.0.1:9/v1", "--n", "2"], "cannot reach"),
    ],
)
def test_bad_input_exits_2_with_a_message(tmp_path: Path, capsys, args, needle):
    assert main(["accuracy", *args, "--out", str(tmp_path)]) == 2
    assert needle in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_sweep_over_two_setups_flags_the_quality_drop(answer_server, tmp_path: Path, capsys):
    # The answer server fails the benchmark's own prompts (it only knows the answer set): the sweep records
    # those as errors and goes on; what is checked here is the accuracy run per setup and its verdict.
    server, root = answer_server
    rc = main(
        [
            "sweep",
            "--target",
            f"{root}/good/v1",
            "--target",
            f"{root}/lossy/v1",
            "--concurrency",
            "1",
            "--requests",
            "2",
            "--no-stream",
            "--accuracy",
            str(N),
            "--seed",
            str(SEED),
            "--out",
            str(tmp_path),
            "--json",
            "--no-report",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    state = json.loads(capsys.readouterr().out)
    good, lossy = state["points"]
    assert good["accuracy"]["summary"]["correct"] == N
    assert lossy["accuracy"]["summary"]["correct"] == N - N // 4
    assert lossy["accuracy"]["vs_first_setup"]["flagged"] is True
