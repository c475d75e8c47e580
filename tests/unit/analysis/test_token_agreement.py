"""Token agreement between the client's counts and the server's counters, llama.cpp's cached prompt tokens."""

import pytest

from servelab.analysis.telemetry import token_agreement


def test_llamacpp_prompt_counter_plus_cached_tokens_agrees():
    # 20 requests of 241 prompt tokens = 4820; llama.cpp evaluated 1000 and found 3820 in its prompt cache.
    # Its prompt counter alone against the client's total read as a (4820 - 1000) / 1000 = 382% mismatch.
    server = {
        "engine": "llama.cpp",
        "counters": {
            "prompt_tokens_total": 1000.0,
            "prefix_cache_hits_total": 3820.0,
            "generation_tokens_total": 320.0,
        },
    }
    a = token_agreement(server, 320, 4820)
    assert a["prompt_tokens_total"]["server"] == 4820.0
    assert a["prompt_tokens_total"]["relative_difference"] == 0.0
    assert a["generation_tokens_total"]["relative_difference"] == 0.0
    # Without the cached counter, the usage-reported cached tokens come off the client's side: 4820 - 3820.
    bare = {"engine": "llama.cpp", "counters": {"prompt_tokens_total": 1000.0}}
    b = token_agreement(bare, 0, 4820, client_cached=3820)["prompt_tokens_total"]
    assert b["client"] == 1000 and b["relative_difference"] == 0.0
    # With neither, no difference is claimed.
    c = token_agreement(bare, 0, 4820)["prompt_tokens_total"]
    assert c["relative_difference"] is None and "excludes cached" in c["note"]


def test_vllm_prompt_counter_counts_cached_tokens_too():
    # vLLM's prompt counter includes cached tokens: a real 10% gap stays a 10% gap.
    server = {"engine": "vllm", "counters": {"prompt_tokens_total": 1000.0, "prefix_cache_hits_total": 500.0}}
    assert token_agreement(server, 0, 1100)["prompt_tokens_total"]["relative_difference"] == pytest.approx(
        0.1
    )
