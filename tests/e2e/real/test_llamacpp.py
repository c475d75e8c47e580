"""servelab against a real llama.cpp server (xllamacpp, SmolLM2-135M-Instruct GGUF; ci_engines.sh).

The server has 4 slots (SERVELAB_LLAMACPP_PARALLEL), one thread, /metrics on, prompt caching on. Checked
where llama.cpp has the feature: usage, llamacpp:* metrics (busy/deferred requests, token counters),
the prompt cache (cached_tokens in usage and llamacpp:prompt_tokens_cached_total), /tokenize.
"""

from __future__ import annotations

import sys

import pytest

from servelab.clock import WallClock
from servelab.config.models import TargetConfig
from servelab.records.schema import OK
from servelab.transport.base import ModelRequest
from servelab.transport.http import HttpTransport, probe_options
from servelab.transport.probe import HttpProbe
from tests.e2e.real.helpers import agreement, fresh_seed, manifest, raw_counter_delta, run

pytestmark = pytest.mark.llamacpp
TEXT = "the river runs past the old mill and the town square before it reaches the sea"


async def test_stream_non_stream_usage_and_tokenize(llamacpp):
    t = HttpTransport(TargetConfig(url=llamacpp.url, model=llamacpp.model), WallClock(), concurrency=2)
    try:
        msgs = [{"role": "user", "content": TEXT}]
        recs = [
            await t.send(ModelRequest(request_id=i, messages=msgs, max_tokens=16, ignore_eos=True, stream=s))
            for i, s in enumerate((True, False))
        ]
        probe = HttpProbe(probe_options(t.target), t.clock)
        n = await probe.count_tokens(TEXT)
        await probe.aclose()
        plain = await t.send(ModelRequest(request_id=9, api="completions", prompt=TEXT, max_tokens=4,
                                          ignore_eos=True, stream=False))
    finally:
        await t.aclose()
    for rec in recs:
        assert rec.status == OK, rec.error
        assert rec.usage_completion_tokens == 16
    assert recs[0].usage_prompt_tokens == recs[1].usage_prompt_tokens > n
    assert recs[0].token_times_ns and len(recs[0].token_times_ns) <= 16
    assert plain.status == OK, plain.error
    assert n is not None and plain.usage_prompt_tokens in (n, n + 1)  # /tokenize, with or without BOS


def test_run_under_load_slots_and_token_counts(llamacpp, tmp_path):
    slots = int(llamacpp.env.get("SERVELAB_LLAMACPP_PARALLEL", "4"))
    res = run(llamacpp.url, llamacpp.model, tmp_path, load={"concurrency": 2 * slots},
              limits={"requests": 4 * slots},
              workload={"input_tokens": 48, "output_tokens": 24, "ignore_eos": True})
    s = res.summary
    assert s["requests"]["ok"] == 4 * slots and s["errors"]["rate"] == 0
    assert s["tokens"]["output"] == 4 * slots * 24
    a = agreement(s, "generation_tokens_total")
    assert abs(a["relative_difference"]) <= 0.01, a
    gauges = s["server"]["gauges"]
    assert 0 < gauges["requests_running"]["max"] <= slots, gauges  # llamacpp:requests_processing
    assert gauges["requests_waiting"]["max"] > 0, gauges  # llamacpp:requests_deferred: no free slot
    assert gauges["slots_busy"]["max"] > 1, gauges  # several slots decode together
    # llama.cpp counts prompt tokens it evaluated; cached ones apart: the two add up to the usage total.
    evaluated = raw_counter_delta(res.run_dir, "llamacpp:prompt_tokens_total")
    cached = raw_counter_delta(res.run_dir, "llamacpp:prompt_tokens_cached_total")
    assert evaluated + cached == pytest.approx(s["tokens"]["input"], rel=0.01)
    target = manifest(res.run_dir)["target"]
    assert target["engine"] == "llama.cpp" and target["models"] == [llamacpp.model], target
    assert target["version"], target  # /props build_info ("b0-unknown" in the xllamacpp wheel's build)
    assert s["server"]["engine"] == "llama.cpp"


def test_prompt_cache_on_a_shared_prefix(llamacpp, tmp_path):
    common = {"load": {"concurrency": 1}, "limits": {"requests": 6}}
    shared = run(llamacpp.url, llamacpp.model, tmp_path / "shared", seed=fresh_seed(), **common,
                 workload={"input_tokens": 160, "output_tokens": 2, "ignore_eos": True,
                           "shared_prefix": {"tokens": 128, "groups": 1}})
    unique = run(llamacpp.url, llamacpp.model, tmp_path / "unique", seed=fresh_seed(), **common,
                 workload={"input_tokens": 160, "output_tokens": 2, "ignore_eos": True})
    hit_shared = raw_counter_delta(shared.run_dir, "llamacpp:prompt_tokens_cached_total")
    hit_unique = raw_counter_delta(unique.run_dir, "llamacpp:prompt_tokens_cached_total")
    # Unique prompts share only the chat template's leading tokens (SmolLM2's default system message,
    # about 24 tokens) with the slot's last prompt.
    assert hit_unique <= 6 * 40, hit_unique
    # One user, one slot reused: every request after the first also finds the common prefix cached.
    assert hit_shared - hit_unique >= 5 * 128 * 0.9, (hit_shared, hit_unique)
    assert shared.summary["tokens"]["cached"] >= hit_shared * 0.9  # usage.prompt_tokens_details.cached_tokens


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
