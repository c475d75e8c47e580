"""How fast does servelab produce single-turn request plans, against a floor measured in the same run?

Each case builds N plans of 512 prompt tokens (after calibration, which is timed separately):

  (a) server   - counter = the simulator's tokenizer behind an async callable (predicted counts only)
  (b) local    - counter = a small BPE tokenizer.json trained here (costs add up: predicted counts)
  (c) estimate - counter = ceil(words / 0.75) (costs do not add up: each prompt measured and adjusted)
  (ref)        - the floor: " ".join(random.choices(words, k=W)) with W the words of one plan, plus a
                 dict per plan; no seeding per index, no counting, no prefix bookkeeping

The ratio is the reference's plans/s (same words per plan) over each case's (how many times slower than the
bare floor).

    PYTHONPATH=src python benchmarks/workload_plans.py [--n 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

from servelab.config.models import RunConfig
from servelab.sim.tokenizer import tokenize
from servelab.workload.prompts import PromptSynthesizer, _base_words
from servelab.workload.requests import build_requests
from servelab.workload.tokens import EstimateCounter, LocalTokenizerCounter, ServerCounter

TOKENS = 512


async def _sim_count(text: str) -> int:
    return len(tokenize(text))


def _local_counter(tmp: Path) -> LocalTokenizerCounter | None:
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    except ImportError:
        return None
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(
        [" ".join(_base_words())] * 2,
        trainers.BpeTrainer(
            vocab_size=400,
            show_progress=False,
            special_tokens=["<s>", "<unk>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok.save(str(tmp / "tokenizer.json"))
    return LocalTokenizerCounter.load(str(tmp / "tokenizer.json"))


async def _case(counter, n: int) -> tuple[float, float, float]:
    cfg = RunConfig.model_validate({"workload": {"input_tokens": TOKENS, "output_tokens": 128,
                                                 "shared_prefix": {"tokens": 64, "groups": 4}}})
    t0 = time.perf_counter()
    plans = await build_requests(cfg, n, PromptSynthesizer(counter, 0))
    t1 = time.perf_counter()
    for _ in plans:
        pass
    t2 = time.perf_counter()
    sample = plans[n // 2].text()
    return t1 - t0, n / (t2 - t1), len(sample.split())


def _reference(n: int, words_per_plan: int) -> float:
    vocab = _base_words()
    rng = random.Random(0)
    t0 = time.perf_counter()
    for i in range(n):
        text = " ".join(rng.choices(vocab, k=words_per_plan))
        _ = {"index": i, "prompt": text, "max_tokens": 128}
    return n / (time.perf_counter() - t0)


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cases = {"server": ServerCounter(_sim_count), "local": _local_counter(Path(tmp)),
                 "estimate": EstimateCounter()}
        rows = []
        for name, counter in cases.items():
            if counter is None:
                rows.append((name, None, None, None))
                continue
            rows.append((name, *await _case(counter, n)))
    print(f"{n} plans of {TOKENS} + 64 shared-prefix tokens")
    print(
        f"{'case':<10}{'calibrate s':>12}{'plans/s':>12}{'words/plan':>12}{'ref plans/s':>13}{'ref/case':>10}"
    )
    for name, cal, rate, words in rows:
        if rate is None:
            print(f"{name:<10}{'(tokenizers not installed)':>46}")
            continue
        ref = _reference(n, words)  # the floor for the same number of words
        print(f"{name:<10}{cal:>12.3f}{rate:>12.0f}{words:>12d}{ref:>13.0f}{ref / rate:>10.1f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000, help="plans per case")
    asyncio.run(main(ap.parse_args().n))
