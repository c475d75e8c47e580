"""The runner over a scripted in-memory transport on virtual time, the simulator target, and comparisons."""

from __future__ import annotations

import pytest

from servelab.accuracy.compare import agreement, flag_quality_drop
from servelab.accuracy.dataset import Item, generate_items
from servelab.accuracy.runner import accuracy_for_target, run_items, score
from servelab.clock import VirtualClock
from servelab.config.models import TargetConfig
from servelab.errors import ConfigError
from servelab.records.schema import HTTP_ERROR
from servelab.transport import mock
from servelab.transport.base import ModelRequest
from servelab.transport.mock import MockTransport


def scripted(clock: VirtualClock, answers: dict[str, str | None], delay_s: float = 0.5) -> MockTransport:
    """The in-library twin: answers each prompt from a table after ``delay_s`` (None: HTTP 503)."""

    def handler(req: ModelRequest) -> mock.Reply:
        text = answers[req.text()]
        if text is None:
            return mock.error(503, "overloaded", delay_s=delay_s)
        return mock.chat_json(text, delay_s=delay_s, finish="stop")

    return MockTransport(handler, clock)


def _run(items, answers, concurrency=3):
    clock = VirtualClock()
    t = scripted(clock, answers)

    async def main():
        return await run_items(t, items, clock=clock, concurrency=concurrency, max_tokens=32,
                               system_prompt="Be brief.")

    return clock.run(main), t, clock


def test_run_items_judges_and_limits_concurrency():
    items = generate_items(12, seed=0)
    answers = {}
    for i, it in enumerate(items):
        answers[it.prompt] = None if i == 5 else (it.expected if i % 3 else "no idea")
    results, t, clock = _run(items, {f"Be brief.\n{k}": v for k, v in answers.items()})
    assert [r.id for r in results] == [it.id for it in items]
    assert t.max_in_flight == 3
    assert clock.now() == 4 * 500_000_000  # 12 items, 3 at a time, 0.5 s each
    assert all(r.temperature == 0.0 and r.max_tokens == 32 and not r.stream for r in t.requests)
    assert t.requests[0].messages[0] == {"role": "system", "content": "Be brief."}
    failed = results[5]
    assert failed.status == HTTP_ERROR and failed.correct is None and failed.error.startswith("HTTP 503: ")
    assert "overloaded" in failed.error
    s = score(results)
    assert (s["items"], s["answered"], s["failed"]) == (12, 11, 1)
    assert s["correct"] == 7  # i % 3 != 0, minus the failed item 5
    assert s["accuracy"]["value"] == pytest.approx(7 / 11)
    assert s["accuracy"]["lo"] < 7 / 11 < s["accuracy"]["hi"]
    assert results[1].latency_ms == pytest.approx(500.0)


def test_run_items_rejects_zero_concurrency():
    with pytest.raises(ConfigError):
        _run(generate_items(2), {}, concurrency=0)


def test_simulator_target_scores_its_filler_honestly():
    r = accuracy_for_target(TargetConfig(url="sim"), generate_items(20), concurrency=4, max_tokens=16)
    assert r["target"]["engine"] == "servelab-sim" and r["target"]["model"] == "sim-tiny"
    s = r["summary"]
    assert s["answered"] == 20 and s["failed"] == 0
    assert s["accuracy"]["value"] == 0.0  # deterministic filler words answer nothing
    assert s["accuracy"]["hi"] > 0.1  # 20 items cannot prove much
    assert len(r["results"]) == 20 and all(x["response"] for x in r["results"])


def test_empty_answer_set_is_bad_input():
    with pytest.raises(ConfigError, match="empty"):
        accuracy_for_target(TargetConfig(url="sim"), [])


def _rows(verdicts, answers=None):
    return {
        "results": [
            {"id": f"q{i}", "correct": v, "answer": (answers or {}).get(i, "right" if v else f"w{i}")}
            for i, v in enumerate(verdicts)
        ]
    }


def test_quality_drop_is_flagged_beyond_the_interval():
    base = _rows([True] * 180 + [False] * 20)
    worse = _rows([True] * 150 + [False] * 50)  # loses 30 items the baseline got right
    q = flag_quality_drop(base, worse)
    assert q["flagged"] and q["verdict"] == "quality drop" and q["method"] == "newcombe-paired"
    assert q["diff"] == pytest.approx(-0.15) and q["hi"] < 0
    # Allowing a 20-point drop: a 15-point loss is no longer beyond the allowance.
    assert not flag_quality_drop(base, worse, max_drop=0.20)["flagged"]
    assert flag_quality_drop(worse, base)["verdict"] == "quality gain"


def test_small_difference_is_within_noise():
    base = _rows([True] * 180 + [False] * 20)
    close = _rows([True] * 178 + [False] * 22)
    q = flag_quality_drop(base, close)
    assert not q["flagged"] and q["verdict"] == "within noise" and q["lo"] < 0 < q["hi"]


def test_failed_items_are_unpaired_and_disjoint_sets_compare_independently():
    base = _rows([True, True, None, False])
    cand = _rows([True, False, True, None])
    q = flag_quality_drop(base, cand)
    assert q["n"] == 2 and q["unpaired"] == 2
    other = {"results": [{"id": f"x{i}", "correct": i % 2 == 0, "answer": "a"} for i in range(10)]}
    assert flag_quality_drop(base, other)["method"] == "newcombe-independent"


def test_agreement_counts_same_answers_right_or_wrong():
    a = _rows([True, False, False, True], answers={1: "7", 2: "8"})
    b = _rows([True, False, False, None], answers={1: "7", 2: "9"})
    ag = agreement(a, b)
    assert ag["paired"] == 3 and ag["unpaired"] == 1
    assert ag["answer"]["k"] == 2 and ag["verdict"]["k"] == 3
    assert ag["differing_ids"] == ["q2"]


def test_user_items_work_through_the_runner():
    items = [Item("a", "2+2?", "4", "number"), Item("b", "capital?", r"(?i)paris", "regex")]
    results, _, _ = _run(items, {"Be brief.\n2+2?": "It is 4.", "Be brief.\ncapital?": "Paris"})
    assert [r.correct for r in results] == [True, True]
    assert [r.answer for r in results] == ["4", "paris"]


def test_summaries_alone_compare_as_independent_samples():
    q = flag_quality_drop({"summary": {"correct": 190, "answered": 200}}, {"correct": 150, "answered": 200})
    assert q["method"] == "newcombe-independent" and q["flagged"] and q["diff"] == pytest.approx(-0.2)
    assert flag_quality_drop({"results": []}, {"results": []})["verdict"] == "no common answered items"
