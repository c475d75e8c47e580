import numpy as np
import pytest

from servelab.config.models import RunConfig
from servelab.sim.tokenizer import tokenize
from servelab.workload.prompts import PromptSynthesizer
from servelab.workload.requests import build_requests, make_synthesizer, planner
from servelab.workload.tokens import ServerCounter


async def sim_count(text: str) -> int:
    return len(tokenize(text))


def _config(**workload) -> RunConfig:
    return RunConfig.model_validate(
        {
            "seed": workload.pop("seed", 0),
            "target": {"api": workload.pop("api", "chat")},
            "workload": workload,
        }
    )


async def _plans(cfg: RunConfig, n: int):
    return await build_requests(cfg, n, PromptSynthesizer(ServerCounter(sim_count), cfg.seed))


async def test_shared_prefix_identical_within_group_distinct_across_groups():
    cfg = _config(input_tokens=40, shared_prefix={"tokens": 100, "groups": 3})
    plans = await _plans(cfg, 60)
    ids = [tokenize(p.text()) for p in plans]
    for p, toks in zip(plans, ids, strict=True):
        assert p.prefix_group == p.index % 3 and p.prefix_tokens == 100
        assert len(toks) == 140 == p.est_prompt_tokens
    for g in range(3):
        group = [t for p, t in zip(plans, ids, strict=True) if p.prefix_group == g]
        assert all(t[:100] == group[0][:100] for t in group)
        # Right after the prefix the requests of a group part ways (no accidental longer prefix).
        assert len({tuple(t[100:103]) for t in group}) == len(group)
    heads = {tuple(ids[g][:100]) for g in range(3)}
    assert len(heads) == 3
    assert len({ids[g][0] for g in range(3)}) == 3  # groups differ from their first token


async def test_without_shared_prefix_prompts_differ_from_the_start():
    plans = await _plans(_config(input_tokens=64), 500)
    assert all(p.prefix_group is None and p.prefix_tokens == 0 for p in plans)
    assert len({tuple(tokenize(p.text())[:3]) for p in plans}) == 500


async def test_same_seed_same_requests_and_index_addressable():
    cfg = _config(
        seed=11,
        input_tokens={"kind": "lognormal", "median": 200, "sigma": 0.6, "max": 1000},
        output_tokens={"kind": "uniform", "low": 5, "high": 400},
        shared_prefix={"tokens": 32, "groups": 2},
    )
    a, b = await _plans(cfg, 3000), await _plans(cfg, 3000)
    assert list(a[:50]) == list(b[:50])
    assert a[2500] == b[2500] == list(b)[2500]  # random access equals sequential production
    other = await _plans(cfg.model_copy(update={"seed": 12}), 3000)
    assert [p.text() for p in a[:20]] != [p.text() for p in other[:20]]
    assert [p.max_tokens for p in a[:50]] != [p.max_tokens for p in other[:50]]


async def test_lengths_follow_the_distributions_and_counts_are_exact():
    cfg = _config(input_tokens={"kind": "empirical", "values": [10, 300], "weights": [3, 1]},
                  output_tokens={"kind": "normal", "mean": 100, "std": 30, "min": 20, "max": 150})
    plans = await _plans(cfg, 2000)
    ins = np.array([p.est_prompt_tokens for p in plans])
    assert set(np.unique(ins).tolist()) == {10, 300}
    assert abs(float(np.mean(ins == 300)) - 0.25) < 5 * np.sqrt(0.25 * 0.75 / 2000)
    outs = np.array([p.max_tokens for p in plans])
    assert outs.min() >= 20 and outs.max() <= 150 and abs(outs.mean() - 100) < 3
    for p in plans[:100]:
        assert len(tokenize(p.text())) == p.est_prompt_tokens
        assert p.token_source == "server"


async def test_ignore_eos_sets_min_tokens_and_temperature_passes_through():
    plans = await _plans(_config(ignore_eos=True, temperature=0.7, output_tokens=64), 5)
    assert all(p.ignore_eos and p.min_tokens == p.max_tokens == 64 and p.temperature == 0.7 for p in plans)
    plans = await _plans(_config(output_tokens=64), 5)
    assert all(not p.ignore_eos and p.min_tokens is None for p in plans)


async def test_chat_and_completions_shapes_with_system_prompt():
    sys = "You are a careful assistant."
    chat = (await _plans(_config(system_prompt=sys, input_tokens=50), 3))[1]
    assert chat.prompt is None and [m["role"] for m in chat.messages] == ["system", "user"]
    assert chat.messages[0]["content"] == sys
    assert chat.est_prompt_tokens == 50 + len(tokenize(sys)) == len(tokenize(chat.text()))
    comp = (await _plans(_config(system_prompt=sys, input_tokens=50, api="completions"), 3))[1]
    assert comp.messages is None and comp.prompt.startswith(sys + "\n\n")
    assert comp.prompt.endswith(chat.messages[1]["content"])
    assert len(tokenize(comp.prompt)) == comp.est_prompt_tokens


async def test_lazy_and_no_counter_calls_after_calibration():
    counter = ServerCounter(sim_count)
    cfg = _config(input_tokens=128, shared_prefix={"tokens": 16, "groups": 4})
    plans = await build_requests(cfg, 100_000, PromptSynthesizer(counter, 0))
    calls = counter.calls
    assert len(plans) == 100_000
    assert plans[-1].index == 99_999 and plans[99_999] == plans[-1]
    for _ in plans[:300]:
        pass
    assert counter.calls == calls
    with pytest.raises(IndexError):
        plans[100_000]


async def test_planner_iterates_unbounded_and_make_synthesizer_picks_the_counter():
    cfg = _config(input_tokens=20)
    synth = await make_synthesizer(cfg, sim_count)
    assert synth.source == "server"
    p = await planner(cfg, synth)
    it = p.iter_plans(start=5)
    assert [next(it).index for _ in range(3)] == [5, 6, 7]
    assert (await make_synthesizer(cfg)).source == "estimate"


async def test_request_plans_refuse_a_workload_that_is_not_single_turn():
    cfg = RunConfig.model_validate({"workload": {"kind": "agent", "profile": "chat"}})
    with pytest.raises(TypeError, match="kind: requests workload, not kind: agent"):
        await _plans(cfg, 1)
